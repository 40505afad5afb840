"""The one Delta Lake adapter: every table read and write goes through here.

Tables are read and written with ``deltalake`` (delta-rs) because Spark's Delta jars need
Maven; Spark reads a table version as the exact list of parquet files its log names
(``spark_dataframe``), never a Delta folder as plain parquet (that would also read files the
log has removed).
"""

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from deltalog.engine.errors import (
    CHANGE_MISFIT,
    HISTORY_LOST,
    NOT_SUPPORTED,
    TABLE_UNREADABLE,
    TABLE_UNWRITABLE,
    TXN_TAKEN,
    DataError,
    NotSupportedError,
)
from deltalog.engine.values import Row
from deltalog.pipelines.filesystems import filesystem_of
from deltalog.schemas.relation import arrow_to_rows, normalize, table_difference

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CDF_CONFIG = {"delta.enableChangeDataFeed": "true"}
# Files of the tables deltalog creates are cut at about this size (delta-rs honours the
# table property when it writes, MERGE included): a MERGE that deletes rows rewrites only
# the files holding them, so a change costs O(rows changed x file size), not the table.
FILE_BYTES = 1 << 20
# A MERGE whose change has at most this many distinct values in the first column names
# them as a filter on the target, so files whose statistics exclude them are not scanned.
MERGE_FILTER_MAX = 1000
_CHANGE = "__deltalog_change"  # column of the merge source: "i" insert, "d" delete
COMMIT_RETRIES = 3
# Change data feed change types -> weight.
CHANGE_WEIGHTS = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}


# Where tables live: a local path, or a URI delta-rs knows (s3://, az://, abfss://, gs://,
# file://). The storage options of a warehouse on object storage (credentials, endpoint,
# region: delta-rs's names) are registered once per warehouse root and found by every call
# on a table under it; delta-rs also reads the usual environment (AWS_*, AZURE_*, GOOGLE_*).
_STORAGE: dict[str, dict[str, str]] = {}
STORAGE_OPTIONS_ENV = "DELTALOG_STORAGE_OPTIONS"


def is_remote(uri: str | Path) -> bool:
    """Whether ``uri`` names object storage (a scheme other than file://)."""
    text = str(uri)
    return "://" in text and not text.startswith("file://")


def set_storage_options(root: str | Path, options: Mapping[str, str] | None) -> None:
    """Use ``options`` for every table under the warehouse ``root`` (None: none)."""
    key = str(root).rstrip("/")
    if options:
        _STORAGE[key] = {str(k): str(v) for k, v in options.items()}
    else:
        _STORAGE.pop(key, None)


def storage_options(uri: str | Path) -> dict[str, str] | None:
    """The storage options registered for the warehouse that holds ``uri``; for a URI under
    no registered warehouse (the CLI, a sensor, an input table in another bucket), the JSON
    object in ``$DELTALOG_STORAGE_OPTIONS`` when ``uri`` is remote, else those of the
    registered warehouses on the same scheme (one store's credentials: an input in another
    bucket of it); else none. Warehouses on that scheme with other options are DL300: the
    options to use are not known."""
    text = str(uri)
    roots = [r for r in _STORAGE if text == r or text.startswith(r + "/")]
    if roots:
        return dict(_STORAGE[max(roots, key=len)])
    configured = os.environ.get(STORAGE_OPTIONS_ENV)
    if not configured and is_remote(text):
        scheme = text.split("://", 1)[0]
        same = {json.dumps(o, sort_keys=True) for r, o in _STORAGE.items()
                if r.split("://", 1)[0] == scheme and is_remote(r)}
        if len(same) > 1:
            raise DataError(
                f"{text} is under no warehouse, and the warehouses on {scheme}:// have "
                f"different storage options: give the options for it in "
                f"${STORAGE_OPTIONS_ENV}", text)
        if same:
            return dict(json.loads(same.pop()))
    if configured and is_remote(text):
        try:
            options = json.loads(configured)
        except json.JSONDecodeError as err:
            raise DataError(f"${STORAGE_OPTIONS_ENV} is not a JSON object: {err}",
                            STORAGE_OPTIONS_ENV) from None
        if not isinstance(options, dict):
            raise DataError(f"${STORAGE_OPTIONS_ENV} is not a JSON object", STORAGE_OPTIONS_ENV)
        return {str(k): str(v) for k, v in options.items()}
    return None


def open_table(uri: str, version: int | None = None) -> DeltaTable:
    """The table at ``uri`` (at ``version``, default latest), with its storage options.

    A log that cannot be read (a commit file torn by a crashed writer, the commits before
    a version removed without a checkpoint) is ``TableUnreadable`` DL311 naming the table;
    a missing table stays ``TableNotFoundError``."""
    try:
        return DeltaTable(uri, version=version, storage_options=storage_options(uri))
    except TableNotFoundError:
        raise
    except (DeltaError, OSError) as err:
        at = "the latest version" if version is None else f"version {version}"
        raise TableUnreadable(
            f"the Delta log of the table cannot be read at {at} ({_first_line(err)}): restore its "
            "_delta_log files, or write the table anew",
            uri,
        ) from None


