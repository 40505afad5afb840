"""A variable joining an int and a float column (a float, ``Rule.casts``) on the columnar
core: the rule is read through ``uncast`` (x from the int columns as ``x~int``, with
``x = x~int``), and the join binds whichever of the two comes second from the first,
converted (``semantics.bind_as``; ``kernels.FLOAT_OF_INT``, ``INT_OF_FLOAT``), and looks it
up in its atoms: no product of the two. An int variable assigned a float takes the int
equal to it. Checked against the naive evaluator, facts compared as text (so that 2 and
2.0 differ), on values where the conversion has no answer or needs more than 64 bits."""

import pytest
from hypothesis import assume, event, given, note, settings
from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.analysis.typecheck import uncast
from deltalog.engine.columnar import kernels, rules
from deltalog.engine.columnar.encoding import Codes, NotColumnar
from deltalog.engine.columnar.evaluate import evaluate_columns
from deltalog.engine.columnar.rules import CompiledRule
from deltalog.engine.errors import AnalysisError
from deltalog.engine.evaluate import evaluate
from deltalog.engine.join.plan import choose_order, prepare
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.naive import evaluate_naive
from deltalog.engine.values import format_fact
from tests.engine.test_mixed_number_types import _history, _mixed_programs, _recursive_programs


def _facts(relations) -> set[str]:
    return {format_fact(p, r) for p, rows in relations.items() for r in rows}


def _on_the_core(text: str, data) -> set[str]:
    """The facts ``evaluate`` gives, checked to be the naive evaluator's and made on the
    columnar core."""
    prog = load_program(text, "casts.dl")
    stats = JoinStats()
    got = _facts(evaluate(prog, data, stats=stats))
    assert stats.core == "columnar", stats.core
    assert got == _facts(evaluate_naive(prog, data))
    return got


DECLS = """.decl a(x: int)
.decl b(x: float)
.decl e(x: int, y: int)
.decl w(x: float, y: float)
"""
EDGE_INTS = [0, 2, -3, 7, 11, 2**53 + 1, 2**53 + 2, -(2**53) - 1, 2**62 + 1, 2**63 - 1,
             -(2**63), -(2**63) + 1]
EDGE_FLOATS = [-0.0, 2.5, -3.0, 7.0, 2.0**53, 2.0**53 + 2, 1e19, -1e19, 2.0**63, -(2.0**63),
               2.0**62]


def _edge_data(pad: str) -> dict[str, list[tuple[int | float]]]:
    """The edge values, ``pad``'s relation the larger (the join binds the other's variable
    first: x from b when a is padded, x~int from a when b is)."""
    data: dict[str, list[tuple[int | float]]] = {
        "a": [(v,) for v in EDGE_INTS], "b": [(v,) for v in EDGE_FLOATS]}
    data[pad] += [(1000 + i,) if pad == "a" else (1000.25 + i,) for i in range(20)]
    return data


def test_edge_values_join_as_the_numbers_equal_to_them():
    # x: a float; 2**53 + 1, 2**62 + 1 and 2**63 - 1 have no float equal to them (2.0**53,
    # 2.0**62 and 2.0**63 are not theirs), 2.5 and the floats beyond the int64s (1e19,
    # 2.0**63) no int64; -(2**63) is -(2.0**63); -0.0 is 0.
    want = {"0.0", "-3.0", "7.0", "9007199254740994.0", "-9.223372036854776e+18"}
    for pad, first in (("a", "x"), ("b", "x~int")):
        data = _edge_data(pad)
        for body in ("a(x), b(x)", "b(x), a(x)"):
            text = DECLS + f"q(x) :- {body}.\n"
            assert _order(text, data)[0] == first
            got = _on_the_core(text, data)
            assert got == {f"q({v})." for v in want}, (pad, body)
        # the int and the float variable equal (z an int, y a float); t a float division
        got = _on_the_core(DECLS + "p(z, y) :- a(z), b(y), z = y.\nh(x, t) :- a(x), b(x), "
                           "t = x / 2.\n", data)
        assert {f for f in got if f.startswith("p")} == {
            "p(0, 0.0).", "p(-3, -3.0).", "p(7, 7.0).", "p(9007199254740994, 9007199254740994.0).",
            "p(-9223372036854775808, -9.223372036854776e+18)."}, pad
        assert "h(7.0, 3.5)." in got and "h(-3.0, -1.5)." in got
        # negations probe the number equal to the variable's in their column (m: none
        # for 2.5, 1e19, 2.0**63 in a; 2.0**53 is not 2**53 + 1); o's x is a float, which
        # the ints with no float equal to them do not give
        got = _on_the_core(DECLS + "m(x) :- b(x), !a(x).\no(x) :- a(x), !b(x).\n", data)
        padding = {f"m({1000.25 + i})." for i in range(20)} | {
            f"o({1000.0 + i})." for i in range(20)}
        assert {f for f in got - padding if f.startswith("m(")} == {
            "m(2.5).", "m(9007199254740992.0).", "m(1e+19).", "m(-1e+19).",
            "m(9.223372036854776e+18).", "m(4.611686018427388e+18)."}, pad
        assert {f for f in got - padding if f.startswith("o(")} == {"o(2.0).", "o(11.0)."}


