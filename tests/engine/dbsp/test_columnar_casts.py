"""A variable joining an int and a float column (a float, ``Rule.casts``) and an int
variable equal to a float expression, on the columnar DBSP kernel: the rule is rewritten
(``uncast``) so that every variable is read from columns of one type, and the kernel
converts an assigned value to the variable's type (``semantics.bind_as``). Checked
against the naive evaluator after load and every commit, facts compared as text (so
that 2 and 2.0 differ), on values where the conversion has no answer or needs more than
64 bits."""

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.analysis.typecheck import uncast
from deltalog.engine.dbsp.columnar import ColumnarStratum, columnar_reason
from deltalog.engine.naive import evaluate_naive
from deltalog.engine.runtime import IncrementalEngine
from deltalog.engine.semantics import floats_as_ints
from deltalog.engine.values import format_fact

DECLS = """.decl e(a: int, b: int)
.decl w(a: float, b: float)
.decl big(a: int)
.decl wf(a: float)
"""
CLOSURE = DECLS + """r(x, y) :- e(x, y).
r(x, y) :- w(x, y).
r(x, z) :- r(x, y), e(y, z).
r(x, z) :- r(x, y), w(y, z).
half(x, t) :- r(x, y), big(y), t = y / 2.
"""
# an int variable equal to a float (z), and x joining a float and an int column
POINTS = DECLS + """p(x) :- wf(x), z = x, big(z).
q(x) :- wf(x), big(x).
n(x) :- big(x), z = x / 2.0, !big(z).
m(x) :- wf(x), !big(x).
o(x) :- big(x), !wf(x).
"""
EDGE = [0, 1, 2, -3, 2**53, 2**53 + 1, 10**19, -(10**19), 2**63 - 1]
FLOATS = [0.0, -0.0, 1.0, 2.0, 2.5, -3.0, 2.0**53, 1e19, -1e19, 2.0**63, float(2**63 - 1)]


def _facts(relations) -> set[str]:
    return {format_fact(p, r) for p, rows in relations.items() for r in rows}


def _columnar_preds(engine: IncrementalEngine) -> set[str]:
    return {p for s, m in engine.strata if isinstance(m, ColumnarStratum) for p in s.preds}


def _agrees(text: str, data, commits) -> IncrementalEngine:
    prog = load_program(text, "casts.dl")
    data = {p: set(data.get(p, ())) for p in prog.edb}
    engine = IncrementalEngine(prog, data, "dbsp")
    assert _columnar_preds(engine) == set(prog.idb), engine.slow_paths()
    for i in range(len(commits) + 1):
        if i:
            for pred, delta in commits[i - 1].items():
                for row, wt in delta.items():
                    (data[pred].add if wt > 0 else data[pred].discard)(row)
            engine.apply(commits[i - 1])
        want = _facts(evaluate_naive(prog, data))
        assert _facts({p: engine.relation(p) for p in prog.idb}) == want, i
    return engine


def test_the_rewrite_reads_each_variable_from_columns_of_one_type():
    prog = load_program(POINTS, "casts.dl")
    q = next(r for r in prog.program.rules if r.head.pred == "q")
    assert q.casts == (("x", "float"),)
    out = uncast(q, lambda pred, i: prog.schemas[pred].columns[i].type)
    assert str(out) == "q(x) :- wf(x), big(x~int), x = x~int."
    assert out.casts == (("x", "float"), ("x~int", "int"))
    p = next(r for r in prog.program.rules if r.head.pred == "p")
    assert uncast(p, lambda pred, i: prog.schemas[pred].columns[i].type) is p


def test_floats_as_ints():
    ints, exact, beyond = floats_as_ints(np.array(FLOATS))
    # 2.5 is not integral; 1e19, -1e19, 2.0**63 are integral beyond the int64s
    assert exact.tolist() == [True, True, True, True, False, True, True, False, False,
                              False, False]
    assert ints[exact].tolist() == [0, 0, 1, 2, -3, 2**53]
    assert beyond
    assert not floats_as_ints(np.array([2.5, float("nan"), float("inf")]))[2]


def test_edge_values_through_a_closure_of_int_and_float_edges():
    data = {"e": {(a, b) for a, b in zip(EDGE, EDGE[1:] + EDGE[:1], strict=True)},
            "w": {(a, b) for a, b in zip(FLOATS, FLOATS[3:] + FLOATS[:3], strict=True)},
            "big": set((v,) for v in EDGE)}
    commits = [{"w": {(2.5, 2.0**53): 1, (1e19, -1e19): 1}},
               {"e": {(10**19, 2**53 + 1): 1, (0, 1): -1}},
               {"big": {(2**53,): -1, (-3,): -1}, "w": {(0.0, 2.5): 1}},
               {"e": {(2**53 + 1, 2**53 + 2): -1}}]
    engine = _agrees(CLOSURE, data, commits)
    assert _columnar_preds(engine) == {"r", "half"}


