"""The columnar core (``deltalog.engine.columnar``) against two oracles: the tuple evaluator
(``deltalog.engine.evaluate.Evaluator``, the same algorithm on Python tuples) and the naive
evaluator (``deltalog.engine.naive``). Random programs over tiny domains (joins, negation,
recursion, aggregates, arithmetic), typed programs over strings, floats and ints mixed,
and the encodings themselves: codes order as values do, and decode to them."""

import math

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.columnar import rules
from deltalog.engine.columnar.encoding import Codes, Dictionary, NotColumnar, float_codes
from deltalog.engine.columnar.evaluate import Columns, evaluate_columns
from deltalog.engine.errors import DataError
from deltalog.engine.evaluate import Evaluator, evaluate
from deltalog.engine.join.plan import prepare
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.naive import evaluate_naive
from tests.engine.dbsp.recursive_programs import recursive_programs
from tests.engine.programs import edb_data, programs


def _columnar(prog, data, **kw):
    stats = JoinStats()
    got = evaluate(prog, data, stats=stats, **kw)
    assert stats.core == "columnar", stats.core
    return got


def _outcome(fn):
    """The relations, or the DataError's code and message (both evaluators must agree)."""
    try:
        return fn()
    except DataError as err:
        return ("error", err.code, str(err))


@settings(max_examples=200, deadline=None)
@given(text=programs(), data=edb_data())
def test_random_programs_agree_with_the_tuple_and_naive_evaluators(text, data):
    note(text)
    prog = load_program(text)
    got = _outcome(lambda: _columnar(prog, data))
    assert got == _outcome(lambda: Evaluator(prog).run(data))
    if not isinstance(got, tuple):
        assert got == evaluate_naive(prog, data)


@settings(max_examples=100, deadline=None)
@given(text=programs(), data=edb_data(), threads=st.integers(2, 3))
def test_joins_split_over_threads_give_the_same_relations(text, data, threads):
    """Every join split into ranges of its first variable, run by several threads."""
    prog = load_program(text)
    saved = rules.THREADS, rules.SPLIT_MIN
    rules.THREADS, rules.SPLIT_MIN = threads, 1
    try:
        got = _outcome(lambda: _columnar(prog, data))
    finally:
        rules.THREADS, rules.SPLIT_MIN = saved
    assert got == _outcome(lambda: Evaluator(prog).run(data))


@settings(max_examples=200, deadline=None)
@given(text=recursive_programs(), data=edb_data())
def test_random_recursive_programs_agree(text, data):
    note(text)
    prog = load_program(text)
    got = _outcome(lambda: _columnar(prog, data))
    assert got == _outcome(lambda: Evaluator(prog).run(data))


TYPED = """\
.decl s(k: int, name: string)
.decl f(k: int, v: float)
.decl i(k: int, v: int)
.decl flag()
"""

# Rules over the typed relations; a program is a random subset (each rule stands alone).
TYPED_RULES = [
    # strings: equality, order, constants, negation, min/max/count
    "r1(a, b) :- s(k, a), s(k, b), a < b.",
    'r2(k) :- s(k, a), a >= "b", a != "é".',
    "r3(a) :- s(_, a), !s(1, a).",
    "r4[k] = m <- agg<<m = min(a)>> s(k, a).",
    "r5[k] = m <- agg<<m = max(a)>> s(k, a).",
    "r6[a] = n <- agg<<n = count()>> s(_, a).",
    # floats: order, arithmetic, -0.0 = 0.0, sums exact whatever the order
    "r7(k, w) :- f(k, v), w = v * 2.0 - 1.0, w > -1.0.",
    "r8(k, j) :- f(k, v), f(j, v), k < j.",
    "r9[k] = t <- agg<<t = sum(v)>> f(k, v).",
    "r10[k] = t <- agg<<t = total(v)>> i(k, v).",
    "r11(k) :- f(k, v), v = 0.0.",
    "r12[k] = m <- agg<<m = min(v)>> f(k, v).",
    # int and float compared, ints into float columns, big ints beyond 2^53
    "r13(k, j) :- i(k, a), f(j, b), a < b.",
    "r14(k, j) :- i(k, a), f(j, b), a = b.",
    ".decl r15(k: int, v: float)\nr15(k, v) :- i(k, v).",
    "r16(k, q, m) :- i(k, a), i(_, b), b != 0, q = a / b, m = a % b.",
    "r17(k) :- i(k, a), a > 9007199254740993.",
    "r18(k, w) :- i(k, a), f(k, b), w = a + b.",
    "r19[k] = t <- agg<<t = sum(v)>> i(k, v).",
    "r20(k) :- i(k, _), !f(k, 0.5).",
    # `=` between two expressions (no variable on either side: a check, not a binding)
    "r25(k) :- f(k, b), b * 4 % 1 = 0.",
    "r26(k, j) :- i(k, a), i(j, b), a + 1 = b - 1.",
    "r27(k) :- f(k, b), 0.5 = b - 1.5.",
    # relations of no columns
    'r21() :- s(_, "a").',
    "r22(k) :- i(k, _), flag().",
    "r23() :- !flag().",
    "r24[k] = n <- agg<<n = count()>> i(k, _), flag().",
]

