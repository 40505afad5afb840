"""Aggregate rules kept on arrays (``deltalog.engine.dbsp.aggregates``): random programs of
aggregate rules (count, sum, total, min, max; int, float and string values, ints beyond
64 bits and sums past int64, floats from the subnormal to the float range's end; keys of
variables, constants, none and a cast; negations, comparisons, arithmetic) under random
commits, checked after every commit against a recompute (results, or the same data
error), with saved-state round trips on the way. Tiny domains, so that groups empty and
fill, extremes leave and sums cancel."""

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.dbsp.aggregates import ColumnarAggregates, add128, groups_reason
from deltalog.engine.errors import DataError
from deltalog.engine.ivm.stratum import SensitivityStratum
from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine
from tests.engine.machines import AgainstRecompute, outcome

DECLS = """.decl e(a: int, b: int)
.decl g(a: int, b: float)
.decl s(a: string, b: string)
.decl ci[x: int] = n: int
.decl si[x: int] = n: int
.decl sf[x: int] = v: float
.decl mi[x: int] = v: int
.decl mf[x: int] = v: float
.decl ms[x: string] = w: string
.decl all[] = n: int
.decl two[x: int, c: int] = n: int
.decl fk[x: float] = n: int
"""
TEMPLATES = [
    "ci[x] = n <- agg<<n = count()>> e(x, y), y {cmp} {k}.",
    "ci[x] = n <- agg<<n = count()>> e(x, _), !e(_, x).",
    "si[x] = n <- agg<<n = sum(y)>> e(x, y).",
    "si[x] = n <- agg<<n = sum(z)>> e(x, y), z = y - {k}.",
    "si[x] = n <- agg<<n = sum(y)>> e(x, y), !g(y, _), x {cmp} {k}.",
    "sf[x] = v <- agg<<v = sum(w)>> g(x, w).",
    "sf[x] = v <- agg<<v = total(w)>> g(x, w), !e(x, x).",
    "sf[x] = v <- agg<<v = total(y)>> e(x, y).",
    "sf[x] = v <- agg<<v = sum(y)>> e(x, y), y {cmp} {k}.",
    "mi[x] = v <- agg<<v = {ext}(y)>> e(x, y).",
    "mi[x] = v <- agg<<v = {ext}(z)>> e(x, y), e(y, z), z != x.",
    "mf[x] = v <- agg<<v = {ext}(w)>> g(x, w).",
    "mf[x] = v <- agg<<v = {ext}(y)>> e(x, y), y {cmp} {k}.",
    "ms[x] = w <- agg<<w = {ext}(y)>> s(x, y).",
    "ms[x] = w <- agg<<w = {ext}(y)>> s(x, y), !s(y, x).",
    "all[] = n <- agg<<n = {func}(y)>> e(_, y).",
    "two[x, {k}] = n <- agg<<n = {func}(y)>> e(x, y).",
    "fk[x] = n <- agg<<n = count()>> g(_, x), !e(_, 1).",
    "fk[y] = n <- agg<<n = {func}(y)>> e(y, x), e(x, y).",  # (an int key in a float column)
    "ci[x] = n <- agg<<n = count()>> e(x, _), g(_, _), g(_, _).",
    "ci[{k}] = n <- agg<<n = count()>> e(1, 2), !e(2, {k}).",  # (assignments of no variable)
]
NODES = st.integers(0, 3)
INTS = st.sampled_from([0, 1, 2, 3, -1, 2**62, 2**62 + 1, -(2**62), 2**63 - 1, -(2**63),
                        2**70])  # (2^62 and 2^62 + 1: one float)
FLOATS = st.sampled_from([0.0, -0.0, 0.1, 0.5, 3.0, -0.1, 1e308, -1e308, 1.7e308, 5e-324,
                          1e-300])
