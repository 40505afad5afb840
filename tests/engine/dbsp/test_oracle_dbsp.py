"""oracle_*: after every commit of random insert/delete batches, every stratum maintained
by ``DbspStratum`` equals a recompute from scratch (``deltalog.engine.evaluate``), and the returned
deltas are exactly the change; the per-commit deltas of transitive closure are those of
the reference model's Q^Δ = D∘Q∘I; differential_*: batch equals singletons, insert then
delete is the identity; work_*: the cost of a commit follows the change, not the size of
the data."""

from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.evaluate import evaluate
from tests.engine.dbsp.composer import DbspComposer
from tests.engine.dbsp.recursive_programs import chains_beside, recursive_programs
from tests.engine.dbsp.reference.operators import join
from tests.engine.dbsp.reference.stream import Stream, fixpoint, incremental, integral, lift
from tests.engine.dbsp.reference.zset import ZSet
from tests.engine.programs import apply_and_check_deltas, as_deltas, edb_changes, edb_data


def _recompute(prog, engine):
    return evaluate(prog, {name: engine.relation(name) for name in prog.edb})


class DbspOracle(RuleBasedStateMachine):
    """Random recursive programs (linear, non-linear, mutual; negation and aggregates in
    the strata above) under random batches over a tiny domain."""

    @initialize(text=recursive_programs(), data=edb_data())
    def load(self, text, data):
        note(text)
        self.prog = load_program(text)
        self.engine = DbspComposer(self.prog, data)

    @rule(batch=edb_changes())
    def commit(self, batch):
        deltas = as_deltas(batch)
        note(f"apply {deltas}")
        apply_and_check_deltas(self.engine, self.prog, deltas)

    @invariant()
    def equals_recompute(self):
        if not hasattr(self, "engine"):
            return
        expected = _recompute(self.prog, self.engine)
        for p in self.prog.idb:
            assert self.engine.relation(p) == expected[p], p


DbspOracle.TestCase.settings = settings(DbspOracle.TestCase.settings, stateful_step_count=8)
TestOracleDbsp = DbspOracle.TestCase


@given(text=recursive_programs(), data=edb_data(), batch=edb_changes(8))
def test_differential_batch_equals_singletons(text, data, batch):
    prog = load_program(text)
    note(text)
    batched = DbspComposer(prog, data)
    single = DbspComposer(prog, data)
    deltas = as_deltas(batch)
    batched.apply(deltas)
    for name, d in deltas.items():
        for row, w in d.items():
            single.apply({name: {row: w}})
    for p in prog.idb:
        assert batched.relation(p) == single.relation(p), p


@given(text=recursive_programs(), data=edb_data(), batch=edb_changes(8))
def test_differential_insert_then_delete_is_identity(text, data, batch):
    prog = load_program(text)
    note(text)
    engine = DbspComposer(prog, data)
    before = {p: engine.relation(p) for p in prog.idb}
    # Only rows that are absent, so that deleting them again restores the start.
    inserts: dict[str, dict] = {}
    for (name, row), _ in batch:
        if row not in data[name]:
            inserts.setdefault(name, {})[row] = 1
    engine.apply(inserts)
    engine.apply({n: {r: -1 for r in d} for n, d in inserts.items()})
    for p in prog.idb:
        assert engine.relation(p) == before[p], p


TC = """
.decl edge(a: int, b: int)
path(x, y) :- edge(x, y).
path(x, y) :- path(x, z), edge(z, y).
"""


def _closure(edges: ZSet) -> ZSet:
    """Q of the reference model: the fixed point of ``path = distinct(edge + path⋈edge)``,
    iterated in inner time; its integral is the closure."""

    def step(path: ZSet) -> ZSet:
        joined = join(path, edges, lambda p: p[1], lambda e: e[0], lambda p, e: (p[0], e[1]))
        return (edges + joined).distinct()

    return integral(fixpoint(step, ZSet()))


_EDGE = st.tuples(st.integers(0, 3), st.integers(0, 3))


@given(start=st.sets(_EDGE, max_size=6),
       commits=st.lists(st.dictionaries(_EDGE, st.sampled_from([1, -1]), min_size=1,
                                        max_size=4), min_size=1, max_size=4))
def test_oracle_reference_model_transitive_closure(start, commits):
    """The reference model as the oracle of ``DbspStratum``: for a stream of edge changes
    (the initial edges at time 0, then one commit per time), ``incremental(↑Q) = D∘↑Q∘I``
    is the stream of changes of the closure; the engine's delta of ``path`` at each commit
    must be that change."""
    engine = DbspComposer(load_program(TC), {"edge": start})
    edges = set(start)
    changes = [ZSet.from_set(start)]
    for commit in commits:
        # Effective changes only (what a Delta table's change feed carries).
        d = {e: w for e, w in commit.items() if (w > 0) != (e in edges)}
        edges = (edges | {e for e, w in d.items() if w > 0}) - {e for e, w in d.items() if w < 0}
        changes.append(ZSet(d))
    expected = incremental(lift(_closure))(Stream(changes, ZSet()))
    assert expected[0] == ZSet.from_set(engine.relation("path"))
    for t, commit in enumerate(commits, start=1):
        got = engine.apply({"edge": dict(commit)})
        assert ZSet(got.get("path", {})) == expected[t], (t, commit)


def _work(n: int) -> tuple[int, int]:
    """Iterator operations of one insert and one delete in a small component, beside
    ``n`` unrelated 3-node chains (the same depth whatever n)."""
    engine = DbspComposer(load_program(TC), {"edge": chains_beside(n)})
    engine.apply({"edge": {(3, 0): 1}})
    ins = sum(w["iterator_ops"] for w in engine.work)
    engine.apply({"edge": {(1, 2): -1}})
    dele = sum(w["iterator_ops"] for w in engine.work)
    return ins, dele


def test_work_follows_the_change_not_the_data():
    small, large = _work(50), _work(800)
    assert small == large
