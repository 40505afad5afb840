"""The Delta adapter: a table made equal to a new set of rows changes in one commit that
carries exactly the inserts and deletes in its change feed, plus our commit metadata."""

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltalog.engine.errors import CHANGE_MISFIT, TXN_TAKEN, NotSupportedError
from deltalog.pipelines import delta_io
from deltalog.schemas.relation import arrow_to_rows

SCHEMA = pa.schema(
    [
        pa.field("src", pa.int64(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
        pa.field("weight", pa.float64(), nullable=False),
    ]
)


def _table(rows: list[tuple[int, str, float]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"src": s, "label": lab, "weight": w} for s, lab, w in rows], schema=SCHEMA
    )


@pytest.fixture
def uri(tmp_path) -> str:
    path = str(tmp_path / "t")
    assert delta_io.create_table(path, SCHEMA) == 0
    return path


V1 = [(1, "a", 0.5), (2, "b", 1.0), (3, "c", 1.5)]
V2 = [(1, "a", 0.5), (3, "c", 1.5), (4, "d", 2.0), (5, "é", -1.0)]


def test_create_enables_change_data_feed(uri):
    dt = DeltaTable(uri)
    assert dt.version() == 0
    assert dt.metadata().configuration["delta.enableChangeDataFeed"] == "true"
    assert delta_io.read_arrow(uri).num_rows == 0
    assert delta_io.arrow_schema_of(uri).names == SCHEMA.names


def test_replace_contents_is_one_commit_with_exact_change_feed(uri):
    assert delta_io.replace_contents(uri, _table(V1), {"step": "one"}) == (3, 0, 1)
    inserted, deleted, version = delta_io.replace_contents(
        uri, _table(V2), {"step": "two", "inputs": {"edge": 7}}
    )
    assert (inserted, deleted, version) == (2, 1, 2)
    assert arrow_to_rows(delta_io.read_arrow(uri)) == set(V2)
    cdf = pa.table(DeltaTable(uri).load_cdf(starting_version=2, ending_version=2))
    changes = {
        (r["src"], r["label"], r["_change_type"], r["_commit_version"]) for r in cdf.to_pylist()
    }
    assert changes == {(2, "b", "delete", 2), (4, "d", "insert", 2), (5, "é", "insert", 2)}
    info = delta_io.commit_metadata(uri, 2)
    assert info["step"] == "two"
    assert json.loads(info["inputs"]) == {"edge": 7}
    assert info["operation"] == "MERGE"


def test_replace_contents_collapses_duplicates(uri):
    assert delta_io.replace_contents(uri, _table([*V1, *V1]), {}) == (3, 0, 1)
    assert delta_io.row_count(uri) == 3


def test_no_commit_when_nothing_changed(uri):
    delta_io.replace_contents(uri, _table(V1), {"step": "one"})
    reordered = _table(list(reversed(V1)))
    assert delta_io.replace_contents(uri, reordered, {"step": "again"}) == (0, 0, 1)
    assert delta_io.table_version(uri) == 1
    assert delta_io.commit_metadata(uri)["step"] == "one"


def test_negative_zero_is_zero_and_no_row_is_lost(uri):
    """-0.0 equals 0.0 (as the engine and the MERGE compare): a table holding 0.0 given
    -0.0 keeps its row and commits nothing (a bitwise difference deleted the row and
    inserted nothing); a new row's -0.0 is stored as 0.0."""
    delta_io.replace_contents(uri, _table([(1, "a", 0.0), (2, "b", 1.0)]), {})
    assert delta_io.replace_contents(uri, _table([(1, "a", -0.0), (2, "b", 1.0)]), {}) == (
        0, 0, 1)
    assert delta_io.replace_contents(uri, _table([(1, "a", -0.0), (3, "c", -0.0)]), {}) == (
        1, 1, 2)
    assert arrow_to_rows(delta_io.read_arrow(uri)) == {(1, "a", 0.0), (3, "c", 0.0)}
    weights = delta_io.read_arrow(uri).column("weight").to_pylist()
    assert [str(w) for w in weights] == ["0.0", "0.0"]


def test_replace_with_empty_deletes_everything(uri):
    delta_io.replace_contents(uri, _table(V1), {})
    assert delta_io.replace_contents(uri, SCHEMA.empty_table(), {}) == (0, 3, 2)
    assert delta_io.row_count(uri) == 0


def test_read_at_an_older_version(uri):
    delta_io.replace_contents(uri, _table(V1), {})
    delta_io.replace_contents(uri, _table(V2), {})
    assert arrow_to_rows(delta_io.read_arrow(uri, version=1)) == set(V1)
    assert arrow_to_rows(delta_io.read_arrow(uri, version=0)) == set()
    assert delta_io.row_count(uri, version=1) == 3
    assert delta_io.row_count(uri) == 4


def test_read_gives_plain_strings(uri):
    delta_io.replace_contents(uri, _table(V1), {})
    assert delta_io.read_arrow(uri).schema.field("label").type == pa.string()


def test_reads_use_arrows_own_filesystem_and_the_process_exits_cleanly(tmp_path):
    """A process that read a table through delta-rs's Python file handler aborted at exit
    now and then (status 134, more often for dictionary-typed columns): reads go through
    Arrow's filesystem, and a reading process exits 0 every time. Partition columns and a
    relative path are read as before."""
    import subprocess
    import sys

    from pyarrow import fs

    path = tmp_path / "dict"
    labels = pa.array(["a", "b", "c"] * 100).dictionary_encode()
    write_deltalake(str(path), pa.table({"label": labels, "n": pa.array(range(300))}))
    assert not isinstance(delta_io.dataset(DeltaTable(str(path)), str(path)).filesystem,
                          fs.PyFileSystem)
    script = ("import sys; from deltalog.pipelines import delta_io; "
              "t = delta_io.read_arrow(sys.argv[1]); assert t.num_rows == 300, t.num_rows")
    codes = [subprocess.run([sys.executable, "-c", script, "dict"], cwd=tmp_path).returncode
             for _ in range(6)]
    assert codes == [0] * 6
    part = str(tmp_path / "part")
    write_deltalake(part, pa.table({"label": ["a", "b", "a"], "n": [1, 2, 3]}),
                    partition_by=["label"])
    assert arrow_to_rows(delta_io.read_arrow(part)) == {("a", 1), ("b", 2), ("a", 3)}
    assert delta_io.head(part).num_rows == 1


def test_stamp_records_metadata_without_rows(uri):
    delta_io.replace_contents(uri, _table(V1), {})
    assert delta_io.stamp(uri, {"why": "empty result"}) == 2
    assert delta_io.history(uri)[0]["why"] == "empty result"
    assert delta_io.row_count(uri) == 3


@pytest.mark.spark
def test_spark_reads_a_version_by_its_file_list(uri, spark):
    delta_io.replace_contents(uri, _table(V1), {})
    delta_io.replace_contents(uri, _table(V2), {})
    df = delta_io.spark_dataframe(spark, uri, version=1)
    assert {tuple(r) for r in df.collect()} == set(V1)
    assert {tuple(r) for r in delta_io.spark_dataframe(spark, uri).collect()} == set(V2)
    # Spark's parquet reader reads the files (the plan scans them; no Arrow hand-over).
    assert "FileScan parquet" in df._jdf.queryExecution().executedPlan().toString()


@pytest.mark.spark
def test_spark_reads_partitioned_tables_with_the_logs_types(tmp_path, spark):
    uri = str(tmp_path / "parted")
    table = pa.table({"a": pa.array([1, 2, 3], pa.int64()), "p": pa.array([7, 8, 7], pa.int64())})
    write_deltalake(uri, table, partition_by=["p"])
    df = delta_io.spark_dataframe(spark, uri)
    assert df.columns == ["a", "p"]
    assert dict(df.dtypes) == {"a": "bigint", "p": "bigint"}
    assert sorted(tuple(r) for r in df.collect()) == [(1, 7), (2, 8), (3, 7)]


@pytest.mark.spark
@pytest.mark.parametrize(
    "config,what",
    [({"delta.enableDeletionVectors": "true"}, "deletionVectors"),
     ({"delta.columnMapping.mode": "name"}, "column mapping")],
)
def test_spark_refuses_tables_a_parquet_read_would_get_wrong(tmp_path, spark, config, what):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"a": [1, 2]}), configuration=config)
    with pytest.raises(NotSupportedError, match=what):
        delta_io.spark_dataframe(spark, uri)