WORDS = st.sampled_from(["", "a", "b", "ba"])
ROWS = {"e": st.tuples(NODES, st.one_of(NODES, INTS)), "g": st.tuples(NODES, FLOATS),
        "s": st.tuples(WORDS, WORDS)}


# plain rules beside the aggregate rules of a predicate (the bridge: ``_bridged``)
PLAIN = [
    "ci[x] = 1 :- e(x, x).",
    "mi[x] = v :- e(x, v), x = {k}.",
    "ms[x] = x :- s(x, x).",
    "two[x, {k}] = 0 :- e(x, x).",
    "ci[3] = 2.",  # (facts of an aggregate's predicate: the bridge's own rows)
    'ms["b"] = "a".',
    "all[] = 1.",
]


@st.composite
def programs(draw, most: int = 1) -> str:
    """Aggregate rules from the templates, at most ``most`` per predicate, and with
    ``most`` > 1 maybe a plain rule beside them."""
    picks = draw(st.lists(st.sampled_from(TEMPLATES), min_size=1, max_size=4))
    heads: dict[str, list[str]] = {}
    for text in picks:
        same = heads.setdefault(text.split("[")[0], [])
        if len(same) < most:
            same.append(text)
    rules = [t for same in heads.values() for t in same]
    if most > 1:
        rules += [t for t in draw(st.lists(st.sampled_from(PLAIN), max_size=2, unique=True))
                  if t.split("[")[0] in heads]
    filled = [text.format(k=draw(NODES), cmp=draw(st.sampled_from(["<", ">=", "!="])),
                          ext=draw(st.sampled_from(["min", "max"])),
                          func=draw(st.sampled_from(["count", "sum", "min", "max"])))
              .replace("count(y)", "count()") for text in rules]
    return DECLS + "\n".join(filled) + "\n"


class ArrayAggregates(AgainstRecompute):
    """One aggregate rule per predicate: a stratum kept by ``ColumnarAggregates``."""

    ROWS = ROWS
    most = 1

    @initialize(text=programs(),
                data=st.fixed_dictionaries(
        {p: st.sets(rows, max_size=8) for p, rows in ROWS.items()}))
    def load(self, text, data):
        note(text)
        prog = load_program(text)
        if not self.start(sorted(prog.idb), lambda: RecomputeEngine(prog, data),
                          lambda: IncrementalEngine(prog, data)):
            return
        eng = self.engines[0]
        for _, m in eng.strata:
            if self.most > 1:  # (or the bridge of a columnar stratum: two rules of a head)
                m = getattr(m, "aggregates", m)
            if isinstance(m, SensitivityStratum):  # (an int key in a float column)
                assert m.group_arrays is not None
            else:
                assert isinstance(m, ColumnarAggregates)
        # (a sensitivity stratum's rule may be recorded on the tuple join, and say so)
        assert not [line for line in eng.slow_paths() if "recorded" not in line]


TestArrayAggregates = ArrayAggregates.TestCase
TestArrayAggregates.settings = settings(max_examples=100, stateful_step_count=8,
                                        deadline=None)


class BridgedAggregates(ArrayAggregates):
    """Two aggregate rules of one predicate, and plain rules beside them: a columnar
    stratum counts each row its rules give once and finds a key they give two values
    (DL302, as a recompute does), its aggregate rules kept on arrays each under a name
    of its own."""

    most = 2

    @initialize(text=programs(most=2), data=st.fixed_dictionaries(
        {p: st.sets(rows, max_size=8) for p, rows in ROWS.items()}))
    def load(self, text, data):
        super().load(text, data)


TestBridgedAggregates = BridgedAggregates.TestCase
TestBridgedAggregates.settings = settings(max_examples=100, stateful_step_count=8,
                                          deadline=None)


