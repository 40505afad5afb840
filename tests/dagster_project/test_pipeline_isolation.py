"""Each pipeline folder loads on its own: a pipeline whose program or binding has an error
becomes a placeholder asset carrying its one-line error (and a log line), and the other
pipelines of the code location keep their assets, checks and jobs, and run."""

import logging
from pathlib import Path

import dagster as dg
import pytest

import deltalog.dagster_project.build as definitions
from deltalog.dagster_project.defs import asset_key
from deltalog.dagster_project.defs.automation import update_job_name
from deltalog.dagster_project.defs.load_errors import FOLDER_KEY, LOAD_ERROR_KEY
from deltalog.engine.errors import DeltalogError
from deltalog.pipelines.spec import load_pipeline
from tests.dagster_project.tiny import make_pipeline, tables_right

pytestmark = pytest.mark.dagster

BAD_PROGRAM = ".decl edge(src: int, dst: int)\npath(x, y) :- edge(x, y)\npath(x) :- .\n"
GOOD_PROGRAM = ".decl e(x: int)\nq(x) :- e(x).\n"


def _folder(base: Path, name: str, program: str, binding: str) -> Path:
    folder = base / name
    folder.mkdir(parents=True)
    (folder / "program.dl").write_text(program, encoding="utf-8")
    (folder / "pipeline.toml").write_text(binding, encoding="utf-8")
    return folder


def _error_of(folder: Path) -> str:
    """The oracle: the error ``load_pipeline`` raises for the folder, as one line."""
    with pytest.raises(DeltalogError) as info:
        load_pipeline(folder)
    return str(info.value)


def test_a_broken_pipeline_does_not_take_down_the_others(tmp_path, caplog):
    base = tmp_path / "pipes"
    base.mkdir()
    spec, root = make_pipeline(base)  # base/tiny, EDB tables in base/warehouse
    syntax = _folder(base, "broken_syntax", BAD_PROGRAM, '[edb]\nedge = "b/edge"\n')
    binding = _folder(base, "broken_binding", GOOD_PROGRAM,
                      '[edb]\ne = "c/e"\n[idb]\nq = "c/q"\nnope = "c/nope"\n')
    with caplog.at_level(logging.ERROR, logger="deltalog.dagster_project.build"):
        defs = definitions.build_definitions(paths=[base], root=root)

    graph = defs.resolve_asset_graph()
    keys = set(graph.get_all_asset_keys())
    tiny = {asset_key(spec, p) for p in (*spec.edb_tables, *spec.idb_tables)}
    placeholders = {dg.AssetKey(["broken_syntax"]), dg.AssetKey(["broken_binding"])}
    assert keys == tiny | placeholders
    assert {j.name for j in defs.jobs or ()} >= {update_job_name(spec)}

    for folder in (syntax, binding):
        error = _error_of(folder)
        assert "\n" not in error and " error DL" in error
        node = graph.get(dg.AssetKey([folder.name]))
        assert node.description == f"Pipeline {folder.name} did not load: {error}"
        assert node.group_name == folder.name
        assert node.metadata[LOAD_ERROR_KEY] == error
        assert node.metadata[FOLDER_KEY] == str(folder)
        assert not node.is_materializable  # nothing can run it
        assert any(error in r.getMessage() for r in caplog.records), error
    assert _error_of(syntax).startswith(f"{syntax / 'program.dl'}:3:1: error DL101")
    assert "nope" in _error_of(binding) and "DL401" in _error_of(binding)

    # The good pipeline runs: its update job brings the IDB tables to the naive result.
    result = defs.resolve_job_def(update_job_name(spec)).execute_in_process(raise_on_error=False)
    assert result.success
    assert tables_right(spec, root, [(1, 2), (2, 3), (3, 1), (3, 4), (5, 6)])


