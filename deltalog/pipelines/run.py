"""One run of one stratum: the object the Dagster layer (and the CLI, tests, benchmarks) calls.

A stratum runs in one of three ways, all under the stratum's lock and all committing through
``deltalog.pipelines.commits``:

- **incremental** (``materialize``): read the change of every input since the versions the
  saved engine consumed (``deltalog.pipelines.inputs``), ``apply`` it, write each IDB change as one
  commit with transaction version ``seq`` (the run number), save the engine;
- **full load** (``materialize`` with no usable state, a large change, or ``rebuild()``):
  load the engine from the input tables and make each IDB table equal its result;
- **Spark rebuild** (``rebuild(spark)``): recompute on Spark, make each table equal the
  result, drop the saved state (the next run reloads the engine from the tables).

With ``partitions`` above 1 (and a Spark session), a stratum the planner can split
(``deltalog.engine.partition``) runs as that many Spark tasks, each maintaining its own
partition state (``deltalog.pipelines.partitions``); the driver reads the change, commits
once per table and keeps its own small state (the run it started, so that a run killed
between its tasks and its commits is finished by the next one with the same change). A
stratum that cannot be split runs in one process, and its notes say why.

Crash safety: the transaction versions in the IDB tables say how far a crashed run got. A
table one run ahead of the state is finished from the state (never applied twice); any other
disagreement is rebuilt from the tables and said so in the result's notes.
"""