STRINGS = st.sampled_from(["", "a", "b", "ab", "B", "é", "zz", "a b", "\x00", "𝄞"])
FLOATS = st.sampled_from([-1.5, -0.0, 0.0, 0.5, 2.0, 1e300, -1e300, 5e-324, 3.0,
                          9007199254740993.0])
INTS = st.sampled_from([-3, -1, 0, 1, 2, 3, 2**53 + 1, 2**62, -(2**62)])
KEYS = st.integers(0, 3)


@st.composite
def typed_data(draw):
    return {
        "s": draw(st.sets(st.tuples(KEYS, STRINGS), max_size=8)),
        "f": draw(st.sets(st.tuples(KEYS, FLOATS), max_size=8)),
        "i": draw(st.sets(st.tuples(KEYS, INTS), max_size=8)),
        "flag": draw(st.sampled_from([set(), {()}])),
    }


@settings(max_examples=400, deadline=None)
@given(rules=st.lists(st.sampled_from(TYPED_RULES), min_size=1, max_size=5, unique=True),
       data=typed_data())
def test_strings_floats_and_mixed_numbers_agree_with_the_tuple_evaluator(rules, data):
    text = TYPED + "\n".join(rules) + "\n"
    note(text)
    prog = load_program(text)
    got = _outcome(lambda: _columnar(prog, data))
    assert got == _outcome(lambda: Evaluator(prog).run(data))


def test_columns_and_dictionary_inputs_give_what_rows_give():
    prog = load_program(TYPED + "r(k, a, v) :- s(k, a), f(k, v), flag().\n")
    rows = {"s": [(1, "b"), (2, "a"), (1, "a")], "f": [(1, 0.5), (2, -0.0)], "flag": [()]}
    cols = {
        "s": Columns([np.array([1, 2, 1]), Dictionary(["a", "b"], np.array([1, 0, 0]))]),
        "f": Columns([[1, 2], np.array([0.5, -0.0])]),
        "flag": Columns([], rows_of_nullary=1),
    }
    assert len(Evaluator(prog).run(rows)["r"]) == 3
    assert evaluate_columns(prog, cols).rows("r") == Evaluator(prog).run(rows)["r"]
    assert evaluate(prog, cols)["r"] == Evaluator(prog).run(rows)["r"]


def test_an_integer_beyond_64_bits_runs_on_the_tuple_evaluator_and_says_so():
    prog = load_program(".decl e(a: int)\nr(y) :- e(x), y = x * x * x.\n")
    data = {"e": [(3,), (2**40,)]}
    stats = JoinStats()
    got = evaluate(prog, data, stats=stats)
    assert stats.core == "tuples: an integer result beyond 64 bits"
    assert got == Evaluator(prog).run(data) and (2**120,) in got["r"]
    with pytest.raises(NotColumnar):
        evaluate_columns(prog, data)


def test_a_variable_joining_int_and_float_columns_runs_on_the_core():
    """Read through ``uncast`` (a~int from i's column); a rule not rewritten so is refused."""
    prog = load_program(TYPED + "r(k) :- i(k, a), f(_, a).\n")
    data = {"i": [(1, 2), (3, 4)], "f": [(0, 2.0), (0, 4.5)]}
    assert _columnar(prog, data)["r"] == {(1,)}
    rule = prog.program.rules[0]
    with pytest.raises(NotColumnar, match="variable a joins a int column with a float column"):
        rules.CompiledRule(prog, prepare(rule), Codes([]), {})


