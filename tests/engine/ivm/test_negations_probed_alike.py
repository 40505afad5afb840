"""Negations of one relation probed alike (in one column order to one depth: ``!e(y, 1),
!e(y, 2)``, ``!e(1, y), !e(2, y)``, ``!e(x, 1), !e(y, 1)``, ``!e(x, y), !e(y, x)``, three
of them, probes before the join among them) share one sensitivity index, as the tuple
join files their probes: the compiled join records them there, each layout's probes a
part on arrays (``IntervalIndex.others``), and commits on the compiled join stab each
layout's part. An engine recorded and committing so maintains what an engine on the
tuple join maintains and what a recompute gives, commit after commit, saved and opened
again between commits, and with its commits sent to the tuple join."""

from collections import Counter
from functools import partial
from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from deltalog.engine import state_codec
from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.columnar.encoding import NotColumnar
from deltalog.engine.ivm.coded_intervals import CodeBook, CodedIntervals
from deltalog.engine.ivm.compiled import CommitJoin
from deltalog.engine.ivm.interval_index import IntervalIndex
from deltalog.engine.ivm.stratum import SensitivityStratum
from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine
from deltalog.engine.segments import MemorySegments
from tests.engine.ivm.test_interval_persist import CollectingSegments
from tests.engine.programs import (
    DOMAIN,
    EDB_ARITY,
    EDB_DECLS,
    as_deltas,
    edb_batches,
    edb_data,
    positive_body,
)

# part ⊆ e whatever the data: ``e(x, y), !part(x, y)`` reads E \ P through a complement
# atom, beside negations of part probed alike.
PART = "part(x, y) :- e(x, y), x < y.\n"


# Positive bodies that bind two or three variables over the tiny domain (and, now and
# then, ``positive_body``'s).
SHAPES = [("e(x, y)",), ("f(x, y)",), ("f(x, y)", "e(y, z)"), ("e(x, y)", "u(y)"),
          ("f(x, y)", "f(y, z)"), ("e(x, y)", "f(x, z)")]


# Which columns of a negated atom are fixed (a bound variable or a constant): all of
# them most often, none (``!e(_, _)``) now and then.
FIXED = {1: [(True,), (True,), (False,)],
         2: [(True, True)] * 3 + [(True, False), (False, True), (False, False)]}


def _alike(draw: Any, pred: str, arity: int, names: list[str], count: int) -> list[str]:
    """``count`` negations of ``pred`` probed alike: the same columns fixed (a bound
    variable or a constant each, so one column order and one depth), the rest ``_``;
    after the first, often the first with another last fixed column (so that their
    probes are coded alike: ``!e(y, 1), !e(y, 2)``, ``!e(y, x), !e(y, y)``)."""
    fixed = draw(st.sampled_from(FIXED[arity]))
    values = [*names, *map(str, range(5))]
    arg = st.one_of(st.sampled_from(names), st.sampled_from(values))
    first = [draw(arg) if f else "_" for f in fixed]
    out = [first]
    for _ in range(count - 1):
        if any(fixed) and draw(st.booleans()):
            args = list(first)
            last = max(c for c in range(arity) if fixed[c])
            args[last] = draw(st.sampled_from([v for v in values if v != first[last]]))
        else:
            args = [draw(arg) if f else "_" for f in fixed]
        out.append(args)
    return [f"!{pred}({', '.join(args)})" for args in out]


