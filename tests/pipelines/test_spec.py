"""Pipeline binding: pipeline.toml must bind every EDB and IDB predicate of the program, and
nothing else; every mistake is one clear error that names pipeline.toml."""

from pathlib import Path

import pytest

from deltalog.engine.errors import BAD_BINDING, DeltalogError
from deltalog.pipelines.spec import BindingError, discover_pipelines, load_pipeline

PROGRAM = """\
.decl edge(src: int, dst: int)
path(x, y) :- edge(x, y).
path(x, z) :- path(x, y), edge(y, z).
lonely(x) :- edge(x, _), !path(_, x).
"""

GOOD = """\
[edb]
edge = "g/edb/edge"

[idb]
path = "g/idb/path"
lonely = "g/idb/lonely"
"""


def _pipeline(tmp_path: Path, binding: str, program: str = PROGRAM) -> Path:
    folder = tmp_path / "g"
    folder.mkdir(exist_ok=True)
    (folder / "program.dl").write_text(program, encoding="utf-8")
    (folder / "pipeline.toml").write_text(binding, encoding="utf-8")
    return folder


def _error(tmp_path: Path, binding: str, program: str = PROGRAM) -> BindingError:
    with pytest.raises(BindingError) as info:
        load_pipeline(_pipeline(tmp_path, binding, program))
    err = info.value
    assert err.code == BAD_BINDING
    assert "pipeline.toml" in str(err)
    return err


def test_good_binding_loads(tmp_path):
    spec = load_pipeline(_pipeline(tmp_path, GOOD))
    assert spec.name == "g"
    assert dict(spec.edb_tables) == {"edge": "g/edb/edge"}
    assert set(spec.idb_tables) == {"path", "lonely"}
    assert spec.table_uri("/wh", "path") == "/wh/g/idb/path"
    assert spec.edb_closure("lonely") == ("edge",)


def test_debian_pipeline_binding_is_complete():
    spec = load_pipeline("debian")
    assert set(spec.edb_tables) == set(spec.program.edb)
    assert set(spec.idb_tables) == set(spec.program.idb)
    assert Path(spec.directory).name in {p.name for p in discover_pipelines()}


def test_missing_idb_table(tmp_path):
    err = _error(tmp_path, GOOD.replace('lonely = "g/idb/lonely"\n', ""))
    assert "'lonely' has no output table" in str(err)


def test_missing_edb_table(tmp_path):
    err = _error(tmp_path, GOOD.replace('edge = "g/edb/edge"\n', ""))
    assert "EDB predicate 'edge' has no table" in str(err)


def test_unknown_predicate(tmp_path):
    err = _error(tmp_path, GOOD + 'ghost = "g/idb/ghost"\n')
    assert "'ghost'" in str(err)


def test_idb_bound_as_edb(tmp_path):
    err = _error(tmp_path, GOOD.replace("[edb]\n", '[edb]\npath = "g/edb/path"\n'))
    assert "move it to [idb]" in str(err)


def test_two_predicates_on_one_table(tmp_path):
    err = _error(tmp_path, GOOD.replace('"g/idb/lonely"', '"g/idb/path"'))
    assert "same table" in str(err)


@pytest.mark.parametrize("path", ["/abs/path", "../outside", "a/../../b", ""])
def test_paths_stay_inside_the_warehouse(tmp_path, path):
    err = _error(tmp_path, GOOD.replace('"g/idb/lonely"', f'"{path}"'))
    assert "lonely" in str(err)


@pytest.mark.parametrize("path", ["s3://lake/bronze/edge", "/data/lake/edge",
                                  "file:///data/lake/edge", "gs://b/edge"])
def test_an_input_table_may_be_bound_where_it_is(tmp_path, path):
    """An [edb] table may live outside the warehouse (a URI, an absolute path): it is read
    where it is; the output tables stay under the warehouse."""
    spec = load_pipeline(_pipeline(tmp_path, GOOD.replace('"g/edb/edge"', f'"{path}"')))
    assert spec.table_uri("/wh", "edge") == path
    assert spec.table_uri("s3://wh/root", "edge") == path
    assert spec.table_uri("s3://wh/root", "path") == "s3://wh/root/g/idb/path"


@pytest.mark.parametrize("path", ["s3://lake/silver/lonely", "/data/lonely"])
def test_an_output_table_outside_the_warehouse_is_refused(tmp_path, path):
    err = _error(tmp_path, GOOD.replace('"g/idb/lonely"', f'"{path}"'))
    assert f'lonely = "{path}" must be a relative path inside the warehouse' in str(err)
    assert "written under the warehouse" in str(err)


@pytest.mark.parametrize("path", ["/data/../edge", "s3:/x y", "C:\\lake\\edge"])
def test_an_input_path_that_is_neither_a_uri_nor_clean_is_refused(tmp_path, path):
    err = _error(tmp_path, GOOD.replace('"g/edb/edge"', f"'{path}'"))
    assert "edge" in str(err) and "relative path" in str(err)


def test_unknown_section(tmp_path):
    err = _error(tmp_path, GOOD + "[extra]\nx = 1\n")
    assert "extra" in str(err)


def test_not_toml(tmp_path):
    err = _error(tmp_path, "[edb\n")
    assert "not valid TOML" in str(err)


def test_program_errors_keep_their_code(tmp_path):
    with pytest.raises(DeltalogError) as info:
        load_pipeline(_pipeline(tmp_path, GOOD, "path(x, y) :- edge(x).\npath(x) :- edge(x)."))
    assert info.value.code.startswith("DL2")


def test_missing_folder(tmp_path):
    with pytest.raises(BindingError, match="no pipeline folder"):
        load_pipeline(tmp_path / "nope")


def test_pipelines_are_found_in_the_configured_folders(tmp_path, monkeypatch):
    """``$DELTALOG_PIPELINES`` names the folders holding pipeline folders (several, joined
    with os.pathsep); by default the project's examples are found."""
    import os

    assert {"debian", "wordnet"} <= {p.name for p in discover_pipelines()}
    for team in ("a", "b"):
        folder = tmp_path / team / f"p_{team}"
        folder.mkdir(parents=True)
        (folder / "program.dl").write_text(".decl e(x: int)\nq(x) :- e(x).\n", encoding="utf-8")
        (folder / "pipeline.toml").write_text(
            f'[edb]\ne = "{team}/e"\n[idb]\nq = "{team}/q"\n', encoding="utf-8"
        )
    monkeypatch.setenv(
        "DELTALOG_PIPELINES", os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")])
    )
    assert [p.name for p in discover_pipelines()] == ["p_a", "p_b"]
    assert load_pipeline("p_b").name == "p_b"
    with pytest.raises(BindingError, match="looked in"):
        load_pipeline("debian")


def test_an_unbound_misspelt_predicate_gets_a_did_you_mean(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "program.dl").write_text(
        ".decl edge(a: int, b: int)\nreach(x, y) :- edge(x, y).\n"
        "reach(x, z) :- reach(x, y), egde(y, z).\n")
    (folder / "pipeline.toml").write_text('[edb]\nedge = "e"\n[idb]\nreach = "r"\n')
    with pytest.raises(DeltalogError) as info:
        load_pipeline(folder)
    assert "EDB predicate 'egde' has no table" in str(info.value)
    assert "misspelling of 'edge'" in str(info.value)
