"""The engine's stateful API: load a program and EDB data once, then ``apply`` EDB deltas
as often as needed and get the IDB deltas back.

``MaintenanceEngine`` is the protocol every evaluation strategy implements; this module has
the ``recompute`` strategy (evaluate from scratch, then diff), the oracle for the others.
"""

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from engine.analysis.check import AnalyzedProgram
from engine.errors import NOT_SUPPORTED, NotSupportedError
from engine.evaluate import Evaluator
from engine.heads import Row
from engine.join.trie import JoinStats
from engine.semantics import coerce

# A delta: rows with weights, +1 inserted and -1 erased (a Z-set over a set relation).
Delta = dict[Row, int]


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

    def __init__(self, prog: AnalyzedProgram, edb: Mapping[str, Iterable[Row]]):
        self.prog = prog
        self.edb: dict[str, set[Row]] = {name: set() for name in prog.edb}
        for name, rows in edb.items():
            self.edb[name] = self._coerced(name, rows)
        self.last_stats = CommitStats()
        self.idb = self._evaluate(JoinStats())

    def _coerced(self, name: str, rows: Iterable[Row]) -> set[Row]:
        cols = self.prog.schemas[name].columns
        return {tuple(coerce(v, c.type) for v, c in zip(r, cols, strict=True)) for r in rows}

    def _evaluate(self, stats: JoinStats) -> dict[str, frozenset[Row]]:
        ev = Evaluator(self.prog)
        ev.stats = stats
        return ev.run(self.edb)

    def relation(self, name: str) -> frozenset[Row]:
        if name in self.idb:
            return self.idb[name]
        if name in self.edb:
            return frozenset(self.edb[name])
        raise KeyError(name)

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
        cols = self.prog.schemas[name].columns
        return tuple(coerce(v, c.type) for v, c in zip(row, cols, strict=True))


STRATEGIES = ("recompute",)


def make_engine(
    prog: AnalyzedProgram, edb: Mapping[str, Iterable[Row]], strategy: str = "recompute"
) -> MaintenanceEngine:
    if strategy == "recompute":
        return RecomputeEngine(prog, edb)
    raise NotSupportedError(
        f"strategy '{strategy}' is not supported (available: {', '.join(STRATEGIES)})",
        None,
        NOT_SUPPORTED,
    )
