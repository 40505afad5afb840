"""Where pipelines and the warehouse are configured: ``$DELTALOG_PIPELINES`` /
``$DELTALOG_WAREHOUSE``, else the ``[tool.deltalog]`` table of the nearest ``pyproject.toml``
that has one (from the current directory upward, paths relative to that file), else the
bundled examples and the repository's warehouse; a table that is not valid is DL402."""

import argparse
from pathlib import Path

import pytest

from deltalog.dagster_project.defs.resources import REPO_ROOT, WAREHOUSE_ENV, default_warehouse_root
from deltalog.engine.errors import BAD_PROJECT
from deltalog.pipelines import cli
from deltalog.pipelines.spec import (
    EXAMPLES_DIR,
    PIPELINES_ENV,
    ProjectError,
    configured_warehouse,
    discover_pipelines,
    load_pipeline,
    pipeline_folders,
    project_config,
)


def _pipeline(base: Path, name: str) -> None:
    folder = base / name
    folder.mkdir(parents=True)
    (folder / "program.dl").write_text(".decl e(x: int)\nq(x) :- e(x).\n", encoding="utf-8")
    (folder / "pipeline.toml").write_text(f'[edb]\ne = "{name}/e"\n[idb]\nq = "{name}/q"\n',
                                          encoding="utf-8")


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's project: pyproject.toml with [tool.deltalog], two pipeline folders, and a
    nested package folder without its own [tool.deltalog] (the cwd of the tests)."""
    monkeypatch.delenv(PIPELINES_ENV, raising=False)
    monkeypatch.delenv(WAREHOUSE_ENV, raising=False)
    root = tmp_path / "proj"
    _pipeline(root / "pipelines", "alpha")
    _pipeline(root / "more", "beta")
    (root / "pyproject.toml").write_text(
        '[project]\nname = "proj"\n\n[tool.deltalog]\npipelines = ["pipelines", "more"]\n'
        'warehouse = "data/wh"\n', encoding="utf-8")
    inner = root / "src" / "pkg"
    inner.mkdir(parents=True)
    (root / "src" / "pyproject.toml").write_text('[tool.ruff]\nline-length = 90\n',
                                                 encoding="utf-8")
    monkeypatch.chdir(inner)
    return root


def test_the_nearest_table_gives_pipelines_and_warehouse(project):
    config = project_config()
    assert config is not None and config.pyproject == project / "pyproject.toml"
    assert pipeline_folders() == [project / "pipelines", project / "more"]
    assert [p.name for p in discover_pipelines()] == ["alpha", "beta"]
    assert load_pipeline("beta").directory == project / "more" / "beta"
    assert configured_warehouse() == str(project / "data" / "wh")
    assert default_warehouse_root() == str(project / "data" / "wh")


def test_the_environment_wins(project, monkeypatch, tmp_path):
    _pipeline(tmp_path / "env", "gamma")
    monkeypatch.setenv(PIPELINES_ENV, str(tmp_path / "env"))
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path / "elsewhere"))
    assert [p.name for p in discover_pipelines()] == ["gamma"]
    assert default_warehouse_root() == str(tmp_path / "elsewhere")


def test_without_a_table_the_examples(tmp_path, monkeypatch):
    monkeypatch.delenv(PIPELINES_ENV, raising=False)
    monkeypatch.delenv(WAREHOUSE_ENV, raising=False)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert project_config() is None
    assert pipeline_folders() == [EXAMPLES_DIR]
    assert default_warehouse_root() == str(REPO_ROOT / "warehouse")
    # the commands look where the Dagster resource looks, from any folder
    args = argparse.Namespace(pipeline="debian", warehouse=None)
    assert cli._pipeline(args)[1] == str(REPO_ROOT / "warehouse")


def test_a_uri_warehouse_is_kept_and_start_is_honoured(tmp_path, monkeypatch):
    monkeypatch.delenv(WAREHOUSE_ENV, raising=False)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.deltalog]\nwarehouse = "s3://bucket/wh"\n', encoding="utf-8")
    (tmp_path / "deep" / "er").mkdir(parents=True)
    assert configured_warehouse(tmp_path / "deep" / "er") == "s3://bucket/wh"
    assert default_warehouse_root(tmp_path / "deep") == "s3://bucket/wh"
    # a table without pipelines: the bundled examples
    monkeypatch.delenv(PIPELINES_ENV, raising=False)
    assert pipeline_folders(tmp_path) == [EXAMPLES_DIR]


@pytest.mark.parametrize(("table", "fragment"), [
    ('pipelines = "pipelines"', "pipelines must be a list"),
    ('pipelines = ["missing"]', "pipelines folder 'missing' does not exist"),
    ('pipeline = ["p"]', "unknown key(s) pipeline"),
    ('warehouse = ""', "warehouse must be a non-empty"),
    ("warehouse = 3", "warehouse must be a non-empty"),
])
def test_a_bad_table_is_dl402(tmp_path, table, fragment):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f"[tool.deltalog]\n{table}\n", encoding="utf-8")
    with pytest.raises(ProjectError) as info:
        project_config(tmp_path)
    err = str(info.value)
    assert info.value.code == BAD_PROJECT and "\n" not in err
    assert err.startswith(f"{pyproject} [tool.deltalog]: error {BAD_PROJECT}: ")
    assert fragment in err


def test_a_pyproject_that_is_not_toml_is_dl402(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.deltalog\n", encoding="utf-8")
    with pytest.raises(ProjectError, match="not valid TOML"):
        project_config(tmp_path)


def test_the_cli_warehouse_default_follows_the_same_order(project, monkeypatch, tmp_path):
    import argparse

    from deltalog.pipelines import cli

    args = argparse.Namespace(pipeline="alpha", warehouse=None)
    spec, root = cli._pipeline(args)
    assert spec.name == "alpha" and root == str(project / "data" / "wh")
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path / "env_wh"))
    assert cli._pipeline(args)[1] == str(tmp_path / "env_wh")
    args.warehouse = "given"
    assert cli._pipeline(args)[1] == "given"


def test_a_teams_own_pipelines_without_a_table_keep_their_warehouse_in_their_project(
        tmp_path, monkeypatch):
    """A project without [tool.deltalog] that names its own pipeline folders (the README's
    snippet, the component): the warehouse is beside its pyproject.toml, for the Dagster
    resource and for the commands given the pipeline's folder from anywhere, not in the
    deltalog installation."""
    from deltalog.dagster_project.build import build_definitions

    monkeypatch.delenv(WAREHOUSE_ENV, raising=False)
    project = tmp_path / "team"
    (project / "pipelines" / "ops").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[project]\nname = "team"\n', encoding="utf-8")
    (project / "pipelines" / "ops" / "program.dl").write_text(
        ".decl e(a: int, b: int)\np(x, y) :- e(x, y).\n", encoding="utf-8")
    (project / "pipelines" / "ops" / "pipeline.toml").write_text(
        '[edb]\ne = "ops/edb/e"\n[idb]\np = "ops/idb/p"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # anywhere
    defs = build_definitions(paths=[project / "pipelines"])
    assert defs.resources is not None
    assert defs.resources["warehouse"].root == str(project / "warehouse")
    args = argparse.Namespace(pipeline=str(project / "pipelines" / "ops"), warehouse=None)
    assert cli._pipeline(args)[1] == str(project / "warehouse")