@st.composite
def alike_programs(draw: Any) -> tuple[str, list[str]]:
    """(program, heads): 1-2 rules over e, f, u (ints over 0..4) each with two or three
    negations of one relation probed alike (``_alike``), now and then another negation
    or a comparison, an aggregate head, or a complement atom over ``part`` beside
    negations of part probed alike; ``heads`` names the rules' heads."""
    rules = []
    heads = []
    complement = draw(st.integers(0, 3)) == 0
    for i in range(draw(st.integers(1, 2))):
        if draw(st.integers(0, 3)):
            body = list(draw(st.sampled_from(SHAPES)))
            bound = [v for v in "xyz" if any(v in atom for atom in body)]
        else:
            body, bound = positive_body(draw, EDB_ARITY, lambda: str(draw(DOMAIN)))
        if complement and i == 0:
            body = ["e(x, y)", "!part(x, y)", *body]
            bound += ["x", "y"]
            pred = "part"
        else:
            pred = draw(st.sampled_from(sorted(EDB_ARITY)))
        names = sorted(set(bound))
        arity = 2 if pred == "part" else EDB_ARITY[pred]
        negations = _alike(draw, pred, arity, names, draw(st.integers(2, 3)))
        if draw(st.integers(0, 2)) == 0:
            other = draw(st.sampled_from(sorted(EDB_ARITY)))
            negations += _alike(draw, other, EDB_ARITY[other], names, 1)
        for neg in negations:
            body.insert(draw(st.integers(0, len(body))), neg)
        if draw(st.integers(0, 3)) == 0:
            body.append(f"{draw(st.sampled_from(names))} "
                        f"{draw(st.sampled_from(['<', '!=', '>=']))} "
                        f"{draw(st.sampled_from([*names, str(draw(DOMAIN))]))}")
        head = f"p{i}"
        heads.append(head)
        if draw(st.integers(0, 4)) == 0:
            rules.append(f"{head}[{draw(st.sampled_from(names))}] = n <- "
                         f"agg<<n = count()>> {', '.join(body)}.")
        else:
            args = [draw(st.sampled_from(names)) for _ in range(draw(st.integers(1, 2)))]
            rules.append(f"{head}({', '.join(args)}) :- {', '.join(body)}.")
    return EDB_DECLS + (PART if complement else "") + "\n".join(rules) + "\n", heads


def _maintainers(engine: IncrementalEngine) -> list[Any]:
    return [h.maintainer for _, m in engine.strata if isinstance(m, SensitivityStratum)
            for h in m.heads]


def _tuple_commits(engine: IncrementalEngine) -> IncrementalEngine:
    """``engine`` with every rule's commits on the tuple join (its first evaluation as
    recorded: the compiled join's arrays)."""
    for m in _maintainers(engine):
        m._commit = "tuples: test"
    return engine


def _changed(out: dict[str, dict[Any, int]]) -> dict[str, dict[Any, int]]:
    return {p: d for p, d in out.items() if d}


@given(program=alike_programs(), data=edb_data(), batches=edb_batches(8, 3),
       cut=st.integers(0, 12))
@settings(max_examples=500, deadline=None)
def test_negations_probed_alike_record_and_commit_on_the_compiled_join(
        program, data, batches, cut):
    """The compiled engine records every such rule on the compiled join (and commits on
    it, after an open too); it, the same with its commits on the tuple join, the tuple
    engine and a recompute agree after the load and every commit, on the relations and
    on the deltas; the compiled engine is saved to a segment store and opened between
    two commits, and one more engine commits on the compiled join until then and on the
    tuple join after (as a commit that meets a value with no code goes on)."""
    text, heads = program
    note(text)
    prog = load_program(text)
    compiled = IncrementalEngine(prog, data, "sensitivity")
    mixed = _tuple_commits(IncrementalEngine(prog, data, "sensitivity"))
    switched = IncrementalEngine(prog, data, "sensitivity")
    tuples = IncrementalEngine(prog, data, "sensitivity", False)
    recompute = RecomputeEngine(prog, data)
    alike = [m for m in _maintainers(compiled) if m.rule.head.pred in heads]
    assert len(alike) == len(heads)
    assert all(m.recorded_by == "compiled" for m in alike), [m.recorded_by for m in alike]
    assert all(type(m.commit_join(prog)) is CommitJoin for m in alike), [
        m.commit_join(prog) for m in alike]
    shared = sum(len(i.others) for m in alike for i in m.indices.values())
    event(f"indices' other layouts: {min(shared, 3)}")
    for engine in (compiled, mixed, tuples):
        for p in prog.idb:
            assert engine.relation(p) == recompute.relation(p), p
    commits = 0
    for step, changes in enumerate(batches):
        if step == cut:  # a new run: saved to a segment store and opened from it
            store = MemorySegments()
            compiled = IncrementalEngine.loads(compiled.dumps(store), store)
            _tuple_commits(switched)
        deltas = as_deltas(changes)
        note(f"apply {deltas}")
        before = {p: compiled.relation(p) for p in prog.idb}
        out = _changed(compiled.apply(deltas))
        commits += compiled.last_stats.work.get("compiled_commits", 0)
        for p in prog.idb:  # the deltas returned are what changed
            after = compiled.relation(p)
            assert {r for r, w in out.get(p, {}).items() if w > 0} == after - before[p], p
            assert {r for r, w in out.get(p, {}).items() if w < 0} == before[p] - after, p
        assert _changed(mixed.apply(deltas)) == out
        assert _changed(switched.apply(deltas)) == out
        assert _changed(tuples.apply(deltas)) == out
        assert _changed(recompute.apply(deltas)) == out
        for p in prog.idb:
            want = recompute.relation(p)
            assert compiled.relation(p) == want, ("compiled", p)
            assert mixed.relation(p) == want, ("mixed", p)
            assert switched.relation(p) == want, ("switched", p)
            assert tuples.relation(p) == want, ("tuples", p)
    event(f"compiled commits: {min(commits, 3)}")
    shared = sum(len(i.others) for m in _maintainers(compiled) if m.rule.head.pred in heads
                 for i in m.indices.values())
    event(f"indices' other layouts at the end: {min(shared, 3)}")


