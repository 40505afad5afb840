"""The table maintenance job of a pipeline in Dagster: it compacts and vacuums with the
configured minimum retention and reports per table; the runs after it stay incremental; it
keeps the change the blocking ``valid_input`` check reads next (from the version that check
last passed at, found in the instance), which the library alone, not told of it, removes;
its weekly schedule is off until turned on (so it never runs by surprise)."""

import dagster as dg
import pytest

from deltalog.dagster_project.definitions import build_definitions
from deltalog.dagster_project.defs.automation import maintenance_job_name, update_job_name
from deltalog.dagster_project.defs.edb import INPUT_CHECK
from deltalog.pipelines.table_maintenance import maintain_tables
from deltalog.pipelines.warehouse import write_edb
from tests.dagster_project.tiny import EDGES_V1, edb_tables, make_pipeline, run_all, tables_right

pytestmark = [pytest.mark.dagster]


def _maintain(defs, spec, instance=None) -> dict:
    """Run the maintenance job with no minimum retention; its report by table."""
    job = defs.resolve_job_def(maintenance_job_name(spec))
    op = f"{spec.name}_maintain_tables"
    result = job.execute_in_process(
        run_config={"ops": {op: {"config": {"min_retention_hours": 0}}}}, instance=instance
    )
    assert result.success
    [event] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return event.event_specific_data.metadata["tables"].value


def _edge_check(defs, spec, instance) -> dg.AssetCheckEvaluation:
    """Run the update job (EDB observations, their valid_input checks, the IDB assets)."""
    result = defs.resolve_job_def(update_job_name(spec)).execute_in_process(
        instance=instance, raise_on_error=False
    )
    [check] = [
        c
        for c in result.get_asset_check_evaluations()
        if c.asset_key.path[-1] == "edge" and c.check_name == INPUT_CHECK
    ]
    return check


def test_the_job_compacts_and_reports_and_runs_stay_incremental(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    edges = list(EDGES_V1)
    for i in range(3):
        edges.append((10 + i, 11 + i))
        write_edb(root, spec, edb_tables(edges))
        run_all(spec, root)
    defs = build_definitions([spec], root=root)
    tables = _maintain(defs, spec)
    assert set(tables) == {*spec.edb_tables, *spec.idb_tables}
    assert tables["path"]["files_after"] == 1 < tables["path"]["files_before"]
    assert tables["path"]["bytes_compacted"] > 0
    assert tables["path"]["needed_from"] <= tables["path"]["version_before"]
    edges.append((50, 1))
    write_edb(root, spec, edb_tables(edges))
    assert {r.mode for r in run_all(spec, root).values()} == {"incremental"}
    assert tables_right(spec, root, edges)


@pytest.mark.parametrize("through_job", [True, False])
def test_the_input_checks_change_is_kept(tmp_path, through_job):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    with dg.instance_for_test() as instance:
        passed = _edge_check(defs, spec, instance)
        assert passed.passed
        since = passed.metadata["delta_version"].value
        edges = list(EDGES_V1)
        for i in range(2):  # changes the strata consume outside Dagster, the check not
            edges.append((20 + i, 21 + i))
            write_edb(root, spec, edb_tables(edges))
            run_all(spec, root)
        for _ in range(2):  # the strata catch up with the compaction in between
            if through_job:
                tables = _maintain(defs, spec, instance)
            else:  # the control: the library, not told of the check's version
                tables = {r.pred: r.as_dict() for r in maintain_tables(root, spec, None, 0)}
            run_all(spec, root)
        if through_job:
            assert tables["edge"]["needed_from"] == since
            assert tables["edge"]["needed_by"] == "caller"
        edges.append((30, 31))
        write_edb(root, spec, edb_tables(edges))
        check = _edge_check(defs, spec, instance)
        if through_job:
            assert check.passed, check.description
            assert check.metadata["checked"].value == f"change since {since}"
            assert tables_right(spec, root, edges)
        else:
            assert not check.passed and "cannot be read any more" in check.description


def test_the_weekly_schedule_is_off_by_default(tmp_path):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    schedule = defs.resolve_schedule_def(f"{spec.name}_table_maintenance_weekly")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert schedule.job_name == maintenance_job_name(spec)
    assert schedule.cron_schedule == "0 4 * * 0"
