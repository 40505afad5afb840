"""Partitioned maintenance as Spark tasks: route the rows, shuffle them to their partitions,
run ``deltalog.pipelines.partitions.run_partition`` in each, bring the derived change back.

The rows come either from the driver (a run's change, which is small) or from Spark's own
reads of the input tables' file lists (a load: no table passes through the driver). Each
row is routed by the split stratum's routes (``deltalog.engine.partition``): to one
partition by the hash of its key, to every partition (broadcast), or to the cells of a
hypercube; a shuffle with the partition number as its key (``partitionBy`` with the
identity, so partition k's task gets exactly the rows of partition k) takes them there.
Only the derived change (and each task's counters) reaches the driver.
"""

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import msgpack
import pyarrow as pa

from deltalog.engine.analysis.program import RelationSchema
from deltalog.engine.errors import DataError
from deltalog.engine.partition import SplitStratum
from deltalog.engine.storage import Delta
from deltalog.pipelines.partitions import (
    END,
    ERROR,
    STATS,
    PartitionFailed,
    PartitionJob,
    Record,
    pack_row,
    run_partition,
    unpack_row,
)

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class SparkRun:
    """What the tasks sent back: the change per relation, counters summed over the
    partitions, and what the shuffle carried (rows and bytes of routed rows)."""

    out: dict[str, Delta] = field(default_factory=dict)
    stats: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    shuffled_rows: int = 0
    shuffled_bytes: int = 0
    retried: int = 0
    changes: dict[str, tuple[pa.Table, pa.Table]] = field(default_factory=dict)
    whole: dict[str, pa.Table] = field(default_factory=dict)  # tables holding copies
    copies_unknown: set[str] = field(default_factory=set)  # tables too duplicated to track


def _route(split: SplitStratum, rows_acc: Any, bytes_acc: Any):  # type: ignore[no-untyped-def]
    """The map side: each input partition ``m`` routes its records, then sends every
    partition a trailer ``(END, m, rows sent to it)``, so that a task can tell a complete
    input from one cut short (PySpark ends a task's input stream quietly when the JVM side
    fails to fetch it, e.g. from a lost executor: the task must not apply a part)."""
    routes = {src: split.route(src) for src in {r.source for r in split.routes.values()}}
    parts = split.parts

    def route(m: int, records: Iterable[Record]) -> Iterator[tuple[int, Record]]:
        sent = [0] * parts
        for source, weight, data in records:
            row = unpack_row(data)
            for name, r in routes.get(source, ()):
                for k in r.targets(row, parts):
                    rows_acc.add(1)
                    bytes_acc.add(len(data) + len(name) + 8)
                    sent[k] += 1
                    yield k, (name, weight, data)
        for k in range(parts):
            yield k, (END, m, msgpack.packb(sent[k]))

    return route


def _tasks(job: PartitionJob):  # type: ignore[no-untyped-def]
    def task(k: int, items: Iterable[tuple[int, Record]]) -> Iterator[Record]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        return run_partition(job, k, (rec for _, rec in items), attempt)

    return task


def bad_rows(frame: "DataFrame", schema: RelationSchema, most: int = 5) -> pa.Table:
    """Up to ``most`` rows of ``frame`` (an input table read by the executors) with a null,
    or a NaN or infinity in a float column: what the input checks reject, found in Spark."""
    from pyspark.sql import functions as F

    conditions = []
    for column in schema.columns:
        value = F.col(column.name)
        conditions.append(value.isNull())
        if column.type == "float":
            conditions.append(F.isnan(value) | value.isin(float("inf"), float("-inf")))
    condition = conditions[0]
    for more in conditions[1:]:
        condition = condition | more
    return frame.filter(condition).limit(most).toArrow()


def change_records(change: Mapping[str, Delta]) -> list[Record]:
    """A run's input change as records (relation, weight, packed row)."""
    return [(pred, w, pack_row(row)) for pred, delta in sorted(change.items())
            for row, w in delta.items()]


def table_records(frames: Mapping[str, "DataFrame"]) -> "RDD[Record]":
    """Every row of each table's DataFrame as a record with weight 1, read by the executors."""
    def records_of(pred: str) -> Any:
        def record(row: Any) -> Record:
            return (pred, 1, pack_row(row))

        return record

    rdds = [frame.rdd.map(records_of(pred)) for pred, frame in sorted(frames.items())]
    first, *rest = rdds
    return first.context.union([first, *rest]) if rest else first


