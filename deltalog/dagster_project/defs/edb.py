"""One observable source asset per EDB Delta table: writing EDB tables is the job of whoever
owns the data, so Dagster observes them. An observation records the table's Delta version as
the asset's data version (what ``AutomationCondition.eager()`` on the IDB assets downstream
reacts to), with its row count from the Delta log and its schema as metadata."""

import warnings
from typing import Any

import dagster as dg

from deltalog.dagster_project.defs.resources import WarehouseResource
from deltalog.engine.errors import DeltalogError
from deltalog.pipelines import delta_io, quality
from deltalog.pipelines.inputs import check_input, require_table
from deltalog.pipelines.spec import PipelineSpec
from deltalog.schemas.relation import dagster_table_schema

KINDS = {"delta", "datalog"}


def asset_key(spec: PipelineSpec, pred: str) -> dg.AssetKey:
    """The asset key of the table of ``pred``: ``<pipeline>/<pred>``."""
    return dg.AssetKey([spec.name, pred])


def table_metadata(spec: PipelineSpec, pred: str, uri: str, rows: int) -> dict[str, Any]:
    """Dagster's standard table metadata of ``pred``'s table at ``uri`` holding ``rows`` rows
    (counted from the Delta log or the run's commit, never by a scan)."""
    return {
        "dagster/table_name": uri,
        "dagster/row_count": rows,
        "dagster/column_schema": dagster_table_schema(spec.program.schemas[pred]),
    }


def _edb_asset(spec: PipelineSpec, pred: str) -> dg.AssetsDefinition:
    schema = spec.program.schemas[pred]
    columns = ", ".join(f"{c.name}: {c.type}" for c in schema.columns)
    table = dg.AssetSpec(
        key=asset_key(spec, pred),
        group_name=spec.name,
        kinds=KINDS,
        description=(
            f"EDB table `{pred}({columns})` of pipeline {spec.name}, at "
            f"`{spec.edb_tables[pred]}` in the warehouse. Observing it records its current "
            "Delta version as the data version; Dagster never writes it."
        ),
        metadata={"table_path": spec.edb_tables[pred]},
    )

    # An external asset (AssetSpec) with an observation function. New Delta versions are not
    # pushed to Dagster: the ``<pipeline>_edb_versions`` sensor polls them (an automation
    # condition cannot notice an outside write until something observes the table).
    def _observe(warehouse: WarehouseResource) -> dg.ObserveResult:
        uri = spec.table_uri(warehouse.root, pred)
        try:
            require_table(uri, pred, spec, "EDB")
            version = delta_io.table_version(uri)
            rows = delta_io.row_count(uri, version)
        except DeltalogError as err:
            raise dg.Failure(description=str(err), allow_retries=False) from None
        return dg.ObserveResult(
            asset_key=table.key,
            data_version=dg.DataVersion(str(version)),
            metadata={
                **table_metadata(spec, pred, uri, rows),
                "delta_version": version,
                "uri": dg.MetadataValue.path(uri),
            },
        )

    with warnings.catch_warnings():  # beta in Dagster 1.13; the tests pin its behaviour
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.multi_observable_source_asset(specs=[table], name=f"{spec.name}__{pred}")(
            _observe
        )


def edb_assets(spec: PipelineSpec) -> list[dg.AssetsDefinition]:
    """One observable source asset per bound EDB table of ``spec``."""
    return [_edb_asset(spec, pred) for pred in sorted(spec.edb_tables)]


INPUT_CHECK = "valid_input"


def _input_check(spec: PipelineSpec, pred: str) -> dg.AssetChecksDefinition:
    key = asset_key(spec, pred)

    @dg.asset_check(
        asset=key,
        name=INPUT_CHECK,
        blocking=True,
        description=(
            f"Blocking: the current version of `{pred}`'s table matches its declaration "
            "(columns and types, no nulls, no NaN, one value per functional key). After a "
            "passed evaluation only the change since the version it passed is read. When it "
            "fails, the IDB assets downstream do not run in the same run (and an IDB "
            "materialization started on its own refuses the same input with the same message)."
        ),
    )
    def _valid(
        context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource
    ) -> dg.AssetCheckResult:
        uri = spec.table_uri(warehouse.root, pred)
        since = _last_passed_version(context, dg.AssetCheckKey(key, INPUT_CHECK))
        try:
            checked = check_input(warehouse.root, spec, pred, since)
        except DeltalogError as err:
            return dg.AssetCheckResult(passed=False, description=str(err))
        problems, version = checked.problems, checked.version
        metadata: dict[str, Any] = {
            "delta_version": version,
            "rows": checked.rows,
            "rows_read": checked.rows_read,
            "checked": "whole table" if checked.since is None else f"change since {checked.since}",
        }
        if problems:
            first = problems[0]
            metadata.update(
                column=first.column or "-",
                offending_row=quality.show_row(first.row) if first.row is not None else "-",
                problems=dg.MetadataValue.md(
                    "\n".join(f"- {quality.describe(pred, uri, version, p)}" for p in problems)
                ),
            )
        return dg.AssetCheckResult(
            passed=not problems,
            severity=dg.AssetCheckSeverity.ERROR,
            description=(
                quality.describe(pred, uri, version, problems[0])
                if problems
                else f"{checked.rows} rows match the declaration of '{pred}'"
            ),
            metadata=metadata,
        )

    return _valid


def _last_passed_version(
    context: dg.AssetCheckExecutionContext, key: dg.AssetCheckKey
) -> int | None:
    """The table version of the check's latest completed evaluation before this run when
    that one passed, else None (this evaluation then reads the whole table)."""
    history = context.instance.event_log_storage.get_asset_check_execution_history(key, limit=3)
    for record in history:
        if record.run_id == context.run.run_id or record.event is None:
            continue
        event = record.event.dagster_event
        evaluation = event.event_specific_data if event is not None else None
        if not isinstance(evaluation, dg.AssetCheckEvaluation):
            continue  # planned, never evaluated (the run failed before the check)
        if not evaluation.passed:
            return None
        version = evaluation.metadata.get("delta_version")
        value = getattr(version, "value", version)
        return value if isinstance(value, int) else None
    return None


def edb_checks(spec: PipelineSpec) -> list[dg.AssetChecksDefinition]:
    """One blocking ``valid_input`` check per bound EDB table of ``spec``."""
    return [_input_check(spec, pred) for pred in sorted(spec.edb_tables)]