def _first_line(err: Exception) -> str:
    """The first line of what delta-rs, Arrow or the OS said (at most 200 characters)."""
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__


def create_table(uri: str, schema: pa.Schema) -> int:
    """Create an empty table with the change data feed on and files of about ``FILE_BYTES``;
    returns its version (0)."""
    try:
        if not is_remote(uri):
            Path(uri.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
        return DeltaTable.create(
            uri, schema, mode="error",
            configuration={**CDF_CONFIG, "delta.targetFileSize": str(FILE_BYTES)},
            storage_options=storage_options(uri),
        ).version()
    except (DeltaError, OSError) as err:
        raise _write_failed(uri, err) from None


def exists(uri: str) -> bool:
    return DeltaTable.is_deltatable(uri, storage_options=storage_options(uri))


def table_id(uri: str) -> str:
    """The table's id from its Delta metadata: kept across versions, new when a table is
    created again at the same path."""
    return str(open_table(uri).metadata().id)


def table_version(uri: str) -> int:
    """The latest version of the table at ``uri``."""
    return open_table(uri).version()


class TableUnreadable(DataError):
    """A version of a table cannot be read: a data file its log lists is missing or
    damaged, or the log entry itself is gone."""

    code = TABLE_UNREADABLE


@contextlib.contextmanager
def _reading(uri: str, version: int | None) -> Iterator[None]:
    """Turn what delta-rs, Arrow or the file system raise while reading a table version
    into ``TableUnreadable`` naming the table and version (a missing table stays
    ``TableNotFoundError``: callers check for it first)."""
    try:
        yield
    except TableNotFoundError:
        raise
    except (DeltaError, pa.ArrowException, OSError) as err:
        at = "its latest version" if version is None else f"version {version}"
        raise TableUnreadable(
            f"{at} of the table cannot be read ({_first_line(err)}): a data file its log lists is "
            "missing or damaged; restore the file, or write the table anew",
            uri,
        ) from None


def _refuse_features(dt: DeltaTable, uri: str, how: str, also: str = "") -> None:
    """``NotSupportedError`` DL901 for a table whose protocol a read of its Parquet files
    would get wrong: deletion vectors (rows deleted without rewriting their file; new
    tables on Databricks have the feature on) or column mapping (columns stored under
    other names). ``how`` says which reader."""
    features = set(dt.protocol().reader_features or ())
    mapping = dt.metadata().configuration.get("delta.columnMapping.mode") or "none"
    unsupported = sorted(features & {"deletionVectors", "columnMapping"})
    if mapping != "none":
        unsupported.append(f"column mapping mode '{mapping}'")
    if unsupported:
        raise NotSupportedError(
            f"{how}, and this table's protocol needs {', '.join(unsupported)}: write a copy "
            f"of it without (a table keeps a reader feature once turned on){also}",
            uri,
            NOT_SUPPORTED,
        )


def dataset(dt: DeltaTable, uri: str) -> Any:
    """The version ``dt`` is at as a pyarrow dataset whose files are read with Arrow's own
    filesystem (local, or S3 with the warehouse's storage options), not delta-rs's Python
    file handler: a process that read through that handler aborts at exit now and then
    ("terminate called without an active exception", delta-rs 1.6 with pyarrow 26), after
    its work, so a finished run would report failure. Other object stores keep delta-rs's
    handler (their storage options are delta-rs's to interpret)."""
    from pyarrow import fs

    _refuse_features(dt, uri, "deltalog reads a table version as its Parquet files "
                     "(delta-rs's Arrow reader)")
    text = str(uri)
    if is_remote(text) and not text.startswith(("s3://", "s3a://")):
        return dt.to_pyarrow_dataset()
    raw, root = filesystem_of(text, storage_options(text) or {})
    return dt.to_pyarrow_dataset(filesystem=fs.SubTreeFileSystem(root, raw))


def read_arrow(uri: str, version: int | None = None) -> pa.Table:
    """The table's contents (at ``version``, default latest), strings as plain ``string``."""
    with _reading(uri, version):
        return normalize(dataset(open_table(uri, version), uri).to_table())


def head(uri: str, version: int | None = None, rows: int = 1) -> pa.Table:
    """The first ``rows`` rows of the table (at ``version``), read lazily."""
    with _reading(uri, version):
        return pa.table(dataset(open_table(uri, version), uri).head(rows))


def row_count(uri: str, version: int | None = None) -> int:
    """Row count from the file statistics in the Delta log (no data files read)."""
    with _reading(uri, version):
        dt = open_table(uri, version)
        _refuse_features(dt, uri, "deltalog counts a table version's rows from its files' "
                         "statistics")
        actions = pa.table(dt.get_add_actions(flatten=True))
        if "num_records" in actions.column_names and actions.column("num_records").null_count == 0:
            return int(pc.sum(actions.column("num_records")).as_py() or 0)
        return int(dataset(dt, uri).count_rows())


def rows_with_keys(uri: str, version: int, keys: pa.Table) -> pa.Table:
    """The rows of the table at ``version`` whose values in ``keys``' columns are one of the
    rows of ``keys``: a filtered scan (files and row groups skipped by their statistics where
    they cannot hold a key), then an exact semi-join."""
    if not keys.num_rows:
        return read_arrow(uri, version).slice(0, 0)
    with _reading(uri, version):
        files = dataset(open_table(uri, version), uri)
        try:
            found = files.to_table(filter=_isin(files, keys, keys.column_names))
        except pa.ArrowNotImplementedError:
            # delta-rs states file statistics of string columns as string_view, which Arrow
            # cannot compare with the column's strings: skip files by the other columns.
            plain = [n for n in keys.column_names
                     if not pa.types.is_string(files.schema.field(n).type)]
            found = files.to_table(filter=_isin(files, keys, plain))
        found = normalize(found)
    names = found.column_names
    return found.join(normalize(keys), keys=keys.column_names, join_type="left semi").select(names)


def _isin(files: Any, keys: pa.Table, names: Sequence[str]) -> pc.Expression | None:
    """``name in values`` for each of ``names`` (None: no filter)."""
    predicate = None
    for name in names:
        values = pc.unique(keys.column(name)).cast(files.schema.field(name).type)
        term = pc.field(name).isin(values)
        predicate = term if predicate is None else predicate & term
    return predicate


def arrow_schema_of(uri: str, version: int | None = None) -> pa.Schema:
    """The Arrow schema of the table (at ``version``, default latest)."""
    table = open_table(uri, version)
    return pa.schema(table.schema().to_arrow())


def commit_metadata(uri: str, version: int | None = None) -> dict[str, Any]:
    """The commit info of ``version`` (default latest), custom metadata keys included."""
    dt = open_table(uri)
    target = dt.version() if version is None else version
    for info in dt.history():
        if info.get("version") == target:
            return dict(info)
    return {}


# Commits that rewrite or remove files without changing the table's rows.
MAINTENANCE_OPERATIONS = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})


