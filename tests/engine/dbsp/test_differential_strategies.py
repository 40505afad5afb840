"""differential_*: the runtime's strategies on the same random recursive programs and
batches give identical relations and deltas (dbsp everywhere, auto = sensitivity below
and dbsp for recursive strata, recompute); work_*: the cost of a commit follows the
change, not the size of the data."""

from hypothesis import given, note
from hypothesis import strategies as st

from engine.evaluate import load_program
from engine.runtime import make_engine
from tests.engine.dbsp.composer import DbspComposer
from tests.engine.dbsp.recursive_programs import chains_beside, recursive_programs
from tests.engine.dbsp.test_oracle_dbsp import _changes, _deltas
from tests.engine.programs import edb_data


@given(text=recursive_programs(), data=edb_data(),
       batches=st.lists(_changes(), min_size=1, max_size=3))
def test_differential_dbsp_auto_recompute(text, data, batches):
    prog = load_program(text)
    note(text)
    engines = {s: make_engine(prog, data, s) for s in ("dbsp", "auto", "recompute")}
    for batch in batches:
        deltas = _deltas(batch)
        outs = {s: e.apply(deltas) for s, e in engines.items()}
        assert outs["dbsp"] == outs["recompute"] == outs["auto"]
        for p in prog.idb:
            rel = engines["recompute"].relation(p)
            assert engines["dbsp"].relation(p) == rel == engines["auto"].relation(p), p


TC = """
.decl edge(a: int, b: int)
path(x, y) :- edge(x, y).
path(x, y) :- path(x, z), edge(z, y).
"""


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
