"""Full recomputes on Spark from input tables at given versions, and the check that an IDB
table equals one.

The recompute is an independent implementation (binary joins, a semi-naive loop), so it is
the oracle of the incremental tables: the check recomputes from the EDB versions a table's
last run consumed, never from an IDB table (it must not trust what it checks). The Spark
rebuild uses the same recompute.
"""

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from deltalog.engine.analysis.program import RelationSchema
from deltalog.engine.values import Row
from deltalog.pipelines import delta_io
from deltalog.pipelines.commits import recorded_edb_versions
from deltalog.pipelines.inputs import require_table
from deltalog.pipelines.spec import PipelineSpec
from deltalog.pipelines.state_store import load_state, state_path
from deltalog.schemas.relation import arrow_schema, arrow_to_rows, normalize

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SAMPLE_LIMIT = 20


@dataclass(frozen=True)
class CheckOutcome:
    """An IDB table compared with a full recompute; the row lists hold up to
    ``SAMPLE_LIMIT`` rows each, the counts are exact."""

    passed: bool
    engine_rows: int
    spark_rows: int
    missing_in_engine: list[Row]
    extra_in_engine: list[Row]
    n_missing: int = 0
    n_extra: int = 0
    edb_versions: dict[str, int] = field(default_factory=dict)
    table_version: int = -1


def table_frames(
    spark: "SparkSession", root: str | Path, spec: PipelineSpec,
    versions: Mapping[str, int | None],
) -> dict[str, "DataFrame"]:
    """The tables of ``versions`` (table -> version, None: the latest) as DataFrames that
    Spark's executors read from the versions' files: the declared columns, in their order
    (a table may hold others, which the program does not read)."""
    return {
        pred: delta_io.spark_dataframe(spark, spec.table_uri(root, pred), version).select(
            *[c.name for c in spec.program.schemas[pred].columns])
        for pred, version in versions.items()
    }


def spark_recompute(
    spark: "SparkSession",
    root: str | Path,
    spec: PipelineSpec,
    versions: Mapping[str, int],
    wanted: Iterable[str],
) -> dict[str, pa.Table]:
    """``wanted`` IDB relations recomputed on Spark from the tables in ``versions`` (table ->
    version; tables not listed are empty to the backend), each as an Arrow table in its
    declared schema."""
    from deltalog.pipelines.spark.compiler import recompute

    wanted = list(wanted)
    recomputed = recompute(spark, spec.program, table_frames(spark, root, spec, versions),
                           wanted)
    out = {}
    for pred in wanted:
        schema = arrow_schema(spec.program.schemas[pred])
        arrow = normalize(recomputed[pred].toArrow())
        out[pred] = arrow.rename_columns(schema.names).cast(schema)
    return out


def spark_differences(
    spark: "SparkSession",
    root: str | Path,
    spec: PipelineSpec,
    versions: Mapping[str, int],
    tables: Mapping[str, str],
) -> tuple[dict[str, tuple[pa.Table, pa.Table]], dict[str, int], dict[str, pa.Table]]:
    """For each IDB relation of ``tables`` (relation -> its table's URI), recomputed on Spark
    from the tables in ``versions``: (rows the recompute has that the table lacks, rows the
    table has that the recompute lacks), and the recompute's row count. Computed in Spark
    (the executors read both), so only the differences reach the driver; and the
    relations whose tables hold copies of a row they keep, whole (``table_differences``)."""
    from deltalog.pipelines.spark.compiler import recompute
    from deltalog.pipelines.spark.session import conform

    recomputed = recompute(spark, spec.program, table_frames(spark, root, spec, versions),
                           list(tables))
    changes, sizes, whole = {}, {}, {}
    for pred, uri in tables.items():
        schema = spec.program.schemas[pred]
        expected = conform(recomputed[pred], schema).persist()
        try:
            added, gone, relation = table_differences(spark, expected, uri, schema)
            changes[pred] = (added, gone)
            if relation is not None:
                whole[pred] = relation
            sizes[pred] = expected.count()
        finally:
            expected.unpersist()
    return changes, sizes, whole


