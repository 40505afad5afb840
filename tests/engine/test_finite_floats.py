"""Floats are finite (``deltalog.engine.semantics``): an operation whose result would be ``inf`` or
``nan`` has no result, like division by zero, and a float sum beyond the float range is
DL308 naming the predicate and group. Every evaluator agrees: the naive one (the oracle),
full evaluation, and each maintenance strategy, after loading and after changes."""

import pytest

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.errors import VALUE_OUT_OF_RANGE, DataError
from deltalog.engine.evaluate import evaluate
from deltalog.engine.naive import evaluate_naive
from deltalog.engine.runtime import make_engine
from deltalog.engine.semantics import aggregate, arith

STRATEGIES = ("recompute", "sensitivity", "dbsp", "auto")


def test_a_result_that_is_not_finite_is_no_result():
    assert arith("*", 1e308, 10.0) is None
    assert arith("+", 1.7e308, 1.7e308) is None
    assert arith("-", -1.7e308, 1.7e308) is None
    assert arith("/", 1e308, 1e-308) is None
    assert arith("*", 10**400, 1.5) is None  # an int beyond the float range meets a float
    assert arith("/", 1.0, 0.0) is None and arith("%", 1.0, 0.0) is None
    assert arith("*", 1e308, 1.0) == 1e308
    assert arith("*", 10**400, 10) == 10**401  # ints stay exact


def test_float_sums_are_exact_whatever_the_partial_sums():
    # math.fsum raises on the partial sum 2e308; the exact sum is 1e308.
    assert aggregate("sum", [1e308, 1e308, -1e308]) == 1e308
    assert aggregate("total", [1e308, 1e308, -1e308]) == 1e308
    assert aggregate("sum", [0.1] * 10) == 1.0 and aggregate("total", [1, 2]) == 3.0
    with pytest.raises(DataError) as err:
        aggregate("sum", [1e308, 1e308])
    assert err.value.code == VALUE_OUT_OF_RANGE


# A rule multiplying into overflow, then by zero, then joining on the product: with IEEE
# floats, inf * 0.0 is nan, which equals nothing (the leapfrog loop relied on x == x).
OVERFLOW = """
.decl v(x: float)
.decl k(x: float)
big(x, y) :- v(x), y = x * 1e308.
prod(x, z) :- big(x, y), z = y * 0.0.
hit(x) :- prod(x, z), k(z).
lim(x) :- v(x), x * 1e308 > 1.0.
"""


def _every_evaluator_agrees(text, data, changes=()):
    prog = load_program(text, "f.dl")
    strategies = [s for s in STRATEGIES if s != "sensitivity" or not prog_recursive(prog)]
    want = evaluate_naive(prog, data)
    assert {p: set(r) for p, r in evaluate(prog, data).items()} == {
        p: set(r) for p, r in want.items()
    }
    engines = {s: make_engine(prog, data, s) for s in strategies}
    for name, e in engines.items():
        for p in prog.idb:
            assert e.relation(p) == want[p], (name, p)
    for change in changes:
        for pred, delta in change.items():
            data[pred] = (set(data[pred]) | {r for r, w in delta.items() if w > 0}) - {
                r for r, w in delta.items() if w < 0
            }
        want = evaluate_naive(prog, data)
        for name, e in engines.items():
            e.apply(change)
            for p in prog.idb:
                assert e.relation(p) == want[p], (name, p)
    return want


def test_overflowing_arithmetic_has_no_result_in_every_evaluator():
    data = {"v": {(1.0,), (10.0,), (-3.0,)}, "k": {(0.0,)}}
    want = _every_evaluator_agrees(
        OVERFLOW,
        data,
        [{"v": {(2.0,): 1, (1.0,): -1}}, {"v": {(1.0,): 1, (10.0,): -1}}],
    )
    assert want["big"] == {(1.0, 1e308)}  # 2.0, 10.0 and -3.0 times 1e308 overflow
    assert want["hit"] == {(1.0,)}  # 10.0 * 1e308 overflowed, 2.0 * 1e308 too, -3.0 too
    assert want["lim"] == {(1.0,)}


def prog_recursive(prog):
    return any(s.recursive for s in prog.strata)


SUMS = """
.decl w(g: int, i: int, x: float)
s[g] = n <- agg<<n = sum(x)>> w(g, _, x).
t[g] = n <- agg<<n = total(x)>> w(g, _, x).
"""


