"""Table maintenance: compact a pipeline's Delta tables and vacuum them, never removing what a
stratum or a check still needs.

MERGE after MERGE, every run adds small files to the IDB tables (and the EDB tables grow by
their writers' commits). ``maintain_tables`` compacts each table (delta-rs ``optimize``: a
commit that rewrites files without changing data, which the change feed skips) and vacuums
it. What must survive a vacuum, per table: every version from the oldest one still needed,
which is the oldest of

- the input version each stratum's saved state consumed (the next run reads the change from
  it: the change-data files of the later commits, or that version's files to diff against),
- the EDB versions the IDB tables' last runs stand for (the recompute check reads them),
- the table's current version;

and a version followed only by maintenance commits counts as the current one (the change
from it is read from the change feed, which skips them).

The vacuum keeps those versions' files (``keep_versions``) and, when an older version is
still needed, a retention reaching back to its commit (so change-data files survive too);
when nothing older than the current version is needed, the configured minimum retention
(default 7 days, Delta's own default) applies.
"""

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from pipelines import delta_io
from pipelines.spec import PipelineSpec
from pipelines.state_store import load_state, state_path

DEFAULT_MIN_RETENTION_HOURS = 7 * 24


@dataclass(frozen=True)
class TableReport:
    """What maintenance did to one table."""

    pred: str
    uri: str
    version_before: int
    version_after: int
    files_before: int
    files_after: int
    needed_from: int  # the oldest version kept readable
    retention_hours: int
    removed_files: int

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def needed_versions(
    root: str | Path, spec: PipelineSpec, state_root: str | Path | None = None
) -> dict[str, int]:
    """Per table of ``spec`` that exists: the oldest version a stratum or a check still
    reads (see the module docstring)."""
    needed: dict[str, int] = {}
    for pred in [*spec.edb_tables, *spec.idb_tables]:
        uri = spec.table_uri(root, pred)
        if delta_io.exists(uri):
            needed[pred] = delta_io.table_version(uri)
    for index in range(len(spec.program.strata)):
        state = load_state(state_path(root, spec.name, index, state_root))
        if state is None:  # no state: the next run loads from the current versions
            continue
        for versions in (state.input_versions, state.edb_versions):
            for pred, version in versions.items():
                if pred in needed:
                    needed[pred] = min(needed[pred], version)
    for pred, version in needed.items():  # past commits that only compacted or vacuumed
        current = delta_io.table_version(spec.table_uri(root, pred))
        if version < current and delta_io.only_maintenance(
            spec.table_uri(root, pred), version, current
        ):
            needed[pred] = current
    return needed


def maintain_tables(
    root: str | Path,
    spec: PipelineSpec,
    state_root: str | Path | None = None,
    min_retention_hours: int = DEFAULT_MIN_RETENTION_HOURS,
    compact: bool = True,
) -> list[TableReport]:
    """Compact (when ``compact``) and vacuum every table of ``spec``; one report each."""
    needed = needed_versions(root, spec, state_root)
    reports = []
    for pred in sorted(needed):
        uri = spec.table_uri(root, pred)
        before = DeltaTable(uri)
        version_before = before.version()
        files_before = len(before.file_uris())
        if compact:
            before.optimize.compact()
        table = DeltaTable(uri)
        current = table.version()
        oldest = needed[pred]
        retention = _retention_hours(table, oldest, version_before, min_retention_hours)
        removed = table.vacuum(
            retention_hours=retention,
            dry_run=False,
            enforce_retention_duration=False,
            keep_versions=list(range(oldest, current + 1)),
        )
        reports.append(
            TableReport(
                pred, uri, version_before, current, files_before,
                len(DeltaTable(uri).file_uris()), oldest, retention, len(removed),
            )
        )
    return reports


def _retention_hours(table: DeltaTable, oldest: int, latest: int, minimum: int) -> int:
    """The configured minimum when nothing older than ``latest`` (the version before this
    maintenance) is needed; else enough hours to reach back past version ``oldest``'s
    commit, so every file removed since (and every change-data file after it) stays."""
    if oldest >= latest:
        return minimum
    stamps = {int(i["version"]): i.get("timestamp") for i in table.history()}
    stamp = stamps.get(oldest)
    if stamp is None:  # its log entry is gone already: keep everything that is left
        return max(minimum, _hours_since(min(s for s in stamps.values() if s is not None)))
    return max(minimum, _hours_since(stamp))


def _hours_since(stamp_ms: int) -> int:
    return math.ceil((time.time() * 1000 - stamp_ms) / 3_600_000) + 1


def reports_table(reports: list[TableReport]) -> Mapping[str, Any]:
    """The reports by table, for run metadata."""
    return {r.pred: r.as_dict() for r in reports}
