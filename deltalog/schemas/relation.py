"""One engine ``RelationSchema`` -> its Arrow, Spark and Dagster forms, and rows <-> Arrow
tables.

Every adapter (Delta, Spark, Dagster metadata) takes its column types from here, so that the
three never disagree about what an ``int`` or a ``string`` column is. pyspark and dagster
are imported only inside the functions that build their forms: importing this module
imports neither.
"""

from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.engine.analysis.program import RelationSchema
from deltalog.engine.columnar.evaluate import Columns, Dictionary
from deltalog.engine.values import Row

if TYPE_CHECKING:
    import dagster as dg
    from numpy.typing import NDArray
    from pyspark.sql import types as T

ARROW_TYPES: dict[str, pa.DataType] = {
    "int": pa.int64(),
    "float": pa.float64(),
    "string": pa.string(),
}


# The Spark type of each column type, by its class name in ``pyspark.sql.types``.
SPARK_TYPES: dict[str, str] = {
    "int": "LongType",
    "float": "DoubleType",
    "string": "StringType",
}


def arrow_schema(schema: RelationSchema, nullable: bool = False) -> pa.Schema:
    """The Arrow schema of a relation: int64 / float64 / string. Deltalog values are never
    null, hence ``nullable=False`` by default."""
    return pa.schema(
        [pa.field(c.name, ARROW_TYPES[c.type], nullable=nullable) for c in schema.columns]
    )


def spark_type(column_type: str) -> "T.DataType":
    """The Spark type of a column type: long / double / string."""
    from pyspark.sql import types as T  # lazy: importing schemas does not import pyspark

    spark_class: type[T.DataType] = getattr(T, SPARK_TYPES[column_type])
    return spark_class()


def spark_schema(schema: RelationSchema, nullable: bool = False) -> "T.StructType":
    """The Spark schema of a relation: its column names, int/float/string as long/double/string.

    Deltalog values are never null, hence ``nullable=False`` by default; DataFrames computed
    by Spark usually report nullable columns, so compare names and types, not nullability.
    """
    from pyspark.sql import types as T

    return T.StructType(
        [T.StructField(c.name, spark_type(c.type), nullable) for c in schema.columns]
    )


def dagster_table_schema(schema: RelationSchema) -> "dg.TableSchema":
    """The relation as a Dagster ``TableSchema`` (for ``dagster/column_schema`` metadata)."""
    import dagster as dg  # lazy: the pipelines that never show Dagster metadata skip it

    key_note = " (functional value)" if schema.functional else ""
    columns = [
        dg.TableColumn(
            name=c.name,
            type=c.type,
            description=(key_note if i == schema.arity - 1 else "") or None,
            constraints=dg.TableColumnConstraints(nullable=False),
        )
        for i, c in enumerate(schema.columns)
    ]
    return dg.TableSchema(columns=columns)


def rows_to_arrow(schema: RelationSchema, rows: Iterable[Row]) -> pa.Table:
    """An Arrow table of ``rows`` (python tuples) with the relation's Arrow schema."""
    target = arrow_schema(schema)
    rows = rows if isinstance(rows, list) else list(rows)
    if any(len(r) != len(target) for r in rows):
        raise ValueError(f"a row of another arity than {len(target)}")
    # one list of values per column (no tuple per row: millions of new tuples would set
    # off the cyclic collector over and over)
    arrays = [pa.array(list(map(itemgetter(i), rows)), type=field.type)
              for i, field in enumerate(target)]
    return pa.Table.from_arrays(arrays, schema=target)


def columns_to_arrow(schema: RelationSchema, columns: "Sequence[NDArray[Any]]") -> pa.Table:
    """An Arrow table of rows given by column (numpy arrays: int64, float64, str objects)
    with the relation's Arrow schema; ``OverflowError`` for an int beyond 64 bits."""
    target = arrow_schema(schema)
    arrays = [pa.array(column, type=field.type)
              for column, field in zip(columns, target, strict=True)]
    return pa.Table.from_arrays(arrays, schema=target)


def arrow_to_columns(table: pa.Table) -> Columns:
    """The rows of ``table`` by column, as the engine takes an input by column
    (``normalize``d first): numbers as numpy arrays, strings dictionary-encoded (Arrow's
    dictionary and indices), a column with nulls as its values (None among them)."""
    table = normalize(table)
    out: list[Any] = []
    for col in table.columns:
        array = col.combine_chunks()
        if array.null_count:
            out.append(np.array(array.to_pylist(), dtype=object))
        elif pa.types.is_string(array.type):
            coded = pc.dictionary_encode(array)
            out.append(Dictionary(coded.dictionary.to_numpy(zero_copy_only=False),
                                  coded.indices.to_numpy()))
        else:
            out.append(array.to_numpy(zero_copy_only=False))
    return Columns(out, table.num_rows if not table.num_columns else 0)


def table_difference(a: pa.Table, b: pa.Table) -> pa.Table:
    """The distinct rows of ``a`` that are not rows of ``b`` (two tables of one relation),
    with ``a``'s schema (``normalize``d): a hash anti-join, no Python row made, values
    compared as the engine compares them."""
    a, b = normalize(a), normalize(b)
    names = a.column_names
    if not names:  # the one row of no columns is in b, or not
        return a.slice(0, 0 if b.num_rows else min(a.num_rows, 1))
    out = a.join(b.select(names), keys=names, join_type="left anti")
    return out.group_by(names, use_threads=False).aggregate([]).select(names).cast(a.schema)


def normalize(table: pa.Table) -> pa.Table:
    """``table`` as the engine compares values: string_view / large_string columns cast to
    plain string, and ``-0.0`` made ``0.0`` in float columns (``x + 0.0``; Arrow's joins
    and groupings compare bits, where ``-0.0 == 0.0``)."""
    fields = [
        pa.field(f.name, pa.string(), f.nullable)
        if pa.types.is_string_view(f.type) or pa.types.is_large_string(f.type)
        else f
        for f in table.schema
    ]
    target = pa.schema(fields)
    out = table if target.equals(table.schema) else table.cast(target)
    for i, f in enumerate(out.schema):
        if pa.types.is_floating(f.type) and out.num_rows:
            out = out.set_column(i, f, pc.add(out.column(i), pa.scalar(0.0, f.type)))
    return out


def arrow_to_rows(table: pa.Table) -> set[Row]:
    """The rows of ``table`` as a set of python tuples (string views read as str)."""
    table = normalize(table)
    if table.num_columns == 0:
        return {()} if table.num_rows else set()
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return set(zip(*columns, strict=True))
