"""Aggregate rules in recursive strata on the columnar DBSP kernel: a functional predicate
defined both by an aggregate (over lower strata: recursion through an aggregate is DL202)
and by recursive rules. The aggregate rules are kept by the maintainer of a non-recursive
stratum of their own, whose rows enter the columnar stratum as an input. Random programs
from templates (min, max, count, sum; int, float and string values; negations,
comparisons, arithmetic) under random commits, checked after every commit against the
tuple-at-a-time kernel and a recompute (results, or the same DL302 on a second value for
a key), with a saved-state round trip on the way."""

import pytest
from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.dbsp.aggregates import ColumnarAggregates
from deltalog.engine.dbsp.columnar import ColumnarStratum, aggregate_rules
from deltalog.engine.dbsp.stratum import DbspStratum
from deltalog.engine.errors import DataError
from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine
from tests.engine.machines import AgainstRecompute

DECLS = """.decl e(a: int, b: int)
.decl g(a: int, b: float)
.decl s(a: string, b: string)
.decl lab[x: int] = m: int
.decl tot[x: int] = v: float
.decl first[x: string] = w: string
"""
NODES = st.integers(0, 4)
FLOATS = st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.5, 2.5, -1.0, 3.0])
WORDS = st.sampled_from(["", "a", "b", "ba", "c"])
CMP = st.sampled_from(["<", "<=", ">", ">=", "!=", "="])
FUNCS = st.sampled_from(["min", "max", "sum", "count"])


def _agg(func: str, result: str, arg: str) -> str:
    return f"agg<<{result} = count()>>" if func == "count" else f"agg<<{result} = {func}({arg})>>"


@st.composite
def _lab_rules(draw) -> list[str]:
    """lab: ints, one or two aggregate rules over e and recursive rules."""
    rules = [f"lab[x] = m <- {_agg(draw(FUNCS), 'm', 'y')} e(x, y), x {{cmp}} {{k}}."]
    if draw(st.booleans()):
        rules.append("lab[x] = n <- agg<<n = count()>> e(_, x), x > {k}, !e(x, x).")
    for _ in range(draw(st.integers(1, 2))):
        rules.append(draw(st.sampled_from([
            "lab[y] = m :- lab[x] = m, e(x, y), !e(y, y), y > {k}.",
            "lab[y] = m :- lab[x] = m, e(x, y), m {cmp} {k}.",
            "lab[y] = n :- lab[x] = m, e(x, y), x < y, n = m + 1, n <= 6.",
        ])))
    return rules


@st.composite
def _tot_rules(draw) -> list[str]:
    """tot: floats (an int aggregate into a float column too)."""
    agg = draw(st.sampled_from([
        f"tot[x] = v <- {_agg(draw(FUNCS), 'v', 'w')} g(x, w).",
        "tot[x] = v <- agg<<v = max(y)>> e(x, y), y {cmp} {k}.",
    ]))
    rec = draw(st.sampled_from([
        "tot[y] = v :- tot[x] = v, e(x, y), !g(y, _).",
        "tot[y] = v :- tot[x] = v, e(x, y), v {cmp} 1.0, x != y.",
    ]))
    return [agg, rec]


@st.composite
def _first_rules(draw) -> list[str]:
    """first: strings, ordered by min and max."""
    func = draw(st.sampled_from(["min", "max"]))
    return [f"first[x] = w <- agg<<w = {func}(y)>> s(x, y).",
            draw(st.sampled_from([
                "first[y] = w :- first[x] = w, s(x, y), !s(y, _).",
                "first[y] = w :- first[x] = w, s(x, y), w {cmp} y.",
            ]))]


FAMILIES = {"lab": _lab_rules, "tot": _tot_rules, "first": _first_rules}


@st.composite
def aggregate_programs(draw) -> str:
    """One or two of the families (each more often ends in DL302 on tiny data)."""
    families = draw(st.lists(st.sampled_from(sorted(FAMILIES)), min_size=1, max_size=2,
                             unique=True))
    rules = [r for f in sorted(families) for r in draw(FAMILIES[f]())]
    filled = [text.format(k=draw(NODES), cmp=draw(CMP)) for text in rules]
    return DECLS + "\n".join(filled) + "\n"


ROWS = {"e": st.tuples(NODES, NODES), "g": st.tuples(NODES, FLOATS),
        "s": st.tuples(WORDS, WORDS)}