def table_differences(
    spark: "SparkSession", expected: "DataFrame", uri: str, schema: RelationSchema
) -> tuple[pa.Table, pa.Table, pa.Table | None]:
    """(rows of ``expected`` the table at ``uri`` lacks, rows of the table ``expected``
    lacks, None), compared in Spark (the executors read the table); only they reach the
    driver, as Arrow in the relation's schema. When the table holds copies of a row that
    ``expected`` keeps (another writer appended them), which no MERGE keyed on every column
    brings down to one copy, the third is ``expected`` whole, for a commit that rewrites
    the table (read into the driver: such a table is a repair, O(table) anyway)."""
    from deltalog.pipelines.spark.session import conform

    actual = conform(delta_io.spark_dataframe(spark, uri), schema)
    arrow_form = arrow_schema(schema)

    def arrow(df: "DataFrame") -> pa.Table:
        table = normalize(df.toArrow())
        return table.rename_columns(arrow_form.names).cast(arrow_form)

    distinct = expected.distinct()
    whole = None
    if delta_io.row_count(uri):  # (from the log: an empty table, as at a first load, has none)
        kept_copies = actual.exceptAll(distinct).intersect(distinct)
        whole = arrow(distinct) if kept_copies.limit(1).count() else None
    return arrow(expected.subtract(actual)), arrow(actual.subtract(expected)), whole


def table_edb_versions(
    root: str | Path, spec: PipelineSpec, pred: str, state_root: str | Path | None = None
) -> tuple[int, dict[str, int]]:
    """(table version, EDB versions the table stands for): those the stratum's last
    completed run consumed, from its saved state, when the table is still at the version
    that run left (a run with no change to write commits nothing, yet the table claims to
    be up to date with the newer EDB versions: a stale table must fail the check); else
    those its newest deltalog commit recorded. EDB tables that neither recorded (a table
    written by hand) default to their current version."""
    uri = spec.table_uri(root, pred)
    require_table(uri, pred, spec, "IDB")
    version = delta_io.table_version(uri)
    state = load_state(state_path(root, spec.name, spec.stratum_of(pred), state_root))
    if state is not None and state.table_versions.get(pred) == version:
        recorded = dict(state.edb_versions)
    else:
        recorded = recorded_edb_versions(uri, version)
    versions = {}
    for edb in spec.edb_closure(pred):
        if edb in recorded:
            versions[edb] = recorded[edb]
        else:
            versions[edb] = delta_io.table_version(spec.table_uri(root, edb))
    return version, versions


def _sample(table: pa.Table) -> list[Row]:
    return sorted(arrow_to_rows(table))[:SAMPLE_LIMIT]


def spark_recompute_checks(
    spark: "SparkSession",
    root: str | Path,
    spec: PipelineSpec,
    preds: Iterable[str],
    state_root: str | Path | None = None,
) -> dict[str, CheckOutcome]:
    """Compare the IDB table of each of ``preds`` with a full recompute on Spark from the EDB
    versions its newest materialization consumed, sharing one recompute among the tables
    produced from the same EDB versions (e.g. one stratum). The comparison runs in Spark
    (each table version read from its files by the executors, the differences counted
    there): the driver receives counts and at most ``SAMPLE_LIMIT`` rows of each
    difference, never a table."""
    from deltalog.pipelines.spark.compiler import recompute
    from deltalog.pipelines.spark.session import conform

    groups: dict[str, list[tuple[str, int]]] = {}
    snapshots: dict[str, dict[str, int]] = {}
    for pred in preds:
        version, edb_versions = table_edb_versions(root, spec, pred, state_root)
        key = json.dumps(edb_versions, sort_keys=True)
        groups.setdefault(key, []).append((pred, version))
        snapshots[key] = edb_versions
    out: dict[str, CheckOutcome] = {}
    for key, members in groups.items():
        edb_versions = snapshots[key]
        frames = table_frames(spark, root, spec, edb_versions)
        recomputed = recompute(spark, spec.program, frames, [p for p, _ in members])
        for pred, version in members:
            schema = spec.program.schemas[pred]
            expected = conform(recomputed[pred], schema).persist()
            actual = conform(
                delta_io.spark_dataframe(spark, spec.table_uri(root, pred), version), schema
            ).persist()
            try:
                # a table is a set: a copy of a row beyond its first is extra
                missing, extra = expected.subtract(actual), actual.exceptAll(expected.distinct())
                n_missing, n_extra = missing.count(), extra.count()
                out[pred] = CheckOutcome(
                    passed=n_missing == 0 and n_extra == 0,
                    engine_rows=actual.count(),
                    spark_rows=expected.count(),
                    missing_in_engine=_first_rows(missing) if n_missing else [],
                    extra_in_engine=_first_rows(extra) if n_extra else [],
                    n_missing=n_missing,
                    n_extra=n_extra,
                    edb_versions=dict(edb_versions),
                    table_version=version,
                )
            finally:
                expected.unpersist()
                actual.unpersist()
    return out


def _first_rows(df: "DataFrame") -> list[Row]:
    """The first ``SAMPLE_LIMIT`` rows of ``df`` in sort order (computed in Spark)."""
    return _sample(normalize(df.orderBy(*df.columns).limit(SAMPLE_LIMIT).toArrow()))
