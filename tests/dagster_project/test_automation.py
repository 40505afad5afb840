"""The sensor's cursor logic, the runs it requests (executed in process on temporary Delta
tables), the blocking input check stopping a run, the daily recompute-check schedule and the
jobs' selections."""

import json

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltalog.dagster_project.definitions import build_definitions
from deltalog.dagster_project.defs import asset_key
from deltalog.dagster_project.defs.automation import (
    Tick,
    checks_job_name,
    plan_tick,
    rebuild_job_name,
    update_job_name,
)
from deltalog.dagster_project.defs.checks import CHECK_NAME
from deltalog.dagster_project.defs.edb import INPUT_CHECK
from deltalog.dagster_project.defs.idb import REBUILD_TAG
from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io
from deltalog.pipelines.state_store import STATE_DIR
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_to_rows
from tests.dagster_project.tiny import EDGES_V1, NODES, START, edb_tables, make_pipeline

pytestmark = pytest.mark.dagster


# -- the cursor logic ---------------------------------------------------------------------
def test_first_tick_sees_every_table_as_changed():
    tick = plan_tick(None, {"edge": 3, "node": 1})
    assert tick == Tick(("edge", "node"), json.dumps({"edge": 3, "node": 1}, sort_keys=True))


def test_no_new_version_skips_and_keeps_the_cursor():
    cursor = json.dumps({"edge": 3, "node": 1})
    tick = plan_tick(cursor, {"edge": 3, "node": 1})
    assert tick.changed == () and json.loads(tick.cursor) == {"edge": 3, "node": 1}
    assert "no EDB table has a new Delta version" in (tick.skip_reason or "")


def test_only_the_tables_that_moved_are_changed():
    cursor = json.dumps({"edge": 3, "node": 1})
    assert plan_tick(cursor, {"edge": 4, "node": 1}).changed == ("edge",)
    # a table recreated (its version went back) is a change too
    assert plan_tick(cursor, {"edge": 3, "node": 0}).changed == ("node",)
    # a table the cursor never saw
    assert plan_tick(cursor, {"edge": 3, "node": 1, "start": 0}).changed == ("start",)


def test_a_missing_table_runs_nothing_and_keeps_the_cursor():
    cursor = json.dumps({"edge": 3})
    tick = plan_tick(cursor, {"edge": 5, "node": None})
    assert tick.changed == () and tick.cursor == cursor
    assert "node" in (tick.skip_reason or "")
    assert plan_tick(None, {"edge": None}).cursor == ""


# -- the sensor on real tables ------------------------------------------------------------
def _sensor_tick(defs: dg.Definitions, name: str, cursor: str | None):
    sensor = defs.resolve_sensor_def(name)
    with dg.build_sensor_context(cursor=cursor, resources=defs.resources) as context:
        result = sensor.evaluate_tick(context)
    return result


def _run(defs: dg.Definitions, job_name: str, request: dg.RunRequest | None = None):
    """Run ``job_name`` in process, on the subset a sensor's ``request`` asks for (as the
    daemon would: its assets and exactly its checks)."""
    job = defs.resolve_job_def(job_name)
    if request is None:
        return job.execute_in_process(raise_on_error=False)
    subset = job.get_subset(
        asset_selection=set(request.asset_selection or ()),
        asset_check_selection=set(request.asset_check_keys or ()),
    )
    return subset.execute_in_process(raise_on_error=False, tags=dict(request.tags))


def _tables(spec, root) -> dict[str, set]:
    return {p: arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, p))) for p in spec.idb_tables}


def _expected(spec, edges, nodes=NODES) -> dict[str, frozenset]:
    return evaluate_naive(
        spec.program, {"edge": set(edges), "node": set(nodes), "start": set(START)}
    )


