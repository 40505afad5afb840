"""The one Delta Lake adapter: every table read and write goes through here.

Tables are read and written with ``deltalake`` (delta-rs) because Spark's Delta jars need
Maven; Spark gets the data through Arrow (``spark_dataframe``), never by reading a Delta folder
as plain parquet (that would also read files the log has removed).
"""

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from schemas.relation import normalize

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CDF_CONFIG = {"delta.enableChangeDataFeed": "true"}
_CHANGE = "__deltalog_change"  # column of the merge source: "i" insert, "d" delete
COMMIT_RETRIES = 3


def create_table(uri: str, schema: pa.Schema) -> int:
    """Create an empty table with the change data feed on; returns its version (0)."""
    return DeltaTable.create(uri, schema, mode="error", configuration=CDF_CONFIG).version()


def exists(uri: str) -> bool:
    return DeltaTable.is_deltatable(uri)


def table_version(uri: str) -> int:
    """The latest version of the table at ``uri``."""
    return DeltaTable(uri).version()


def read_arrow(uri: str, version: int | None = None) -> pa.Table:
    """The table's contents (at ``version``, default latest), strings as plain ``string``."""
    return normalize(DeltaTable(uri, version=version).to_pyarrow_table())


def row_count(uri: str, version: int | None = None) -> int:
    """Row count from the file statistics in the Delta log (no data files read)."""
    dt = DeltaTable(uri, version=version)
    actions = pa.table(dt.get_add_actions(flatten=True))
    if "num_records" in actions.column_names and actions.column("num_records").null_count == 0:
        return int(pc.sum(actions.column("num_records")).as_py() or 0)
    return dt.to_pyarrow_table().num_rows


def arrow_schema_of(uri: str) -> pa.Schema:
    return pa.schema(DeltaTable(uri).schema().to_arrow())


def commit_metadata(uri: str, version: int | None = None) -> dict[str, Any]:
    """The commit info of ``version`` (default latest), custom metadata keys included."""
    dt = DeltaTable(uri)
    target = dt.version() if version is None else version
    for info in dt.history():
        if info.get("version") == target:
            return dict(info)
    return {}


def history(uri: str) -> list[dict[str, Any]]:
    """Commit infos of the table, newest first (custom metadata keys are top-level keys)."""
    return [dict(info) for info in DeltaTable(uri).history()]


def stamp(uri: str, commit_metadata: Mapping[str, str]) -> int:
    """A commit that changes no rows and carries ``commit_metadata``; returns its version.
    For recording what produced a table whose first result is empty."""
    dt = DeltaTable(uri)
    empty = pa.schema(dt.schema().to_arrow()).empty_table()
    write_deltalake(
        uri,
        empty,
        mode="append",
        commit_properties=CommitProperties(custom_metadata=dict(commit_metadata)),
    )
    return DeltaTable(uri).version()


def _distinct(table: pa.Table) -> pa.Table:
    names = table.column_names
    return table.group_by(names, use_threads=False).aggregate([]).select(names)


def _diff(old: pa.Table, new: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(rows of new not in old, rows of old not in new), both as sets."""
    names = new.column_names
    inserted = new.join(old, keys=names, join_type="left anti")
    deleted = old.join(new, keys=names, join_type="left anti")
    return inserted.select(names), deleted.select(names)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def replace_contents(
    uri: str, new: pa.Table, commit_metadata: Mapping[str, str | int | float]
) -> tuple[int, int, int]:
    """Make the table at ``uri`` equal the set of rows ``new``, in one commit.

    The commit touches only changed rows (a merge whose source is the difference), so the
    change data feed carries exactly the inserts and deletes; ``commit_metadata`` is stored in
    the commit info (values as strings). No commit at all when nothing changed.
    Returns (inserted, deleted, version after). A concurrent writer that commits first makes
    this one re-read and retry (Delta's optimistic concurrency), up to ``COMMIT_RETRIES``.
    """
    metadata = {k: v if isinstance(v, str) else json.dumps(v) for k, v in commit_metadata.items()}
    dt = DeltaTable(uri)
    target = pa.schema(dt.schema().to_arrow())
    new = _distinct(normalize(new).select(target.names).cast(target))
    for attempt in range(COMMIT_RETRIES + 1):
        dt = DeltaTable(uri)
        read_version = dt.version()
        old = normalize(dt.to_pyarrow_table())
        inserted, deleted = _diff(old, new)
        if inserted.num_rows == 0 and deleted.num_rows == 0:
            return 0, 0, read_version
        source = pa.concat_tables(
            [
                inserted.append_column(_CHANGE, pa.repeat("i", inserted.num_rows)),
                deleted.append_column(_CHANGE, pa.repeat("d", deleted.num_rows)),
            ]
        )
        on = " AND ".join(f"t.{_quote(c)} = s.{_quote(c)}" for c in target.names)
        try:
            metrics = (
                dt.merge(
                    source,
                    predicate=on,
                    source_alias="s",
                    target_alias="t",
                    commit_properties=CommitProperties(custom_metadata=metadata),
                )
                .when_matched_delete(predicate=f"s.{_CHANGE} = 'd'")
                .when_not_matched_insert(
                    {c: f"s.{_quote(c)}" for c in target.names}, predicate=f"s.{_CHANGE} = 'i'"
                )
                .execute()
            )
        except CommitFailedError:
            if attempt == COMMIT_RETRIES:
                raise
            time.sleep(0.05 * (attempt + 1))
            continue
        return (
            int(metrics["num_target_rows_inserted"]),
            int(metrics["num_target_rows_deleted"]),
            DeltaTable(uri).version(),
        )
    raise AssertionError("unreachable")


def spark_dataframe(spark: "SparkSession", uri: str, version: int | None = None) -> "DataFrame":
    """The table (at ``version``) as a Spark DataFrame, handed over through Arrow.

    This is the one place that would switch to Spark's native Delta reader in a deployment
    that has the Delta jars.
    """
    return spark.createDataFrame(read_arrow(uri, version))


__all__ = [
    "CDF_CONFIG",
    "TableNotFoundError",
    "commit_metadata",
    "create_table",
    "exists",
    "history",
    "read_arrow",
    "replace_contents",
    "row_count",
    "spark_dataframe",
    "stamp",
    "table_version",
]
