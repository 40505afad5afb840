"""oracle_*: after every commit of random insert/delete batches, every stratum maintained
by ``DbspStratum`` equals a recompute from scratch (``engine.evaluate``), and the returned
deltas are exactly the change; differential_*: batch equals singletons, insert then
delete is the identity."""

from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from engine.evaluate import evaluate, load_program
from tests.engine.dbsp.composer import DbspComposer
from tests.engine.dbsp.recursive_programs import recursive_programs
from tests.engine.programs import DOMAIN, EDB_ARITY, apply_and_check_deltas, edb_data


def _recompute(prog, engine):
    return evaluate(prog, {name: engine.relation(name) for name in prog.edb})


def _changes(max_size=6):
    row = st.one_of(*[st.tuples(st.just(n), st.tuples(*([DOMAIN] * a)))
                      for n, a in EDB_ARITY.items()])
    return st.lists(st.tuples(row, st.sampled_from([1, -1])), min_size=1, max_size=max_size)


def _deltas(batch):
    deltas: dict[str, dict] = {}
    for (name, row), w in batch:
        deltas.setdefault(name, {})[row] = w
    return deltas


class DbspOracle(RuleBasedStateMachine):
    """Random recursive programs (linear, non-linear, mutual; negation and aggregates in
    the strata above) under random batches over a tiny domain."""

    @initialize(text=recursive_programs(), data=edb_data())
    def load(self, text, data):
        note(text)
        self.prog = load_program(text)
        self.engine = DbspComposer(self.prog, data)

    @rule(batch=_changes())
    def commit(self, batch):
        deltas = _deltas(batch)
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


@given(text=recursive_programs(), data=edb_data(), batch=_changes(8))
def test_differential_batch_equals_singletons(text, data, batch):
    prog = load_program(text)
    note(text)
    batched = DbspComposer(prog, data)
    single = DbspComposer(prog, data)
    deltas = _deltas(batch)
    batched.apply(deltas)
    for name, d in deltas.items():
        for row, w in d.items():
            single.apply({name: {row: w}})
    for p in prog.idb:
        assert batched.relation(p) == single.relation(p), p


@given(text=recursive_programs(), data=edb_data(), batch=_changes(8))
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