class AggregateMachine(AgainstRecompute):
    """Columnar kernel, tuple kernel and recompute on the same commits; an error (DL302)
    ends the run, on all three at once."""

    ROWS = ROWS

    @initialize(text=aggregate_programs(), data=st.fixed_dictionaries(
        {p: st.sets(rows, max_size=6) for p, rows in ROWS.items()}))
    def load(self, text, data):
        note(text)
        prog = load_program(text)
        if not self.start_both_ways([s.preds[0] for s in prog.strata if s.recursive],
                                    prog, data, "auto"):
            return
        col = self.engines[0]
        assert sum(isinstance(m, ColumnarStratum) for _, m in col.strata) == len(
            self.preds) > 0
        assert not [line for line in col.slow_paths() if "DBSP" in line]


TestAggregatesInRecursion = AggregateMachine.TestCase
TestAggregatesInRecursion.settings = settings(max_examples=200, stateful_step_count=6,
                                              deadline=None)


LABELS = DECLS + """
lab[x] = m <- agg<<m = min(y)>> e(x, y), x < 2.
lab[y] = m :- lab[x] = m, e(x, y), y >= 2.
"""


def test_an_aggregate_rule_keeps_its_recursive_stratum_columnar():
    """The aggregate rule is kept by a maintainer of its own (on arrays, under auto and
    dbsp; the tuple DBSP kernel's with the columnar kernel off); the rest of the stratum
    is columnar, and a commit's work shows both."""
    prog = load_program(LABELS)
    engine = IncrementalEngine(prog, {"e": {(0, 5), (0, 2), (2, 3), (3, 4)}})
    (m,) = [m for s, m in engine.strata if "lab" in s.preds]
    assert isinstance(m, ColumnarStratum) and isinstance(m.aggregates, ColumnarAggregates)
    assert engine.slow_paths() == []
    assert engine.relation("lab") == {(0, 2), (2, 2), (3, 2), (4, 2), (5, 2)}
    assert engine.apply({"e": {(0, 1): 1}}) == {"lab": {
        (0, 2): -1, (2, 2): -1, (3, 2): -1, (4, 2): -1, (5, 2): -1,
        (0, 1): 1, (2, 1): 1, (3, 1): 1, (4, 1): 1, (5, 1): 1}}
    work = engine.last_stats.work
    # (the aggregate's assignments are a columnar stratum of their own)
    assert work["columnar_strata"] == 2 and work["aggregate_assignments"] >= 1
    # a change the aggregate does not see reaches the recursion alone
    assert engine.apply({"e": {(4, 6): 1}}) == {"lab": {(6, 1): 1}}
    dbsp = IncrementalEngine(prog, {"e": {(0, 5)}}, "dbsp")
    (m,) = [m for s, m in dbsp.strata if "lab" in s.preds]
    assert isinstance(m, ColumnarStratum) and isinstance(m.aggregates, ColumnarAggregates)
    assert dbsp.slow_paths() == []
    off = IncrementalEngine(prog, {"e": {(0, 5)}}, "dbsp", columnar=False)
    (m,) = [m for s, m in off.strata if "lab" in s.preds]
    assert isinstance(m, DbspStratum)


def test_the_aggregate_maintainer_is_required_exactly_when_there_are_aggregate_rules():
    prog = load_program(LABELS)
    stratum = next(s for s in prog.strata if "lab" in s.preds)
    assert aggregate_rules(stratum) is not None
    with pytest.raises(ValueError, match="aggregate rules"):
        ColumnarStratum(prog, stratum)
    plain = load_program(DECLS + "lab[y] = m :- lab[x] = m, e(x, y).\nlab[x] = 0 :- g(x, _).")
    stratum = next(s for s in plain.strata if "lab" in s.preds)
    assert aggregate_rules(stratum) is None


def test_a_second_value_from_the_aggregate_and_the_recursion_is_dl302():
    prog = load_program(LABELS)
    engine = IncrementalEngine(prog, {"e": {(0, 5), (1, 7), (5, 2)}})
    with pytest.raises(DataError) as err:
        engine.apply({"e": {(7, 2): 1}})
    assert err.value.code == "DL302" and "lab[2]" in str(err.value)


def test_min_and_max_of_strings_on_the_tuple_kernel():
    """The tuple kernel's groups sum the values of sum and total only (a string min once
    failed there, summing strings)."""
    text = DECLS + "first[x] = w <- agg<<w = min(y)>> s(x, y).\n"
    prog = load_program(text)
    data = {"s": {("a", "b"), ("a", ""), ("c", "ba")}}
    engine = IncrementalEngine(prog, data, "dbsp")
    assert engine.relation("first") == {("a", ""), ("c", "ba")}
    assert engine.apply({"s": {("a", ""): -1}}) == {"first": {("a", ""): -1, ("a", "b"): 1}}
    assert engine.relation("first") == RecomputeEngine(
        prog, {"s": {("a", "b"), ("c", "ba")}}).relation("first")