BODY = ".decl e(a: int, b: int)\n.decl f(a: int, b: int)\n"


@st.composite
def alike_rules(draw: Any) -> str:
    """One rule ``r`` of every variable over f (and e), with two or three negations of e
    probed alike whose columns are the rule's variables and constants (``_alike``)."""
    body = list(draw(st.sampled_from([("f(x, y)",), ("f(x, y)", "e(y, z)"),
                                      ("f(x, y)", "f(y, z)")])))
    names = ["x", "y", "z"] if len(body) > 1 else ["x", "y"]
    for neg in _alike(draw, "e", 2, names, draw(st.integers(2, 3))):
        body.insert(draw(st.integers(0, len(body))), neg)
    return f"r({', '.join(names)}) :- {', '.join(body)}."


def _rows(draw: Any) -> Any:
    return draw(st.sets(st.tuples(DOMAIN, DOMAIN), max_size=12))


@given(rule=alike_rules(), data=st.data())
@settings(max_examples=500, deadline=None)
def test_a_rule_of_negations_probed_alike_commits_like_the_tuple_join(rule, data):
    """Dense data over 0..4 and commits of one to three rows of e and f: the compiled
    engine (recorded and committing on the compiled join), the tuple engine and a
    recompute agree after every commit, on r and on its deltas."""
    note(rule)
    prog = load_program(BODY + rule)
    start = {"e": _rows(data.draw), "f": _rows(data.draw)}
    compiled = IncrementalEngine(prog, start, "sensitivity")
    tuples = IncrementalEngine(prog, start, "sensitivity", False)
    recompute = RecomputeEngine(prog, start)
    (m,) = _maintainers(compiled)
    assert m.recorded_by == "compiled" and type(m.commit_join(prog)) is CommitJoin
    assert compiled.relation("r") == tuples.relation("r") == recompute.relation("r")
    for _ in range(6):
        deltas = as_deltas(data.draw(st.lists(st.tuples(
            st.tuples(st.sampled_from(["e", "e", "f"]), st.tuples(DOMAIN, DOMAIN)),
            st.sampled_from([1, -1])), min_size=1, max_size=3)))
        note(f"apply {deltas}")
        out = _changed(compiled.apply(deltas))
        assert _changed(tuples.apply(deltas)) == out
        assert _changed(recompute.apply(deltas)) == out
        assert compiled.relation("r") == recompute.relation("r")


# Rules whose negations the tuple join probes for every binding the compiled join's
# output holds (each head holds every variable): the compiled load records the same
# probes into the shared index. (key, rule)
SAME_PROBES = [
    (("neg", "e", (0, 1), 1), "r(x, y) :- f(x, y), !e(y, 1), !e(y, 2)."),
    (("neg", "e", (0, 1), 1), "r(x, y) :- f(x, y), !e(1, y), !e(2, y)."),
    (("neg", "e", (0, 1), 1), "r(x, y) :- f(x, y), !e(x, y), !e(y, x)."),
    (("neg", "e", (0, 1), 1), "r(x, y) :- f(x, y), !e(x, 1), !e(y, 1)."),
    (("neg", "e", (0, 1), 1), "r(x, y) :- f(x, y), !e(y, 3), !e(1, y), !e(x, 4)."),
    (("neg", "e", (0, 1), 0), "r(x, y) :- f(x, y), !e(y, _), !e(x, _), !e(2, _)."),
    (("neg", "e", (0, 1), 0), "r(x, y) :- f(x, y), !e(3, _), !e(2, _)."),
    (("whole", "e"), "r(x, y) :- f(x, y), !e(_, _), !e(_, _)."),
]
DATA = {"e": {(0, 1), (1, 2), (2, 0), (3, 3), (4, 1), (1, 4)},
        "f": {(0, 1), (1, 0), (2, 2), (3, 4), (4, 3), (0, 3), (1, 1)}}


