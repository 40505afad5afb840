"""A team's own project from an empty folder, as the README's "Your own project" says, on a
warehouse on object storage (the S3 server the tests start): ``deltalog init``, a rule of
the team's own, the warehouse named in ``[tool.deltalog]`` with the storage options and a
local state folder from the environment; the seed writes the EDB table to S3, the update
job loads and then maintains a change incrementally, a team-written expectation blocks a
bad change (nothing derived from it is written), and the Spark recompute checks pass
reading the tables from S3. The oracle: the naive evaluator."""

import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from deltalog.dagster_project.defs.resources import STATE_ENV, WAREHOUSE_ENV
from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io
from deltalog.pipelines.scaffold import init_project
from deltalog.pipelines.spec import PIPELINES_ENV, load_pipeline
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_to_rows
from tests.local import import_fresh

pytestmark = [pytest.mark.dagster, pytest.mark.spark,
              pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

ROOT = "s3://deltalog-test/team-project"
RULE = "far(x, z) :- reaches(x, z), !edge(x, z).\n"
SUITE = {"expectations": [{"type": "expect_column_values_to_match_regex",
                           "kwargs": {"column": "src", "regex": "^[a-z]+$"}}]}


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "team"
    init_project(project, package="team_s3")
    example = project / "pipelines" / "example"
    program = example / "program.dl"
    program.write_text(program.read_text(encoding="utf-8") + RULE, encoding="utf-8")
    binding = example / "pipeline.toml"
    binding.write_text(
        binding.read_text(encoding="utf-8").replace(
            '[idb]\n', '[idb]\nfar = "example/idb/far"\n')
        + '\n[expectations]\nedge = "expectations/edge.json"\n', encoding="utf-8")
    (example / "expectations").mkdir()
    (example / "expectations" / "edge.json").write_text(json.dumps(SUITE), encoding="utf-8")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8").replace(
        'warehouse = "warehouse"', f'warehouse = "{ROOT}"'), encoding="utf-8")
    return project


def _rows(spec, pred: str) -> set:
    return arrow_to_rows(delta_io.read_arrow(spec.table_uri(ROOT, pred)))


def _edges(rows) -> pa.Table:
    return pa.table({"src": [r[0] for r in rows], "dst": [r[1] for r in rows]})


def _right(spec, edges) -> bool:
    expected = evaluate_naive(spec.program, {"edge": set(edges)})
    return all(_rows(spec, p) == expected[p] for p in spec.idb_tables)


def test_a_team_project_on_object_storage_from_init_to_spark_checks(
    tmp_path, s3, monkeypatch
):
    monkeypatch.delenv(PIPELINES_ENV, raising=False)
    monkeypatch.delenv(WAREHOUSE_ENV, raising=False)
    monkeypatch.setenv(delta_io.STORAGE_OPTIONS_ENV, json.dumps(s3))
    monkeypatch.setenv(STATE_ENV, str(tmp_path / "state"))
    project = _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    spec = load_pipeline(project / "pipelines" / "example")
    assert set(spec.idb_tables) == {"reaches", "far"} and "edge" in spec.expectations

    assert import_fresh(project, "team_s3.seed", monkeypatch).main() == 0
    defs = import_fresh(project, "team_s3.definitions", monkeypatch).defs
    assert defs.resources["warehouse"].root == ROOT
    seeded = sorted(_rows(spec, "edge"))
    with dg.instance_for_test() as instance:
        def update():
            return defs.resolve_job_def("example_update").execute_in_process(
                instance=instance, raise_on_error=False)

        def modes(result) -> set[str]:
            return {str(e.materialization.metadata["mode"].value)
                    for e in result.get_asset_materialization_events()
                    if e.materialization.asset_key.path[-1] in spec.idb_tables}

        first = update()
        assert first.success and modes(first) == {"full"}
        assert _right(spec, seeded)

        changed = [*seeded, ("d", "e")]
        write_edb(ROOT, spec, {"edge": _edges(changed)})
        second = update()
        assert second.success and modes(second) == {"incremental"}
        assert _right(spec, changed)

        write_edb(ROOT, spec, {"edge": _edges([*changed, ("Bad!", "a")])})
        before = {p: delta_io.table_version(spec.table_uri(ROOT, p)) for p in spec.idb_tables}
        blocked = update()
        failed = [c for c in blocked.get_asset_check_evaluations() if not c.passed]
        assert [c.check_name for c in failed] == ["valid_input"]
        assert "expect_column_values_to_match_regex" in (failed[0].description or "")
        assert not blocked.get_asset_materialization_events()  # nothing derived from it
        assert before == {p: delta_io.table_version(spec.table_uri(ROOT, p))
                          for p in spec.idb_tables}

        write_edb(ROOT, spec, {"edge": _edges(changed)})  # the team fixes the table
        assert update().success and _right(spec, changed)
        checks = defs.resolve_job_def("example_recompute_checks").execute_in_process(
            instance=instance, raise_on_error=False)
        evaluations = checks.get_asset_check_evaluations()
        # the Spark recompute of each IDB table, and the suite on the whole EDB table
        assert {c.asset_key.path[-1] for c in evaluations} == {*spec.idb_tables, "edge"}
        assert all(c.passed for c in evaluations), [c.description for c in evaluations]
