"""The engine's stateful API: load a program and EDB data once, then ``apply`` EDB deltas
as often as needed and get the IDB deltas back.

``MaintenanceEngine`` is the protocol every evaluation strategy implements; this module has
the ``recompute`` strategy (evaluate from scratch, then diff), the oracle for the others.
"""

import gc
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from numpy.typing import NDArray

from deltalog.engine import state_codec
from deltalog.engine.analysis.program import AnalyzedProgram, Stratum
from deltalog.engine.columnar.evaluate import Columns
from deltalog.engine.errors import (
    NOT_SUPPORTED,
    DeltalogError,
    NotSupportedError,
)
from deltalog.engine.evaluate import evaluate
from deltalog.engine.heads import check_functional, functional_conflict
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.segments import SegmentSink, SegmentSource
from deltalog.engine.semantics import coerce_row
from deltalog.engine.storage import (
    CodedRows,
    Delta,
    RelationStore,
    StratumMaintainer,
)
from deltalog.engine.values import Row


@dataclass
class CommitStats:
    """What one ``apply`` did: sizes in and out, work counters, time."""

    edb_changes: int = 0
    idb_inserted: int = 0
    idb_erased: int = 0
    work: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "edb_changes": self.edb_changes,
            "idb_inserted": self.idb_inserted,
            "idb_erased": self.idb_erased,
            **self.work,
            "seconds": round(self.seconds, 6),
        }


class MaintenanceEngine(Protocol):
    """Load once, then apply changes; relations are sets (weights are +1/-1 changes)."""

    strategy: str
    last_stats: CommitStats

    def relation(self, name: str) -> frozenset[Row]: ...

    def contains(self, name: str, row: Row) -> bool: ...

    def apply(self, edb_deltas: Mapping[str, Delta]) -> dict[str, Delta]: ...


def diff(old: Iterable[Row], new: Iterable[Row]) -> Delta:
    """The delta that takes set ``old`` to set ``new``."""
    old_s, new_s = set(old), set(new)
    out: Delta = dict.fromkeys(new_s - old_s, 1)
    out.update(dict.fromkeys(old_s - new_s, -1))
    return out


def apply_delta(rows: set[Row], delta: Mapping[Row, int]) -> set[Row]:
    """Apply a delta to a set with set semantics: inserting a present row or erasing an
    absent one changes nothing."""
    out = set(rows)
    for row, w in delta.items():
        if w > 0:
            out.add(row)
        elif w < 0:
            out.discard(row)
    return out


class RecomputeEngine:
    """Evaluate from scratch after every change and diff against the previous result."""

    strategy = "recompute"

    def __init__(self, prog: AnalyzedProgram, edb: Mapping[str, Iterable[Row] | Columns]):
        self.prog = prog
        self.edb: dict[str, set[Row]] = {name: set() for name in prog.edb}
        for name, rows in edb.items():
            if isinstance(rows, Columns) and name in prog.schemas:
                rows.check(name, prog.schemas[name].arity)
            self.edb[name] = self._coerced(
                name, rows.rows() if isinstance(rows, Columns) else rows)
        self.last_stats = CommitStats()
        self.idb = self._evaluate(JoinStats())

    def _coerced(self, name: str, rows: Iterable[Row]) -> set[Row]:
        return {self._one(name, r) for r in rows}

    def _evaluate(self, stats: JoinStats) -> dict[str, frozenset[Row]]:
        return evaluate(self.prog, self.edb, stats=stats)

    def relation(self, name: str) -> frozenset[Row]:
        if name in self.idb:
            return self.idb[name]
        if name in self.edb:  # (the input's rows and the program's facts)
            return frozenset(self.edb[name] | self.prog.facts.get(name, frozenset()))
        raise KeyError(name)

    def contains(self, name: str, row: Row) -> bool:
        return self._one(name, row) in self.relation(name)

    def apply(self, edb_deltas: Mapping[str, Delta]) -> dict[str, Delta]:
        start = time.perf_counter()
        changes = 0
        new_edb = dict(self.edb)
        for name, delta in edb_deltas.items():
            if name not in self.edb:
                raise NotSupportedError(
                    f"'{name}' is not an EDB predicate of the program", name, NOT_SUPPORTED
                )
            before = self.edb[name]
            after = apply_delta(before, {self._one(name, r): w for r, w in delta.items()})
            changes += len(before ^ after)
            new_edb[name] = after
        stats = JoinStats()
        old_idb = self.idb
        self.edb = new_edb
        self.idb = self._evaluate(stats)
        out = {name: diff(old_idb[name], self.idb[name]) for name in self.prog.idb}
        out = {name: d for name, d in out.items() if d}
        self.last_stats = CommitStats(
            edb_changes=changes,
            idb_inserted=sum(1 for d in out.values() for w in d.values() if w > 0),
            idb_erased=sum(1 for d in out.values() for w in d.values() if w < 0),
            work=stats.as_dict(),
            seconds=time.perf_counter() - start,
        )
        return out

    def _one(self, name: str, row: Row) -> Row:
        return coerce_row(self.prog.schemas[name], row)


