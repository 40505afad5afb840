"""Reading Spark results back in the Spark tests."""

import json
from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from deltalog.engine.values import Row


def collect_all(got: Mapping[str, DataFrame]) -> dict[str, list[Row]]:
    """Every relation's rows in one Spark job (a job per relation is slow on a small machine):
    rows travel as JSON objects, whose numbers round-trip exactly (ints and doubles)."""
    parts = []
    for name, df in got.items():
        row = F.to_json(F.struct(*[F.col(c) for c in df.columns])) if df.columns else F.lit("{}")
        parts.append(df.select(F.lit(name).alias("rel"), row.alias("row")))
    out: dict[str, list[Row]] = {name: [] for name in got}
    if not parts:
        return out
    union = parts[0]
    for part in parts[1:]:
        union = union.union(part)
    for rel, text in union.collect():
        obj = json.loads(text)
        out[rel].append(tuple(obj[c] for c in got[rel].columns))
    return out