class SensitivityAggregates(AgainstRecompute):
    """Aggregate rules, two of a predicate and plain rules beside them, under the
    sensitivity strategy: the groups on arrays (``GroupArrays`` fed by the change oracle's
    units, the head rows' support on arrays too), against a recompute and against the
    groups kept per group in Python objects (columnar kernel off)."""

    ROWS = ROWS

    @initialize(text=programs(most=2), data=st.fixed_dictionaries(
        {p: st.sets(rows, max_size=8) for p, rows in ROWS.items()}))
    def load(self, text, data):
        note(text)
        prog = load_program(text)
        if not self.start_both_ways(sorted(prog.idb), prog, data, "sensitivity"):
            return
        eng, plain = self.engines
        for _, m in eng.strata:
            assert isinstance(m, SensitivityStratum)
            arrays = {id(r) for r in m.group_arrays.rules} if m.group_arrays else set()
            for rule in m.stratum.rules:
                if rule.aggregate is not None:
                    assert (id(rule) in arrays) == (groups_reason(prog, rule) is None)
        assert not any(m.group_arrays for _, m in plain.strata)


TestSensitivityAggregates = SensitivityAggregates.TestCase
TestSensitivityAggregates.settings = settings(max_examples=100, stateful_step_count=8,
                                              deadline=None)