STRATEGIES = ("auto", "sensitivity", "dbsp", "recompute")


def _maintainer(prog: AnalyzedProgram, stratum: Stratum, strategy: str,
                columnar: bool = True, coding: Any = None) -> StratumMaintainer:
    """The maintainer of ``stratum`` under ``strategy``. ``auto`` maintains a recursive
    stratum the DBSP way, and a non-recursive one too when it qualifies for the columnar
    kernel (its delta queries cost less than recording and stabbing intervals, and keep
    less), else by sensitivity indices. DBSP strata of the graph shape
    (``deltalog.engine.dbsp.columnar.columnar_reason``) run on the columnar kernel, and
    sensitivity strata record their first evaluation on the compiled join
    (``deltalog.engine.ivm.compiled``), unless ``columnar`` is off; both ways compute the
    same thing (differential tests). A non-recursive stratum of one aggregate rule per
    predicate is kept on arrays (``deltalog.engine.dbsp.aggregates``) under auto and dbsp
    when its assignments are columnar. A columnar stratum's aggregate rules read lower
    strata only: the maintainer of a non-recursive stratum of their own keeps them
    (``bridged_aggregates``: one name per rule where a predicate has several)."""
    from deltalog.engine.dbsp.columnar import (
        ColumnarStratum,
        bridged_aggregates,
        columnar_reason,
    )

    if columnar and strategy in ("auto", "dbsp") and not stratum.recursive:
        from deltalog.engine.dbsp.aggregates import ColumnarAggregates, aggregates_reason

        if aggregates_reason(prog, stratum) is None:
            return ColumnarAggregates(prog, stratum, coding)
    use_dbsp = strategy == "dbsp" or (strategy == "auto" and (stratum.recursive or (
        columnar and columnar_reason(prog, stratum) is None)))
    if not use_dbsp:
        from deltalog.engine.ivm.stratum import SensitivityStratum

        return SensitivityStratum(prog, stratum, compiled=columnar, coding=coding)
    from deltalog.engine.dbsp.stratum import DbspStratum

    if columnar and columnar_reason(prog, stratum) is None:
        aggregates = bridged_aggregates(prog, stratum)  # (they read lower strata only)
        return ColumnarStratum(prog, stratum, None if aggregates is None else _maintainer(
            *aggregates, strategy, columnar, coding), coding)
    return DbspStratum(prog, stratum)


