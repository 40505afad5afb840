"""Table maintenance: compact a pipeline's Delta tables and vacuum them, never removing what a
stratum or a check still reads.

MERGE after MERGE, every run adds small data and change-data files to the IDB tables (and
the EDB tables grow by their writers' commits). ``maintain_tables`` compacts each table
(delta-rs ``optimize.compact``: a commit that rewrites files with ``dataChange=false``, which
the change feed skips) and vacuums it. What must survive, per table, is every version from
the oldest one still needed, the oldest of

- the input version each stratum's saved state consumed: its next run reads the change from
  there (the change-data files of the later commits, their added and removed data files, or
  that version's files to diff against when the table has no change feed);
- the EDB versions the recompute check reads for each IDB table
  (``deltalog.pipelines.recompute.table_edb_versions``: the saved state's when the table is still at
  the version its last run left, else those its newest deltalog commit recorded); the check
  reads those versions' data files;
- versions the caller names (``keep``: the Dagster job adds the version each blocking
  ``valid_input`` check last passed, whose change it reads next);
- the table's current version.

A stratum input version followed only by maintenance commits (compactions, vacuums) counts
as the current one when the table has a change feed: the change from it is the feed of
those commits, which is empty, so its files are not needed. The check's versions are read
as snapshots and are kept as they are.

The vacuum's retention (delta-rs removes files that were removed from the table, or that the
log no longer names, longer ago than ``retention_hours``) reaches back past the oldest
needed version's commit, plus a margin, so every file removed at or after it (and every
change-data file written since) stays; never less than the configured minimum (default 7
days, Delta's own default). The versions something reads as a snapshot are passed as
``keep_versions`` too. Only when nothing older than the current version is needed does the
configured minimum alone apply.

Compaction and vacuum are commits: an IDB table moves to a later version with the same
rows. Under the stratum's lock, the saved state is told that version (``_follow``): the
next run finds the table where its state expects it, and the recompute check, which reads
the state's EDB versions only while the table is at the state's version (else those its
newest deltalog commit recorded, possibly much older), keeps reading the versions kept.
The tables of a stratum whose last run committed and was interrupted before saving its
state are left alone (reported as skipped): its next run finishes that run from the state,
which needs the run's commit to be the table's newest.
"""

import contextlib
import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from deltalog.engine.errors import DeltalogError
from deltalog.pipelines import delta_io
from deltalog.pipelines.commits import app_id
from deltalog.pipelines.recompute import table_edb_versions
from deltalog.pipelines.spec import PipelineSpec
from deltalog.pipelines.state_store import load_state, save_state, state_path, stratum_lock

DEFAULT_MIN_RETENTION_HOURS = 7 * 24  # Delta's default delta.deletedFileRetentionDuration
# Extra hours of retention past the oldest needed commit: a concurrent writer stamps its
# removes (and writes its change-data files) a little before its commit's timestamp.
MARGIN_HOURS = 1
LOCK_WAIT_SECONDS = 600.0


@dataclass(frozen=True)
class TableReport:
    """What maintenance did to one table. ``files_*`` count the data files of the current
    version (what a reader opens); ``removed_files`` and ``bytes_removed`` are the files the
    vacuum deleted from the table's folder (data and change-data files); ``bytes_compacted``
    is the size of the files compaction rewrote, as delta-rs reports it."""

    pred: str
    uri: str
    version_before: int
    version_after: int
    files_before: int
    files_after: int
    needed_from: int  # every version from this one on stays readable
    needed_by: str  # who needs it: "current", "stratum N", "check of P", "caller"
    retention_hours: int
    removed_files: int
    bytes_removed: int
    bytes_compacted: int
    skipped: str = ""  # why the table was left as it was (empty: maintained)

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass(frozen=True)
class Needed:
    """The oldest version of a table still needed, why, and the versions read as snapshots
    (kept whole by the vacuum)."""

    version: int
    by: str
    snapshots: frozenset[int]


