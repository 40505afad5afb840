"""The table maintenance job of a pipeline in Dagster: it compacts and vacuums with the
configured minimum retention and reports per table; its weekly schedule is off until
turned on (so it never runs by surprise)."""

import dagster as dg
import pytest

from dagster_project.definitions import build_definitions
from pipelines.warehouse import write_edb
from tests.dagster_project.tiny import EDGES_V1, edb_tables, make_pipeline, run_all, tables_right

pytestmark = [pytest.mark.dagster]


def test_the_job_compacts_and_reports_and_runs_stay_incremental(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    edges = list(EDGES_V1)
    for i in range(3):
        edges.append((10 + i, 11 + i))
        write_edb(root, spec, edb_tables(edges))
        run_all(spec, root)
    defs = build_definitions([spec], root=root)
    job = defs.resolve_job_def(f"{spec.name}_table_maintenance")
    result = job.execute_in_process(
        run_config={"ops": {f"{spec.name}_maintain_tables": {"config": {"min_retention_hours": 0}}}}
    )
    assert result.success
    [event] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    tables = event.event_specific_data.metadata["tables"].value
    assert tables["path"]["files_after"] == 1 < tables["path"]["files_before"]
    edges.append((50, 1))
    write_edb(root, spec, edb_tables(edges))
    assert {r.mode for r in run_all(spec, root).values()} == {"incremental"}
    assert tables_right(spec, root, edges)


def test_the_weekly_schedule_is_off_by_default(tmp_path):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    schedule = defs.resolve_schedule_def(f"{spec.name}_table_maintenance_weekly")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert schedule.job_name == f"{spec.name}_table_maintenance"
