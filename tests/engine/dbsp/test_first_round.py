"""A cyclic base rule (three atoms or more, no negation) is evaluated at load by the
columnar core's compiled leapfrog triejoin, every assignment of its body one derivation.
The counts it leaves are those the delta queries would leave: a row goes only when a
commit takes its last derivation (projections, wildcards, repeated atoms and variables,
constants, comparisons, arithmetic, nullary atoms and heads); and the load's join work on
the triangles grows like N^1.5, not N^2."""

import math
from unittest.mock import patch

from hypothesis import given, note, settings
from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.dbsp.columnar import ColumnarStratum, _cyclic
from deltalog.engine.evaluate import evaluate
from deltalog.engine.runtime import IncrementalEngine
from tests.engine.test_worst_case_optimal import instance, pairwise_intermediate, slope

DECLS = ".decl e(a: int, b: int)\n.decl f(a: int, b: int)\n.decl on()\n"
BODIES = [  # (a cyclic body, its variables)
    ("e(x, y), e(y, z), e(z, x)", "xyz"),
    ("e(x, y), e(y, z), f(z, w), e(w, x)", "xyzw"),
    ("e(x, y), f(y, z), e(z, x), f(x, _), e(_, y)", "xyz"),
    ("e(x, y), e(x, y), f(y, z), e(z, x)", "xyz"),
    ("e(x, x), f(x, y), e(y, z), f(z, x), e(y, 2)", "xyz"),
    ("e(x, y), f(y, z), e(z, x), x < z", "xyz"),
    ("e(x, y), f(y, z), f(z, x), s = x + z", "xyzs"),
    ("e(x, y), on(), f(y, z), e(z, x)", "xyz"),
]
HEADS = [("p(x)", "x"), ("p(x, y)", "xy"), ("p(y, x)", "xy"), ("p(w)", "w"), ("p(z)", "z"),
         ("p(x, s)", "xs"), ("p()", ""), ("p(3)", "")]


@st.composite
def rules(draw):
    body, bound = draw(st.sampled_from(BODIES))
    head = draw(st.sampled_from([h for h, vs in HEADS if set(vs) <= set(bound)]))
    return f"{DECLS}{head} :- {body}."


DOMAIN = st.integers(0, 3)
EDGES = st.sets(st.tuples(DOMAIN, DOMAIN), max_size=10)


def _change(rows, held):
    return {r: (-1 if r in held else 1) for r in rows}


@settings(max_examples=150, deadline=None)
@given(text=rules(), e=EDGES, f=EDGES, on=st.booleans(),
       steps=st.lists(st.tuples(EDGES, EDGES, st.booleans()), min_size=1, max_size=5))
def test_the_first_round_counts_as_the_delta_queries_do(text, e, f, on, steps):
    note(text)
    prog = load_program(text)
    data = {"e": set(e), "f": set(f), "on": {()} if on else set()}
    lftj = IncrementalEngine(prog, data, "auto")
    with patch.object(ColumnarStratum, "direct_first_round", True):
        direct = IncrementalEngine(prog, data, "auto")
    assert lftj.last_stats.work.get("first_round_joins", 0) == 1
    assert "first_round_joins" not in direct.last_stats.work
    for de, df, flip in steps:
        deltas = {"e": _change(de, data["e"]), "f": _change(df, data["f"])}
        if flip:
            deltas["on"] = {(): -1 if data["on"] else 1}
        for name, d in deltas.items():
            for r, w in d.items():
                (data[name].add if w > 0 else data[name].discard)(r)
        got = lftj.apply(deltas)
        assert got == direct.apply(deltas)
        assert lftj.relation("p") == evaluate(prog, data)["p"]


def test_the_loads_join_work_on_triangles_grows_like_n_to_1_5():
    prog = load_program(".decl e(a: int, b: int)\nt(x, y, z) :- e(x, y), e(y, z), e(z, x).")
    sizes, work, pairwise = [], [], []
    for m in (400, 1600, 6400):
        edges = instance(m)
        engine = IncrementalEngine(prog, {"e": edges}, "auto")
        k = math.isqrt(m)
        assert len(engine.relation("t")) == k * (k - 1) * (k - 2)
        assert engine.last_stats.work["first_round_joins"] == 1
        sizes.append(len(edges))
        work.append(engine.last_stats.work["first_round_steps"])
        pairwise.append(pairwise_intermediate(edges))
    assert 1.3 <= slope(sizes, work) <= 1.7, (sizes, work)
    assert pairwise[-1] > 20 * work[-1]


def test_only_a_cyclic_body_takes_the_compiled_join():
    assert _cyclic(["xy", "yz", "zx"]) and _cyclic(["xy", "yz", "zw", "wx"])
    assert _cyclic(["xx", "xy", "yz", "zx", "y"])
    assert not _cyclic(["xy", "yz", "zw"]) and not _cyclic(["x", "x", "x"])
    assert not _cyclic(["xyz", "xy", "yz", "zx"])  # (one atom holds the triangle)
    prog = load_program(".decl e(a: int, b: int)\np(x, w) :- e(x, y), e(y, z), e(z, w).")
    engine = IncrementalEngine(prog, {"e": {(0, 1), (1, 2), (2, 3)}})
    assert "first_round_joins" not in engine.last_stats.work
    assert engine.relation("p") == {(0, 3)}


def test_a_cyclic_body_joining_int_and_float_columns_takes_the_compiled_join():
    """x and z join an int column of e and a float column of g (floats, read from e as
    x~int and z~int, ``uncast``): the body is still a triangle, and the core binds each
    pair by converting, not as a product. The counts agree with the delta queries'."""
    text = (".decl e(a: int, b: int)\n.decl g(a: float, b: float)\n"
            "t(x, y, z) :- e(x, y), e(y, z), g(z, x).\n")
    prog = load_program(text)
    e = {(1, 2), (2, 3), (2**53 + 1, 2), (2, 2**53 + 1), (-3, 0), (0, 4), (2**63 - 1, 5),
         (5, 6)}
    g = {(3.0, 1.0), (2.0**53, 2.0**53), (4.0, -3.0), (3.5, 1.0), (6.0, 1e19),
         (6.0, 2.0**63)}
    lftj = IncrementalEngine(prog, {"e": e, "g": g}, "auto")
    assert lftj.last_stats.work.get("first_round_joins", 0) == 1
    with patch.object(ColumnarStratum, "direct_first_round", True):
        direct = IncrementalEngine(prog, {"e": e, "g": g}, "auto")
    assert lftj.relation("t") == direct.relation("t") == evaluate(prog, {"e": e, "g": g})["t"]
    assert lftj.relation("t") == {(1.0, 2, 3.0), (-3.0, 0, 4.0)}
    deltas = {"e": {(1, 2): -1, (2**53, 2): 1, (2, 2**53): 1}, "g": {(4.0, -3.0): -1}}
    assert lftj.apply(deltas) == direct.apply(deltas)
    assert lftj.relation("t") == {(2.0**53, 2, 2.0**53)}