def test_an_int_with_no_float_equal_to_it_joins_nothing():
    # 2**53 + 1 rounds to 2.0**53 as a float, but is not equal to it: whether the join
    # binds y from r's float (at the load) or from e's int (the commit), no r(1.0, 5.0)
    text = DECLS + "r(x, y) :- w(x, y).\nr(x, z) :- r(x, y), e(y, z).\n"
    for data, commit in (({"w": {(1.0, 2.0**53)}}, {"e": {(2**53 + 1, 5): 1}}),
                         ({"e": {(2**53 + 1, 5)}}, {"w": {(1.0, 2.0**53): 1}})):
        engine = _agrees(text, data, [commit, {"e": {(2**53, 6): 1}}])
        assert (1.0, 5.0) not in engine.relation("r") and (1.0, 6.0) in engine.relation("r")


def test_an_int_equal_to_a_float_beyond_64_bits():
    data = {"wf": set((v,) for v in FLOATS), "big": set((v,) for v in EDGE)}
    commits = [{"big": {(10**19,): -1, (2**63,): 1}}, {"wf": {(1e19,): -1, (4.0,): 1},
                                                       "big": {(4,): 1, (8,): 1}}]
    engine = _agrees(POINTS, data, commits)
    p = {row[0] for row in engine.relation("p")}
    assert 2.0**63 in p and 1e19 not in p and 2.5 not in p
    # a negation converts its relation's numbers: no int equals 2.5; x in o is a float,
    # which 2**53 + 1 and 2**63 - 1 (in big) give none
    assert engine.relation("m") == {(2.5,)} and engine.relation("o") == {(8.0,)}


STEPS = ["r(x, z) :- r(x, y), e(y, z).", "r(x, z) :- r(x, y), w(y, z).",
         "r(x, z) :- r(x, y), e(y, z), wf(z).", "r(x, t) :- r(x, y), big(t), t = y / 2.",
         "r(x, z) :- r(x, y), w(y, z), big(z).", "r(x, t) :- r(x, y), wf(t), t = y - 1.",
         "r(x, y) :- r(y, x), e(x, _), big(x).", "r(x, z) :- r(x, y), e(y, z), !wf(z).",
         "r(x, z) :- r(x, y), w(y, z), !big(z)."]
QUERIES = ["k(x) :- r(x, x), big(x).", "k(t) :- r(_, y), wf(y), t = y * 2.",
           "k(y) :- r(_, y), !big(y).", "k(x) :- big(x), !r(x, _).",
           "k(t) :- r(x, y), t = x - y / 2, !wf(t).", "k(x) :- r(x, y), big(z), z = y."]
VALUES = st.sampled_from([0, 1, 2, 3, -3, 2**53 + 1])


def _row(pred: str):
    arity = 2 if pred in ("e", "w") else 1
    cell = VALUES.map(float) if pred in ("w", "wf") else VALUES
    return st.tuples(*[cell] * arity)


@st.composite
def _history(draw):
    data = {p: draw(st.sets(_row(p), max_size=8)) for p in ("e", "w", "big", "wf")}
    commits = []
    for _ in range(draw(st.integers(1, 4))):
        pred = draw(st.sampled_from(sorted(data)))
        rows = draw(st.sets(_row(pred), min_size=1, max_size=3))
        commits.append({pred: {r: draw(st.sampled_from([1, -1])) for r in rows}})
    return data, commits


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=3, unique=True),
       query=st.sampled_from(QUERIES), base=st.sampled_from(["e", "w"]),
       history=_history())
def test_random_recursive_programs_on_the_columnar_kernel(steps, query, base, history):
    text = DECLS + f"r(x, y) :- {base}(x, y).\n" + "\n".join([*steps, query]) + "\n"
    note(text)
    prog = load_program(text, "casts.dl")
    assert all(columnar_reason(prog, s) is None for s in prog.strata)
    _agrees(text, *history)


@pytest.mark.parametrize("text", [CLOSURE, POINTS])
def test_a_saved_state_goes_on(text):
    prog = load_program(text, "casts.dl")
    data = {"e": {(1, 2), (2, 3)}, "w": {(3.0, 4.0), (2.5, 1.0)}, "big": {(2,), (4,)},
            "wf": {(2.0,), (4.0,), (2.5,)}}
    data = {p: data[p] for p in prog.edb}
    engine = IncrementalEngine(prog, data, "dbsp")
    again = IncrementalEngine.loads(engine.dumps())
    change = {"e": {(4, 1): 1}, "big": {(2,): -1, (1,): 1}, "wf": {(1.0,): 1}}
    change = {p: d for p, d in change.items() if p in prog.edb}
    assert again.apply(change) == engine.apply(change)
    assert _columnar_preds(again) == set(prog.idb)