def test_an_int_variable_assigned_a_float_takes_the_int_equal_to_it():
    text = DECLS + "n(x, z) :- a(x), z = x / 2.0, !a(z).\nk(z) :- b(y), z = y, !a(z).\n"
    data = {"a": [(v,) for v in (2, 4, 5, -6, 2**53, 2**62)],
            "b": [(v,) for v in (-0.0, 2.5, 4.0, 3.0, 2.0**62)]}
    got = _on_the_core(text, data)
    assert {f for f in got if f.startswith("n")} == {
        "n(2, 1).", "n(-6, -3).", "n(9007199254740992, 4503599627370496).",
        "n(4611686018427387904, 2305843009213693952)."}  # (5 / 2.0: no int; 2 in a)
    assert {"k(0).", "k(3)."} <= got and "k(4)." not in got
    # an integral float beyond the int64s: its int has no code, the tuple evaluator runs
    prog = load_program(text, "casts.dl")
    data["b"].append((1e19,))
    stats = JoinStats()
    got_big = _facts(evaluate(prog, data, stats=stats))
    assert stats.core == "tuples: an integer beyond 64 bits"
    assert "k(10000000000000000000)." in got_big
    assert got_big == _facts(evaluate_naive(prog, data))


def test_a_recursive_closure_over_int_and_float_edges():
    text = DECLS + ("r(x, y) :- e(x, y).\nr(x, z) :- r(x, y), w(y, z).\n"
                    "r(x, z) :- r(x, y), e(y, z).\nk(x, t) :- r(x, x), b(x), t = x / 2.\n")
    data = {"e": [(1, 2), (2**53 + 1, 5), (6, 1), (-3, 2**63 - 1)],
            "w": [(2.0, 3.5), (2.0, 6.0), (2.0**53, 1.0), (3.5, -3.0), (1e19, 1.0)],
            "b": [(1.0,), (6.0,)]}
    got = _on_the_core(text, data)
    # (r's first column an int, its second a float; k's x joins both)
    assert {"r(1, 6.0).", "r(6, 6.0).", "r(9007199254740993, 5.0)."} <= got
    assert {f for f in got if f.startswith("k")} == {"k(1.0, 0.5).", "k(6.0, 3.0)."}


def test_an_aggregate_counts_each_assignment_once():
    # (x~int is x's int: the distinct assignments are those of the rule as written)
    text = (".decl a(k: int, x: int)\n.decl b(x: float)\n"
            "c[k] = n <- agg<<n = count()>> a(k, x), b(x).\n"
            "s[k] = n <- agg<<n = sum(x)>> a(k, x), b(x).\n"
            "m[k] = n <- agg<<n = max(x)>> b(x), a(k, x).\n")
    data = {"a": [(1, 2), (1, 3), (2, 2**53 + 1), (2, 4), (1, -3)],
            "b": [(2.0,), (3.0,), (2.0**53,), (4.0,), (-3.0,), (2.5,)]}
    assert _on_the_core(text, data) == {"c(1, 3).", "c(2, 1).", "s(1, 2.0).", "s(2, 4.0).",
                                        "m(1, 3.0).", "m(2, 4.0)."}


def _order(text: str, data) -> tuple[str, ...]:
    """The variable order the core's planner takes for the one rule of ``text``."""
    prog = load_program(text, "casts.dl")
    prep = prepare(uncast(prog.program.rules[0], lambda p, i: (
        prog.schemas[p].columns[i].type)))
    return choose_order(prep, {a.index: len(data[a.pred]) for a in prep.atoms})


def _plan(text: str, order):
    prog = load_program(DECLS + text, "casts.dl")
    (rule,) = prog.program.rules
    compiled = CompiledRule(prog, prepare(uncast(rule, lambda p, i: (
        prog.schemas[p].columns[i].type))), Codes([]), {})
    return compiled.plan({0: 10, 1: 10}, frozenset(), order)


