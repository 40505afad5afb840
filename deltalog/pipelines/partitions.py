"""One partition of a partitioned stratum: the work a Spark task does, with no Spark in it.

A partition keeps its own engine state in the segment store (``part-K`` under the stratum's
partitions folder), in the same format as a single-process stratum: ``seq`` is the run that
last brought it to ``input_versions``, and ``extra["out"]`` names the segment holding the
change that run derived (the whole relation, for a load). ``extra["copies"]`` holds, per
input, the rows its table holds more than once (a Delta table is a bag), so that a change
that comes as the feed's weights is told apart here, from the partition's own relations,
with no lookup in the table (None past ``COPIES_MAX`` rows: the driver then sends that
table's changes as set changes, looked up in the table). A task for run ``seq`` that finds
its partition already at ``seq`` and those versions returns the saved change without
applying anything: a retried or speculative attempt never applies a change twice (the
partition's lock keeps two attempts apart). A partition that is neither at this run nor at
the one before it is "out of step": the driver reloads the stratum.

Records in and out are ``(relation, weight, row packed with MessagePack)``; a run's counters
travel as a record named ``STATS``, a failure as one named ``ERROR`` (the driver raises it
as the error it was, naming the table), so that bad data never surfaces as a task's
traceback.
"""

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.errors import DeltalogError
from deltalog.engine.runtime import IncrementalEngine
from deltalog.engine.storage import Delta
from deltalog.engine.values import Row
from deltalog.pipelines.faults import task_fault
from deltalog.pipelines.inputs import COPIES_MAX
from deltalog.pipelines.malloc import tune_malloc
from deltalog.pipelines.state_store import (
    StratumState,
    Writer,
    load_state,
    save_state,
    stratum_lock,
)

STATS = "\x00stats"
ERROR = "\x00error"
END = "\x00end"  # a map partition's trailer: (END, its number, rows it sent here)
OUT_OF_STEP = "out of step"

Record = tuple[str, int, bytes]


class IncompleteInput(Exception):
    """A task's input ended before every map partition's trailer, or holds other rows than
    the trailers count: the task fails (Spark runs it again), having changed nothing."""


class PartitionFailed(DeltalogError):
    """A partition's task reported an error that is not bad input: ``kind`` is the
    error's class name there, ``partition`` the partition."""

    def __init__(self, message: str, where: str, code: str | None, kind: str, partition: int):
        super().__init__(message, where, code)
        self.kind, self.partition = kind, partition


def pack_row(row: Iterable[Any]) -> bytes:
    return msgpack.packb(list(row), use_bin_type=True)


def unpack_row(data: bytes) -> Row:
    return tuple(msgpack.unpackb(data, raw=False))


@dataclass(frozen=True)
class PartitionJob:
    """What every task of one run needs: where the partitions keep their states
    (``folder``), the split program and its fingerprint, the run (``seq``) and the input
    versions it brings the partitions to; for a maintenance run (``full`` False) the run and
    versions the partitions must be at before it. ``fault``: the crash-test point (the
    driver's ``DELTALOG_FAULT``), honoured on a task's first attempt only."""

    folder: str
    digest: str
    program: AnalyzedProgram
    preds: tuple[str, ...]
    seq: int
    inputs: Mapping[str, int]
    full: bool
    before_seq: int = 0
    before: Mapping[str, int] | None = None
    lock_wait: float = 600.0
    fault: str = ""
    # the table each input of ``program`` reads, and the tables whose rows come as bag
    # weights (copies added less copies removed, from the change feed) to be told apart here
    sources: Mapping[str, str] = field(default_factory=dict)
    bags: frozenset[str] = frozenset()
    copies_max: int = COPIES_MAX  # rows held more than once kept per input at the most
    maps: int = -1  # map partitions whose trailers a complete input holds (-1: no check)


def part_path(folder: str | Path, k: int) -> Path:
    return Path(folder) / f"part-{k:05d}"


def run_partition(job: PartitionJob, k: int, records: Iterable[Record],
                  attempt: int = 0) -> Iterator[Record]:
    """Maintain (or load) partition ``k`` with ``records`` (its routed rows: the change, or
    every row for a load); yield its derived change, then its counters."""
    started = time.perf_counter()
    tune_malloc()
    path = part_path(job.folder, k)
    try:
        with stratum_lock(path, job.lock_wait):
            out, stats = _run(job, k, path, records, attempt)
    except DeltalogError as err:
        yield (ERROR, k, msgpack.packb([type(err).__name__, err.code, err.message,
                                        str(err.where or "")]))
        return
    except IncompleteInput:
        raise  # a failed task: Spark tries it again
    except Exception as err:
        yield (ERROR, k, msgpack.packb([type(err).__name__, "", str(err), ""]))
        return
    for pred, delta in out.items():
        for row, weight in delta.items():
            yield (pred, weight, pack_row(row))
    stats["seconds"] = time.perf_counter() - started
    yield (STATS, k, msgpack.packb(stats))


