"""Jobs, the sensor and the schedule of one pipeline.

- ``<pipeline>_update``: observe the EDB tables (with their blocking ``valid_input`` checks)
  and materialize the IDB assets incrementally. No Spark.
- ``<pipeline>_edb_versions`` (sensor): every 30 s reads the Delta version of each EDB table;
  its cursor holds the versions of the last tick (JSON ``{pred: version}``). When any version
  moved, it requests one ``_update`` run of the changed EDB assets and everything downstream,
  with a run key made of the versions (the same versions never launch twice). A polling
  sensor, because no automation condition sees an outside write to a Delta table: Dagster
  learns of a new version only when something observes the table, and this is that observer
  (with the blocking input checks in the same run, before the IDB assets).
- ``<pipeline>_automation`` (automation condition sensor): evaluates the IDB assets'
  ``AutomationCondition.eager()``: an IDB asset is materialized when an asset it reads was
  updated by a run that did not also update it (a stratum or an EDB observation launched from
  the UI, say); the sensor's ``_update`` runs carry everything downstream already.
- ``<pipeline>_recompute_checks`` + a daily schedule: the ``matches_spark_recompute`` check
  of every IDB table (Spark recomputes from the EDB versions each table consumed), and the
  ``expectations`` check of every EDB table with a Great Expectations suite.
- ``<pipeline>_rebuild``: every IDB asset in a run tagged ``deltalog/rebuild`` (launch it from
  the UI, or a backfill of the IDB assets with that tag).
- ``<pipeline>_table_maintenance`` + a weekly schedule (off until turned on): compact and
  vacuum the pipeline's tables, keeping what a stratum or a check still reads
  (``pipelines/table_maintenance.py``).
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field

from deltalog.dagster_project.defs.checks import CHECK_NAME
from deltalog.dagster_project.defs.edb import INPUT_CHECK, asset_key
from deltalog.dagster_project.defs.expectations import CHECK_NAME as EXPECTATIONS_CHECK
from deltalog.dagster_project.defs.idb import REBUILD_TAG
from deltalog.dagster_project.defs.resources import WarehouseResource
from deltalog.engine.errors import DeltalogError
from deltalog.pipelines import delta_io
from deltalog.pipelines.spec import PipelineSpec
from deltalog.pipelines.table_maintenance import (
    DEFAULT_MIN_RETENTION_HOURS,
    maintain_tables,
    reports_table,
)

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

SENSOR_INTERVAL_SECONDS = 30
RECOMPUTE_CRON = "0 3 * * *"  # daily, 03:00 UTC
MAINTENANCE_CRON = "0 4 * * 0"  # weekly, Sunday 04:00 UTC


def update_job_name(spec: PipelineSpec) -> str:
    return f"{spec.name}_update"


def checks_job_name(spec: PipelineSpec) -> str:
    return f"{spec.name}_recompute_checks"


def rebuild_job_name(spec: PipelineSpec) -> str:
    return f"{spec.name}_rebuild"


def maintenance_job_name(spec: PipelineSpec) -> str:
    return f"{spec.name}_table_maintenance"


def automation_sensor_name(spec: PipelineSpec) -> str:
    return f"{spec.name}_automation"


class TableMaintenanceConfig(dg.Config):
    min_retention_hours: int = Field(
        default=DEFAULT_MIN_RETENTION_HOURS,
        description=(
            "Files removed longer ago than this are vacuumed, unless a stratum or a check "
            "still reads their version (then the retention reaches back to it)."
        ),
    )
    compact: bool = Field(default=True, description="Compact small files before vacuuming.")
    full: bool = Field(
        default=True,
        description=(
            "Also vacuum files the Delta log no longer names (old change-data files, files "
            "of failed writes), under the same retention."
        ),
    )


def _input_checks_passed(instance: dg.DagsterInstance, spec: PipelineSpec) -> dict[str, int]:
    """EDB table -> the version its ``valid_input`` check last passed at, when its latest
    evaluation passed: the next evaluation reads the change since that version."""
    out = {}
    for pred in sorted(spec.edb_tables):
        key = dg.AssetCheckKey(asset_key(spec, pred), INPUT_CHECK)
        for record in instance.event_log_storage.get_asset_check_execution_history(key, limit=3):
            event = record.event.dagster_event if record.event is not None else None
            evaluation = event.event_specific_data if event is not None else None
            if not isinstance(evaluation, dg.AssetCheckEvaluation):
                continue  # planned, never evaluated
            version = evaluation.metadata.get("delta_version")
            value = getattr(version, "value", version)
            if evaluation.passed and isinstance(value, int):
                out[pred] = value
            break
    return out


def _maintenance_job(spec: PipelineSpec) -> dg.JobDefinition:
    @dg.op(name=f"{spec.name}_maintain_tables", out=dg.Out(dg.Nothing))
    def maintain(
        context: dg.OpExecutionContext,
        config: TableMaintenanceConfig,
        warehouse: WarehouseResource,
    ) -> dg.Output[None]:
        try:
            reports = maintain_tables(
                warehouse.root, spec, warehouse.state_root, config.min_retention_hours,
                compact=config.compact, full=config.full,
                keep=_input_checks_passed(context.instance, spec),
            )
        except DeltalogError as err:
            raise dg.Failure(description=str(err), allow_retries=False) from None
        for r in reports:
            if r.skipped:
                context.log.warning(f"{r.pred}: {r.skipped}")
                continue
            context.log.info(
                f"{r.pred}: {r.files_before} -> {r.files_after} files, {r.removed_files} "
                f"removed ({r.bytes_removed} bytes), versions from {r.needed_from} kept "
                f"for {r.needed_by} ({r.retention_hours} h)"
            )
        return dg.Output(None, metadata={"tables": dg.MetadataValue.json(reports_table(reports))})

    @dg.job(
        name=maintenance_job_name(spec),
        description=(
            f"Compact and vacuum the tables of {spec.name}, keeping every version a stratum "
            "or a check still reads."
        ),
        executor_def=dg.in_process_executor,
    )
    def _job() -> None:
        maintain()

    return _job


@dataclass(frozen=True)
class Tick:
    """What one sensor tick decided: the EDB tables whose version moved (empty: no run),
    the cursor to store, and why nothing runs when nothing does."""

    changed: tuple[str, ...]
    cursor: str
    skip_reason: str | None = None


def plan_tick(cursor: str | None, versions: Mapping[str, int | None]) -> Tick:
    """The sensor's decision from its stored ``cursor`` and the current ``versions`` (None
    for a table that does not exist). A table whose version differs from the cursor's (a
    new commit, or a table recreated at a lower version) counts as changed; the first tick
    (no cursor) sees every table as changed. While a table is missing nothing runs and the
    cursor stays as it was."""
    seen: dict[str, int] = json.loads(cursor) if cursor else {}
    missing = sorted(p for p, v in versions.items() if v is None)
    if missing:
        return Tick((), cursor or "", f"EDB table(s) {', '.join(missing)} do not exist yet")
    current = {p: int(v) for p, v in versions.items() if v is not None}
    changed = tuple(sorted(p for p, v in current.items() if seen.get(p) != v))
    new_cursor = json.dumps(current, sort_keys=True)
    if not changed:
        return Tick((), new_cursor, "no EDB table has a new Delta version")
    return Tick(changed, new_cursor)


def run_key(spec: PipelineSpec, versions: Mapping[str, int]) -> str:
    return f"{spec.name}:{json.dumps(dict(versions), sort_keys=True)}"


def _edb_versions(spec: PipelineSpec, root: str) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for pred in sorted(spec.edb_tables):
        uri = spec.table_uri(root, pred)
        out[pred] = delta_io.table_version(uri) if delta_io.exists(uri) else None
    return out


def _downstream_idb(spec: PipelineSpec, changed: tuple[str, ...]) -> list[str]:
    """IDB predicates whose rules read (transitively) one of the ``changed`` EDB tables."""
    return sorted(p for p in spec.idb_tables if set(spec.edb_closure(p)) & set(changed))


# A polling sensor, not an automation condition: the EDB tables are written outside Dagster,
# and a condition only sees what the instance records; this sensor is what notices a new
# Delta version (and runs the blocking input checks before the IDB assets in one run).
def _edb_sensor(spec: PipelineSpec, job: "UnresolvedAssetJobDefinition") -> dg.SensorDefinition:
    @dg.sensor(
        name=f"{spec.name}_edb_versions",
        job=job,
        minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            f"Launches {update_job_name(spec)} for the EDB tables of {spec.name} that got a "
            "new Delta version and the IDB assets downstream of them. The cursor holds the "
            "versions seen last (JSON {table: version})."
        ),
    )
    def _sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
        versions = _edb_versions(spec, warehouse.root)
        tick = plan_tick(context.cursor, versions)
        context.update_cursor(tick.cursor)
        if not tick.changed:
            return dg.SkipReason(tick.skip_reason or "nothing changed")
        current = {p: int(v) for p, v in versions.items() if v is not None}
        return dg.RunRequest(
            run_key=run_key(spec, current),
            asset_selection=[
                *(asset_key(spec, p) for p in tick.changed),
                *(asset_key(spec, p) for p in _downstream_idb(spec, tick.changed)),
            ],
            asset_check_keys=[
                dg.AssetCheckKey(asset_key(spec, p), INPUT_CHECK) for p in tick.changed
            ],
            tags={"deltalog/edb_versions": json.dumps(current, sort_keys=True)},
        )

    return _sensor


def pipeline_automation(spec: PipelineSpec) -> dg.Definitions:
    """The jobs, sensor and schedule of ``spec`` (see the module docstring)."""
    edb = [asset_key(spec, p) for p in sorted(spec.edb_tables)]
    idb = [asset_key(spec, p) for p in sorted(spec.idb_tables)]
    update = dg.define_asset_job(
        update_job_name(spec),
        selection=dg.AssetSelection.assets(*edb, *idb).without_checks()
        | dg.AssetSelection.checks(*(dg.AssetCheckKey(k, INPUT_CHECK) for k in edb)),
        description=f"Observe the EDB tables of {spec.name} and update its IDB tables.",
        executor_def=dg.in_process_executor,
    )
    checks = dg.define_asset_job(
        checks_job_name(spec),
        selection=dg.AssetSelection.checks(
            *(dg.AssetCheckKey(k, CHECK_NAME) for k in idb),
            *(dg.AssetCheckKey(asset_key(spec, p), EXPECTATIONS_CHECK)
              for p in sorted(spec.expectations)),
        ),
        description=f"Every IDB table of {spec.name} against a full recompute on Spark, and "
                    "every EDB table with an expectation suite against the whole suite.",
        executor_def=dg.in_process_executor,
    )
    rebuild = dg.define_asset_job(
        rebuild_job_name(spec),
        selection=dg.AssetSelection.assets(*idb).without_checks(),
        description=(
            f"Rebuild every IDB table of {spec.name} from scratch (run tag {REBUILD_TAG})."
        ),
        tags={REBUILD_TAG: "spark"},
        executor_def=dg.in_process_executor,
    )
    # A schedule of the checks job rather than a cron condition on each check: one named run
    # a day that recomputes every stratum on one Spark session.
    schedule = dg.ScheduleDefinition(
        name=f"{spec.name}_recompute_checks_daily",
        job=checks,
        cron_schedule=RECOMPUTE_CRON,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Daily at 03:00 UTC: {checks_job_name(spec)}.",
    )
    maintenance = _maintenance_job(spec)
    weekly = dg.ScheduleDefinition(
        name=f"{spec.name}_table_maintenance_weekly",
        job=maintenance,
        cron_schedule=MAINTENANCE_CRON,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Sundays at 04:00 UTC: {maintenance_job_name(spec)} (off until turned on).",
    )
    automation = dg.AutomationConditionSensorDefinition(
        automation_sensor_name(spec),
        target=dg.AssetSelection.assets(*idb),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
        description=(
            f"Evaluates the automation conditions of the IDB assets of {spec.name} (eager: "
            "materialize when an upstream asset was updated by another run)."
        ),
    )
    return dg.Definitions(
        jobs=[update, checks, rebuild, maintenance],
        sensors=[_edb_sensor(spec, update), automation],
        schedules=[schedule, weekly],
    )