def test_the_iteration_limit_is_the_same_error():
    prog = load_program(".decl e(a: int)\nr(x) :- e(x).\nr(y) :- r(x), y = x + 1.\n")
    with pytest.raises(DataError) as err:
        _columnar(prog, {"e": [(0,)]}, max_iterations=5)
    with pytest.raises(DataError) as tuple_err:
        Evaluator(prog, max_iterations=5).run({"e": [(0,)]})
    assert str(err.value) == str(tuple_err.value) and err.value.code == "DL312"


def test_a_functional_conflict_names_both_facts():
    prog = load_program(".decl e(a: int, b: string)\nr[x] = y <- e(x, y).\n")
    with pytest.raises(DataError) as err:
        _columnar(prog, {"e": [(1, "a"), (1, "b"), (2, "c")]})
    assert "r[1] = \"a\". and r[1] = \"b\"." in str(err.value)


# -- encodings ------------------------------------------------------------------------

TEXT = st.text(max_size=6)


@given(st.lists(TEXT, min_size=1, max_size=30))
def test_string_codes_order_as_the_strings_do_and_decode_to_them(values):
    codes = Codes([Codes.strings_of(values)])
    got = codes.encode(values, "string")
    assert codes.python(got, "string") == values
    for a, ca in zip(values, got.tolist(), strict=True):
        for b, cb in zip(values, got.tolist(), strict=True):
            assert (a < b) == (ca < cb) and (a == b) == (ca == cb)


FINITE = st.floats(allow_nan=False, allow_infinity=False)


@given(st.lists(FINITE, min_size=1, max_size=30))
def test_float_codes_order_as_the_numbers_do_and_decode_to_them(values):
    codes = Codes([])
    got = codes.encode(values, "float")
    back = codes.python(got, "float")
    assert back == values  # -0.0 == 0.0, and decodes to 0.0
    assert all(not (math.copysign(1, b) < 0 and b == 0) for b in back)
    for a, ca in zip(values, got.tolist(), strict=True):
        for b, cb in zip(values, got.tolist(), strict=True):
            assert (a < b) == (ca < cb) and (a == b) == (ca == cb)


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=30))
def test_int_codes_are_the_ints(values):
    codes = Codes([])
    assert codes.python(codes.encode(values, "int"), "int") == values


def test_ints_widen_into_float_columns_and_big_ints_have_no_code():
    codes = Codes([])
    assert codes.encode([1, -2], "float").tolist() == float_codes(np.array([1.0, -2.0])).tolist()
    with pytest.raises(NotColumnar):
        codes.encode([2**64], "int")
    with pytest.raises(NotColumnar):
        codes.code(2**53 + 1, "float")  # no float equals it


def test_a_functional_conflict_in_rows_too_wide_to_pack_is_found():
    """Rows whose columns span more than 62 bits together grow in a hash set in the order
    they come (here: e's rows, then f's): the conflict check reads them sorted."""
    prog = load_program(
        ".decl e(a: int, b: int, c: int)\n.decl f(a: int, b: int, c: int)\n"
        "r[x, y] = z <- e(x, y, z).\nr[x, y] = z <- f(x, y, z).\n")
    big = 2**62
    data = {"e": [(0, 5, 3), (big, big, 1)], "f": [(-big, -big, 2), (0, 5, 4)]}
    with pytest.raises(DataError) as err:
        _columnar(prog, data)
    assert "r[0, 5] = 3. and r[0, 5] = 4." in str(err.value)


def test_count_over_repeated_atoms_with_wildcards_counts_each_wildcard():
    """``u(_), u(_)`` in an aggregate's body: two variables, so pairs are counted (as the
    naive evaluator and Spark count them), in every evaluator and strategy."""
    from deltalog.engine.runtime import make_engine

    prog = load_program(".decl e(a: int, b: int)\n.decl u(a: int)\n"
                        "r[x] = n <- agg<<n = count()>> e(x, _), u(_), u(_).\n")
    data = {"e": {(0, 0)}, "u": {(0,), (1,)}}
    assert _columnar(prog, data)["r"] == {(0, 4)} == evaluate_naive(prog, data)["r"]
    assert Evaluator(prog).run(data)["r"] == {(0, 4)}
    for strategy in ("auto", "sensitivity", "dbsp"):
        engine = make_engine(prog, data, strategy)
        assert engine.relation("r") == {(0, 4)}, strategy
        engine.apply({"u": {(2,): 1}})
        assert engine.relation("r") == {(0, 9)}, strategy