class IncrementalEngine:
    """Load once, then ``apply`` EDB deltas: every stratum maintained by its strategy,
    strata in order, each seeing the effective deltas of the strata below it."""

    def __init__(
        self,
        prog: AnalyzedProgram,
        edb: Mapping[str, Iterable[Row] | Columns],
        strategy: str = "auto",
        columnar: bool = True,
    ):
        """``edb``: each input's rows, or its columns (``Columns``: numpy arrays or
        ``Dictionary`` columns, as read from Arrow), which are coded as they are, never
        made Python rows (a relation of int, float and string columns that is not
        functional; any other is read as rows)."""
        self.prog = prog
        self.strategy = strategy
        self.columnar = columnar
        start = time.perf_counter()
        from deltalog.engine.dbsp.columnar import SharedCoding

        # (the codes the columnar strata and the inputs loaded by column share)
        coding = SharedCoding()
        self.store = RelationStore({name: s.arity for name, s in prog.schemas.items()})
        for name in prog.edb:
            given = edb.get(name, ())
            if isinstance(given, Columns) and self._as_columns(name, given):
                self.store[name].load(self._coded(name, given, coding))
                continue
            rows = self._coerced(name, given.rows() if isinstance(given, Columns) else given)
            rows.update(prog.facts.get(name, ()))
            check_functional(prog.schemas[name], rows)
            self.store[name].load(rows)
        for name in edb:
            if name not in self.store or name in prog.idb:
                raise NotSupportedError(
                    f"'{name}' is not an EDB predicate of the program", name, NOT_SUPPORTED
                )
        self.store.settle()
        self.strata: list[tuple[Stratum, StratumMaintainer]] = []
        work: dict[str, int] = {}
        for stratum in prog.strata:
            m = _maintainer(prog, stratum, strategy, columnar, coding)
            for pred, held in m.initialize(self.store).items():
                self.store[pred].load(held if type(held) in (set, CodedRows) else set(held))
            self.store.settle()
            _add_work(work, m.work)
            self.strata.append((stratum, m))
        self.last_stats = CommitStats(work=work, seconds=time.perf_counter() - start)
        self._broken: str | None = None
        # The loaded state (relations, indices, counts: millions of small objects) lives
        # as long as the engine. Moved out of the cyclic collector's generations, a full
        # collection no longer walks it: otherwise one can stall a small commit for a
        # second. (Process-wide; objects alive now are never collected as cycles.)
        gc.freeze()

    def slow_paths(self) -> list[str]:
        """One line per stratum, or rule, maintained off the compiled core, saying why:
        aggregate rules kept per group in Python objects, a stratum on the
        tuple-at-a-time DBSP kernel, a rule whose sensitivity intervals the tuple join
        recorded or whose commits run on it (all right, and slower)."""
        from deltalog.engine.dbsp.aggregates import ColumnarAggregates, aggregates_reason
        from deltalog.engine.dbsp.columnar import (
            ColumnarStratum,
            aggregate_rules,
            bridged_aggregates,
            columnar_reason,
        )
        from deltalog.engine.dbsp.stratum import DbspStratum
        from deltalog.engine.ivm.stratum import SensitivityStratum

        out = []
        every: list[tuple[Stratum, StratumMaintainer]] = []
        for stratum, m in self.strata:  # (a columnar stratum's aggregate rules: their own)
            every.append((stratum, m))
            if isinstance(m, ColumnarStratum) and m.aggregates is not None:
                rules = aggregate_rules(stratum)
                assert rules is not None
                every.append((rules, m.aggregates))
        for stratum, m in every:
            names = ", ".join(stratum.preds)
            if (self.strategy in ("auto", "dbsp") and not stratum.recursive
                    and not isinstance(m, ColumnarAggregates | ColumnarStratum)
                    and aggregate_rules(stratum) is not None
                    and not (isinstance(m, SensitivityStratum) and all(
                        h.arrays is not None for h in m.heads
                        if h.maintainer.rule.aggregate is not None))):
                bridged = bridged_aggregates(self.prog, stratum)
                assert bridged is not None
                why = (aggregates_reason(*bridged) if self.columnar else
                       "the columnar kernel is off") or (
                    "a state saved before they were kept on arrays")
                out.append(f"{names}: aggregate rules kept per group in Python objects ({why})")
            if isinstance(m, DbspStratum):
                why = (columnar_reason(self.prog, stratum) if self.columnar else None) or (
                    "the columnar kernel is off")
                out.append(f"{names}: maintained by the tuple-at-a-time DBSP kernel ({why})")
            elif isinstance(m, SensitivityStratum):
                for pred in m.preds:  # (an aggregate's under auto and dbsp: said above)
                    kept = m.mapping_reason(pred)
                    if kept is not None and (self.strategy == "sensitivity"
                                             or not kept.startswith("an aggregate's")):
                        out.append(f"{pred}: support counts kept in Python objects ({kept})")
                for head in m.heads:
                    rule = head.maintainer
                    by = rule.recorded_by
                    if by != "compiled":
                        why = by.removeprefix("tuples: ") if by != "tuples" else (
                            "the compiled join is off")
                        out.append(f"{names}: rule at {rule.rule.loc} recorded its "
                                   f"sensitivity intervals on the tuple join ({why})")
                        continue
                    commit = rule.commit_join(self.prog, self.store)
                    if isinstance(commit, str):
                        why = commit.removeprefix("tuples: ")
                    else:
                        refused = sorted({p for p, perm in commit.relations()
                                          if self.store[p].coded_refused(perm)})
                        if not refused:
                            continue
                        why = f"a value with no 64-bit code in {', '.join(refused)}"
                    out.append(f"{names}: rule at {rule.rule.loc} commits on the tuple "
                               f"join ({why})")
        return out

    def relation(self, name: str) -> frozenset[Row]:
        return frozenset(self.store[name].rows)

    def coded_columns(self, name: str) -> "list[NDArray[Any]] | None":
        """Relation ``name`` by column (int64, float64 or str-object arrays, rows in no
        particular order) when the engine keeps it coded (a columnar stratum's), without
        making its rows; None when it keeps it as rows."""
        held = self.store[name].rows
        return held.columns() if type(held) is CodedRows else None

    def size(self, name: str) -> int:
        """The number of rows of relation ``name`` (current version)."""
        return len(self.store[name])

    def contains(self, name: str, row: Row) -> bool:
        return self._one(name, row) in self.store[name]

    columnar = True  # (a state saved before the attribute: the default)

    # -- state -------------------------------------------------------------------------
    STATE_FORMAT = 15  # 2: exact sums hold finite summands only; 3: MessagePack, no pickle;
    # 4: comparisons and assignments on the columnar kernel; 5: segments (sorted runs,
    # arrays); 6: the columnar kernel's hash index and commit arrays saved; 7: support
    # counts and functional heads of sensitivity strata as paged maps; 8: classes named
    # in the deltalog.engine package; 9: negations (and floats, string order) on the
    # columnar DBSP kernel, sensitivity intervals as coded arrays; 10: rows of any arity on
    # the columnar DBSP kernel (layouts and pair codes); 11: a nursery of young facts;
    # 12: a non-recursive columnar stratum keeps sorted keys and a count per fact; 13: a
    # variable joining int and float columns on the columnar DBSP kernel (``uncast``);
    # 14: a sensitivity index of negations probed alike keeps a part per layout (others);
    # 15: coded indexes of string columns, by the store's dictionary of string codes

    def dumps(self, sink: SegmentSink | None = None) -> bytes:
        """The engine state (relations, support counts, sensitivity indices, aggregate and
        DBSP state) as bytes, for a store outside the engine to keep. With a ``sink`` (a
        segment store), large relations and arrays go to segments of their own, and of
        those opened from the store only what changed since is written: the bytes
        returned are the root that names them. Without, a whole snapshot (an in-memory
        copy)."""
        if self._broken is not None:
            raise NotSupportedError(
                f"refusing to save an engine that stopped at an error ({self._broken})",
                None,
                NOT_SUPPORTED,
            )
        return state_codec.dumps((self.STATE_FORMAT, self), sink)

    @classmethod
    def loads(
        cls, blob: bytes | memoryview, source: SegmentSource | None = None
    ) -> "IncrementalEngine":
        """An engine saved by ``dumps`` (with its segments read from ``source`` when it was
        saved to a segment store: mapped, read a page at a time as the engine touches
        them), read by ``deltalog.engine.state_codec``, which reads data
        only: it builds engine classes from their saved state and never calls a name the
        bytes give (a state naming anything else raises ``state_codec.UnsafeState``). The
        cyclic
        garbage collector is paused while the millions of small objects are created: each
        generation-0 pass would otherwise walk the young ones again (up to 3x the load
        time of a sensitivity-index state, bench.state_io)."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            fmt, engine = state_codec.loads(blob, source)
        finally:
            if enabled:
                gc.enable()
        if fmt != cls.STATE_FORMAT or not isinstance(engine, cls):
            raise NotSupportedError(
                f"engine state format {fmt!r} is not supported (expected "
                f"{cls.STATE_FORMAT}); rebuild the state from the tables",
                None,
                NOT_SUPPORTED,
            )
        gc.freeze()
        return engine

    def _as_columns(self, name: str, given: Columns) -> bool:
        """Whether input ``name`` given by column is kept as coded rows."""
        schema = self.prog.schemas[name]
        given.check(name, schema.arity)
        return bool(schema.arity) and not schema.functional and all(
            c.type in ("int", "float", "string") for c in schema.columns)

    def _coded(self, name: str, given: Columns, coding: Any) -> CodedRows:
        """The rows of input ``name``, given by column, and its facts, as coded rows (in
        ``coding``, the columnar strata's)."""
        from deltalog.engine.dbsp.columnar import coded_columns

        schema = self.prog.schemas[name]
        held = coded_columns([c.type for c in schema.columns], given.columns, coding)
        facts = [coerce_row(schema, r) for r in self.prog.facts.get(name, ())]
        if facts:
            held.update(r for r, h in zip(facts, held.contains_all(facts).tolist(),
                                          strict=True) if not h)
        return held

    def _one(self, name: str, row: Row) -> Row:
        return coerce_row(self.prog.schemas[name], row)

    def _coerced(self, name: str, rows: Iterable[Row]) -> set[Row]:
        """The rows of a load as the relation stores them: coercion only changes ints in
        float columns, so a relation without one takes its rows as they are (tuples)."""
        schema = self.prog.schemas[name]
        if any(c.type == "float" for c in schema.columns):
            return {self._one(name, r) for r in rows}
        # (a set of tuples, as the pipeline reads a table, is copied without hashing its
        # rows again; each pass below runs in C)
        out = set(rows) if type(rows) in (set, frozenset) and set(map(type, rows)) <= {
            tuple} else set(map(tuple, rows))
        arity = schema.arity
        if out and set(map(len, out)) != {arity}:
            bad = next(r for r in out if len(r) != arity)
            raise ValueError(f"a row of {len(bad)} values for {name}, of arity {arity}")
        return out

    def apply(self, edb_deltas: Mapping[str, Delta]) -> dict[str, Delta]:
        if self._broken is not None:
            raise NotSupportedError(
                f"this engine stopped at an earlier error ({self._broken}); load it again",
                None,
                NOT_SUPPORTED,
            )
        start = time.perf_counter()
        prepared = self._prepare(edb_deltas)
        changes = 0
        for name, delta in prepared.items():
            changes += len(self.store[name].commit(delta))
        work: dict[str, int] = {}
        out: dict[str, Delta] = {}
        try:
            for stratum, m in self.strata:
                deltas = {}
                for p in stratum.preds:
                    for name in self.prog.dependencies.get(p, ()):
                        d = self.store[name].delta()
                        if d and name not in stratum.preds:
                            deltas[name] = d
                if not deltas:
                    continue
                result = m.apply(self.store, deltas)
                _add_work(work, m.work)
                for pred, d in result.items():
                    effective = self.store[pred].commit(d)
                    if effective:
                        out[pred] = effective
        except DeltalogError as exc:
            self._broken = str(exc)
            raise
        finally:
            self.store.settle()
        self.last_stats = CommitStats(
            edb_changes=changes,
            idb_inserted=sum(1 for d in out.values() for w in d.values() if w > 0),
            idb_erased=sum(1 for d in out.values() for w in d.values() if w < 0),
            work=work,
            seconds=time.perf_counter() - start,
        )
        return out

    def check_edb(self, edb_deltas: Mapping[str, Delta]) -> None:
        """Raise the error ``apply`` would raise on ``edb_deltas`` before it changes
        anything (an unknown predicate, a second value for a functional key); change
        nothing."""
        self._prepare(edb_deltas)

    def _prepare(self, edb_deltas: Mapping[str, Delta]) -> dict[str, Delta]:
        prepared: dict[str, Delta] = {}
        for name, delta in edb_deltas.items():
            if name not in self.prog.edb:
                raise NotSupportedError(
                    f"'{name}' is not an EDB predicate of the program", name, NOT_SUPPORTED
                )
            # a row the program states as a fact stays whatever the input says (the
            # relation is the input's rows and the program's facts, as in a recompute)
            facts = self.prog.facts.get(name, frozenset())
            rows = {self._one(name, r): w for r, w in delta.items() if w}
            prepared[name] = {r: w for r, w in rows.items() if w > 0 or r not in facts}
            self._check_functional_edb(name, prepared[name])
        return prepared

    def _check_functional_edb(self, name: str, delta: Mapping[Row, int]) -> None:
        """A second value for a key of a functional EDB relation is an error, before any
        change is applied."""
        schema = self.prog.schemas[name]
        if not schema.functional:
            return
        k = schema.key_arity
        rel = self.store[name]
        erased = {r for r, w in delta.items() if w < 0}
        seen: dict[Row, Row] = {}
        for row in sorted(r for r, w in delta.items() if w > 0):
            other = seen.setdefault(row[:k], row)
            if other == row:
                cur = rel.current().ceil(row[:k])
                if cur is not None and cur[:k] == row[:k] and cur != row and cur not in erased:
                    other = cur
            if other != row:
                raise functional_conflict(name, other, row)


def _add_work(total: dict[str, int], work: Mapping[str, int]) -> None:
    for k, v in work.items():
        total[k] = total.get(k, 0) + v


def make_engine(
    prog: AnalyzedProgram, edb: Mapping[str, Iterable[Row]], strategy: str = "auto"
) -> MaintenanceEngine:
    if strategy == "recompute":
        return RecomputeEngine(prog, edb)
    if strategy in STRATEGIES:
        return IncrementalEngine(prog, edb, strategy)
    raise NotSupportedError(
        f"strategy '{strategy}' is not supported (available: {', '.join(STRATEGIES)})",
        None,
        NOT_SUPPORTED,
    )


def warm() -> None:
    """Compile (or load from numba's cache) the kernels most programs use: evaluation
    from scratch (``deltalog.engine.columnar.evaluate.warm``), and a sensitivity load,
    commits and a save (the recording join, the commit join, the array parts' stabs and
    merges); the DBSP kernels of recursive strata (the generic steps and a linear
    closure's loop); and aggregate rules on arrays. Setup calls it, so that a user's
    first run does not compile."""
    from deltalog.engine.analysis.analyze import load_program
    from deltalog.engine.columnar.evaluate import warm as warm_evaluation
    from deltalog.engine.dbsp import kernels as dbsp_kernels
    from deltalog.engine.dbsp import linear

    warm_evaluation()
    dbsp_kernels.warm()
    linear.warm()
    prog = load_program(".decl e(x: int, y: int)\n"
                        "t(x, y, z) :- e(x, y), e(y, z), e(x, z), x < y.", "<warm>")
    big = 2**40  # (and intervals of codes beyond int32, kept as int64: a second variant)
    for nodes in ((0, 1, 2, 3), (0, big, 2 * big, 3 * big)):
        a, b, c, d = nodes
        engine = IncrementalEngine(prog, {"e": [(a, b), (b, c), (a, c), (c, d)]},
                                   "sensitivity")
        engine.apply({"e": {(b, d): 1, (a, b): -1}})
        engine.apply({"e": {(b, d): -1, (a, b): 1}})
        engine.dumps()  # (a save makes parts of what the commits recorded, repeats dropped)
    # aggregate rules on arrays (``deltalog.engine.dbsp.aggregates``: 128-bit sums)
    prog = load_program(".decl e(x: int, y: int)\n"
                        "s[x] = n <- agg<<n = sum(y)>> e(x, y).\n"
                        "m[x] = n <- agg<<n = max(y)>> e(x, y).", "<warm>")
    engine = IncrementalEngine(prog, {"e": [(0, 1), (0, 2), (1, 5)]})
    engine.apply({"e": {(0, 3): 1, (1, 5): -1}})