@pytest.mark.parametrize("key,rule", SAME_PROBES)
def test_the_shared_index_holds_the_probes_the_tuple_join_records(key, rule):
    """Every negation's probes, in one index under their one key, as the tuple join files
    them (a part per layout); commits on the compiled join maintain what the tuple join's
    commits do, and a recompute gives."""
    prog = load_program(BODY + rule)
    compiled = IncrementalEngine(prog, DATA, "sensitivity")
    tuples = IncrementalEngine(prog, DATA, "sensitivity", False)
    (m,), (t,) = _maintainers(compiled), _maintainers(tuples)
    assert m.recorded_by == "compiled" and t.recorded_by == "tuples"
    assert sorted(k for k in m.indices if k[0] != "atom") == [key]
    # (as sets: a probe two layouts share, !e(x, y) and !e(y, x) at x = y, is in both
    # parts; the tuple join's index keeps it once)
    assert set(m.indices[key].intervals()) == set(t.indices[key].intervals())
    assert m.indices[key].intervals()
    if key[0] == "neg" and "!e(x, 1), !e(y, 1)" in rule:
        assert len(m.indices[key].others) == 1  # the probes of x and of (x, y)
    for change in ({"e": {(1, 3): 1, (2, 0): -1}}, {"e": {(3, 3): -1, (2, 1): 1}},
                   {"f": {(2, 4): 1, (0, 1): -1}, "e": {(4, 2): 1}}):
        out = compiled.apply(change)
        assert tuples.apply(change) == out
        assert compiled.relation("r") == tuples.relation("r") == RecomputeEngine(
            prog, {n: compiled.relation(n) for n in ("e", "f")}).relation("r")


def test_twice_commits_on_the_compiled_join_and_stabs_both_constants():
    """``!e(y, 1), !e(y, 2)``: one part holds both probes; inserting e(3, 2) stabs the
    probe of the second negation at y = 3 (taking 0 out of twice; 3 comes in), e(4, 1)
    the first's at y = 4; each commit on the compiled join."""
    prog = load_program(BODY + "twice(x) :- e(x, y), !e(y, 1), !e(y, 2).")
    engine = IncrementalEngine(prog, {"e": {(0, 3), (1, 4), (4, 0)}}, "sensitivity")
    (m,) = _maintainers(engine)
    key = ("neg", "e", (0, 1), 1)
    assert m.recorded_by == "compiled" and not m.indices[key].others
    assert type(m.indices[key].static) is CodedIntervals
    assert engine.relation("twice") == {(0,), (1,), (4,)}
    assert engine.apply({"e": {(3, 2): 1}}) == {"twice": {(0,): -1, (3,): 1}}
    assert engine.last_stats.work["compiled_commits"] == 1
    assert engine.apply({"e": {(4, 1): 1}}) == {"twice": {(1,): -1}}
    assert engine.last_stats.work["compiled_commits"] == 1
    assert engine.apply({"e": {(3, 2): -1}}) == {"twice": {(0,): 1, (3,): -1}}
    assert engine.last_stats.work["compiled_commits"] == 1
    assert engine.relation("twice") == {(0,), (4,)}


def _layouts() -> tuple[CodedIntervals, CodedIntervals]:
    """The probes of ``!e(x, 1)`` (context x) and of ``!e(y, 1)`` (context x, y) of one
    index ("neg", "e", (0, 1), 1): bucket the probe's variable, point 1."""
    ones = np.ones(2, np.int64)
    first = CodedIntervals(CodeBook([]), ["int"], "int", [(0, 0, "int")],
                           np.array([[0], [2]], np.int64), ones, ones.copy(), split=True)
    second = CodedIntervals(CodeBook([]), ["int", "int"], "int", [(0, 1, "int")],
                            np.array([[0, 3], [2, 0]], np.int64), ones.copy(), ones.copy(),
                            split=True)
    return first, second


