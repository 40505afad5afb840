"""Test-only composer: every stratum of a program maintained by ``DbspStratum``, exactly
as the runtime composes strata (store with every relation, EDB loaded, ``initialize``
stratum by stratum with commits, then per commit: EDB deltas committed, ``apply``
stratum by stratum with commits, ``store.settle()`` at the end)."""

from collections.abc import Iterable, Mapping

from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.dbsp.stratum import DbspStratum
from deltalog.engine.heads import check_functional
from deltalog.engine.semantics import coerce
from deltalog.engine.storage import Delta, RelationStore
from deltalog.engine.values import Row


class DbspComposer:
    def __init__(self, prog: AnalyzedProgram, edb: Mapping[str, Iterable[Row]]):
        self.prog = prog
        self.store = RelationStore({n: s.arity for n, s in prog.schemas.items()})
        for name in prog.edb:
            rows = set(prog.facts.get(name, ())) | {self._one(name, r) for r in edb.get(name, ())}
            check_functional(prog.schemas[name], rows)
            self.store[name].commit(dict.fromkeys(rows, 1))
        self.store.settle()
        self.strata = []
        self.work: list[dict[str, int]] = []
        for stratum in prog.strata:
            m = DbspStratum(prog, stratum)
            for pred, rows in m.initialize(self.store).items():
                self.store[pred].commit(dict.fromkeys(rows, 1))
            self.store.settle()
            self.strata.append((stratum, m))
            self.work.append(m.work)

    def _one(self, name: str, row: Row) -> Row:
        cols = self.prog.schemas[name].columns
        return tuple(coerce(v, c.type) for v, c in zip(row, cols, strict=True))

    def relation(self, name: str) -> frozenset[Row]:
        return frozenset(self.store[name].rows)

    def apply(self, edb_deltas: Mapping[str, Delta]) -> dict[str, Delta]:
        out: dict[str, Delta] = {}
        self.work = []
        for name, delta in edb_deltas.items():
            self.store[name].commit({self._one(name, r): w for r, w in delta.items() if w})
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
                self.work.append(m.work)
                for pred, d in result.items():
                    assert d and all(w in (1, -1) for w in d.values()), (pred, d)
                    effective = self.store[pred].commit(d)
                    assert effective == d, f"{pred}: not an effective delta {d}"
                    out[pred] = effective
        finally:
            self.store.settle()
        return out