@pytest.mark.parametrize("values", [
    [2**63 - 1, 2**63 - 1, 2**63 - 1, -(2**63), -(2**63), 5],
    [-(2**63)] * 7 + [-1, 1],
    [1, -1, 2**62, 2**62, 2**62, 2**62, -(2**62)],
])
def test_the_128_bit_sums_are_exact_whatever_the_order(values):
    """Summands added and taken away in every order give the exact sum (hi * 2^64 + lo,
    lo unsigned), past int64 on the way."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        signs = rng.choice([1, -1], len(values))
        order = rng.permutation(len(values))
        hi, lo = np.zeros(1, np.int64), np.zeros(1, np.int64)
        vals = np.array(values, np.int64)[order]
        add128(np.zeros(len(values), np.int64), vals, signs[order].astype(np.int64), hi, lo)
        want = sum(int(v) * int(w) for v, w in zip(vals, signs[order], strict=True))
        assert int(hi[0]) * 2**64 + int(lo[0]) % 2**64 == want


def test_an_aggregate_stratum_commits_by_the_assignments_it_changes():
    """A commit's work is the assignments that came and went, not the group's size: one
    inserted edge into a group of a thousand changes one assignment, and a min whose
    value stays untouched reads no group again."""
    text = DECLS + ("mi[x] = v <- agg<<v = min(y)>> e(x, y).\n"
                    "ci[x] = n <- agg<<n = count()>> e(x, _).\n")
    prog = load_program(text)
    rows = {(0, y) for y in range(1000)}
    eng = IncrementalEngine(prog, {"e": rows})
    assert eng.relation("mi") == {(0, 0)} and eng.relation("ci") == {(0, 1000)}
    assert eng.apply({"e": {(0, 5000): 1}}) == {"ci": {(0, 1000): -1, (0, 1001): 1}}
    assert eng.last_stats.work["aggregate_assignments"] == 2  # (one per rule)
    assert eng.apply({"e": {(0, 0): -1}}) == {"mi": {(0, 0): -1, (0, 1): 1},
                                              "ci": {(0, 1001): -1, (0, 1000): 1}}
    assert eng.apply({"e": {(0, -3): 1, (0, 1): -1}}) == {"mi": {(0, 1): -1, (0, -3): 1}}


def test_sums_of_ints_beyond_int64_come_and_go_exactly():
    """Summands beyond int64 (kept as exact integers beside the 128-bit sums) and sums
    that pass int64 and come back, on the load and on commits, as a recompute has them."""
    text = DECLS + ("si[x] = n <- agg<<n = sum(y)>> e(x, y).\n"
                    "sf[x] = v <- agg<<v = total(y)>> e(x, y).\n")
    prog = load_program(text)
    data = {"e": {(1, 2**70), (1, 3), (2, 2**63 - 1), (2, 2**62)}}
    eng, rec = IncrementalEngine(prog, data), RecomputeEngine(prog, data)
    for change in ({(1, 2**70): -1, (2, -(2**63)): 1}, {(2, 2**63 - 1): -1, (1, -(2**70)): 1},
                   {(1, 3): -1, (2, 2**62): -1}, {(1, -(2**70)): -1, (2, -(2**63)): -1}):
        assert eng.apply({"e": change}) == rec.apply({"e": change})
        for p in ("si", "sf"):
            assert eng.relation(p) == rec.relation(p)


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 2), st.floats(allow_nan=False,
                                                            allow_infinity=False,
                                                            max_value=1e300, min_value=-1e300)),
                     min_size=1, max_size=30, unique=True),
       cut=st.integers(0, 30), data=st.data())
def test_float_sums_are_exact_under_any_order_of_changes(rows, cut, data):
    """Floats of any exponent (subnormals, and shifts far apart within a group) summed by
    ``total`` and ``sum``, loaded in part and then inserted and erased in a drawn order:
    the correctly rounded exact sums a recompute gives, to the bit."""
    text = DECLS + ("sf[x] = v <- agg<<v = total(w)>> g(x, w).\n"
                    "mf[x] = v <- agg<<v = sum(w)>> g(x, w), w != 0.5.\n")
    prog = load_program(text)
    first, rest = set(rows[:cut]), rows[cut:]
    eng, rec = IncrementalEngine(prog, {"g": first}), RecomputeEngine(prog, {"g": first})
    held = set(first)
    for row in data.draw(st.permutations(rest + sorted(first)[: len(first) // 2])):
        change = {row: -1 if row in held else 1}
        held ^= {row}
        got, want = outcome(lambda c=change: eng.apply({"g": c})), outcome(
            lambda c=change: rec.apply({"g": c}))
        assert got == want
        if isinstance(got, str):
            return
        for p in ("sf", "mf"):
            got_rows = {(k, v, repr(v)) for k, v in eng.relation(p)}
            assert got_rows == {(k, v, repr(v)) for k, v in rec.relation(p)}, p


def test_an_int_key_in_a_float_column_is_kept_where_its_second_value_is_found():
    """Ints beyond 2^53 that one float key stands for are two groups with one key: the
    sensitivity maintainer keeps such a rule, its groups on arrays and the rows they
    give counted, and finds the second value (DL302), as the tuple evaluator and the
    columnar core (the recompute, which grouped the keys made floats first and merged
    the two groups) do; a commit that makes the two groups' rows one row keeps it."""
    from deltalog.engine.evaluate import Evaluator

    prog = load_program(DECLS + "fk[x] = n <- agg<<n = count()>> e(x, _).\n")
    data = {"e": {(2**53, 1), (2**53 + 1, 1), (2**53 + 1, 2)}}
    for make in (lambda: Evaluator(prog).run(data), lambda: RecomputeEngine(prog, data),
                 lambda: IncrementalEngine(prog, data)):
        with pytest.raises(DataError) as err:
            make()
        assert err.value.code == "DL302"
    eng = IncrementalEngine(prog, {"e": {(2**53, 1), (2, 1)}})
    (_, m), = eng.strata
    assert isinstance(m, SensitivityStratum) and m.group_arrays is not None
    assert eng.slow_paths() == []
    assert eng.relation("fk") == {(2.0**53, 1), (2.0, 1)}
    # the second group's row is the first's: counted twice, one row
    rec = RecomputeEngine(prog, {"e": {(2**53, 1), (2, 1)}})
    for change in ({(2**53 + 1, 7): 1}, {(2**53, 1): -1}, {(2**53 + 1, 8): 1}):
        assert eng.apply({"e": change}) == rec.apply({"e": change})
    assert eng.relation("fk") == {(2.0**53, 2), (2.0, 1)}
    with pytest.raises(DataError, match="DL302"):  # (and a group of one again: 1 and 2)
        eng.apply({"e": {(2**53, 5): 1}})