def test_an_index_of_two_layouts_routes_stabs_and_keeps_them_apart():
    """Each layout's part in an index of its own; an interval recorded as values goes to
    the part it fits, one no part fits (a probe before the join, payload None; a bucket
    that is not its context's) to one on tuples; a stab asks them all; a part refuses an
    interval of another layout; saved and opened, the same intervals, stabbed alike."""
    first, second = _layouts()
    index = IntervalIndex()
    index.add_static(first)
    index.add_static(second)
    assert index.static is first and [o.static for o in index.others] == [second]
    assert index.of_layout(second.layout(), make=False) is index.others[0]
    with pytest.raises(NotColumnar):
        first.like([((3,), 1, 1, ((0,), 3))])  # (the second's shape)
    # (``!e(2, 1)``, probed before the join, files ((2,), 1, 1, None) under the same key)
    index.add_many([((5,), 1, 1, ((4,), 5)), ((1,), 1, 1, ((), 1)), ((2,), 1, 1, None),
                    ((3,), 1, 1, ((3,), 4))])
    assert len(index.others) == 2 and len(index) == 8
    assert ((1,), 1, 1, ((), 1)) in index.static.live_records()
    assert ((5,), 1, 1, ((4,), 5)) in index.others[0].intervals()
    plain = index.others[1]
    assert plain.layout() is None
    assert plain.intervals() == [((2,), 1, 1, None), ((3,), 1, 1, ((3,), 4))]
    store = CollectingSegments()
    again = state_codec.loads(store.save(partial(state_codec.dumps, index)), store)
    assert Counter(again.intervals()) == Counter(index.intervals())
    assert sorted(again.stab((0,), 1)) == [(1, 1, ((), 0)), (1, 1, ((2,), 0))]
    assert Counter(again.stab((2,), 1)) == Counter([(1, 1, ((), 2)), (1, 1, None)])
    assert again.stab((2,), 1) == [] and len(again) == len(index) - 4
    assert again.of_layout(second.layout(), make=False) is again.others[0]


THREE_NEGATIONS = (".decl e(a: int, b: int)\n.decl u(a: int)\n"
                   "p0[x] = n <- agg<<n = count()>> !u(3), !u(0), !u(x), e(x, _).\n")


def _three_negations(strategy: str) -> tuple[Any, IncrementalEngine]:
    """The engine after u(0) inserted and u(3) erased, its commits on the compiled join
    (which leave the intervals of ``!u(3)`` and ``!u(0)``, probed once before the join, as
    the load recorded them: a change to u there re-evaluates the whole rule)."""
    prog = load_program(THREE_NEGATIONS)
    engine = IncrementalEngine(prog, {"e": set(), "u": {(3,)}}, strategy)
    engine.apply({"e": {(0, 0): 1}})
    engine.apply({"u": {(0,): 1, (3,): -1}})
    assert engine.last_stats.work["compiled_commits"] == 1
    return prog, engine


def _erase_u0(prog: Any, engine: IncrementalEngine) -> None:
    """u(0) erased: p0(0, 1) comes, as a recompute says."""
    assert engine.apply({"u": {(0,): -1}}) == {"p0": {(0, 1): 1}}
    assert engine.relation("p0") == RecomputeEngine(
        prog, {"e": {(0, 0)}, "u": set()}).relation("p0")


@pytest.mark.parametrize("strategy", ["sensitivity"])  # (auto: on arrays, below)
def test_three_negations_of_one_relation_after_a_reopen(strategy):
    """Found by the Hypothesis test above: after a save and an open the rule missed p0(0,
    1). The open decided again how the rule commits, saw the index u's three negations
    share partly on tuples (the load's records of the two probed once) and chose the tuple
    join, which trusted those stale intervals. Now the open decides as the load did (no
    commit on the tuple join recorded into the index): the compiled join, which is right."""
    prog, engine = _three_negations(strategy)
    store = MemorySegments()
    engine = IncrementalEngine.loads(engine.dumps(store), store)
    _erase_u0(prog, engine)
    assert engine.last_stats.work["compiled_commits"] == 1


@pytest.mark.parametrize("strategy", ["sensitivity"])  # (auto: on arrays, below)
def test_three_negations_of_one_relation_moved_to_the_tuple_join(strategy):
    """A rule whose commits move from the compiled join to the tuple join (as one that
    meets a value with no code does) covers the intervals the compiled commits left
    stale first: the change to u re-evaluates the whole rule
    (``RuleMaintainer._cover_once``)."""
    prog, engine = _three_negations(strategy)
    _tuple_commits(engine)
    _erase_u0(prog, engine)
    assert engine.last_stats.work.get("compiled_commits", 0) == 0


def test_three_negations_of_one_relation_on_arrays_under_auto():
    """Under auto the rule is kept on arrays (``ColumnarAggregates``): the same commits,
    with a save and an open between, give what a recompute gives."""
    prog = load_program(THREE_NEGATIONS)
    engine = IncrementalEngine(prog, {"e": set(), "u": {(3,)}})
    assert [type(m).__name__ for s, m in engine.strata if "p0" in s.preds] == [
        "ColumnarAggregates"]
    engine.apply({"e": {(0, 0): 1}})
    engine.apply({"u": {(0,): 1, (3,): -1}})
    store = MemorySegments()
    engine = IncrementalEngine.loads(engine.dumps(store), store)
    _erase_u0(prog, engine)