def only_maintenance(uri: str, start: int, end: int) -> bool:
    """Whether every commit after version ``start`` up to ``end`` is table maintenance
    (compaction, vacuum): the rows at ``end`` are the rows at ``start``."""
    infos = {int(i["version"]): i for i in history(uri) if start < int(i["version"]) <= end}
    return len(infos) == end - start and all(
        i.get("operation") in MAINTENANCE_OPERATIONS for i in infos.values()
    )


def history(uri: str) -> list[dict[str, Any]]:
    """Commit infos of the table, newest first (custom metadata keys are top-level keys)."""
    return [dict(info) for info in open_table(uri).history()]


def stamp(
    uri: str, commit_metadata: Mapping[str, str], txn: tuple[str, int] | None = None
) -> int:
    """A commit that changes no rows and carries ``commit_metadata`` (and the application
    transaction ``txn`` = (app id, version)); returns its version. For recording what
    produced a table whose first result is empty."""
    dt = open_table(uri)
    empty = pa.schema(dt.schema().to_arrow()).empty_table()
    try:
        write_deltalake(
            uri,
            empty,
            mode="append",
            commit_properties=_properties(commit_metadata, txn),
            storage_options=storage_options(uri),
        )
    except (DeltaError, OSError) as err:
        raise _write_failed(uri, err) from None
    return open_table(uri).version()


def _properties(
    metadata: Mapping[str, object], txn: tuple[str, int] | None, retries: int | None = None
) -> CommitProperties:
    custom = {k: v if isinstance(v, str) else json.dumps(v) for k, v in metadata.items()}
    return CommitProperties(
        custom_metadata=custom,
        app_transactions=[Transaction(txn[0], txn[1])] if txn is not None else None,
        max_commit_retries=retries,
    )


def transaction_version(uri: str, app_id: str) -> int | None:
    """The version of application transaction ``app_id`` recorded in the table (the ``txn``
    action of its newest commit that carried one), None when it never committed."""
    return open_table(uri).transaction_version(app_id)


def cdf_enabled(uri: str) -> bool:
    config = open_table(uri).metadata().configuration
    return str(config.get("delta.enableChangeDataFeed", "false")).lower() == "true"


def changes(
    uri: str, start: int, end: int, columns: Sequence[str] | None = None
) -> dict[Row, int]:
    """The change of the table from version ``start`` to version ``end`` as a delta
    ({row: +1 or -1}, set semantics): from the change data feed of commits start+1..end,
    inserts and deletes of one row cancelling; a diff of the two versions when the table
    has no change data feed (O(table) instead of O(change)). Rows hold ``columns`` in that
    order (default: the table's own order).

    Raises ``HistoryLost`` when neither can be read any more (data or change-data files
    vacuumed, log entries removed)."""
    if start == end:
        return {}
    try:
        return _changes(uri, start, end, columns)
    except (DeltaError, pa.ArrowException, OSError, TableUnreadable) as err:
        raise _lost(uri, start, end, err) from None