@pytest.mark.parametrize(
    "config,what",
    [({"delta.enableDeletionVectors": "true"}, "deletionVectors"),
     ({"delta.columnMapping.mode": "name"}, "column mapping")],
)
def test_reads_refuse_tables_a_parquet_read_would_get_wrong(tmp_path, config, what):
    """DL901 naming the feature, not DL311's "a data file missing or damaged"."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"a": [1, 2]}), configuration=config)
    for read in (delta_io.read_arrow, delta_io.head, delta_io.row_count):
        with pytest.raises(NotSupportedError, match=f"{what}.*write a copy") as err:
            read(uri)
        assert err.value.code == "DL901"


def test_rows_arrow_round_trip_and_string_views():
    from deltalog.engine.analysis.program import RelationSchema
    from deltalog.engine.syntax.ast import Column
    from deltalog.schemas.relation import arrow_schema, rows_to_arrow

    schema = RelationSchema(
        "r", (Column("n", "int"), Column("s", "string"), Column("x", "float")), False
    )
    rows = {(1, "a", 0.5), (2, "ü", 2.0)}
    table = rows_to_arrow(schema, rows)
    assert table.schema == arrow_schema(schema)
    assert not any(f.nullable for f in table.schema)
    assert arrow_to_rows(table) == rows
    viewed = table.cast(
        pa.schema([("n", pa.int64()), ("s", pa.string_view()), ("x", pa.float64())])
    )
    assert arrow_to_rows(viewed) == rows
    assert rows_to_arrow(schema, []).num_rows == 0


def _log(uri: str, version: int) -> list[dict]:
    path = f"{uri}/_delta_log/{version:020d}.json"
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_commit_delta_is_one_merge_commit_with_txn_and_metadata(uri):
    delta_io.replace_contents(uri, _table(V1), {})
    inserted, deleted, version = delta_io.commit_delta(
        uri, _table([(4, "d", 2.0), (1, "a", 0.5)]), _table([(2, "b", 1.0)]),
        {"deltalog.seq": "7"}, ("deltalog:p:0:t", 7),
    )
    # (1, a) is present already: set semantics, it changes nothing.
    assert (inserted, deleted, version) == (1, 1, 2)
    assert arrow_to_rows(delta_io.read_arrow(uri)) == {(1, "a", 0.5), (3, "c", 1.5), (4, "d", 2.0)}
    actions = _log(uri, 2)  # the one new log entry holds everything
    assert delta_io.table_version(uri) == 2
    kinds = [next(iter(a)) for a in actions]
    assert kinds.count("commitInfo") == 1 and "add" in kinds and "remove" in kinds
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "MERGE" and info["deltalog.seq"] == "7"
    assert {"appId": "deltalog:p:0:t", "version": 7} in [a["txn"] for a in actions if "txn" in a]
    assert delta_io.transaction_version(uri, "deltalog:p:0:t") == 7
    assert delta_io.transaction_version(uri, "other") is None


def test_commit_delta_refuses_to_delete_an_absent_row(uri):
    delta_io.replace_contents(uri, _table(V1), {})
    with pytest.raises(delta_io.DataError) as info:
        delta_io.commit_delta(uri, _table([(4, "d", 2.0)]), _table([(9, "z", 0.0)]), {}, ("a", 1))
    assert info.value.code == CHANGE_MISFIT
    assert delta_io.table_version(uri) == 1


def test_commit_delta_refuses_a_used_transaction_version(uri):
    delta_io.commit_delta(uri, _table(V1), _table([]), {}, ("app", 3))
    for version in (3, 2):
        with pytest.raises(delta_io.DataError) as info:
            delta_io.commit_delta(uri, _table([(8, "x", 1.0)]), _table([]), {}, ("app", version))
        assert info.value.code == TXN_TAKEN
    assert arrow_to_rows(delta_io.read_arrow(uri)) == set(V1)


def test_changes_from_the_feed_equal_a_diff_of_versions(tmp_path, uri):
    plain = str(tmp_path / "plain")
    DeltaTable.create(plain, SCHEMA)  # no change data feed: changes() diffs two versions
    steps = [V1, V2, V1, [(1, "a", 0.5)], V2]
    for rows in steps:
        delta_io.replace_contents(uri, _table(rows), {})
        delta_io.replace_contents(plain, _table(rows), {})
    assert not delta_io.cdf_enabled(plain) and delta_io.cdf_enabled(uri)
    for start in range(len(steps) + 1):
        for end in range(start, len(steps) + 1):
            old = arrow_to_rows(delta_io.read_arrow(uri, start))
            new = arrow_to_rows(delta_io.read_arrow(uri, end))
            expected = {**dict.fromkeys(new - old, 1), **dict.fromkeys(old - new, -1)}
            assert delta_io.changes(uri, start, end) == expected, (start, end)
            assert delta_io.changes(plain, start, end) == expected, (start, end)


@pytest.mark.parametrize("kind", ["int", "string"])
def test_a_small_change_rewrites_only_the_files_holding_its_rows(tmp_path, monkeypatch, kind):
    """Tables deltalog creates cut their files at ``FILE_BYTES``: the first commit writes
    its rows in key order over several files, and a change that deletes two rows and
    inserts two rewrites at most the two files that held the deleted rows (a MERGE scans
    only the files whose statistics allow the change's first-column values), while the
    table and its change feed say exactly the change, whatever the values (quotes too)."""
    monkeypatch.setattr(delta_io, "FILE_BYTES", 16 << 10)
    uri = str(tmp_path / "t")
    value = (lambda i: i) if kind == "int" else (lambda i: f"it's {i:06d}")
    typ = pa.int64() if kind == "int" else pa.string()
    schema = pa.schema([pa.field("a", typ, nullable=False),
                        pa.field("b", pa.int64(), nullable=False)])
    delta_io.create_table(uri, schema)
    rows = [(value(i), i % 7) for i in range(20_000)]
    table = pa.table({"a": pa.array([r[0] for r in rows], typ), "b": [r[1] for r in rows]},
                     schema=schema)
    empty = table.slice(0, 0)
    delta_io.commit_delta(uri, table, empty, {}, ("app", 1))
    files = len(DeltaTable(uri).file_uris())
    assert files >= 8
    gone = pa.table({"a": pa.array([rows[5][0], rows[15_000][0]], typ),
                     "b": [rows[5][1], rows[15_000][1]]}, schema=schema)
    new = pa.table({"a": pa.array([value(30_000), value(30_001)], typ), "b": [1, 2]},
                   schema=schema)
    ins, dels, version = delta_io.commit_delta(uri, new, gone, {}, ("app", 2))
    assert (ins, dels) == (2, 2)
    metrics = json.loads(json.dumps(DeltaTable(uri).history(1)[0]["operationMetrics"]))
    assert int(metrics["num_target_files_removed"]) <= 2
    assert int(metrics["num_target_files_scanned"]) < files
    expected = (set(rows) - {rows[5], rows[15_000]}) | {(value(30_000), 1), (value(30_001), 2)}
    assert arrow_to_rows(delta_io.read_arrow(uri)) == expected
    assert delta_io.changes(uri, version - 1, version) == {
        rows[5]: -1, rows[15_000]: -1, (value(30_000), 1): 1, (value(30_001), 2): 1}


def test_bag_changes_count_copies_and_look_up_only_what_the_counts_cannot_tell(tmp_path,
                                                                               monkeypatch):
    """``bag_changes`` tells a set change from the feed and the copies a reader knew: one
    copy of two deleted is no change; the last copy deleted is. A count the feed would take
    below zero (the reader's copies were wrong) is looked up in the table instead."""
    uri = str(tmp_path / "bag")
    schema = pa.schema([pa.field("a", pa.int64(), nullable=False)])
    write_deltalake(uri, pa.table({"a": [1, 1, 2]}, schema=schema),
                    configuration=delta_io.CDF_CONFIG)
    write_deltalake(uri, pa.table({"a": [1, 3]}, schema=schema), mode="overwrite")
    lookups = []
    real = delta_io.rows_with_keys
    monkeypatch.setattr(delta_io, "rows_with_keys",
                        lambda u, v, keys: lookups.append(keys.num_rows) or real(u, v, keys))
    known = {(1,): 2, (2,): 1}
    delta, after = delta_io.bag_changes(uri, 0, 1, None, lambda r: known.get(r, 0))
    assert delta == {(2,): -1, (3,): 1} and after == {(1,): 1, (2,): 0, (3,): 1}
    assert lookups == []
    # a reader that thought row 1 absent: the feed's -1 cannot be, so it is looked up
    def wrong(row):
        return 0 if row == (1,) else known.get(row, 0)

    delta, after = delta_io.bag_changes(uri, 0, 1, None, wrong)
    assert lookups == [1]
    assert delta == {(1,): 1, (2,): -1, (3,): 1} and after[(1,)] == 1


def test_versions_since_count_the_copies_and_net_each_commit(uri):
    """A table is a bag and an overwrite deletes and inserts in one commit: a row's
    version is the commit that took it from no copy to some, whatever copies came and
    went while one stayed."""
    a, b = (5, "x", 1.0), (7, "y", 1.0)
    write_deltalake(uri, _table([a, b]), mode="append")  # version 1
    write_deltalake(uri, _table([a]), mode="append")  # 2: a second copy of a
    write_deltalake(uri, _table([a, b]), mode="overwrite")  # 3: one copy of each again
    assert delta_io.versions_since(uri, [a, b]) == {a: 1, b: 1}
    write_deltalake(uri, _table([b]), mode="overwrite")  # 4: a gone
    write_deltalake(uri, _table([a]), mode="append")  # 5: a back
    assert delta_io.versions_since(uri, [a, b]) == {a: 5, b: 1}