def needed_versions(
    root: str | Path,
    spec: PipelineSpec,
    state_root: str | Path | None = None,
    keep: Mapping[str, int] | None = None,
) -> dict[str, Needed]:
    """Per existing table of ``spec``: the oldest version a stratum, a check or the caller
    (``keep``: table -> version) still reads (see the module docstring)."""
    current: dict[str, int] = {}
    for pred in [*spec.edb_tables, *spec.idb_tables]:
        uri = spec.table_uri(root, pred)
        if delta_io.exists(uri):
            current[pred] = delta_io.table_version(uri)
    # (version, who) pairs: the feed's are versions a change is read from, the rest snapshots
    feed: dict[str, list[tuple[int, str]]] = {p: [] for p in current}
    snapshots: dict[str, list[tuple[int, str]]] = {p: [(v, "current")] for p, v in current.items()}
    for index in range(len(spec.program.strata)):
        state = load_state(state_path(root, spec.name, index, state_root))
        if state is None:  # no usable state: the next run loads from the current versions
            continue
        for pred, version in state.input_versions.items():
            if pred in feed:
                feed[pred].append((version, f"stratum {index}"))
    for pred in spec.idb_tables:
        if pred in current:
            _, versions = table_edb_versions(root, spec, pred, state_root)
            for edb, version in versions.items():
                if edb in snapshots:
                    snapshots[edb].append((version, f"check of {pred}"))
    for pred, version in (keep or {}).items():
        if pred in snapshots:
            snapshots[pred].append((version, "caller"))
    out = {}
    for pred, now in current.items():
        uri = spec.table_uri(root, pred)
        changes = [(_feed_start(uri, v, now), who) for v, who in feed[pred]]
        pairs = [*snapshots[pred], *changes]  # on a tie, "current" says the most
        version, by = min(pairs, key=lambda p: p[0])
        wanted = {v for v, _ in snapshots[pred]} | {v for v, _ in changes}
        out[pred] = Needed(version, by, frozenset(v for v in wanted if v <= now))
    return out


def _feed_start(uri: str, version: int, current: int) -> int:
    """The version a change is read from: ``current`` when every commit after ``version``
    is maintenance and the table has a change feed (the feed of those commits is empty),
    else ``version``."""
    if (
        version < current
        and delta_io.cdf_enabled(uri)
        and delta_io.only_maintenance(uri, version, current)
    ):
        return current
    return version


def maintain_tables(
    root: str | Path,
    spec: PipelineSpec,
    state_root: str | Path | None = None,
    min_retention_hours: int = DEFAULT_MIN_RETENTION_HOURS,
    *,
    compact: bool = True,
    full: bool = True,
    keep: Mapping[str, int] | None = None,
    lock_wait: float = LOCK_WAIT_SECONDS,
) -> list[TableReport]:
    """Compact (when ``compact``) and vacuum every table of ``spec``; one report each, in
    table name order. ``full`` vacuums files the log no longer names too (old change-data
    files, files of failed writes), under the same retention; without it only files the
    table removed go. An IDB table is maintained under its stratum's lock (a run of that
    stratum waits; this waits up to ``lock_wait`` seconds for one already running), and
    the stratum's saved state is then told the table's new version (same rows), so the
    recompute check keeps reading the EDB versions kept for it.

    Raises ``DeltalogError`` naming the table when delta-rs cannot compact or vacuum it
    (the tables maintained before it are done; the table's rows never change)."""
    if min_retention_hours < 0:
        raise DeltalogError(
            f"min_retention_hours must be 0 or more, not {min_retention_hours}", spec.name
        )
    needed = needed_versions(root, spec, state_root, keep)
    reports: list[TableReport] = []
    # The IDB tables first, each stratum's under its lock, its saved state told of the new
    # versions; the EDB tables last, so a check reading EDB versions never misses them.
    for index, stratum in enumerate(spec.program.strata):
        preds = sorted(p for p in stratum.preds if p in needed)
        if not preds:
            continue
        path = state_path(root, spec.name, index, state_root)
        with stratum_lock(path, lock_wait):
            pending = _interrupted_run(root, spec, index, path, preds)
            if pending:
                reports.extend(_untouched(p, spec.table_uri(root, p), needed[p], pending)
                               for p in preds)
                continue
            for pred in preds:
                reports.append(
                    _guarded(pred, spec.table_uri(root, pred), needed[pred],
                             min_retention_hours, compact, full)
                )
            _follow(root, spec, path, preds)
    for pred in sorted(p for p in spec.edb_tables if p in needed):
        reports.append(
            _guarded(pred, spec.table_uri(root, pred), needed[pred],
                     min_retention_hours, compact, full)
        )
    return sorted(reports, key=lambda r: r.pred)


def _interrupted_run(
    root: str | Path, spec: PipelineSpec, index: int, path: Path, preds: list[str]
) -> str:
    """Why stratum ``index``'s tables must be left as they are: a run that committed to
    them and was interrupted before saving its state (the next run finishes it from the
    state, which needs its commit to be the table's newest); empty when there is none."""
    state = load_state(path)
    if state is None:
        return ""
    for pred in preds:
        uri = spec.table_uri(root, pred)
        txn = delta_io.transaction_version(uri, app_id(spec, index, pred))
        if txn != state.written.get(pred):
            return (
                f"run {txn} of stratum {index} committed to '{pred}' and did not finish "
                "(the next run finishes it): left for the next maintenance"
            )
    return ""


def _untouched(pred: str, uri: str, needed: Needed, why: str) -> TableReport:
    table = delta_io.open_table(uri)
    files = len(table.file_uris())
    version = table.version()
    return TableReport(pred, uri, version, version, files, files, needed.version, needed.by,
                       0, 0, 0, 0, skipped=why)