def _lost(uri: str, start: int, end: int, err: Exception) -> "HistoryLost":
    return HistoryLost(
        f"the change of the table from version {start} to {end} cannot be read any more "
        f"({_first_line(err)})",
        uri,
    )


def bag_changes(
    uri: str,
    start: int,
    end: int,
    columns: Sequence[str] | None,
    copies_before: Callable[[Row], int],
) -> tuple[dict[Row, int], dict[Row, int]]:
    """The change of the table from version ``start`` to ``end`` as ``changes`` gives it,
    for a reader that knows how many copies of each row version ``start`` held
    (``copies_before``): a Delta table is a bag, and a row the change feed deletes is gone
    only when its last copy is. The feed counts copies exactly (every copy a commit adds
    or removes is a row of it), so no row is looked up in the table, except rows whose
    count the feed would take below zero (a table rewritten outside the feed), which are.
    Returns (the set delta, the number of copies after ``end`` of every row whose number
    changed). O(change) with the feed; without one, a count of both versions."""
    if start == end:
        return {}, {}
    try:
        feed = _feed(uri, start, end, columns)
        if feed is None:
            return _diff_counts(uri, start, end, columns)
    except (DeltaError, pa.ArrowException, OSError, TableUnreadable) as err:
        raise _lost(uri, start, end, err) from None
    delta: dict[Row, int] = {}
    after: dict[Row, int] = {}
    unsure: list[Row] = []
    for row, weight in _feed_weights(feed).items():
        before = copies_before(row)
        now = before + weight
        if now < 0:
            unsure.append(row)
            continue
        after[row] = now
        if (before > 0) != (now > 0):
            delta[row] = 1 if now > 0 else -1
    if unsure:
        found = _count_rows(uri, end, unsure, columns)
        for row in unsure:
            after[row] = found.get(row, 0)
            if copies_before(row) > 0 and not found.get(row):
                delta[row] = -1
            elif found.get(row) and copies_before(row) == 0:
                delta[row] = 1
    return delta, after


def feed_weights(
    uri: str, start: int, end: int, columns: Sequence[str] | None = None
) -> dict[Row, int]:
    """Copies added less copies removed, per row, from version ``start`` to ``end``: from
    the change data feed alone (O(change)); without one, ``changes``. A row with a positive
    weight was inserted (or added as one more copy); a negative one may still be there."""
    weights = bag_weights(uri, start, end, columns)
    return changes(uri, start, end, columns) if weights is None else weights


def bag_weights(
    uri: str, start: int, end: int, columns: Sequence[str] | None = None
) -> dict[Row, int] | None:
    """Copies added less copies removed, per row, from version ``start`` to ``end``, from
    the change data feed (O(change)); None when the table has no feed for those versions."""
    if start == end:
        return {}
    try:
        feed = _feed(uri, start, end, columns)
    except (DeltaError, pa.ArrowException, OSError, TableUnreadable) as err:
        raise _lost(uri, start, end, err) from None
    return None if feed is None else _feed_weights(feed)


def _feed(uri: str, start: int, end: int, columns: Sequence[str] | None) -> pa.Table | None:
    """The change data feed of commits start+1..end (None: the table has none, or not for
    these versions any more, or the columns' types at ``start`` or ``end`` are not the
    latest version's: the feed reads every row in the latest types, so a float column
    narrowed to ints reads 2.5 as 2, a row no version held; the caller then compares the
    versions themselves, each read in its own types)."""
    if not cdf_enabled(uri):
        return None
    try:
        table = open_table(uri)  # (its types are the ones the feed reads rows in)
        now = _types(table, columns)
        if any(_types(open_table(uri, v), columns) != now
               for v in {start, end} - {table.version()}):
            return None
        reader = table.load_cdf(starting_version=start + 1, ending_version=end)
        feed = pa.table(reader)
    except (DeltaError, pa.ArrowException, OSError, TableUnreadable):
        return None  # the feed is gone for these versions (enabled later, vacuumed)
    if columns is not None:
        feed = feed.select([*columns, "_change_type"])
    return normalize(feed)


def _types(table: DeltaTable, columns: Sequence[str] | None) -> list[tuple[str, str]]:
    """The (name, Arrow type) of ``columns`` (default: every column) of ``table``."""
    schema = pa.schema(table.schema().to_arrow())
    names = list(columns) if columns is not None else schema.names
    return [(n, str(schema.field(n).type)) if n in schema.names else (n, "") for n in names]


_NAN = float("nan")  # one NaN object: rows holding NaN then are equal keys (NaN != NaN)