def test_a_pipeline_whose_names_clash_is_shown_not_merged(tmp_path):
    """Two folders naming one pipeline would define the same assets and jobs: the first
    loads, the second is a placeholder saying which folder it clashes with."""
    good = _folder(tmp_path / "a", "team", GOOD_PROGRAM, '[edb]\ne = "a/e"\n[idb]\nq = "a/q"\n')
    _folder(tmp_path / "b", "team", GOOD_PROGRAM, '[edb]\ne = "b/e"\n[idb]\nq = "b/q"\n')
    defs = definitions.build_definitions(paths=[tmp_path / "a", tmp_path / "b"],
                                         root=tmp_path / "wh")
    graph = defs.resolve_asset_graph()
    assert set(graph.get_all_asset_keys()) == {
        dg.AssetKey(["team", "e"]), dg.AssetKey(["team", "q"]), dg.AssetKey(["team"])}
    description = graph.get(dg.AssetKey(["team"])).description
    assert f"as does the pipeline in {good}" in description
    assert "rename one" in description and "error DL000" in description


def test_a_defect_in_one_pipeline_is_isolated_too(tmp_path, monkeypatch):
    """An exception that is no DeltalogError (a defect) costs only its pipeline, with DL000
    and the exception's type."""
    base = tmp_path / "pipes"
    _folder(base, "ok", GOOD_PROGRAM, '[edb]\ne = "ok/e"\n[idb]\nq = "ok/q"\n')
    _folder(base, "bug", GOOD_PROGRAM, '[edb]\ne = "bug/e"\n[idb]\nq = "bug/q"\n')
    real = definitions.pipeline_definitions

    def flaky(spec):
        if spec.name == "bug":
            raise RuntimeError("factory broke")
        return real(spec)

    monkeypatch.setattr(definitions, "pipeline_definitions", flaky)
    defs = definitions.build_definitions(paths=[base], root=tmp_path / "wh")
    graph = defs.resolve_asset_graph()
    assert set(graph.get_all_asset_keys()) == {
        dg.AssetKey(["ok", "e"]), dg.AssetKey(["ok", "q"]), dg.AssetKey(["bug"])}
    assert graph.get(dg.AssetKey(["bug"])).description == (
        f"Pipeline bug did not load: {base / 'bug'}: error DL000: unexpected RuntimeError: "
        "factory broke")


def test_paths_take_pipeline_folders_or_folders_of_them(tmp_path):
    one = _folder(tmp_path / "x", "solo", GOOD_PROGRAM, '[edb]\ne = "s/e"\n[idb]\nq = "s/q"\n')
    _folder(tmp_path / "many", "m1", GOOD_PROGRAM, '[edb]\ne = "m1/e"\n[idb]\nq = "m1/q"\n')
    _folder(tmp_path / "many", "m2", GOOD_PROGRAM, '[edb]\ne = "m2/e"\n[idb]\nq = "m2/q"\n')
    defs = definitions.build_definitions(paths=[one, tmp_path / "many"], root=tmp_path / "wh")
    groups = {n.group_name for n in defs.resolve_asset_graph().asset_nodes}
    assert groups == {"solo", "m1", "m2"}
    with pytest.raises(ValueError, match="not both"):
        definitions.build_definitions([load_pipeline(one)], paths=[one])


def test_everything_broken_still_loads(tmp_path):
    _folder(tmp_path, "only", BAD_PROGRAM, "")
    defs = definitions.build_definitions(paths=[tmp_path], root=tmp_path / "wh")
    assert set(defs.resolve_asset_graph().get_all_asset_keys()) == {dg.AssetKey(["only"])}
    assert set(defs.resources or {}) == {"warehouse", "spark"}


def test_merged_into_an_existing_project(tmp_path):
    """The README's recipe: a project's own Definitions merged with build_definitions."""

    @dg.asset
    def team_report() -> None:
        return None

    _folder(tmp_path / "pipes", "ours", GOOD_PROGRAM, '[edb]\ne = "o/e"\n[idb]\nq = "o/q"\n')
    defs = dg.Definitions.merge(
        dg.Definitions(assets=[team_report]),
        definitions.build_definitions(paths=[tmp_path / "pipes"], root=tmp_path / "wh"),
    )
    assert set(defs.resolve_asset_graph().get_all_asset_keys()) == {
        dg.AssetKey(["team_report"]), dg.AssetKey(["ours", "e"]), dg.AssetKey(["ours", "q"])}
    assert defs.resolve_job_def("ours_update") is not None
    defs.resolve_implicit_global_asset_job_def()  # the resources satisfy every asset