def run_on_spark(
    spark: "SparkSession", split: SplitStratum, job: PartitionJob,
    records: "list[Record] | RDD[Record]",
    tables: Mapping[str, tuple[str, RelationSchema]] | None = None,
) -> SparkRun:
    """Route ``records`` to the partitions of ``split`` and run ``job`` in each (every
    partition runs, with or without rows); raises the first partition's error.

    With ``tables`` (relation -> its table's URI and schema; for a load, whose partitions
    derive whole relations): the tasks' rows stay in Spark, are compared there with each
    table's current version, and ``changes`` holds only the differences (rows to insert,
    rows to delete) as Arrow; ``out`` stays empty."""
    sc = spark.sparkContext
    rows_acc, bytes_acc = sc.accumulator(0), sc.accumulator(0)
    if isinstance(records, list):
        rdd = sc.parallelize(records, max(1, min(split.parts, len(records) // 10_000 + 1)))
    else:
        rdd = records
    job = replace(job, maps=rdd.getNumPartitions())
    routed = rdd.mapPartitionsWithIndex(_route(split, rows_acc, bytes_acc))
    shuffled = routed.partitionBy(split.parts, lambda k: k)
    outputs = shuffled.mapPartitionsWithIndex(_tasks(job))
    if tables is not None:
        from pyspark import StorageLevel

        # computed once (a task recomputed after a lost block returns its saved rows)
        outputs.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        try:
            collected = (outputs if tables is None else
                         outputs.filter(lambda r: r[0] in (STATS, ERROR))).collect()
        except Exception as err:  # py4j's error of a job Spark gave up on (4 failed tries)
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise PartitionFailed(
                f"the Spark job of run {job.seq} failed ({first[:500]}); the partitions that "
                "finished keep their change, and the next run finishes this run first",
                job.folder, None, type(err).__name__, -1) from None
        run = _collected(job, collected)
        run.shuffled_rows, run.shuffled_bytes = int(rows_acc.value), int(bytes_acc.value)
        if tables is not None:
            run.changes, run.whole = _differences(spark, outputs, tables)
        return run
    finally:
        if tables is not None:
            outputs.unpersist()


def _collected(job: PartitionJob, collected: list[Record]) -> SparkRun:
    run = SparkRun()
    errors = []
    for name, weight, data in collected:
        if name == STATS:
            stats = msgpack.unpackb(data, raw=False)
            for pred, n in stats.pop("sizes", {}).items():
                run.sizes[pred] = run.sizes.get(pred, 0) + int(n)
            run.retried += int(stats.pop("retried", 0))
            run.copies_unknown.update(stats.pop("copies_unknown", ()))
            for key, value in stats.items():
                run.stats[key] = run.stats.get(key, 0) + value
        elif name == ERROR:
            errors.append((weight, msgpack.unpackb(data, raw=False)))
        else:
            delta = run.out.setdefault(name, {})
            row = unpack_row(data)
            delta[row] = delta.get(row, 0) + weight
    if errors:
        k, (kind, code, message, where) = min(errors)
        if kind == "DataError":
            raise DataError(message, where or None, code or None)
        raise PartitionFailed(f"partition {k}: {kind}: {message}", where or job.folder,
                              code or None, kind, k)
    run.out = {p: {r: w for r, w in d.items() if w} for p, d in run.out.items()}
    return run


def _differences(
    spark: "SparkSession", outputs: "RDD[Record]",
    tables: Mapping[str, tuple[str, RelationSchema]],
) -> tuple[dict[str, tuple[pa.Table, pa.Table]], dict[str, pa.Table]]:
    """Per relation: (rows the partitions derived that its table lacks, rows the table has
    that they did not), compared in Spark; and the relations whose tables hold copies of a
    row they keep, whole (``table_differences``)."""
    from deltalog.pipelines.recompute import table_differences
    from deltalog.schemas.relation import spark_schema

    out, whole = {}, {}
    for pred, (uri, schema) in tables.items():
        def rows_of(records: Iterable[Record], pred: str = pred) -> Iterator[Any]:
            return (unpack_row(data) for name, _, data in records if name == pred)

        derived = spark.createDataFrame(outputs.mapPartitions(rows_of), spark_schema(schema))
        added, gone, relation = table_differences(spark, derived, uri, schema)
        out[pred] = (added, gone)
        if relation is not None:
            whole[pred] = relation
    return out, whole