def test_whichever_comes_first_the_other_is_converted_and_looked_up():
    plan = _plan("q(x) :- a(x), b(x).", ("x", "x~int"))
    assert plan.kinds == [kernels.JOIN, kernels.INT_OF_FLOAT] and plan.args[1] == 0
    plan = _plan("q(x) :- a(x), b(x).", ("x~int", "x"))
    assert plan.kinds == [kernels.JOIN, kernels.FLOAT_OF_INT] and plan.args[1] == 0
    assert not plan.post_checks and not plan.post_assign
    plan = _plan("p(z) :- a(z), b(y), z = y.", ("y", "z"))
    assert plan.kinds == [kernels.JOIN, kernels.INT_OF_FLOAT] and not plan.post_checks


def test_without_uncast_such_rules_are_refused():
    """A variable read from an int and a float column: the caller rewrites the rule
    (``uncast``) first."""
    prog = load_program(DECLS + "q(x) :- a(x), b(x).\n")
    (q,) = prog.program.rules
    with pytest.raises(NotColumnar, match="variable x joins a int column with a float"):
        CompiledRule(prog, prepare(q), Codes([]), {})


def test_the_join_of_an_int_and_a_float_column_is_linear():
    prog = load_program(DECLS + "q(x) :- a(x), b(x).\n")
    ops, sizes = [], (2000, 8000)
    for n in sizes:
        # every other value shared: a's even ints, b's multiples of 4 and halves
        data = {"a": [(2 * i,) for i in range(n)],
                "b": [(4.0 * i,) for i in range(n // 2)] + [(i + 0.5,) for i in range(n // 2)]}
        stats = JoinStats()
        got = evaluate(prog, data, stats=stats)
        assert stats.core == "columnar", stats.core
        assert len(got["q"]) == (n + 1) // 2
        ops.append(stats.operations)
    assert ops[1] < 6 * ops[0], (sizes, ops)  # a product would be 16 times
    assert ops[1] < 20 * sizes[1], ops


# Values where a conversion has no answer: ints with no float equal (2**53 + 1) beside
# the float they round to, floats with no int (2.5) or none in 64 bits (1e19).
EDGE = {"int": [2**53 + 1, 2**53, -(2**53) - 1], "float": [2.0**53, 2.5, -2.5, 1e19, -0.0]}
ARITY = {"a": 2, "b": 2, "c": 1, "d": 1}


@st.composite
def _edge_inputs(draw) -> dict[str, set[tuple[int | float, ...]]]:
    """Inputs of the mixed programs (``test_mixed_number_types``' relations), their values
    mostly shared between the int and the float relations, now and then an edge one."""
    shared = draw(st.lists(st.sampled_from([0, 1, 2, 3, -3, 2**53]), min_size=1, max_size=3))

    def cell(pred: str) -> int | float:
        typ = "float" if pred in ("b", "d") else "int"
        if not draw(st.integers(0, 4)):
            return draw(st.sampled_from(EDGE[typ]))
        v = draw(st.sampled_from(shared))
        return float(v) if typ == "float" else v

    return {p: {tuple(cell(p) for _ in range(n)) for _ in range(draw(st.integers(0, 6)))}
            for p, n in ARITY.items()}


def _agrees_on_the_core(text: str, data, split: bool) -> None:
    """``split``: every join split over two threads by ranges of its first variable."""
    note(text)
    try:
        prog = load_program(text, "mixed.dl")
    except AnalysisError:
        assume(False)
    want = _facts(evaluate_naive(prog, data))
    saved = rules.THREADS, rules.SPLIT_MIN
    if split:
        rules.THREADS, rules.SPLIT_MIN = 2, 1
    try:
        result = evaluate_columns(prog, data)
    except NotColumnar as why:  # (an int beyond 64 bits: 1e19 made an int, 2**53 * 3...)
        assert "beyond 64 bits" in str(why), why
        event("an int beyond 64 bits: the tuple evaluator")
        assert _facts(evaluate(prog, data)) == want
        return
    finally:
        rules.THREADS, rules.SPLIT_MIN = saved
    got = _facts({p: result.rows(p) for p in result.relations})
    event("on the core" + (", facts" if got else ""))
    assert got == want


@settings(max_examples=150, deadline=None)
@given(text=_mixed_programs(), data=_history().map(lambda h: h[0]) | _edge_inputs(),
       split=st.booleans())
def test_random_programs_joining_int_and_float_columns_on_the_core(text, data, split):
    _agrees_on_the_core(text, data, split)


@settings(max_examples=150, deadline=None)
@given(text=_recursive_programs(), data=_history().map(lambda h: h[0]) | _edge_inputs(),
       split=st.booleans())
def test_random_recursive_programs_joining_int_and_float_columns_on_the_core(text, data,
                                                                              split):
    _agrees_on_the_core(text, data, split)
