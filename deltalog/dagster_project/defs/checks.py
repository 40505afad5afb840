"""Asset checks: each IDB table must equal a full recompute on Spark from the EDB versions its
materialization consumed; a failure shows (up to 20 of) the differing rows on each side.

One ``matches_spark_recompute`` check per IDB predicate, grouped per stratum into one
multi-asset check so that a recursive component is recomputed on Spark once, not per member.
"""

import time

import dagster as dg

from deltalog.dagster_project.defs.edb import asset_key
from deltalog.dagster_project.defs.resources import SparkResource, WarehouseResource
from deltalog.engine.errors import DeltalogError
from deltalog.pipelines.recompute import CheckOutcome, spark_recompute_checks
from deltalog.pipelines.spec import PipelineSpec

CHECK_NAME = "matches_spark_recompute"


def _json_rows(rows: list[tuple]) -> dg.MetadataValue:
    return dg.MetadataValue.json([list(r) for r in rows])


def _result(
    spec: PipelineSpec, pred: str, outcome: CheckOutcome, seconds: float
) -> dg.AssetCheckResult:
    summary = (
        f"{outcome.engine_rows} rows, equal to the Spark recompute"
        if outcome.passed
        else f"{outcome.n_missing} row(s) missing in the table, {outcome.n_extra} extra"
    )
    return dg.AssetCheckResult(
        asset_key=asset_key(spec, pred),
        check_name=CHECK_NAME,
        passed=bool(outcome.passed),
        severity=dg.AssetCheckSeverity.ERROR,
        description=summary,
        metadata={
            "engine_rows": outcome.engine_rows,
            "spark_rows": outcome.spark_rows,
            "n_missing_in_engine": outcome.n_missing,
            "n_extra_in_engine": outcome.n_extra,
            "missing_in_engine": _json_rows(outcome.missing_in_engine),
            "extra_in_engine": _json_rows(outcome.extra_in_engine),
            "edb_versions": dg.MetadataValue.json(outcome.edb_versions),
            "table_version": outcome.table_version,
            # The Spark recompute of the whole stratum (shared by its predicates), apart from
            # the engine's time on the materialization.
            "spark_seconds": dg.MetadataValue.float(round(seconds, 3)),
        },
    )


def _stratum_checks(spec: PipelineSpec, index: int) -> dg.AssetChecksDefinition:
    preds = spec.program.strata[index].preds
    specs = [
        dg.AssetCheckSpec(
            name=CHECK_NAME,
            asset=asset_key(spec, pred),
            description=(
                f"`{pred}` equals a full recompute on Spark (binary joins, an independent "
                "implementation) from the EDB versions its last materialization consumed."
            ),
        )
        for pred in preds
    ]

    @dg.multi_asset_check(
        specs=specs,
        name=f"{spec.name}__{'__'.join(preds)}__{CHECK_NAME}"[:200],
        description=f"Spark recompute check of stratum {index} of {spec.name}",
    )
    def _matches(warehouse: WarehouseResource, spark: SparkResource):
        started = time.perf_counter()
        try:
            outcomes = spark_recompute_checks(
                spark.session(), warehouse.root, spec, preds, warehouse.state_root
            )
        except DeltalogError as err:
            for pred in preds:
                yield dg.AssetCheckResult(
                    asset_key=asset_key(spec, pred),
                    check_name=CHECK_NAME,
                    passed=False,
                    severity=dg.AssetCheckSeverity.ERROR,
                    description=str(err),
                )
            return
        seconds = time.perf_counter() - started
        for pred in preds:
            yield _result(spec, pred, outcomes[pred], seconds)

    return _matches


def idb_checks(spec: PipelineSpec) -> list[dg.AssetChecksDefinition]:
    """One ``matches_spark_recompute`` check per IDB predicate of ``spec``, one definition
    per stratum."""
    return [_stratum_checks(spec, i) for i in range(len(spec.program.strata))]
