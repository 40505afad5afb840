"""The columnar DBSP kernel on relations of three and four columns (and negations binding
three variables): rows packed through pair codes (``_Packing``), a join reading an atom
in the layout its bound columns ask for. Checked against the tuple kernel and a
recompute under random commits, with state round trips; the work a change costs does
not grow with unrelated data. (``test_columnar.py``'s random programs cover three
columns too.)"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.dbsp.columnar import ColumnarStratum, _Packing, natural
from deltalog.engine.errors import DataError
from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine
from deltalog.engine.segments import MemorySegments

WIDE = """
.decl t(a: int, b: int, l: string)
.decl blocked(a: int, b: int, l: string)
.decl start(a: int)
lab(x, y, l) :- t(x, y, l), !blocked(x, y, l).
lab(x, z, l) :- lab(x, y, l), t(y, z, l), !blocked(y, z, l).
route(x, y, l, 1) :- start(x), t(x, y, l).
route(x, z, l, n) :- route(x, y, l, m), t(y, z, k), k != l, n = m + 1, n <= 4.
route(x, z, l, n) :- route(x, y, l, m), lab(y, z, l), x != z, n = m + 1, n <= 4.
pairs(x, y) :- lab(x, y, _), lab(y, x, _).
tri(x, y, l) :- start(x), t(x, y, l).
tri(x, z, l) :- tri(x, y, l), t(y, z, l), lab(x, z, l).
"""


def _columnar(engine: IncrementalEngine) -> list[ColumnarStratum]:
    return [m for _, m in engine.strata if isinstance(m, ColumnarStratum)]


NODE = st.integers(0, 5)
LABEL = st.sampled_from(["a", "b"])
ROW = st.tuples(NODE, NODE, LABEL)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_wide_relations_agree_with_the_tuple_kernel_and_a_recompute(data):
    prog = load_program(WIDE)
    start = {"t": data.draw(st.sets(ROW, max_size=14)),
             "blocked": data.draw(st.sets(ROW, max_size=3)), "start": {(0,), (1,)}}
    col = IncrementalEngine(prog, start, "auto")
    tup = IncrementalEngine(prog, start, "auto", columnar=False)
    rec = RecomputeEngine(prog, start)
    assert len(_columnar(col)) == 4 and not _columnar(tup) and col.slow_paths() == []
    store = MemorySegments()
    for _ in range(4):
        change = {p: {r: data.draw(st.sampled_from([1, -1])) for r in
                      data.draw(st.sets(ROW, max_size=5))} for p in ("t", "blocked")}
        change = {p: {r: w for r, w in rows.items() if (w > 0) != rec.contains(p, r)}
                  for p, rows in change.items()}
        assert col.apply(change) == tup.apply(change) == rec.apply(change)
        if data.draw(st.booleans()):
            col = IncrementalEngine.loads(col.dumps(store), store)
        for p in ("lab", "route", "pairs", "tri"):
            assert col.relation(p) == rec.relation(p) == tup.relation(p), p


def test_labelled_reachability_by_hand():
    prog = load_program(WIDE)
    edb = {"t": {(1, 2, "a"), (2, 3, "a"), (3, 4, "b"), (2, 5, "b")},
           "blocked": {(3, 4, "b")}, "start": {(1,)}}
    engine = IncrementalEngine(prog, edb)
    assert _columnar(engine)
    assert engine.relation("lab") == {(1, 2, "a"), (2, 3, "a"), (1, 3, "a"), (2, 5, "b")}
    assert engine.relation("route") == {(1, 2, "a", 1), (1, 5, "a", 2), (1, 3, "a", 2),
                                        (1, 4, "a", 3)}
    assert engine.apply({"blocked": {(3, 4, "b"): -1}}) == {"lab": {(3, 4, "b"): 1}}
    assert engine.apply({"t": {(2, 3, "a"): -1}}) == {
        "lab": {(2, 3, "a"): -1, (1, 3, "a"): -1},
        "route": {(1, 3, "a", 2): -1, (1, 4, "a", 3): -1},
        "tri": {(1, 3, "a"): -1}}


CHAINS = """
.decl t(a: int, b: int, l: int)
lab(x, y, l) :- t(x, y, l).
lab(x, z, l) :- lab(x, y, l), t(y, z, l).
"""


def _gathered(n: int) -> tuple[int, int]:
    """Rows gathered by an insert and a delete in a small labelled component, beside n
    unrelated labelled 3-node chains."""
    edb = {(3 * i + 10, 3 * i + 11, i % 7) for i in range(n)}
    edb |= {(3 * i + 11, 3 * i + 12, i % 7) for i in range(n)}
    edb |= {(0, 1, 1), (1, 2, 1)}
    engine = IncrementalEngine(load_program(CHAINS), {"t": edb})
    assert _columnar(engine)
    engine.apply({"t": {(2, 0, 1): 1}})
    ins = engine.last_stats.work["rows_gathered"]
    engine.apply({"t": {(1, 2, 1): -1}})
    return ins, engine.last_stats.work["rows_gathered"]


def test_work_on_wide_rows_follows_the_change_not_the_data():
    small, large = _gathered(50), _gathered(3000)
    assert small == large
    assert 0 < small[0] < 100 and 0 < small[1] < 100


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3), st.integers(0, 2**31 - 1),
                          st.integers(0, 7)), min_size=1, max_size=40),
       st.permutations(range(4)), st.integers(1, 3))
def test_packing_round_trips_every_layout(rows, perm, split):
    packing = _Packing()
    cols = [np.array([r[i] for r in rows], np.int64) for i in range(4)]
    keys = packing.pack(natural(4), cols, len(rows))
    assert (keys >= 0).all()
    assert len(set(keys.tolist())) == len(set(rows))
    layout = (tuple(perm[:split]), tuple(perm[split:]))
    other = packing.relayout(keys, natural(4), layout)
    assert [c.tolist() for c in packing.unpack(layout, other)] == [c.tolist() for c in cols]
    assert packing.relayout(other, layout, natural(4)).tolist() == keys.tolist()
    # a key looked up (not added) is found for rows seen, negative for a pair never seen
    seen = packing.pack(layout, cols, len(rows), known=True)
    assert seen.tolist() == other.tolist()
    fresh = [c.copy() for c in cols]
    fresh[perm[-1]] = fresh[perm[-1]] + 2**31  # (beyond any code: never seen)
    if split < 3:
        assert (packing.pack(layout, fresh, len(rows), known=True) < 0).all()


FUNCTIONAL = """
.decl e(a: int, b: int)
.decl up[x: int] = y: int
.decl cost[x: int, l: string] = c: int
up[x] = y :- e(x, y), x < y.
up[x] = z :- up[x] = y, e(y, z), y > z, x > 2.
cost[x, "a"] = 1 :- e(x, _), x < 2.
cost[y, l] = c :- cost[x, l] = b, e(x, y), x < y, c = b + 1.
"""


def _outcome(engine: IncrementalEngine, change: dict) -> object:
    try:
        return engine.apply(change)
    except DataError as err:
        return str(err)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_functional_relations_agree_with_the_tuple_kernel(data):
    """A second value for a key is DL302 on both kernels, naming the same two facts (the
    columnar kernel finds it in the commit's new version, before the state changes)."""
    prog = load_program(FUNCTIONAL)
    edges = st.sets(st.tuples(NODE, NODE), max_size=8)
    start = {"e": data.draw(edges)}
    try:
        tup = IncrementalEngine(prog, start, "auto", columnar=False)
    except DataError as err:
        with pytest.raises(DataError) as also:
            IncrementalEngine(prog, start, "auto")
        assert str(also.value) == str(err)
        return
    col = IncrementalEngine(prog, start, "auto")
    assert len(_columnar(col)) == 2 and col.slow_paths() == []
    for _ in range(4):
        change = {r: data.draw(st.sampled_from([1, -1])) for r in data.draw(edges)}
        change = {r: w for r, w in change.items() if (w > 0) != tup.contains("e", r)}
        got = _outcome(col, {"e": change})
        assert got == _outcome(tup, {"e": change})
        if isinstance(got, str):
            assert "DL302" in got
            return
        for p in ("up", "cost"):
            assert col.relation(p) == tup.relation(p), p


def test_a_second_value_for_a_key_names_both_facts():
    prog = load_program(FUNCTIONAL)
    engine = IncrementalEngine(prog, {"e": {(3, 4), (5, 6)}})
    assert _columnar(engine) and engine.relation("up") == {(3, 4), (5, 6)}
    assert engine.apply({"e": {(5, 6): -1, (5, 7): 1}}) == {"up": {(5, 6): -1, (5, 7): 1}}
    with pytest.raises(DataError) as err:
        engine.apply({"e": {(4, 1): 1}})
    assert "up[3] = 1." in str(err.value) and "up[3] = 4." in str(err.value)
    assert "DL302" in str(err.value)


NO_ATOM = """
.decl e(a: int, b: int)
.decl q(a: int)
p(x) :- x = 1, !q(x).
p(7) :- !q(3).
p(x) :- x = 2, x != 3.
p(z) :- p(y), e(y, z).
"""


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_rules_with_no_positive_atom(data):
    """A rule of constraints and negations only starts from one empty row at the load,
    and changes with its negations' key sets after."""
    prog = load_program(NO_ATOM)
    small = st.integers(0, 8)
    start = {"e": data.draw(st.sets(st.tuples(small, small), max_size=10)),
             "q": data.draw(st.sets(st.tuples(small), max_size=3))}
    col = IncrementalEngine(prog, start, "auto")
    tup = IncrementalEngine(prog, start, "auto", columnar=False)
    rec = RecomputeEngine(prog, start)
    assert _columnar(col) and col.slow_paths() == []
    for _ in range(4):
        change = {p: {r: data.draw(st.sampled_from([1, -1])) for r in data.draw(
            st.sets(st.tuples(small, small) if p == "e" else st.tuples(small), max_size=3))}
            for p in ("e", "q")}
        change = {p: {r: w for r, w in rows.items() if (w > 0) != rec.contains(p, r)}
                  for p, rows in change.items()}
        assert col.apply(change) == tup.apply(change) == rec.apply(change)
        assert col.relation("p") == rec.relation("p")