def test_sensor_requests_runs_for_new_versions_only(tmp_path):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    name = f"{spec.name}_edb_versions"

    first = _sensor_tick(defs, name, None)
    [request] = first.run_requests
    assert set(request.asset_selection) == {
        asset_key(spec, p) for p in (*spec.edb_tables, *spec.idb_tables)
    }
    assert {k.name for k in request.asset_check_keys} == {INPUT_CHECK}
    assert _run(defs, update_job_name(spec), request).success
    assert _tables(spec, root) == _expected(spec, EDGES_V1)

    quiet = _sensor_tick(defs, name, first.cursor)
    assert not quiet.run_requests and quiet.skip_message
    assert quiet.cursor == first.cursor

    # A new version of `node` only: the run covers node and what reads it (unreachable).
    nodes = [*NODES, (8, "n8")]
    tables = edb_tables(EDGES_V1)
    tables["node"] = pa.table({"id": [n[0] for n in nodes], "label": [n[1] for n in nodes]})
    write_edb(root, spec, tables)
    moved = _sensor_tick(defs, name, quiet.cursor)
    [request] = moved.run_requests
    assert set(request.asset_selection) == {
        asset_key(spec, "node"),
        asset_key(spec, "unreachable"),
    }
    assert json.loads(moved.cursor)["node"] == json.loads(first.cursor)["node"] + 1
    result = _run(defs, update_job_name(spec), request)
    assert result.success
    [mat] = [
        e.materialization
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key == asset_key(spec, "unreachable")
    ]
    assert mat.metadata["mode"].value == "incremental"
    assert mat.metadata["inserted"].value == 15  # (8, y) and (x, 8) for x, y in 1..8
    assert _tables(spec, root) == _expected(spec, EDGES_V1, nodes)


def test_blocking_input_check_stops_the_update_run(tmp_path):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    assert _run(defs, update_job_name(spec)).success
    versions = {p: delta_io.table_version(spec.table_uri(root, p)) for p in spec.idb_tables}
    states = {f: f.read_bytes() for f in (root / STATE_DIR).rglob("*") if f.is_file()}

    uri = spec.table_uri(root, "edge")
    drifted = pa.table({"src": [1, 2], "dst": ["2", "x"]})
    write_deltalake(uri, drifted, mode="overwrite", schema_mode="overwrite")
    result = _run(defs, update_job_name(spec))
    assert not result.success
    [check] = [
        c for c in result.get_asset_check_evaluations() if c.asset_key == asset_key(spec, "edge")
    ]
    assert check.check_name == INPUT_CHECK and not check.passed
    assert "column 'dst' has type string" in (check.description or "")
    assert check.metadata["column"].value == "dst"
    assert "src: 1" in check.metadata["offending_row"].value
    idb_keys = {asset_key(spec, p) for p in spec.idb_tables}
    assert not [
        e
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key in idb_keys
    ]
    assert versions == {p: delta_io.table_version(spec.table_uri(root, p)) for p in spec.idb_tables}
    assert states == {f: f.read_bytes() for f in (root / STATE_DIR).rglob("*") if f.is_file()}


# -- the schedule and the jobs ------------------------------------------------------------
def test_jobs_select_what_they_say(tmp_path):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)

    def steps(job_name: str) -> set[str]:
        return {node.name for node in defs.resolve_job_def(job_name).graph.node_defs}

    edb = {f"{spec.name}__{p}" for p in spec.edb_tables}
    strata = {f"{spec.name}__{'__'.join(s.preds)}" for s in spec.program.strata}
    inputs = {f"{spec.name}__{p}_{INPUT_CHECK}" for p in spec.edb_tables}
    recompute = {f"{s}__{CHECK_NAME}" for s in strata}
    assert steps(update_job_name(spec)) == edb | strata | inputs
    assert steps(checks_job_name(spec)) == recompute
    assert steps(rebuild_job_name(spec)) == strata
    assert defs.resolve_job_def(rebuild_job_name(spec)).tags.get(REBUILD_TAG)


def test_daily_schedule_runs_the_recompute_checks(tmp_path):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    schedule = defs.resolve_schedule_def(f"{spec.name}_recompute_checks_daily")
    assert schedule.job_name == checks_job_name(spec)
    assert schedule.cron_schedule == "0 3 * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    with dg.build_schedule_context() as context:
        [request] = schedule.evaluate_tick(context).run_requests or []
    assert request is not None


# (slow: the default run has the checks job's steps in test_jobs_select_what_they_say, and
# runs the same recompute checks, passing and failing, in test_materialize)
@pytest.mark.slow
@pytest.mark.spark
def test_recompute_checks_job_passes_after_an_update(tmp_path, spark):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    assert _run(defs, update_job_name(spec)).success
    result = _run(defs, checks_job_name(spec))
    assert result.success
    evaluations = result.get_asset_check_evaluations()
    assert {e.asset_key for e in evaluations} == {asset_key(spec, p) for p in spec.idb_tables}
    assert all(e.passed for e in evaluations)