def _feed_weights(feed: pa.Table) -> dict[Row, int]:
    """Copies added less copies removed, per row of the feed (zeros left out). Rows that
    hold NaN where others hold NaN count as the same row."""
    names = [n for n in feed.column_names if not n.startswith("_")]
    kinds = feed.column("_change_type").to_pylist()
    columns = [feed.column(n).to_pylist() for n in names]
    for i, n in enumerate(names):
        if pa.types.is_floating(feed.schema.field(n).type):
            columns[i] = [_NAN if v != v else v for v in columns[i]]
    net: dict[Row, int] = {}
    for kind, row in zip(kinds, zip(*columns, strict=True), strict=True):
        net[row] = net.get(row, 0) + CHANGE_WEIGHTS[kind]
    return {row: w for row, w in net.items() if w}


def _counted(table: pa.Table) -> pa.Table:
    """The distinct rows of ``table`` with their numbers of copies (column ``count_all``)."""
    return normalize(table).group_by(table.column_names, use_threads=False).aggregate(
        [([], "count_all")]
    )


def _as_counts(counted: pa.Table) -> dict[Row, int]:
    names = [n for n in counted.column_names if n != "count_all"]
    values = [counted.column(n).to_pylist() for n in names]
    return dict(zip(zip(*values, strict=True), counted.column("count_all").to_pylist(),
                    strict=True))


def _row_counts(table: pa.Table) -> dict[Row, int]:
    return _as_counts(_counted(table))


def _diff_counts(
    uri: str, start: int, end: int, columns: Sequence[str] | None
) -> tuple[dict[Row, int], dict[Row, int]]:
    old_table, new_table = read_arrow(uri, start), read_arrow(uri, end)
    if columns is not None:
        old_table, new_table = old_table.select(list(columns)), new_table.select(list(columns))
    old, new = _row_counts(old_table), _row_counts(new_table)
    delta = dict.fromkeys(new.keys() - old.keys(), 1)
    delta.update(dict.fromkeys(old.keys() - new.keys(), -1))
    after = {row: new.get(row, 0) for row in old.keys() | new.keys()
             if new.get(row, 0) != old.get(row, 0)}
    return delta, after


def _count_rows(
    uri: str, version: int, rows: Sequence[Row], columns: Sequence[str] | None
) -> dict[Row, int]:
    """How many copies of each of ``rows`` the table holds at ``version`` (a filtered scan)."""
    schema = arrow_schema_of(uri, version)
    names = list(columns) if columns is not None else schema.names
    keys = normalize(pa.table(
        {n: pa.array([r[i] for r in rows], schema.field(n).type) for i, n in enumerate(names)}
    ))
    return _row_counts(rows_with_keys(uri, version, keys).select(names))


def copies_of(table: pa.Table, most: int) -> dict[Row, int] | None:
    """The rows ``table`` holds more than once, with their numbers of copies (None when
    there are more than ``most`` such rows)."""
    if table.num_rows == 0:
        return {}
    counted = _counted(table)
    if counted.num_rows == table.num_rows:
        return {}
    many = counted.filter(pc.greater(counted.column("count_all"), 1))
    return None if many.num_rows > most else _as_counts(many)


def versions_since(uri: str, rows: Iterable[Row]) -> dict[Row, int]:
    """For each of ``rows`` (rows of the latest version, in the table's column order): the
    version of the commit whose insert of it is still in force, from the change data
    feed; rows it cannot place (no feed, or history vacuumed) are left out."""
    wanted = set(rows)
    try:
        dt = open_table(uri)
        if not wanted or not cdf_enabled(uri):
            return {}
        feed = pa.table(dt.load_cdf(starting_version=0, ending_version=dt.version()))
    except (DeltaError, pa.ArrowException, OSError, TableUnreadable):
        return {}
    names = [c for c in feed.column_names if not c.startswith("_")]
    feed = normalize(feed).sort_by("_commit_version")
    # A table is a bag, and one commit may delete and insert the same row (an overwrite,
    # in any order): each commit's changes are netted per row, the copies counted, and a
    # row's version is the commit that took it from no copy to some (a copy added or
    # removed while another stays moves nothing).
    since: dict[Row, int] = {}
    copies: dict[Row, int] = {}
    values = [feed.column(n).to_pylist() for n in names]
    kinds = feed.column("_change_type").to_pylist()
    versions = feed.column("_commit_version").to_pylist()
    net: dict[Row, int] = {}
    for i, kind in enumerate(kinds):
        row = tuple(col[i] for col in values)
        if row in wanted:
            net[row] = net.get(row, 0) + CHANGE_WEIGHTS.get(kind, 0)
        if i + 1 == len(kinds) or versions[i + 1] != versions[i]:  # the commit's end
            for r, w in net.items():
                before = copies.get(r, 0)
                after = copies[r] = max(before + w, 0)
                if not before and after:
                    since[r] = int(versions[i])
                elif before and not after:
                    since.pop(r, None)
            net = {}
    return since