def _run(job: PartitionJob, k: int, path: Path, records: Iterable[Record],
         attempt: int) -> tuple[dict[str, Delta], dict[str, Any]]:
    state = load_state(path)
    if (state is not None and state.digest == job.digest and state.seq == job.seq
            and state.input_versions == dict(job.inputs)):
        return _saved_output(state), {"retried": 1, "sizes": state.extra.get("sizes", {})}
    rows: dict[str, dict[Row, int]] = defaultdict(dict)
    received = 0
    trailers: dict[int, int] = {}
    for name, weight, data in records:
        if name == END:
            trailers[weight] = int(msgpack.unpackb(data))
            continue
        row = unpack_row(data)
        rows[name][row] = rows[name].get(row, 0) + weight
        received += 1
    if job.maps >= 0 and (len(trailers) != job.maps or sum(trailers.values()) != received):
        raise IncompleteInput(
            f"partition {k}: {received} rows and the trailers of {len(trailers)} of "
            f"{job.maps} map partitions (counting {sum(trailers.values())} rows)")
    opened = None
    deltas: dict[str, Delta] = {}
    unknown: set[str] = set()
    if job.full:
        engine = IncrementalEngine(job.program, {n: set(r) for n, r in rows.items()})
        out: dict[str, Delta] = {p: dict.fromkeys(engine.relation(p), 1) for p in job.preds}
        copies: dict[str, dict[Row, int] | None] = {
            n: {r: c for r, c in counted.items() if c >= 2} for n, counted in rows.items()}
    else:
        if (state is None or state.digest != job.digest or state.seq != job.before_seq
                or state.input_versions != dict(job.before or {})):
            raise RuntimeError(
                f"{OUT_OF_STEP}: partition {k} at {path} is at run "
                f"{state.seq if state else 'none'}, this run ({job.seq}) needs run "
                f"{job.before_seq}")
        opened = state.open()
        engine = IncrementalEngine.loads(opened.read(state.root), opened)
        copies = _copies(state)
        for name, weights in rows.items():
            if job.sources.get(name) in job.bags:
                weights = _set_change(engine, name, weights, copies, k)
            deltas[name] = {r: w for r, w in weights.items() if w}
        deltas = {n: d for n, d in deltas.items() if d}
        engine.check_edb(deltas)
        out = engine.apply(deltas) if deltas else {}
    for name, known in copies.items():
        if known is not None and len(known) > job.copies_max:
            copies[name] = None  # too many to keep: that table's changes come as sets
        if copies[name] is None and name in job.sources:
            unknown.add(job.sources[name])
    sizes = {p: engine.size(p) for p in job.preds}
    new = StratumState(digest=job.digest, seq=job.seq, input_versions=dict(job.inputs),
                       edb_versions={}, written={}, table_versions={},
                       extra={"out": None, "sizes": sizes, "copies": {
                           n: None if c is None else [[*r, m] for r, m in c.items()]
                           for n, c in copies.items()}})
    if not deltas and opened is not None and state is not None:
        # no change reached this partition: its segments stay, only the run is recorded
        new.root, new.segments = state.root, dict(state.segments)
        saved = save_state(path, new)
    else:
        def dump(writer: Writer) -> bytes:
            new.extra["out"] = writer.write([_pack_output(out)])
            return engine.dumps(writer)

        saved = save_state(path, new, dump, opened)
    if attempt == 0 and job.fault:
        task_fault(job.fault, k)  # the crash tests: Spark runs the task again
    counters = {name: v for name, v in engine.last_stats.as_dict().items()
                if isinstance(v, int | float)}
    return out, {"received": received, "state_bytes_written": saved["bytes_written"],
                 "sizes": sizes, "copies_unknown": sorted(unknown), **counters}


def _copies(state: StratumState) -> dict[str, dict[Row, int] | None]:
    return {str(n): None if rows is None else {tuple(r[:-1]): int(r[-1]) for r in rows}
            for n, rows in state.extra.get("copies", {}).items()}


def _set_change(engine: IncrementalEngine, name: str, weights: Mapping[Row, int],
                copies: dict[str, dict[Row, int] | None], k: int) -> Delta:
    """The set change of input ``name`` from its feed's ``weights``: a row enters with its
    first copy and leaves with its last (copies held before: ``copies``, else one when
    the partition's relation holds the row); ``copies`` brought up to date."""
    known = copies.get(name, {})
    if known is None:
        raise RuntimeError(f"{OUT_OF_STEP}: partition {k} does not know the copies of the "
                           f"rows of '{name}'")
    delta: Delta = {}
    for row, weight in weights.items():
        before = known.get(row) or (1 if engine.contains(name, row) else 0)
        now = before + weight
        if now < 0:  # the table was rewritten outside its change feed
            raise RuntimeError(f"{OUT_OF_STEP}: the change of '{name}' takes a row below "
                               f"zero copies in partition {k}")
        if now >= 2:
            known[row] = now
        else:
            known.pop(row, None)
        if (before > 0) != (now > 0):
            delta[row] = 1 if now > 0 else -1
    copies[name] = known
    return delta


def _pack_output(out: Mapping[str, Delta]) -> bytes:
    return msgpack.packb({p: [[*row, w] for row, w in d.items()] for p, d in out.items()},
                         use_bin_type=True)


def _saved_output(state: StratumState) -> dict[str, Delta]:
    name = state.extra.get("out")
    if not name:
        return {}
    data = msgpack.unpackb(bytes(state.open().read(name)), raw=False)
    return {p: {tuple(r[:-1]): int(r[-1]) for r in rows} for p, rows in data.items()}
