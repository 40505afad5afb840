"""``deltalog init DIR`` scaffolds a team's own project: its definitions load (by importing
the generated module, and through ``dg list defs``), its seed writes the EDB table, and its
example pipeline runs end to end to the naive evaluator's result. A non-empty DIR is DL403
and nothing is written. The ``DeltalogPipelines`` component builds the same definitions,
and ``dg dev`` serves the project."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import dagster as dg
import pytest

from deltalog.dagster_project.defs.resources import WAREHOUSE_ENV
from deltalog.engine.errors import NOT_EMPTY
from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import cli, delta_io
from deltalog.pipelines.facts import read_csv_relation
from deltalog.pipelines.scaffold import NotEmptyError, init_project
from deltalog.pipelines.spec import PIPELINES_ENV, load_pipeline
from deltalog.schemas.relation import arrow_to_rows
from tests.local import free_port, import_fresh

pytestmark = [pytest.mark.dagster, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

BIN = Path(sys.executable).parent
KEYS = {dg.AssetKey(["example", "edge"]), dg.AssetKey(["example", "reaches"])}
JOBS = {"example_update", "example_recompute_checks", "example_rebuild",
        "example_table_maintenance"}


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv(PIPELINES_ENV, raising=False)
    monkeypatch.delenv(WAREHOUSE_ENV, raising=False)


def test_init_writes_a_project(tmp_path, clean_env, capsys):
    project = tmp_path / "Team-Graphs"
    assert cli.main(["init", str(project)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {project / 'pyproject.toml'}" in out
    config = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["project"]["name"] == "Team-Graphs"
    assert any(d.startswith("deltalog") for d in config["project"]["dependencies"])
    assert config["tool"]["deltalog"] == {"pipelines": ["pipelines"], "warehouse": "warehouse"}
    assert config["tool"]["dg"]["project"]["root_module"] == "team_graphs"
    for rel in ("pipelines/example/program.dl", "pipelines/example/pipeline.toml",
                "pipelines/example/data/edge.csv", "team_graphs/definitions.py",
                "team_graphs/seed.py", "team_graphs/__init__.py", "README.md"):
        assert (project / rel).is_file(), rel
    spec = load_pipeline(project / "pipelines" / "example")
    assert set(spec.edb_tables) == {"edge"} and set(spec.idb_tables) == {"reaches"}
    assert spec.program.strata[0].recursive


def test_init_refuses_a_folder_that_is_not_empty(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(NotEmptyError) as info:
        init_project(tmp_path)
    assert info.value.code == NOT_EMPTY
    assert cli.main(["init", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err == f"{tmp_path}: error {NOT_EMPTY}: a folder that is not empty; deltalog init " \
        "writes a project only into a new or empty folder (it overwrites nothing)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
    assert (tmp_path / "keep.txt").read_text(encoding="utf-8") == "mine"
    (tmp_path / "afile").write_text("", encoding="utf-8")
    with pytest.raises(NotEmptyError, match="a file;"):
        init_project(tmp_path / "afile")
    init_project(tmp_path / "empty_then")  # a new folder is fine, and so is an empty one
    (tmp_path / "empty").mkdir()
    assert (tmp_path / "empty" / "pyproject.toml") in init_project(tmp_path / "empty")


def test_the_generated_project_loads_seeds_and_runs(tmp_path, clean_env, monkeypatch):
    """From another directory (the definitions find the project themselves): the example's
    assets, checks and jobs exist, the seed writes the EDB table, and the update job makes
    `reaches` equal the naive evaluator's closure of the CSV's edges."""
    project = tmp_path / "graphs_proj"
    init_project(project, package="graphs_pkg_a")
    monkeypatch.chdir(tmp_path)
    module = import_fresh(project, "graphs_pkg_a.definitions", monkeypatch)
    defs = module.defs
    graph = defs.resolve_asset_graph()
    assert set(graph.get_all_asset_keys()) == KEYS
    assert {j.name for j in defs.jobs or ()} >= JOBS
    warehouse = defs.resources["warehouse"]
    assert Path(warehouse.root) == project / "warehouse"

    seed = import_fresh(project, "graphs_pkg_a.seed", monkeypatch)
    assert seed.main() == 0
    spec = load_pipeline(project / "pipelines" / "example")
    edges = read_csv_relation(project / "pipelines/example/data/edge.csv",
                              spec.program.schemas["edge"])
    assert arrow_to_rows(delta_io.read_arrow(spec.table_uri(warehouse.root, "edge"))) == edges

    result = defs.resolve_job_def("example_update").execute_in_process(raise_on_error=False)
    assert result.success
    reaches = arrow_to_rows(delta_io.read_arrow(spec.table_uri(warehouse.root, "reaches")))
    assert reaches == evaluate_naive(spec.program, {"edge": edges})["reaches"]
    assert ("a", "d") in reaches and ("x", "y") in reaches


def test_dg_list_defs_on_the_generated_project(tmp_path, clean_env):
    """Dagster's own tool loads the project: ``dg list defs --json`` in its folder."""
    project = tmp_path / "dgproj"
    init_project(project)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(project)}
    done = subprocess.run([str(BIN / "dg"), "list", "defs", "--json"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    listed = json.loads(done.stdout)
    assert {a["asset_key"] for a in listed["assets"]} == {"example/edge", "example/reaches"}
    assert {j["name"] for j in listed["jobs"]} >= JOBS


def test_the_component_builds_the_same_definitions(tmp_path, clean_env):
    from dagster.components.testing import create_defs_folder_sandbox

    from deltalog.dagster_project.component import DeltalogPipelines

    init_project(tmp_path / "src_proj")
    with create_defs_folder_sandbox() as sandbox:
        shutil.copytree(tmp_path / "src_proj" / "pipelines", sandbox.project_root / "pipes")
        shutil.copytree(tmp_path / "src_proj" / "pipelines" / "example",
                        sandbox.project_root / "broken" / "bad")
        (sandbox.project_root / "broken" / "bad" / "program.dl").write_text(
            "reaches(x, y) :- edge(x, y", encoding="utf-8")
        path = sandbox.scaffold_component(
            component_cls=DeltalogPipelines,
            defs_path="deltalog",
            defs_yaml_contents={
                "type": "deltalog.dagster_project.component.DeltalogPipelines",
                "attributes": {"paths": ["pipes", "broken"], "warehouse": "wh"},
            },
        )
        with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
            assert isinstance(component, DeltalogPipelines)
            graph = defs.resolve_asset_graph()
            assert set(graph.get_all_asset_keys()) == {*KEYS, dg.AssetKey(["bad"])}
            assert "error DL101" in (graph.get(dg.AssetKey(["bad"])).description or "")
            assert {j.name for j in defs.jobs or ()} >= JOBS
            assert Path(defs.resources["warehouse"].root) == sandbox.project_root / "wh"


def test_dg_dev_serves_the_generated_project(tmp_path, clean_env):
    """``dg dev`` in the project's folder starts Dagster (webserver, daemon, code server):
    its GraphQL lists the example's assets and jobs; stopped with its process group."""
    project = tmp_path / "devproj"
    init_project(project)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    port = free_port()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(project), "DAGSTER_HOME": str(home)}
    server = subprocess.Popen([str(BIN / "dg"), "dev", "--host", "127.0.0.1", "--port",
                               str(port)], cwd=project, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    query = json.dumps({"query": "{ assetNodes { assetKey { path } } "
                                 "repositoriesOrError { ... on RepositoryConnection "
                                 "{ nodes { jobs { name } } } } }"}).encode()
    try:
        listed = None
        for _ in range(240):
            assert server.poll() is None, "dg dev exited"
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/graphql", data=query,
                    headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=5) as response:
                    listed = json.loads(response.read())["data"]
                if listed["assetNodes"]:
                    break
            except (OSError, KeyError, TypeError):
                pass
            time.sleep(0.5)
        assert listed is not None and listed["assetNodes"], "dg dev did not serve the project"
        keys = {"/".join(n["assetKey"]["path"]) for n in listed["assetNodes"]}
        assert keys == {"example/edge", "example/reaches"}
        jobs = {j["name"] for r in listed["repositoriesOrError"]["nodes"] for j in r["jobs"]}
        assert jobs >= JOBS
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