class HistoryLost(DataError):
    """The change between two versions of a table cannot be read (its history was vacuumed
    or pruned); whoever consumed the older version must reload from the current one."""

    code = HISTORY_LOST


def _changes(
    uri: str, start: int, end: int, columns: Sequence[str] | None
) -> dict[Row, int]:
    feed = _feed(uri, start, end, columns)
    if feed is not None:
        net = {row: (1 if w > 0 else -1) for row, w in _feed_weights(feed).items()}
        names = [n for n in feed.column_names if not n.startswith("_")]
        return _still_present_kept(uri, end, net, names)
    return _diff_counts(uri, start, end, columns)[0]


def _still_present_kept(
    uri: str, version: int, net: dict[Row, int], names: list[str]
) -> dict[Row, int]:
    """``net`` without the deletions of rows that ``version`` still holds. A Delta table is a
    bag: with two copies of a row, deleting one (or an overwrite that deletes both and
    inserts one again) is a net deletion in the change feed, yet the row is still there.
    Only the rows deleted are looked up (a filtered scan of version ``version``)."""
    deleted = [row for row, w in net.items() if w < 0]
    if not deleted:
        return net
    schema = arrow_schema_of(uri, version)
    keys = normalize(pa.table(
        {n: pa.array([r[i] for r in deleted], schema.field(n).type) for i, n in enumerate(names)}
    ))
    present = arrow_to_rows(rows_with_keys(uri, version, keys).select(names))
    return {row: w for row, w in net.items() if w > 0 or row not in present}


def _distinct(table: pa.Table) -> pa.Table:
    names = table.column_names
    return table.group_by(names, use_threads=False).aggregate([]).select(names)


