"""One multi-asset per stratum (a recursive component or a single predicate): one AssetSpec
per IDB predicate, with deps from the rule bodies; the body runs the stratum through
``StratumRun``: ``materialize()`` (incremental from the saved engine state), or ``rebuild()``
in a run tagged
``deltalog/rebuild`` (``spark``: a recompute on Spark)."""

from typing import Any

import dagster as dg

from deltalog.dagster_project.defs.edb import KINDS, asset_key, table_metadata
from deltalog.dagster_project.defs.resources import SparkResource, WarehouseResource
from deltalog.engine.errors import DeltalogError
from deltalog.pipelines.run import StratumResult, StratumRun
from deltalog.pipelines.spec import PipelineSpec


def _metadata(spec: PipelineSpec, result: StratumResult, uri: str) -> dict[str, Any]:
    # dagster/row_count is the table's size after the run's commit, from the engine (or the
    # Delta log), never a scan; seconds is the whole stratum run, engine_seconds the engine's
    # part of it (the Spark check's own seconds are on its evaluation: spark_seconds).
    return {
        **table_metadata(spec, result.pred, uri, result.rows),
        "inserted": result.inserted,
        "deleted": result.deleted,
        "input_versions": dg.MetadataValue.json(result.input_versions),
        "edb_versions": dg.MetadataValue.json(result.edb_versions),
        "table_version": result.table_version,
        "seconds": dg.MetadataValue.float(round(result.seconds, 3)),
        "uri": dg.MetadataValue.path(uri),
        "mode": result.mode,
        "rebuilt_because": result.rebuilt_because or "-",
        "incremental": result.mode in ("incremental", "unchanged"),
        "seq": result.seq,
        "notes": dg.MetadataValue.text("\n".join(result.notes) or "-"),
        "engine_seconds": dg.MetadataValue.float(float(result.stats.get("seconds", 0.0))),
        **{name: _number(result.stats.get(name, 0)) for name in WORK_COUNTERS},
        **({"lineage": dg.MetadataValue.md(result.lineage)} if result.lineage else {}),
        **({"partitioning": str(result.stats["partitioning"])}
           if result.stats.get("partitioning") else {}),
    }


# Engine counters shown on every materialization (0 when a run did not report one), so the
# UI's plots follow the cost of each run against the change it carried.
WORK_COUNTERS = (
    "edb_changes",
    "idb_inserted",
    "idb_erased",
    "iterator_ops",
    "oracle_regions",
    "intervals_matched",
    "count_queries",
    "rows_gathered",
    "facts_touched",
    "state_bytes_written",
    "state_bytes_read",
    "state_segments",
    "state_open_s",
    "state_save_s",
    "partitions",
    "shuffled_rows",
    "shuffled_bytes",
)


def _number(value: Any) -> Any:
    return dg.MetadataValue.float(float(value)) if isinstance(value, float) else int(value)


# A run tagged ``deltalog/rebuild`` rebuilds each selected stratum (``StratumRun.rebuild``).
# With the value ``spark`` (the ``<pipeline>_rebuild`` job, and so a UI backfill of it):
# recomputed on Spark, one commit per IDB table that makes it equal the result, saved
# state dropped. With any other value: saved state dropped and reloaded by the Python
# engine from the tables.
REBUILD_TAG = "deltalog/rebuild"
REBUILD_ON_SPARK = "spark"


def _describe(spec: PipelineSpec, pred: str, recursive: bool) -> str:
    rules = [r for r in spec.program.program.rules if r.head.pred == pred]
    shown = "\n".join(f"    {r}" for r in rules)
    kind = "recursive " if recursive else ""
    return (
        f"IDB `{pred}` of pipeline {spec.name} ({kind}stratum), written to "
        f"`{spec.idb_tables[pred]}` in the warehouse. Rules:\n\n{shown}"
    )


def _stratum_asset(spec: PipelineSpec, index: int) -> dg.AssetsDefinition:
    stratum = spec.program.strata[index]
    specs = [
        dg.AssetSpec(
            key=asset_key(spec, pred),
            deps=[asset_key(spec, q) for q in spec.upstream_of((pred,), exclude=stratum.preds)],
            group_name=spec.name,
            kinds=KINDS,
            description=_describe(spec, pred, stratum.recursive),
            metadata={"table_path": spec.idb_tables[pred], "stratum": index},
            # Materialized when a table it reads was updated by a run that did not also
            # update it (the `<pipeline>_automation` sensor evaluates this).
            automation_condition=dg.AutomationCondition.eager(),
        )
        for pred in stratum.preds
    ]
    name = f"{spec.name}__{'__'.join(stratum.preds)}"[:200]

    @dg.multi_asset(
        name=name,
        specs=specs,
        description=f"Stratum {index} of {spec.name}: {', '.join(stratum.preds)}",
    )
    def _materialize(
        context: dg.AssetExecutionContext, warehouse: WarehouseResource, spark: SparkResource
    ):
        rebuild = context.run.tags.get(REBUILD_TAG)
        parts = spark.partitions
        run = StratumRun(warehouse.root, spec, index, state_root=warehouse.state_root,
                         spark=spark.session() if parts > 1 else None, partitions=parts,
                         broadcast_rows=spark.broadcast_rows)
        try:
            if not rebuild:
                results = run.materialize()
            elif rebuild == REBUILD_ON_SPARK:
                results = run.rebuild(spark=spark.session())
            else:
                results = run.rebuild()
        except DeltalogError as err:
            raise dg.Failure(description=str(err), allow_retries=False) from None
        for result in results:
            yield dg.MaterializeResult(
                asset_key=asset_key(spec, result.pred),
                metadata=_metadata(spec, result, spec.table_uri(warehouse.root, result.pred)),
            )

    return _materialize


def idb_assets(spec: PipelineSpec) -> list[dg.AssetsDefinition]:
    """One multi-asset per stratum of ``spec``, in evaluation order."""
    return [_stratum_asset(spec, i) for i in range(len(spec.program.strata))]
