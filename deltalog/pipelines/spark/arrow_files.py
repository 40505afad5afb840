"""Spark reading a Delta table version's files through Arrow's filesystems: a Python data
source (PySpark's ``DataSource`` API) whose tasks each read some of the version's parquet
files with ``pyarrow`` on the executors, for warehouses on object storage where Spark has
no Hadoop filesystem for the scheme (pyspark from PyPI has no S3A: hadoop-aws comes from
Maven). The driver holds only the file names; no row passes through it.

The executors need deltalog (and so pyarrow) installed, as they do for the recompute's
Arrow UDFs; they reach the storage with the warehouse's storage options (delta-rs's names:
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...), passed in an option Spark redacts from
plans and its UI (its name holds "secret"), or with their own environment's credentials.
"""

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from deltalog.pipelines.filesystems import filesystem_of

NAME = "deltalog_arrow_files"
# Files per Spark task.
FILES_PER_TASK = 4


class _Files(InputPartition):  # type: ignore[misc]
    """Some files of the version: (file URI, its partition values as strings)."""

    def __init__(self, files: Sequence[tuple[str, Mapping[str, str | None]]]):
        super().__init__(list(files))
        self.files = list(files)


class ArrowFiles(DataSource):  # type: ignore[misc]
    """Options: ``files`` (JSON: [[uri, {partition column: value}], ...]), ``schema``
    (JSON of the Spark schema), ``arrow_schema`` (the table's Arrow schema, IPC bytes in
    hex), ``storage_options_secret`` (JSON of the storage options)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return StructType.fromJson(json.loads(self.options["schema"]))

    def reader(self, schema: StructType) -> "DataSourceReader":
        return _Reader(dict(self.options))


class _Reader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: Mapping[str, str]):
        self.files = [(f, dict(p)) for f, p in json.loads(options["files"])]
        self.arrow_schema = pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(
            options["arrow_schema"])))
        self.storage = json.loads(options.get("storage_options_secret", "{}"))

    def partitions(self) -> list[InputPartition]:
        step = FILES_PER_TASK
        return [_Files(self.files[i : i + step]) for i in range(0, len(self.files), step)]

    def read(self, partition: _Files) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        import pyarrow.parquet as pq

        for uri, values in partition.files:
            filesystem, path = filesystem_of(uri, self.storage)
            table = pq.read_table(path, filesystem=filesystem)
            yield from _conform(table, values, self.arrow_schema).to_batches()


def _conform(table: pa.Table, values: Mapping[str, str | None], schema: pa.Schema) -> pa.Table:
    """The file's rows with the partition columns (constants from the log) added, every
    column in ``schema``'s order and type (strings plain, not views)."""
    columns = []
    for field in schema:
        if field.name in values:
            raw = pa.array([values[field.name]] * table.num_rows, pa.string())
            columns.append(raw.cast(field.type))
        else:
            columns.append(table.column(field.name).cast(field.type))
    return pa.table(columns, schema=schema)


def read_files(
    spark: Any,
    files: Sequence[tuple[str, Mapping[str, str | None]]],
    schema: pa.Schema,
    storage: Mapping[str, str],
) -> Any:
    """A DataFrame of ``files`` (each with its partition values) in ``schema``."""
    from pyspark.sql.pandas.types import from_arrow_schema

    spark.dataSource.register(ArrowFiles)
    return (
        spark.read.format(NAME)
        .option("files", json.dumps([[f, dict(v)] for f, v in files]))
        .option("schema", json.dumps(from_arrow_schema(schema).jsonValue()))
        .option("arrow_schema", schema.serialize().to_pybytes().hex())
        .option("storage_options_secret", json.dumps(dict(storage)))
        .load()
    )