import hashlib
import itertools
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from deltalog.engine.errors import FUNCTIONAL_CONFLICT, DataError, NotSupportedError
from deltalog.engine.partition import (
    BROADCAST_LIMIT,
    SplitStratum,
    plan_partitioning,
    split_stratum,
)
from deltalog.engine.runtime import IncrementalEngine, diff
from deltalog.engine.segments import CorruptSegment
from deltalog.engine.storage import Delta
from deltalog.engine.values import Row
from deltalog.pipelines import delta_io, quality
from deltalog.pipelines import inputs as inputs_module
from deltalog.pipelines.commits import (
    EDB_VERSIONS,
    INPUT_VERSIONS,
    MODE,
    CommitWriter,
    Txns,
    Written,
    versions_json,
    versions_of,
)
from deltalog.pipelines.faults import FAULT_ENV, fault
from deltalog.pipelines.inputs import Copies, InputReader
from deltalog.pipelines.lineage import run_sample
from deltalog.pipelines.malloc import tune_malloc
from deltalog.pipelines.partitions import OUT_OF_STEP, PartitionFailed, PartitionJob
from deltalog.pipelines.spec import PipelineSpec
from deltalog.pipelines.state_store import (
    Reader,
    StoreError,
    StratumState,
    drop_state,
    load_state,
    older_format,
    save_state,
    state_exists,
    state_path,
    stratum_lock,
)
from deltalog.pipelines.stratum_program import stratum_digest, stratum_program
from deltalog.schemas.relation import (
    arrow_to_rows,
    columns_to_arrow,
    rows_to_arrow,
    table_difference,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from deltalog.pipelines.spark.maintain import SparkRun

LOCK_WAIT_SECONDS = 600.0

# A change this large (at least RELOAD_MIN_ROWS input rows and more than RELOAD_SHARE of the
# inputs' rows) reloads the stratum from the tables, like a first load, instead of maintaining
# it: per changed row, maintenance costs far more than evaluation does, and the saved state
# would be rewritten whole anyway. The run says so in its notes and reports mode "full".
RELOAD_SHARE = 0.25
RELOAD_MIN_ROWS = 1000


class _AllInserted(Mapping[Row, int]):
    """The change that fills an empty table: every row of ``rows`` (a relation's rows in
    the engine's store, read in place) with weight +1, for the run's lineage sample."""

    def __init__(self, rows: Any):
        self._rows = rows

    def __getitem__(self, row: Row) -> int:
        if row in self._rows:
            return 1
        raise KeyError(row)

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def values(self) -> Any:
        return itertools.repeat(1, len(self._rows))

    def items(self) -> Any:
        return ((row, 1) for row in self._rows)


@dataclass(frozen=True)
class StratumResult:
    """What a run did to one IDB predicate's table. ``seconds`` is the wall time of the whole
    stratum run (read, maintain, write, save the state), shared by the predicates it defines;
    so are ``mode``, ``seq``, ``stats`` (the engine's counters) and ``notes``."""

    pred: str
    rows: int
    inserted: int
    deleted: int
    input_versions: dict[str, int]
    edb_versions: dict[str, int]
    table_version: int
    seconds: float
    # "full" (a first load, or a change too large to maintain), "rebuilt" (a saved state
    # that could not be used was replaced by a load from the tables: ``rebuilt_because``
    # says why), "incremental", "unchanged", "rebuild" (the Spark rebuild job)
    mode: str = "full"
    rebuilt_because: str = ""
    seq: int = 0
    stats: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    state_bytes: int = 0
    lineage: str = ""  # markdown: a sample of this table's change (``lineage.run_sample``)


class _Unreconcilable(Exception):
    """The saved state cannot be reconciled with the tables; the message says why."""


class StratumRun:
    """One run of stratum ``index`` of ``spec`` over the warehouse at ``root``: call
    ``materialize()`` or ``rebuild()`` once. The saved engine state lives under
    ``state_root`` (default: ``_deltalog_state`` in the warehouse); the input versions it
    consumed make it rebuildable from the tables when it is lost.

    Raises ``DataError`` DL304 when an input table is missing, DL305 when another run of the
    stratum holds its lock for more than ``lock_wait`` seconds, DL3xx on bad input data."""

    def __init__(
        self,
        root: str | Path,
        spec: PipelineSpec,
        index: int,
        *,
        state_root: str | Path | None = None,
        lock_wait: float = LOCK_WAIT_SECONDS,
        spark: "SparkSession | None" = None,
        partitions: int = 1,
        broadcast_rows: int = BROADCAST_LIMIT,
    ):
        tune_malloc()
        self.root, self.spec, self.index, self.lock_wait = root, spec, index, lock_wait
        self.spark, self.partitions, self.broadcast_rows = spark, partitions, broadcast_rows
        self.preds = spec.program.strata[index].preds
        self.path = state_path(root, spec.name, index, state_root)
        self.state_root = state_root
        self.digest = stratum_digest(spec.program, index)
        self.notes: list[str] = []
        self.reader = InputReader(root, spec, index)
        self.writer = CommitWriter(root, spec, index, self.notes)
        self.start = time.perf_counter()
        self.state_bytes = 0  # bytes the last save wrote (segments and manifest)
        self.state_bytes_read = 0  # bytes of the saved state the run read before saving
        self.state_segments = 0  # live segments of the saved state
        self.opened: Reader | None = None  # the store the engine was opened from
        self.history: list[list[Any]] = []  # the saved state's record of earlier runs
        self.state_open_s = 0.0  # reading the saved state and loading the engine from it
        self.state_save_s = 0.0  # the engine's bytes and the state file written
        self.rebuilt_because = ""  # why an existing state was replaced by a full load
        # an interrupted run this one finished: what it wrote and the engine's counters
        self.finished: tuple[Written, dict[str, Any]] | None = None
        self.lineage: dict[str, str] = {}  # pred -> a sample of the run's change (markdown)
        self.partitioning = ""  # with partitions > 1: the plan, or why the stratum is single
        self.split = self._split() if partitions > 1 else None

    # -- the public entry points -------------------------------------------------------
    def materialize(self) -> list[StratumResult]:
        """Bring the stratum's IDB tables up to date with its inputs: incrementally from the
        saved engine state when there is one that agrees with the tables, else by a full
        load from the tables."""
        with stratum_lock(self.path, self.lock_wait):
            self.start = time.perf_counter()
            if self.split is not None:
                return self._partitioned(self.split)
            return self._materialize()

    def rebuild(self, spark: "SparkSession | None" = None) -> list[StratumResult]:
        """Rebuild the stratum's IDB tables from scratch (the backfill path).

        With ``spark``: recompute the stratum on Spark from its input tables (EDB and
        upstream IDB tables) at their current versions, drop the saved engine state, and make
        each IDB table equal the result in ONE commit per table with the same metadata and
        application transaction (at the next ``seq``) as an incremental run; a table that
        already equals it gets no commit (except a first, stamped commit to a table no run
        wrote yet). Results have mode ``"rebuild"``. The Python engine is not run: the next
        run reloads it from the rebuilt tables (mode ``"full"``) and commits nothing when it
        agrees with Spark. So a rebuild killed at any point converges on the next run.

        Without ``spark``: drop the state and reload it with the Python engine (mode
        ``"full"``; its load writes the tables' differences)."""
        with stratum_lock(self.path, self.lock_wait):
            self.start = time.perf_counter()
            if spark is not None:
                return self._spark_rebuild(spark)
            inputs, edbs = self.reader.snapshot()
            state = load_state(self.path)
            self.history = state.history if state is not None else []
            if drop_state(self.path):
                self._rebuilt("rebuild requested: saved state dropped")
            floor = state.seq if state is not None else 0
            if self.split is not None:
                return self._split_full(self.split, inputs, edbs, floor)
            return self._full_load(inputs, edbs, floor)

    def _rebuilt(self, why: str) -> None:
        """Say in the notes, and in the results' mode, that a saved state was replaced."""
        self.notes.append(why)
        self.rebuilt_because = why

    # -- the three ways a stratum runs -------------------------------------------------
    def _open_saved(self) -> tuple[dict[str, int], dict[str, int], StratumState | None, int]:
        """The inputs' and EDB tables' current versions, the saved state (None: none that
        reads) and its run number (0 without one)."""
        inputs, edbs = self.reader.snapshot()
        opened = time.perf_counter()
        state = load_state(self.path)
        self.state_open_s = time.perf_counter() - opened
        self.history = state.history if state is not None else []
        return inputs, edbs, state, state.seq if state is not None else 0

    def _materialize(self) -> list[StratumResult]:
        inputs, edbs, state, floor = self._open_saved()
        if state is None:
            if older_format(self.path) is not None:
                self._rebuilt(
                    "saved state in the whole-file format of an earlier deltalog: rebuilt "
                    "from the tables into the segment store (the old file removed)"
                )
            elif state_exists(self.path):
                self._rebuilt(
                    "saved state unreadable (another format, or corrupted: its manifest's "
                    "checksum or a segment's size does not match): rebuilt from the tables"
                )
            else:
                txns = self.writer.txns()
                runs = [t for t, _ in txns.values() if t is not None]
                last = {p: self.writer.commit_of_run(p, t) for p, (t, _) in txns.items() if t}
                if runs and all(c is not None and c.get(MODE) == "rebuild" for c in last.values()):
                    self.notes.append("loaded from the tables the Spark rebuild wrote")
                elif runs:
                    self._rebuilt(
                        f"no saved state at {self.path}, though run {max(runs)} committed to "
                        "the tables (a first run cut short before it saved one, or the "
                        "state was removed or is kept elsewhere): rebuilt from the tables"
                    )
            return self._full_load(inputs, edbs, floor)
        if state.extra.get("partitions"):
            self._rebuilt(f"the state was saved by a run with {state.extra['partitions']} "
                          "partitions, this run has one: reloaded from the tables")
            return self._full_load(inputs, edbs, floor)
        if state.digest != self.digest:
            self._rebuilt("the stratum's rules changed since the state was saved: rebuilt")
            return self._full_load(inputs, edbs, floor)
        moved = self._other_tables(state)
        if moved:
            self._rebuilt(
                f"{moved} is not the table the saved state was made from (another Delta "
                "table id): rebuilt from the tables"
            )
            return self._full_load(inputs, edbs, floor + 1)
        try:
            engine, state = self._reconcile(state)
            # A finished interrupted run may have moved the consumed versions.
            return self._step(engine, state, inputs, edbs)
        except _Unreconcilable as why:
            self._rebuilt(f"state and tables disagree ({why}): rebuilt from the tables")
            return self._full_load(inputs, edbs, floor + 1)
        except (CorruptSegment, StoreError) as err:
            # a page read on demand failed its checksum: whatever the run committed before
            # is compared with the full load's result (one commit of the difference, if any)
            self._rebuilt(f"saved state unreadable ({err}): rebuilt from the tables")
            return self._full_load(inputs, edbs, floor + 1)

    def _full_load(
        self, inputs: Mapping[str, int], edbs: Mapping[str, int], floor: int
    ) -> list[StratumResult]:
        """Load the engine from the input tables at ``inputs``; make each IDB table equal
        its result in one commit; save the state."""
        self.opened = None
        txns = self.writer.txns()
        seq = max([floor, *(t or 0 for t, _ in txns.values())]) + 1
        copies: Copies = {}
        given = {pred: self.reader.read_columns(pred, v, copies) for pred, v in inputs.items()}
        fault("after_read", self.index)
        engine = IncrementalEngine(stratum_program(self.spec.program, self.index), given)
        stats = engine.last_stats.as_dict()
        self.notes.extend(engine.slow_paths())
        out: dict[str, Delta] = {}  # changes made as rows
        tables: dict[str, tuple[pa.Table, pa.Table]] = {}  # changes made as tables
        sample: dict[str, Mapping[Row, int]] = {}  # every change, for the lineage sample
        whole: dict[str, pa.Table | None] = {}  # tables holding copies of a row: rewritten
        for pred in self.preds:
            uri = self.writer.uri(pred)
            exists = delta_io.exists(uri)
            table = self._whole_table(engine, pred)
            held = delta_io.read_arrow(uri) if exists else None
            if held is not None and delta_io.extra_copies(held):
                whole[pred] = table
            if table is None:  # the engine keeps the relation as rows
                current = arrow_to_rows(held) if held is not None else set()
                out[pred] = sample[pred] = diff(current, engine.relation(pred))
            elif held is not None:  # a rebuild: the difference with the table, by anti-joins
                added, gone = table_difference(table, held), table_difference(held, table)
                tables[pred] = (added, gone)
                sample[pred] = {**dict.fromkeys(arrow_to_rows(gone), -1),
                                **dict.fromkeys(arrow_to_rows(added), 1)}
            else:  # a new table: the whole relation, from the engine's columns
                tables[pred] = (table, table.slice(0, 0))
                sample[pred] = _AllInserted(engine.store[pred].rows)
        changes = {**self.writer.arrow_changes(out), **tables}  # (DL308 before any commit)
        relations = {p: t if t is not None else rows_to_arrow(self.spec.program.schemas[p],
                                                              engine.relation(p))
                     for p, t in whole.items()}
        written = self.writer.write(changes, seq, inputs, edbs, txns, stamp_new=True,
                                    whole=relations)
        self._save(engine, seq, inputs, edbs, written.txns, copies)
        self.lineage = run_sample(engine, sample)
        sizes = {p: engine.size(p) for p in self.preds}
        return self._results("full", seq, inputs, edbs, written, stats, sizes)

    def _whole_table(self, engine: IncrementalEngine, pred: str) -> "pa.Table | None":
        """Relation ``pred`` as an Arrow table straight from the engine's coded columns
        (a columnar stratum's: no row is made); None when the engine keeps it as rows, or
        it holds an int beyond 64 bits (the rows' path names the row in its error)."""
        cols = engine.coded_columns(pred)
        if cols is None:
            return None
        try:
            return columns_to_arrow(self.spec.program.schemas[pred], cols)
        except (OverflowError, pa.ArrowException):
            return None

    def _consumed_edbs(self, edbs: Mapping[str, int]) -> dict[str, int]:
        """The EDB versions this stratum's inputs stand for: an EDB input's own version, an
        IDB input's those its stratum's last run consumed. ``edbs`` (the EDB tables'
        current versions) where that is not known or the inputs disagree."""
        spec = self.spec
        out: dict[str, int] = {}
        for pred in spec.upstream(spec.program.strata[self.index]):
            if pred in edbs:
                known = {pred: int(edbs[pred])}
            else:
                upstream = load_state(state_path(self.root, spec.name, spec.stratum_of(pred),
                                                 self.state_root))
                if upstream is None:
                    return dict(edbs)
                known = {str(k): int(v) for k, v in upstream.edb_versions.items()}
            for table, version in known.items():
                if out.setdefault(table, version) != version:
                    return dict(edbs)
        return out if set(out) == set(edbs) else dict(edbs)

    def _step(
        self,
        engine: IncrementalEngine,
        state: StratumState,
        inputs: Mapping[str, int],
        edbs: Mapping[str, int],
    ) -> list[StratumResult]:
        """Maintain from the state's input versions to ``inputs``: one run, ``seq + 1``."""
        txns = {p: (state.written.get(p), state.table_versions.get(p, -1)) for p in self.preds}
        if dict(inputs) == state.input_versions:
            consumed = self._consumed_edbs(edbs)
            if consumed == state.edb_versions:
                sizes = {p: engine.size(p) for p in self.preds}
                if self.finished is not None:  # the run this one finished is its change
                    written, stats = self.finished
                    return self._results("incremental", state.seq, inputs, edbs, written,
                                         stats, sizes)
                unchanged = Written(txns, dict.fromkeys(self.preds, (0, 0)), 0, frozenset())
                return self._results("unchanged", state.seq, inputs, edbs, unchanged, {}, sizes)
            # The inputs are the same tables but stand for newer EDB versions (an upstream
            # change that cancelled out): a run with no change records them, for lineage.
            edbs = consumed
        copies = _copied(state.copies)
        deltas = self._changes(state.input_versions, inputs, copies, engine)
        if (said := self.reader.feed_note()) is not None:
            self.notes.append(said)
        self.reader.check_functional(engine, deltas, inputs)
        changed = sum(len(d) for d in deltas.values())
        size = sum(engine.size(p) for p in inputs)
        if changed >= RELOAD_MIN_ROWS and changed > RELOAD_SHARE * size:
            self.notes.append(
                f"the change ({changed} rows) is {changed / max(size, 1):.0%} of the inputs "
                f"({size} rows): the stratum was reloaded from the tables instead of maintained"
            )
            return self._full_load(inputs, edbs, state.seq)
        fault("after_read", self.index)
        out = engine.apply(deltas) if deltas else {}
        stats = engine.last_stats.as_dict() if deltas else {"edb_changes": 0}
        self.notes.extend(engine.slow_paths())
        seq = state.seq + 1
        written = self.writer.write(self.writer.arrow_changes(out), seq, inputs, edbs, txns)
        self._save(engine, seq, inputs, edbs, written.txns, copies)
        self.lineage = run_sample(engine, out)
        sizes = {p: engine.size(p) for p in self.preds}
        return self._results("incremental", seq, inputs, edbs, written, stats, sizes)

    # -- partitioned strata (Spark tasks) -------------------------------------------------
    def _split(self) -> SplitStratum | None:
        """The stratum split into ``partitions``, or None (said in the notes) when the
        planner finds no partitioning for it."""
        sub = stratum_program(self.spec.program, self.index)
        [stratum] = [s for s in sub.strata if s.rules]
        sizes = {}
        for pred in self.spec.upstream(self.spec.program.strata[self.index]):
            uri = self.reader.uri(pred)
            sizes[pred] = delta_io.row_count(uri) if delta_io.exists(uri) else 0
        plan = plan_partitioning(sub, stratum, sizes, self.broadcast_rows, self.partitions)
        self.partitioning = plan.describe()
        if plan.kind == "single":
            self.notes.append(f"ran in one process, not in {self.partitions} partitions: "
                              f"{plan.reason}")
            return None
        if self.spark is None:
            raise NotSupportedError(
                f"{self.partitions} partitions need a Spark session (the stratum is "
                f"{self.partitioning}); give one, or run with partitions = 1",
                self.spec.name)
        return split_stratum(sub, plan, self.partitions)

    def _split_digest(self, split: SplitStratum) -> str:
        text = f"{self.digest}\n{split.parts}\n{split.plan.describe()}"
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def _parts_folder(self, split: SplitStratum) -> Path:
        """Where the partitions keep their states: an absolute path, the same on every
        executor (a relative one would be taken from each executor's own directory)."""
        return self.path.with_name(f"{self.path.name}.parts").absolute() / str(split.parts)

    def _partitioned(self, split: SplitStratum) -> list[StratumResult]:
        inputs, edbs, state, floor = self._open_saved()
        digest = self._split_digest(split)
        if state is None:
            if state_exists(self.path):
                self._rebuilt("saved state unreadable: reloaded from the tables")
            return self._split_full(split, inputs, edbs, floor)
        if state.digest != digest:
            was = state.extra.get("partitions") or 1
            self._rebuilt(f"the state was saved by a run with {was} partition(s) or other "
                          f"rules; this run is {self.partitioning} in {split.parts} "
                          "partitions: reloaded from the tables")
            return self._split_full(split, inputs, edbs, floor)
        if state.extra.get("reload"):
            self._rebuilt(f"the last run stopped on bad input ({state.extra['reload']}): "
                          "reloaded from the tables")
            return self._split_full(split, inputs, edbs, floor + 1)
        moved = self._other_tables(state)
        if moved:
            self._rebuilt(f"{moved} is not the table the saved state was made from: rebuilt")
            return self._split_full(split, inputs, edbs, floor + 1)
        try:
            pending = state.extra.get("pending")
            finished = None
            if pending:  # a run that started its tasks and did not finish: the same change
                seq, p_inputs, p_edbs = int(pending[0]), pending[1], pending[2]
                finished = self._split_step(split, state, p_inputs, p_edbs, seq)
                self.notes.append(f"finished interrupted run {seq} (input versions "
                                  f"{versions_json(p_inputs)}) from the partitions' states")
                state = load_state(self.path)
                if state is None:
                    raise _Unreconcilable("the state just saved cannot be read")
            txns = self.writer.txns()
            for pred in self.preds:
                txn, version = txns[pred]
                expected = (state.written.get(pred), state.table_versions.get(pred, -1))
                if (txn, version) != expected and not (
                    txn == expected[0] and version > expected[1] >= 0
                    and delta_io.only_maintenance(self.writer.uri(pred), expected[1], version)
                ):
                    raise _Unreconcilable(
                        f"table '{pred}' is at version {version} with run {txn}, the saved "
                        f"state (run {state.seq}) expects version {expected[1]} with run "
                        f"{expected[0]}")
            if dict(inputs) == state.input_versions:
                consumed = self._consumed_edbs(edbs)
                if consumed == state.edb_versions:
                    if finished is not None:  # the run this one finished is its change
                        return [replace(r, notes=tuple(self.notes)) for r in finished]
                    unchanged = Written(txns, dict.fromkeys(self.preds, (0, 0)), 0,
                                        frozenset())
                    return self._results("unchanged", state.seq, inputs, edbs, unchanged,
                                         self._split_stats(split),
                                         state.extra.get("sizes", {}))
                edbs = consumed  # as in _step
            return self._split_step(split, state, inputs, edbs, state.seq + 1)
        except _Unreconcilable as why:
            self._rebuilt(f"state and tables disagree ({why}): rebuilt from the tables")
            return self._split_full(split, inputs, edbs, floor + 1)
        except PartitionFailed as failed:
            if OUT_OF_STEP not in failed.message:
                raise
            self._rebuilt(f"a partition's state is out of step ({failed.message}): "
                          "reloaded from the tables")
            return self._split_full(split, inputs, edbs, floor + 1)

    def _split_stats(self, split: SplitStratum, run: "SparkRun | None" = None) -> dict[str, Any]:
        stats: dict[str, Any] = {"partitioning": self.partitioning, "partitions": split.parts}
        if run is not None:
            stats.update(
                {k: v for k, v in run.stats.items() if k != "seconds"},
                shuffled_rows=run.shuffled_rows, shuffled_bytes=run.shuffled_bytes,
                partition_retries=run.retried,
                partition_seconds=round(float(run.stats.get("seconds", 0.0)), 3),
            )
        return stats

    def _job(self, split: SplitStratum, seq: int, inputs: Mapping[str, int], full: bool,
             before: StratumState | None = None,
             bags: frozenset[str] = frozenset()) -> PartitionJob:
        return PartitionJob(
            str(self._parts_folder(split)), self._split_digest(split), split.program,
            self.preds, seq, dict(inputs), full,
            before_seq=before.seq if before is not None else 0,
            before=dict(before.input_versions) if before is not None else None,
            lock_wait=self.lock_wait, fault=os.environ.get(FAULT_ENV, ""),
            sources={name: route.source for name, route in split.routes.items()},
            bags=bags, copies_max=inputs_module.COPIES_MAX,
        )

    def _on_spark(self, split: SplitStratum, job: PartitionJob, records: Any,
                  inputs: Mapping[str, int], load: bool = False) -> "SparkRun":
        from deltalog.pipelines.spark.maintain import run_on_spark

        assert self.spark is not None
        tables = ({p: (self.writer.ensure_table(p), self.spec.program.schemas[p])
                   for p in self.preds} if load else None)
        try:
            return run_on_spark(self.spark, split, job, records, tables)
        except DataError as err:
            route = split.routes.get(str(err.where))
            if err.code != FUNCTIONAL_CONFLICT or route is None:
                raise
            pred = route.source
            schema = self.spec.program.schemas[pred]
            raise quality.functional_error(schema, pred, self.writer.uri(pred), inputs[pred],
                                           err) from None

    def _split_full(self, split: SplitStratum, inputs: Mapping[str, int],
                    edbs: Mapping[str, int], floor: int) -> list[StratumResult]:
        """Load every partition from the input tables, read by the executors; make each
        IDB table equal the union of the partitions' results in one commit (the
        differences computed in Spark)."""
        from deltalog.pipelines.spark.maintain import bad_rows, table_records

        assert self.spark is not None
        txns = self.writer.txns()
        seq = max([floor, *(t or 0 for t, _ in txns.values())]) + 1
        folder = self._parts_folder(split)
        for other in folder.parent.glob("*") if folder.parent.is_dir() else ():
            if other != folder:  # the partitions of another number of partitions
                shutil.rmtree(other, ignore_errors=True)
        frames = {}
        for pred, version in inputs.items():
            uri = self.reader.uri(pred)
            schema = self.spec.program.schemas[pred]
            if pred in self.spec.edb_tables:
                self.reader.check_schema(pred, version)
            frames[pred] = delta_io.spark_dataframe(self.spark, uri, version).select(
                *[c.name for c in schema.columns])
            if pred in self.spec.edb_tables:
                sample = bad_rows(frames[pred], schema)
                if sample.num_rows:  # the input checks name the table, column and row
                    quality.check_table(schema, pred, uri, version, sample)
        fault("after_read", self.index)
        job = self._job(split, seq, inputs, full=True)
        # the partitions' relations are compared with the tables in Spark: only the
        # differences reach the driver
        run = self._on_spark(split, job, table_records(frames), inputs, load=True)
        written = self.writer.write(run.changes, seq, inputs, edbs, txns, stamp_new=True,
                                    whole=run.whole)
        self._save_driver(split, seq, inputs, edbs, written.txns, run.sizes,
                          run.copies_unknown)
        return self._results("full", seq, inputs, edbs, written, self._split_stats(split, run),
                             run.sizes)

    def _split_step(self, split: SplitStratum, state: StratumState, inputs: Mapping[str, int],
                    edbs: Mapping[str, int], seq: int) -> list[StratumResult]:
        """Run ``seq``: the inputs' change from the state's versions to ``inputs``, routed
        to the partitions; one commit per table (tables that already hold run ``seq`` are
        skipped: an interrupted run finished)."""
        txns = self.writer.txns()
        # The inputs' changes as their feeds' weights (O(change)): the partitions keep the
        # copies and tell a row's last copy apart themselves; a table too duplicated for
        # that in some partition comes as a set change, its deleted rows looked up.
        as_sets = set(state.extra.get("set_inputs", ()))
        try:
            deltas, bags = self.reader.bag_changes(
                state.input_versions, inputs, [p for p in inputs if p not in as_sets])
        except delta_io.HistoryLost as lost:
            raise _Unreconcilable(f"{lost.where}: {lost.message}") from None
        if (said := self.reader.feed_note()) is not None:
            self.notes.append(said)
        fault("after_read", self.index)
        state.extra["pending"] = [seq, dict(inputs), dict(edbs)]
        save_state(self.path, state)  # the run this state is in the middle of
        from deltalog.pipelines.spark.maintain import change_records

        try:
            run = self._on_spark(split, self._job(split, seq, inputs, False, state, bags),
                                 change_records(deltas), inputs)
        except DataError as err:
            # some partitions may have applied the change: the next run reloads
            state.extra.pop("pending")
            state.extra["reload"] = f"run {seq}: {err.code}"
            save_state(self.path, state)
            raise
        skip = frozenset(p for p in self.preds if txns[p][0] == seq)
        written = self.writer.write(self.writer.arrow_changes(run.out), seq, inputs, edbs,
                                    txns, skip=skip)
        self._save_driver(split, seq, inputs, edbs, written.txns, run.sizes,
                          as_sets | run.copies_unknown)
        stats = {**self._split_stats(split, run),
                 "edb_changes": sum(len(d) for d in deltas.values())}
        return self._results("incremental", seq, inputs, edbs, written, stats, run.sizes)

    def _save_driver(self, split: SplitStratum, seq: int, inputs: Mapping[str, int],
                     edbs: Mapping[str, int], txns: Txns, sizes: Mapping[str, int],
                     as_sets: Iterable[str]) -> None:
        """The driver's state: the run and versions every partition is at, no engine;
        ``as_sets``: the inputs whose changes go to the partitions as set changes."""
        state = StratumState(
            digest=self._split_digest(split), seq=seq, input_versions=dict(inputs),
            edb_versions=dict(edbs), written={p: txns[p][0] for p in self.preds},
            table_versions={p: txns[p][1] for p in self.preds},
            table_ids=self._table_ids([*inputs, *self.preds]),
            history=[*self.history, [seq, dict(edbs), dict(inputs),
                                     {p: txns[p][1] for p in self.preds}]],
            extra={"partitions": split.parts, "plan": self.partitioning,
                   "sizes": dict(sizes), "set_inputs": sorted(as_sets)},
        )
        self.history = state.history
        saved = save_state(self.path, state)
        self.state_bytes = saved["bytes_written"]
        fault("after_state", self.index)

    def _spark_rebuild(self, spark: "SparkSession") -> list[StratumResult]:
        from deltalog.pipelines.recompute import spark_differences

        inputs, edbs = self.reader.snapshot()
        state = load_state(self.path)
        txns = self.writer.txns()
        seq = max([state.seq if state is not None else 0, *(t or 0 for t, _ in txns.values())]) + 1
        started = time.perf_counter()
        tables = {pred: self.writer.ensure_table(pred) for pred in self.preds}
        changes, sizes, whole = spark_differences(spark, self.root, self.spec, inputs, tables)
        spark_seconds = time.perf_counter() - started
        fault("after_read", self.index)
        # Before any commit: a state that outlived a half-done rebuild would be reconciled
        # against tables it never produced.
        if drop_state(self.path):
            self.notes.append("rebuild on Spark: saved state dropped (the next run reloads it)")
        written = self.writer.write(
            changes, seq, inputs, edbs, txns, stamp_new=True, mode="rebuild", whole=whole
        )
        stats = {"spark_seconds": round(spark_seconds, 3)}
        # The run number of the tables' newest deltalog commits (this rebuild's when it wrote).
        return self._results("rebuild", seq if written.commits else seq - 1, inputs, edbs,
                             written, stats, sizes)

    # -- state ---------------------------------------------------------------------------
    def _table_ids(self, preds: Iterable[str]) -> dict[str, str]:
        """The Delta table id of each existing table of ``preds``."""
        out = {}
        for pred in preds:
            uri = self.writer.uri(pred)
            if delta_io.exists(uri):
                out[pred] = delta_io.table_id(uri)
        return out

    def _other_tables(self, state: StratumState) -> str | None:
        """The first table (as "input 'p'" or "table 'p'") whose id is not the one the
        state recorded; None when all are the same tables."""
        now = self._table_ids(state.table_ids)
        for pred, recorded in sorted(state.table_ids.items()):
            if pred in now and now[pred] != recorded:
                return f"{'table' if pred in self.preds else 'input'} '{pred}'"
        return None

    def _changes(
        self, old: Mapping[str, int], new: Mapping[str, int], copies: Copies,
        engine: IncrementalEngine,
    ) -> dict[str, Delta]:
        """The inputs' changes from ``old`` to ``new``, told from the change feeds and
        ``copies`` with the engine's relations as they were at ``old`` (``copies`` brought
        to ``new`` in place)."""
        for pred, version in new.items():
            if pred not in old:
                raise _Unreconcilable(f"input '{pred}' is not in the saved state")
            if version < old[pred]:
                raise _Unreconcilable(
                    f"input '{pred}' went back from version {old[pred]} to {version}"
                )
        try:
            return self.reader.changes(old, new, copies, engine.contains)
        except delta_io.HistoryLost as lost:
            raise _Unreconcilable(f"{lost.where}: {lost.message}") from None

    def _reconcile(self, state: StratumState) -> tuple[IncrementalEngine, StratumState]:
        """The engine of ``state``, with an interrupted run ``state.seq + 1`` finished when
        the tables show one; raises ``_Unreconcilable`` when the tables and the state
        disagree in any other way."""
        txns = self.writer.txns()
        pending = []
        for pred in self.preds:
            txn, version = txns[pred]
            expected = (state.written.get(pred), state.table_versions.get(pred, -1))
            if (txn, version) == expected:
                continue
            if (
                txn == expected[0]
                and version > expected[1] >= 0
                and delta_io.only_maintenance(self.writer.uri(pred), expected[1], version)
            ):  # compacted or vacuumed since the run: the same rows at a later version
                state.table_versions[pred] = version
                continue
            if txn == state.seq + 1:
                pending.append(pred)
                continue
            raise _Unreconcilable(
                f"table '{pred}' is at version {version} with run {txn}, the saved state "
                f"(run {state.seq}) expects version {expected[1]} with run {expected[0]}"
            )
        opened = time.perf_counter()
        try:
            self.opened = state.open()
            engine = IncrementalEngine.loads(self.opened.read(state.root), self.opened)
        except Exception as err:  # any state that does not load is rebuilt, said in the notes
            raise _Unreconcilable(
                f"the saved engine state cannot be read ({type(err).__name__}: {err})"
            ) from None
        self.state_open_s += time.perf_counter() - opened
        if not pending:
            return engine, state
        seq = state.seq + 1
        commits = {}
        for pred in pending:
            info = self.writer.commit_of_run(pred, seq)
            if info is None or int(info["version"]) != txns[pred][1]:
                raise _Unreconcilable(f"table '{pred}' has run {seq} but not as its newest commit")
            commits[pred] = info
        recorded = {(c[INPUT_VERSIONS], c[EDB_VERSIONS]) for c in commits.values()}
        if len(recorded) != 1:
            raise _Unreconcilable(f"the commits of run {seq} disagree on their input versions")
        [(inputs_json, edbs_json)] = recorded
        inputs, edbs = versions_of(inputs_json), versions_of(edbs_json)
        copies = _copied(state.copies)
        out = engine.apply(self._changes(state.input_versions, inputs, copies, engine))
        for pred in pending:
            version = txns[pred][1]
            table_change = delta_io.changes(self.writer.uri(pred), version - 1, version)
            if table_change != out.get(pred, {}):
                raise _Unreconcilable(
                    f"the commit of run {seq} to '{pred}' is not the change replayed"
                )
        written = self.writer.write(
            self.writer.arrow_changes(out), seq, inputs, edbs, txns, skip=frozenset(pending)
        )
        self.finished = (written, engine.last_stats.as_dict())
        self.notes.append(
            f"finished interrupted run {seq} (committed to {', '.join(pending)} at input "
            f"versions {versions_json(inputs)}) from the saved state"
        )
        state = self._save(engine, seq, inputs, edbs, written.txns, copies)
        # On from the state just saved: the next save writes what changes after it.
        self.opened = state.open()
        return IncrementalEngine.loads(self.opened.read(state.root), self.opened), state

    def _save(
        self,
        engine: IncrementalEngine,
        seq: int,
        inputs: Mapping[str, int],
        edbs: Mapping[str, int],
        txns: Txns,
        copies: Copies,
    ) -> StratumState:
        saving = time.perf_counter()
        state = StratumState(
            digest=self.digest,
            seq=seq,
            input_versions=dict(inputs),
            edb_versions=dict(edbs),
            written={p: txns[p][0] for p in self.preds},
            table_versions={p: txns[p][1] for p in self.preds},
            table_ids=self._table_ids([*inputs, *self.preds]),
            history=[*self.history, [seq, dict(edbs), dict(inputs),
                                     {p: txns[p][1] for p in self.preds}]],
            copies=copies,
        )
        self.history = state.history
        if self.opened is not None:
            self.state_bytes_read += self.opened.bytes_touched()
        saved = save_state(self.path, state, engine.dumps, self.opened, self.index)
        self.opened = None  # its segments may be gone: the engine now stands for `state`
        self.state_bytes = saved["bytes_written"]
        self.state_segments = saved["segments"]
        self.state_save_s = time.perf_counter() - saving
        fault("after_state", self.index)
        return state

    def _results(
        self,
        mode: str,
        seq: int,
        inputs: Mapping[str, int],
        edbs: Mapping[str, int],
        written: Written,
        stats: Mapping[str, Any],
        sizes: Mapping[str, int],
    ) -> list[StratumResult]:
        """One result per predicate; ``sizes`` are the rows each table holds after the run
        (the engine's relation, or the Spark result), so no table is scanned to count them.
        A table that took another change than the engine's (said in the notes) is counted
        from its Delta log instead."""
        seconds = time.perf_counter() - self.start
        if mode == "full" and self.rebuilt_because:
            mode = "rebuilt"
        stats = {
            **({"partitioning": self.partitioning} if self.partitioning else {}),
            **stats,
            "idb_inserted": sum(i for i, _ in written.counts.values()),
            "idb_erased": sum(d for _, d in written.counts.values()),
            "state_bytes_written": self.state_bytes,
            "state_bytes_read": self.state_bytes_read,
            "state_segments": self.state_segments,
            "state_open_s": round(self.state_open_s, 4),
            "state_save_s": round(self.state_save_s, 4),
        }
        out = []
        for pred in self.preds:
            uri = self.writer.uri(pred)
            version = written.txns[pred][1]
            if version < 0:
                version = delta_io.table_version(uri)
            ins, dels = written.counts[pred]
            rows = sizes[pred]
            if pred in written.diverged:
                rows = delta_io.row_count(uri, version)
            out.append(
                StratumResult(
                    pred,
                    rows,
                    ins,
                    dels,
                    dict(inputs),
                    dict(edbs),
                    version,
                    seconds,
                    mode=mode,
                    rebuilt_because=self.rebuilt_because if mode == "rebuilt" else "",
                    seq=seq,
                    stats=stats,
                    notes=tuple(self.notes),
                    state_bytes=self.state_bytes,
                    lineage=self.lineage.get(pred, ""),
                )
            )
        return out


def _copied(copies: Copies) -> Copies:
    """A copy of a saved state's ``copies`` for the next state (the saved one untouched)."""
    return {pred: None if rows is None else dict(rows) for pred, rows in copies.items()}
