"""The forms of one relation schema (Arrow, Spark, Dagster) agree on names and types, and
importing ``schemas`` imports neither pyspark nor dagster (the adapters that never show a
Spark or Dagster form do not pay for them)."""

import subprocess
import sys

import pyarrow as pa

from deltalog.engine.analysis.analyze import load_program
from deltalog.schemas.relation import arrow_schema, dagster_table_schema, spark_schema

PROGRAM = ".decl r(k: int, x: float, s: string)\nf[k] = n <- agg<<n = count()>> r(k, _, _).\n"


def test_importing_schemas_imports_neither_pyspark_nor_dagster():
    code = (
        "import sys, deltalog.schemas.relation; "
        "print(sorted(m for m in ('pyspark', 'dagster') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_arrow_spark_and_dagster_forms_agree():
    from pyspark.sql import types as T

    schema = load_program(PROGRAM).schemas["r"]
    arrow = arrow_schema(schema)
    assert arrow == pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            pa.field("x", pa.float64(), nullable=False),
            pa.field("s", pa.string(), nullable=False),
        ]
    )
    assert all(f.nullable for f in arrow_schema(schema, nullable=True))
    spark = spark_schema(schema)
    assert [(f.name, f.dataType, f.nullable) for f in spark.fields] == [
        ("k", T.LongType(), False),
        ("x", T.DoubleType(), False),
        ("s", T.StringType(), False),
    ]
    dagster = dagster_table_schema(schema)
    assert [(c.name, c.type) for c in dagster.columns] == [
        ("k", "int"),
        ("x", "float"),
        ("s", "string"),
    ]


def test_dagster_form_marks_the_functional_value():
    schema = load_program(PROGRAM).schemas["f"]
    columns = dagster_table_schema(schema).columns
    assert "functional value" in (columns[-1].description or "")
    assert all(not c.constraints.nullable for c in columns)


def test_arrow_to_columns_gives_the_rows_arrow_to_rows_gives():
    """Chunked columns, large and view strings, -0.0 (made 0.0), nulls and a table of no
    columns: the columns hold the rows ``arrow_to_rows`` reads."""
    import numpy as np
    import pyarrow as pa

    from deltalog.engine.columnar.evaluate import Dictionary
    from deltalog.schemas.relation import arrow_to_columns, arrow_to_rows

    table = pa.table({
        "a": pa.chunked_array([[1, 2], [3, 2]], pa.int64()),
        "s": pa.chunked_array([["x", "é"], ["x", "yy"]], pa.large_string()),
        "f": pa.chunked_array([[-0.0, 1.5], [2.0, -0.0]], pa.float64()),
        "n": pa.array([1, None, 3, 4], pa.int64()),
    })
    cols = arrow_to_columns(table)
    assert isinstance(cols.columns[1], Dictionary)
    assert set(cols.rows()) == arrow_to_rows(table)
    assert {np.signbit(v) for _, _, v, _ in cols.rows()} == {False}
    none = pa.table({"x": pa.array([], pa.int64())}).select([])
    assert arrow_to_columns(none).rows() == []
    one = pa.table({"x": pa.array([1], pa.int64())}).select([])
    assert arrow_to_columns(one).rows() == [()] == list(arrow_to_rows(one))