def test_a_float_sum_beyond_the_range_is_dl308_in_every_evaluator():
    fits = {(1, 1, 1e308), (1, 2, 1e308), (1, 3, -1e308), (2, 1, 0.5)}
    want = _every_evaluator_agrees(SUMS, {"w": set(fits)})
    assert want["s"] == {(1, 1e308), (2, 0.5)}
    over = fits - {(1, 3, -1e308)}
    prog = load_program(SUMS, "f.dl")
    with pytest.raises(DataError) as err:
        evaluate_naive(prog, {"w": over})
    assert err.value.code == VALUE_OUT_OF_RANGE and "group (1)" in str(err.value)
    with pytest.raises(DataError):
        evaluate(prog, {"w": over})
    for strategy in STRATEGIES:
        with pytest.raises(DataError) as err:
            make_engine(prog, {"w": over}, strategy)
        assert err.value.code == VALUE_OUT_OF_RANGE, strategy
        engine = make_engine(prog, {"w": fits}, strategy)
        with pytest.raises(DataError) as err:
            engine.apply({"w": {(1, 3, -1e308): -1}})  # the change takes the sum out of range
        assert err.value.code == VALUE_OUT_OF_RANGE, strategy
        assert "'s'" in str(err.value) or "'t'" in str(err.value), strategy


def test_recursion_over_floats_that_would_overflow_stops():
    # Doubling until the value overflows: the last step has no result, so the fixpoint is
    # finite (with IEEE floats it would reach inf and stop there only by luck of inf == inf).
    text = """
    .decl seed(x: float)
    d(x) :- seed(x).
    d(y) :- d(x), y = x * 2.0.
    """
    want = _every_evaluator_agrees(text, {"seed": {(1.0,)}})
    assert len(want["d"]) == 1024 and max(want["d"]) == (2.0**1023,)


ZEROS = """
.decl e(x: float, y: float)
.decl f(x: float)
tc(x, y) :- e(x, y).
tc(x, z) :- tc(x, y), e(y, z).
hy(y) :- f(x), y = x * -1.0.
h(x) :- f(x).
lo[k] = m <- agg<<m = min(x)>> f(x), k = 1.
c(-0.0) :- f(_).
"""


def _signs(relation) -> set[str]:
    return {repr(row) for row in relation}


def test_negative_zero_is_zero_written_one_way_in_every_evaluator():
    """-0.0 equals 0.0: whatever the input or the arithmetic gives, every strategy (and
    every kind of stratum) stores and shows it as 0.0, as the recompute's codes do."""
    prog = load_program(ZEROS, "z.dl")
    data = {"e": {(-0.0, 1.0), (1.0, -0.0)}, "f": {(-0.0,)}}
    want = {p: _signs(r) for p, r in evaluate(prog, data).items()}
    assert "(-0.0,)" not in want["hy"] and want["hy"] == {"(0.0,)"}
    for strategy in [s for s in STRATEGIES if s != "sensitivity"]:
        engine = make_engine(prog, data, strategy)
        engine.apply({"f": {(-0.0,): -1}})
        engine.apply({"f": {(-0.0,): 1}, "e": {(-0.0, -0.0): 1}})
        now = evaluate(prog, {"e": data["e"] | {(0.0, 0.0)}, "f": data["f"]})
        for p in prog.idb:
            assert _signs(engine.relation(p)) == _signs(now[p]), (strategy, p)
            assert not any("-0.0" in r for r in _signs(engine.relation(p))), (strategy, p)


def test_negative_zero_computed_before_any_zero_is_seen_is_zero():
    """The first float a columnar stratum codes is the -0.0 of an int's division (no 0.0
    seen before it): stored and shown as 0.0 by every strategy, at the load and when a
    commit brings it."""
    prog = load_program(".decl u(a: int)\np(g) :- u(x), g = x / -1.5.\n", "z.dl")
    for strategy in STRATEGIES:
        engine = make_engine(prog, {"u": {(0,), (3,)}}, strategy)
        assert _signs(engine.relation("p")) == {"(0.0,)", "(-2.0,)"}, strategy
        later = make_engine(prog, {"u": {(3,)}}, strategy)
        assert later.apply({"u": {(0,): 1}}) == {"p": {(0.0,): 1}}, strategy
        assert _signs(later.relation("p")) == {"(0.0,)", "(-2.0,)"}, strategy