def _guarded(
    pred: str, uri: str, needed: Needed, minimum: int, compact: bool, full: bool
) -> TableReport:
    """``_maintain``, what delta-rs or the file system raise as a ``DeltalogError``."""
    try:
        return _maintain(pred, uri, needed, minimum, compact, full)
    except (DeltaError, pa.ArrowException, OSError) as err:
        text = str(err).strip()
        first = text.splitlines()[0][:200] if text else type(err).__name__
        raise DeltalogError(
            f"table maintenance of '{pred}' stopped ({first}); its rows are unchanged, run "
            "the maintenance again",
            uri,
        ) from None


def _follow(root: str | Path, spec: PipelineSpec, path: Path, preds: list[str]) -> None:
    """Record in the stratum's saved state (at ``path``, its lock held) the version each
    of its tables ``preds`` is at now, when the commits since the version the state
    expects are only maintenance: the same rows. The recompute check then still reads
    the EDB versions of the state (the ones kept), and the next run finds the tables
    as its state expects them."""
    state = load_state(path)
    if state is None:
        return
    moved = False
    for pred in preds:
        uri = spec.table_uri(root, pred)
        expected, now = state.table_versions.get(pred, -1), delta_io.table_version(uri)
        if 0 <= expected < now and delta_io.only_maintenance(uri, expected, now):
            state.table_versions[pred] = now
            moved = True
    if moved:
        try:
            save_state(path, state)
        except OSError as err:
            raise DeltalogError(
                f"the saved state could not be updated after table maintenance ({err}); "
                "the next run reconciles it",
                str(path),
            ) from None


def _maintain(
    pred: str, uri: str, needed: Needed, minimum: int, compact: bool, full: bool
) -> TableReport:
    before = delta_io.open_table(uri)
    version_before = before.version()
    files_before = len(before.file_uris())
    bytes_compacted = 0
    if compact:
        metrics = before.optimize.compact()
        bytes_compacted = _total_size(metrics.get("filesRemoved"))
    table = delta_io.open_table(uri)
    current = table.version()
    retention = retention_hours(table, needed.version, current, minimum)
    on_disk = _files_on_disk(uri)
    table.vacuum(
        retention_hours=retention,
        dry_run=False,
        enforce_retention_duration=False,  # the retention is computed above, never blind
        full=full,
        keep_versions=sorted(needed.snapshots | {current}),
    )
    left = _files_on_disk(uri)
    gone = set(on_disk) - set(left)
    return TableReport(
        pred=pred,
        uri=uri,
        version_before=version_before,
        version_after=delta_io.open_table(uri).version(),
        files_before=files_before,
        files_after=len(delta_io.open_table(uri).file_uris()),
        needed_from=needed.version,
        needed_by=needed.by,
        retention_hours=retention,
        removed_files=len(gone),
        bytes_removed=sum(on_disk[f] for f in gone),
        bytes_compacted=bytes_compacted,
    )


def retention_hours(table: DeltaTable, oldest: int, current: int, minimum: int) -> int:
    """The vacuum retention that keeps every version from ``oldest`` on: the configured
    ``minimum`` when nothing older than ``current`` is needed; else enough whole hours to
    reach back past version ``oldest``'s commit (plus ``MARGIN_HOURS``), so every file
    removed at or after it, and every change-data file written since, stays."""
    if oldest >= current:
        return minimum
    stamps = {int(i["version"]): i.get("timestamp") for i in table.history()}
    stamp = stamps.get(oldest)
    if stamp is None:  # its log entry is gone: keep everything the remaining log knows
        known = [s for s in stamps.values() if s is not None]
        stamp = min(known) if known else 0
    return max(minimum, _hours_since(int(stamp)) + MARGIN_HOURS)


def _hours_since(stamp_ms: int) -> int:
    return max(0, math.ceil((time.time() * 1000 - stamp_ms) / 3_600_000))


def _total_size(files: Any) -> int:
    """``totalSize`` of an optimize metrics entry (delta-rs gives it as JSON text)."""
    if isinstance(files, str):
        try:
            files = json.loads(files)
        except ValueError:
            return 0
    if isinstance(files, Mapping):
        return int(files.get("totalSize") or 0)
    return 0


def _files_on_disk(uri: str) -> dict[str, int]:
    """Every file in the table's folder but its log, with its size."""
    out = {}
    for folder, dirs, files in os.walk(uri):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        for name in files:
            path = os.path.join(folder, name)
            with contextlib.suppress(FileNotFoundError):
                out[path] = os.path.getsize(path)
    return out


def reports_table(reports: list[TableReport]) -> Mapping[str, Any]:
    """The reports by table, for run metadata."""
    return {r.pred: r.as_dict() for r in reports}
