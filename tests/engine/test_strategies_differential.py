"""differential_*: every strategy (auto, sensitivity, dbsp, recompute) gives the same
relations after every commit of the same random batches; auto composes sensitivity-index
strata with DBSP strata in one program."""

from hypothesis import given, note
from hypothesis import strategies as st

from engine.evaluate import load_program
from engine.runtime import make_engine
from tests.engine.programs import DOMAIN, EDB_ARITY, edb_data, programs


def _batches():
    row = st.one_of(*[st.tuples(st.just(n), st.tuples(*([DOMAIN] * a)))
                      for n, a in EDB_ARITY.items()])
    batch = st.lists(st.tuples(row, st.sampled_from([1, -1])), min_size=1, max_size=5)
    return st.lists(batch, min_size=1, max_size=5)


@given(text=programs(recursion=True), data=edb_data(), steps=_batches())
def test_differential_every_strategy_agrees(text, data, steps):
    note(text)
    prog = load_program(text)
    recursive = any(s.recursive for s in prog.strata)
    names = ["recompute", "auto", "dbsp"] + ([] if recursive else ["sensitivity"])
    engines = {name: make_engine(prog, data, name) for name in names}
    for batch in steps:
        deltas: dict[str, dict] = {}
        for (name, row), w in batch:
            deltas.setdefault(name, {})[row] = w
        outs = {name: e.apply(deltas) for name, e in engines.items()}
        for name in names[1:]:
            assert outs[name] == outs["recompute"], (name, deltas)
            for p in prog.idb:
                assert engines[name].relation(p) == engines["recompute"].relation(p), (name, p)


@given(text=programs(recursion=True), data=edb_data(), steps=_batches(), cut=st.integers(0, 4))
def test_differential_saved_and_loaded_state_continues_the_same(text, data, steps, cut):
    """An engine saved after ``cut`` commits and loaded again (a new run of the pipeline)
    gives the same deltas from then on as one that never stopped."""
    from engine.runtime import IncrementalEngine

    prog = load_program(text)
    straight = IncrementalEngine(prog, data, "auto")
    resumed = IncrementalEngine(prog, data, "auto")
    for i, batch in enumerate(steps):
        if i == cut:
            resumed = IncrementalEngine.loads(resumed.dumps())
        deltas: dict[str, dict] = {}
        for (name, row), w in batch:
            deltas.setdefault(name, {})[row] = w
        assert resumed.apply(deltas) == straight.apply(deltas)
    for p in prog.idb:
        assert resumed.relation(p) == straight.relation(p)
