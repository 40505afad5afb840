"""The one way this project starts Spark and moves relations in and out of it.

Session settings that behave on a small local machine (2 cores, a few GB: few shuffle
partitions, no UI, loopback only), and conversions between Python rows / Arrow tables and
DataFrames (a relation's Spark schema is ``deltalog.schemas.relation.spark_schema``).
"""

import os
import sys
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from deltalog.engine.analysis.program import RelationSchema
from deltalog.engine.errors import BAD_VALUE, DataError
from deltalog.engine.semantics import coerce
from deltalog.engine.values import Value
from deltalog.schemas.relation import arrow_schema, spark_schema, spark_type

SPARK_CONF: dict[str, str] = {
    "spark.master": "local[*,4]",  # a failed task is tried again, as on a cluster
    "spark.driver.memory": "2g",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}

# For short runs on small data (tests, demos): the JVM's C1 compiler only. The C2 compiler's
# work rarely pays off in a run of seconds; here it halved the Spark test suite's time.
FAST_START_CONF: dict[str, str] = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}

_PYTHON_TYPES: dict[str, type | tuple[type, ...]] = {
    "int": int,
    "float": (int, float),
    "string": str,
}

# Spark types accepted for a column of each deltalog type (all widen without loss).
_ACCEPTED: dict[str, tuple[type[T.DataType], ...]] = {
    "int": (T.ByteType, T.ShortType, T.IntegerType, T.LongType),
    "float": (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType),
    "string": (T.StringType, T.CharType, T.VarcharType),
}


def make_spark_session(
    app_name: str = "deltalog", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A Spark session, local by default (or the one already running in this process,
    whose JVM settings then stay as they were). ``conf`` adds to or overrides
    ``SPARK_CONF`` (``spark.master`` names a cluster)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers (Arrow UDFs) must run the interpreter that has our dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    drop_stopped_context()
    builder = SparkSession.builder.appName(app_name)
    for key, value in {**SPARK_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def context_stopped(spark: SparkSession) -> bool:
    """Whether the JVM stopped ``spark``'s context on its own (Spark stops it after an
    internal error, such as its scheduler running out of memory), which the Python side
    does not learn: every later call then fails with "Cannot call methods on a stopped
    SparkContext". ``False`` for a context stopped from Python (its JVM handle is gone)."""
    jsc = spark.sparkContext._jsc
    return jsc is not None and bool(jsc.sc().isStopped())


def drop_stopped_context() -> bool:
    """Forget this process's session if the JVM stopped its context, so that the next
    ``make_spark_session`` starts a new context in the same JVM instead of handing out the
    dead one. Whether there was one to drop."""
    from pyspark import SparkContext

    active = SparkContext._active_spark_context
    if active is None or active._jsc is None or not active._jsc.sc().isStopped():
        return False
    active.stop()  # the Python side's handles; the JVM's context is already stopped
    return True


def conform(df: DataFrame, schema: RelationSchema, names: Sequence[str] | None = None) -> DataFrame:
    """``df`` with its columns (taken by position) cast to the schema's types and renamed to
    ``names`` (default: the schema's column names). Raises DataError DL301 when the number
    of columns differs or a column's type cannot be widened losslessly."""
    names = [c.name for c in schema.columns] if names is None else list(names)
    fields = df.schema.fields
    if len(fields) != schema.arity:
        raise DataError(
            f"input for '{schema.name}' has {len(fields)} columns, the relation has {schema.arity}",
            schema.name,
            BAD_VALUE,
        )
    positional = df.toDF(*[f"_in{i}" for i in range(len(fields))])
    cols = []
    for i, (field, column) in enumerate(zip(fields, schema.columns, strict=True)):
        if not isinstance(field.dataType, _ACCEPTED[column.type]):
            raise DataError(
                f"input column {i + 1} ('{field.name}') of '{schema.name}' has Spark type "
                f"{field.dataType.simpleString()}, the relation's column '{column.name}' is "
                f"{column.type}",
                schema.name,
                BAD_VALUE,
            )
        cols.append(F.col(f"_in{i}").cast(spark_type(column.type)).alias(names[i]))
    return positional.select(*cols)


def to_spark(
    spark: SparkSession,
    schema: RelationSchema,
    rows_or_arrow: Iterable[tuple[Value, ...]] | pa.Table,
) -> DataFrame:
    """A DataFrame with the relation's schema from Python tuples or a pyarrow Table
    (columns by position; ints widen into float columns)."""
    if isinstance(rows_or_arrow, pa.Table):
        table = rows_or_arrow
        if table.num_columns != schema.arity:
            raise DataError(
                f"table for '{schema.name}' has {table.num_columns} columns, the relation has "
                f"{schema.arity}",
                schema.name,
                BAD_VALUE,
            )
        target = arrow_schema(schema, nullable=True)
        try:
            table = table.rename_columns(target.names).cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise DataError(
                f"table for '{schema.name}' does not fit the relation's types: {err}",
                schema.name,
                BAD_VALUE,
            ) from err
        if table.num_rows == 0:
            return spark.createDataFrame([], spark_schema(schema))
        return conform(spark.createDataFrame(table), schema)
    rows = []
    for row in rows_or_arrow:
        if len(row) != schema.arity:
            raise DataError(
                f"row {row!r} for '{schema.name}' has {len(row)} values, the relation has "
                f"{schema.arity}",
                schema.name,
                BAD_VALUE,
            )
        for v, c in zip(row, schema.columns, strict=True):
            if not isinstance(v, _PYTHON_TYPES[c.type]) or isinstance(v, bool):
                raise DataError(
                    f"row {row!r} for '{schema.name}': {v!r} is not a value of column "
                    f"'{c.name}' ({c.type})",
                    schema.name,
                    BAD_VALUE,
                )
        rows.append(tuple(coerce(v, c.type) for v, c in zip(row, schema.columns, strict=True)))
    return spark.createDataFrame(rows, spark_schema(schema))


def collect_rows(df: DataFrame) -> set[tuple[Value, ...]]:
    """Every row of ``df`` as a plain tuple (duplicates collapse)."""
    return {tuple(row) for row in df.collect()}