def _diff(old: pa.Table, new: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(rows of new not in old, rows of old not in new), both as sets, values compared as
    the MERGE compares them (``-0.0`` is ``0.0``: an anti-join comparing bits would
    delete the row it meant to replace and insert nothing)."""
    return table_difference(new, old), table_difference(old, new)


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
    dt = open_table(uri)
    target = pa.schema(dt.schema().to_arrow())
    new = _distinct(normalize(new).select(target.names).cast(target))
    for attempt in range(COMMIT_RETRIES + 1):
        dt = open_table(uri)
        read_version = dt.version()
        old = normalize(dataset(dt, uri).to_table())
        inserted, deleted = _diff(old, new)
        if inserted.num_rows == 0 and deleted.num_rows == 0:
            return 0, 0, read_version
        result = _try_merge(uri, dt, inserted, deleted,
                            CommitProperties(custom_metadata=metadata), attempt)
        if result is not None:
            return result
    raise AssertionError("unreachable")


def _merge(
    dt: DeltaTable, inserted: pa.Table, deleted: pa.Table, properties: CommitProperties
) -> tuple[int, int]:
    """One MERGE commit keyed on every column: insert ``inserted`` rows that are absent,
    delete ``deleted`` rows that are present. Returns (rows inserted, rows deleted)."""
    names = inserted.column_names
    source = pa.concat_tables(
        [
            inserted.append_column(_CHANGE, pa.repeat("i", inserted.num_rows)),
            deleted.append_column(_CHANGE, pa.repeat("d", deleted.num_rows)),
        ]
    )
    if names:  # inserted rows are written in key order: files keep narrow key ranges
        source = source.sort_by([(c, "ascending") for c in names])
    on = " AND ".join(f"t.{_quote(c)} = s.{_quote(c)}" for c in names)
    first = _first_column_filter(source, names[0]) if names else None
    if first is not None:
        on = f"{first} AND {on}"
    metrics = (
        dt.merge(
            source, predicate=on, source_alias="s", target_alias="t", commit_properties=properties
        )
        .when_matched_delete(predicate=f"s.{_CHANGE} = 'd'")
        .when_not_matched_insert(
            {c: f"s.{_quote(c)}" for c in names}, predicate=f"s.{_CHANGE} = 'i'"
        )
        .execute()
    )
    return int(metrics["num_target_rows_inserted"]), int(metrics["num_target_rows_deleted"])


def _first_column_filter(source: pa.Table, name: str) -> str | None:
    """``t.<name> IN (...)`` of the source's distinct values of its first column, as SQL
    literals (ints and strings; a float column gets no filter: its literals would be read
    as decimals); None when there are more than ``MERGE_FILTER_MAX``."""
    values = pc.unique(source.column(name)).to_pylist()
    if not values or len(values) > MERGE_FILTER_MAX:
        return None
    literals = []
    for v in values:
        if isinstance(v, bool) or v is None:
            return None
        if isinstance(v, int):
            literals.append(str(v))
        elif isinstance(v, str):
            literals.append("'" + v.replace("'", "''") + "'")
        else:
            return None
    return f"t.{_quote(name)} IN ({', '.join(literals)})"


def commit_delta(
    uri: str,
    inserted: pa.Table,
    deleted: pa.Table,
    commit_metadata: Mapping[str, object],
    txn: tuple[str, int],
    at_version: int | None = None,
) -> tuple[int, int, int]:
    """Apply a change (rows to insert, rows to delete; set semantics) to the table at
    ``uri`` as ONE commit (a MERGE) carrying ``commit_metadata`` and the application
    transaction ``txn`` = (app id, version). Returns (inserted, deleted, version after).

    ``at_version`` is the version the caller's image of the table is of (the one its last
    commit left): when the table is still at it and the change deletes nothing, the rows
    are appended (the caller knows they are absent), O(change); a MERGE reads the whole
    target table to match them.

    Exactly once: the commit is refused with ``DataError`` DL306 when the table already has
    ``txn``'s version (or a later one) for that app id, checked before each attempt. delta-rs
    1.6 does not itself reject two commits of one app id and version (seen in a test), so
    that check, under the caller's lock, is what keeps a change from being applied twice.
    A conflict with another writer (CommitFailedError) re-reads the table and retries.

    Every deleted row must be in the table: in a MERGE that also inserts, delta-rs 1.6 turns
    a source row that no clause applies to into a row of nulls, which the table's non-null
    columns reject (DataError DL307, nothing committed); and a MERGE that changes nothing
    commits nothing (so records no transaction)."""
    target = arrow_schema_of(uri)
    inserted = normalize(inserted).select(target.names).cast(target)
    deleted = normalize(deleted).select(target.names).cast(target)
    for attempt in range(COMMIT_RETRIES + 1):
        dt = open_table(uri)
        _refuse_taken(dt, uri, txn)
        properties = _properties(commit_metadata, txn, 0)
        if deleted.num_rows == 0 and at_version is not None and dt.version() == at_version:
            result = _try_append(uri, inserted, properties, attempt)
        else:
            result = _try_merge(uri, dt, inserted, deleted, properties, attempt)
        if result is not None:
            return result
    raise AssertionError("unreachable")


def _refuse_taken(dt: DeltaTable, uri: str, txn: tuple[str, int]) -> None:
    """DL310 when the table already holds application transaction ``txn``'s version (or a
    later one) for its app id: another run applied this change."""
    app_id, version = txn
    done = dt.transaction_version(app_id)
    if done is not None and done >= version:
        raise DataError(
            f"application transaction {app_id} version {version} is already committed "
            f"(table has version {done} of it): another run applied this change",
            uri,
            TXN_TAKEN,
        )


def extra_copies(table: pa.Table) -> int:
    """How many rows of ``table`` repeat an earlier row (0: it is a set)."""
    return table.num_rows - _distinct(normalize(table)).num_rows if table.num_columns else 0


def overwrite(
    uri: str,
    rows: pa.Table,
    commit_metadata: Mapping[str, object],
    txn: tuple[str, int],
) -> tuple[int, int, int]:
    """Make the table at ``uri`` hold exactly the set ``rows`` in ONE commit that removes
    every file and writes the rows anew, carrying ``commit_metadata`` and the application
    transaction ``txn``: for a table holding copies of a row (another writer appended
    them), which a MERGE keyed on every column cannot bring down to one copy. Returns
    (rows written, rows removed, version after); DL310 as ``commit_delta``."""
    target = arrow_schema_of(uri)
    rows = _distinct(normalize(rows).select(target.names).cast(target))
    for attempt in range(COMMIT_RETRIES + 1):
        dt = open_table(uri)
        _refuse_taken(dt, uri, txn)
        removed = row_count(uri)
        try:
            write_deltalake(uri, rows, mode="overwrite",
                            commit_properties=_properties(commit_metadata, txn, 0),
                            storage_options=storage_options(uri))
        except CommitFailedError as err:
            _back_off(attempt, err)
            continue
        except (DeltaError, OSError) as err:
            raise _write_failed(uri, err) from None
        return rows.num_rows, removed, open_table(uri).version()
    raise AssertionError("unreachable")


def _try_append(
    uri: str, inserted: pa.Table, properties: CommitProperties, attempt: int
) -> tuple[int, int, int] | None:
    """One append attempt: (inserted, 0, new version), or None to retry after a conflict."""
    try:
        write_deltalake(uri, inserted, mode="append", commit_properties=properties,
                        storage_options=storage_options(uri))
    except CommitFailedError as err:
        _back_off(attempt, err)
        return None
    except (DeltaError, OSError) as err:
        raise _write_failed(uri, err) from None
    return inserted.num_rows, 0, open_table(uri).version()


def _back_off(attempt: int, err: CommitFailedError) -> None:
    """A concurrent commit won attempt ``attempt``: back off before the caller retries on
    the new version (None), or raise the conflict on the last attempt."""
    if attempt == COMMIT_RETRIES:
        raise err
    time.sleep(0.05 * (attempt + 1))


def spark_dataframe(spark: "SparkSession", uri: str, version: int | None = None) -> "DataFrame":
    """The table (at ``version``) as a Spark DataFrame that Spark's own parquet reader reads
    from the version's exact file list (from the Delta log, through delta-rs): executors
    read the files, the driver holds only their names (Spark's Delta reader needs jars from
    Maven). Partition columns come from the files' paths, cast to the log's types. On
    object storage without a Hadoop filesystem for its scheme in Spark (pyspark from PyPI
    has no S3A), the executors read the same files with Arrow's filesystems instead
    (``deltalog.pipelines.spark.arrow_files``, with the warehouse's storage options).

    Raises ``NotSupportedError`` for a table whose protocol a plain parquet read would get
    wrong: deletion vectors (rows deleted without rewriting their file) or column mapping
    (columns stored under other names)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    with _reading(uri, version):
        dt = open_table(uri, version)
        files = dt.file_uris()
        schema = pa.schema(dt.schema().to_arrow())
        partitions = list(dt.metadata().partition_columns)
    _refuse_features(dt, uri, "Spark reads Delta tables as their parquet files here",
                     " (or read it where Spark has the Delta Lake jars)")
    if not files:
        return spark.createDataFrame(normalize(schema.empty_table()))
    if is_remote(uri):
        # Hadoop names S3 s3a://; without that filesystem on Spark's classpath (hadoop-aws,
        # which pyspark from PyPI lacks), the executors read the files with Arrow's
        hadoop = [f"s3a://{f[len('s3://'):]}" if f.startswith("s3://") else f for f in files]
        base = f"s3a://{uri[len('s3://'):]}" if uri.startswith("s3://") else uri
        if not _spark_has_filesystem(spark, hadoop[0]):
            from deltalog.pipelines.spark.arrow_files import read_files

            named = [(f, _partition_values(uri, f, partitions)) for f in files]
            return read_files(spark, named, normalize(schema.empty_table()).schema,
                              storage_options(uri) or {})
        files, uri = hadoop, base
    reader = spark.read.option("basePath", uri) if partitions else spark.read
    df = reader.parquet(*files)
    for name in partitions:
        df = df.withColumn(name, F.col(name).cast(from_arrow_type(schema.field(name).type)))
    return df.select(*schema.names)


def _spark_has_filesystem(spark: "SparkSession", path: str) -> bool:
    """Whether Spark has a Hadoop filesystem for ``path``'s scheme (a cluster's Spark
    usually has S3A and ABFS; pyspark from PyPI has neither)."""
    scheme = path.split("://", 1)[0]
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
    except Exception:  # py4j wraps the JVM's UnsupportedFileSystemException
        return False
    return True


def _partition_values(uri: str, file: str, partitions: Sequence[str]) -> dict[str, str | None]:
    """A file's partition values from its path below the table (``col=value`` folders, as
    Delta writes them; ``__HIVE_DEFAULT_PARTITION__`` is null)."""
    from urllib.parse import unquote

    out: dict[str, str | None] = dict.fromkeys(partitions)
    for part in file[len(uri.rstrip("/")) + 1 :].split("/")[:-1]:
        name, eq, value = part.partition("=")
        if eq and name in out:
            value = unquote(value)
            out[name] = None if value == "__HIVE_DEFAULT_PARTITION__" else value
    return out


__all__ = [
    "CDF_CONFIG",
    "CHANGE_MISFIT",
    "TXN_TAKEN",
    "DataError",
    "TableNotFoundError",
    "changes",
    "commit_delta",
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
    "transaction_version",
]


def _try_merge(
    uri: str, dt: DeltaTable, inserted: pa.Table, deleted: pa.Table,
    properties: CommitProperties, attempt: int,
) -> tuple[int, int, int] | None:
    """One MERGE attempt: (inserted, deleted, new version), or None when a concurrent
    commit won and the caller should retry on the new version (after a short back-off);
    the last attempt's conflict is raised."""
    try:
        ins, dels = _merge(dt, inserted, deleted, properties)
    except CommitFailedError as err:
        _back_off(attempt, err)
        return None
    except (DeltaError, OSError) as err:
        raise _write_failed(uri, err, merge=True) from None
    return ins, dels, open_table(uri).version()


def _write_failed(uri: str, err: Exception, merge: bool = False) -> Exception:
    """What a failed write of the table is to the user: storage that refused the files
    (full, read-only, not permitted: an OS error) is DL315, nothing committed; what else
    delta-rs refuses in a MERGE is DL307 (a deleted row the table does not hold); any
    other error is itself."""
    text = str(err).strip()
    if isinstance(err, OSError) or "os error" in text:
        cause = text.splitlines()[-1][:300] if text else type(err).__name__
        return DataError(
            f"the table's files cannot be written ({cause}); nothing was committed: free "
            "space or grant write access, then run again",
            uri,
            TABLE_UNWRITABLE,
        )
    if merge:
        return DataError(f"the change does not fit the table (a deleted row absent?): {err}",
                         uri, CHANGE_MISFIT)
    return err
