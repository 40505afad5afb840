"""Complement iteration with counting (Veldhuizen 2014, §3.1.2): T \\ S for S ⊆ T equals the set
difference on both versions, through every trie operation; it costs O(|T \\ S| log n)
count queries where probing S per row of T costs |T|; the planner recognizes exactly the
shapes the containment analysis guarantees."""

import math
from bisect import bisect_left

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sortedcontainers import SortedList

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.analysis.containment import supersets
from deltalog.engine.ivm.rule import RuleMaintainer, WorkCounters
from deltalog.engine.ivm.surgery import tree_surgery
from deltalog.engine.join.ceil_trie import CeilTrieIterator
from deltalog.engine.join.complement import Complement, ComplementRows
from deltalog.engine.join.plan import complement_pairs, prepare
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.sentinels import BOTTOM, TOP
from deltalog.engine.storage import ListRows, RelationStore, VersionedRelation, permute

VALUES = st.integers(0, 5)
ROWS = st.sets(st.tuples(VALUES, VALUES), max_size=25)


@st.composite
def versions(draw):
    """Relations t ⊇ s after one commit that keeps s ⊆ t (both versions), in a random
    column order."""
    t_rows = draw(ROWS)
    s_rows = {r for r in t_rows if draw(st.booleans())}
    t = VersionedRelation("t", 2, t_rows)
    s = VersionedRelation("s", 2, s_rows)
    erased = {r for r in sorted(t_rows) if draw(st.integers(0, 3)) == 0}
    new_t = (t_rows - erased) | draw(st.sets(st.tuples(VALUES, VALUES), max_size=6))
    # s keeps most of its rows (those still in t) and flips a few rows of the new t
    new_s = {r for r in sorted(new_t)
             if (draw(st.booleans()) if draw(st.integers(0, 3)) == 0 else r in s_rows)}
    t.commit({**dict.fromkeys(t_rows - new_t, -1), **dict.fromkeys(new_t - t_rows, 1)})
    s.commit({**dict.fromkeys(s_rows - new_s, -1), **dict.fromkeys(new_s - s_rows, 1)})
    perm = draw(st.sampled_from([(0, 1), (1, 0)]))
    before = sorted(permute(r, perm) for r in t_rows - s_rows)
    after = sorted(permute(r, perm) for r in new_t - new_s)
    return Complement(t, s, perm, JoinStats()), before, after


def _least_at_or_after(rows: list, key: tuple) -> tuple | None:
    i = bisect_left(rows, key)
    return rows[i] if i < len(rows) else None


KEYS = st.one_of(
    st.just(()),
    st.tuples(st.one_of(VALUES, st.just(BOTTOM), st.just(TOP))),
    st.tuples(VALUES, st.one_of(VALUES, st.just(BOTTOM), st.just(TOP))),
    st.tuples(VALUES, VALUES, st.just(BOTTOM)),
)


@given(case=versions(), keys=st.lists(KEYS, max_size=12))
def test_complement_equals_set_difference_on_both_versions(case, keys):
    c, before, after = case
    for view, expected in ((c.previous(), before), (c.current(), after)):
        assert list(view) == expected
        assert len(view) == len(expected)
        for key in keys:
            assert view.ceil(key) == _least_at_or_after(expected, key), key
        for row in {*expected, *before, *after}:
            assert (row in view) == (row in expected)


@given(case=versions())
def test_complement_delta_is_the_change_between_versions(case):
    c, before, after = case
    assert dict(c.delta()) == {**dict.fromkeys(set(after) - set(before), 1),
                               **dict.fromkeys(set(before) - set(after), -1)}
    # Its tree surgery is the one of the materialized difference.
    assert tree_surgery(c.delta(), c.previous(), c.current()) == tree_surgery(
        c.delta(), ListRows(before), ListRows(after))


OPS = st.lists(st.one_of(st.sampled_from(["open", "up", "next"]),
                         st.tuples(st.just("seek"), VALUES)), max_size=30)


@given(case=versions(), ops=OPS)
def test_complement_trie_iterator_follows_the_materialized_one(case, ops):
    """open/up/next/seek/key/at_end on T \\ S agree, step by step, with a trie iterator over
    the materialized difference, on the previous and the current version."""
    c, before, after = case
    for view, expected in ((c.previous(), before), (c.current(), after)):
        got = CeilTrieIterator(view, JoinStats())
        ref = CeilTrieIterator(ListRows(expected), JoinStats())
        for op in ops:
            if op == "open":
                if ref.depth >= 1 or (ref.depth >= 0 and ref.at_end()):
                    continue
                got.open()
                ref.open()
            elif op == "up":
                if ref.depth < 0:
                    continue
                got.up()
                ref.up()
            elif op == "next":
                if ref.depth < 0 or ref.at_end():
                    continue
                got.next()
                ref.next()
            else:
                if ref.depth < 0:
                    continue
                got.seek(op[1])
                ref.seek(op[1])
            assert got.at_end() == ref.at_end()
            if ref.depth >= 0 and not ref.at_end():
                assert got.key() == ref.key()


def _walk(rows, stats: JoinStats) -> list[tuple]:
    """Every row of a binary relation through the trie protocol."""
    it = CeilTrieIterator(rows, stats)
    out = []
    it.open()
    while not it.at_end():
        x = it.key()
        it.open()
        while not it.at_end():
            out.append((x, it.key()))
            it.next()
        it.up()
        it.next()
    it.up()
    return out


N = 100_000
HOLES = [(i * 9_973 % (N // 4), 0) for i in range(10)]  # |T \ S| = 10, scattered


def _big():
    t_rows = {(i // 4, i % 4 * 2 + 1) for i in range(N - len(HOLES))} | set(HOLES)
    assert len(t_rows) == N
    s_rows = t_rows - set(HOLES)
    return t_rows, s_rows


def test_counter_complement_costs_complement_times_log_n_not_t():
    """|T| = 10^5, |T \\ S| = 10: iterating T \\ S takes a few hundred count queries,
    O(|T \\ S| · log n); probing S per row of T takes |T| probes."""
    t_rows, s_rows = _big()
    stats = JoinStats()
    rows = ComplementRows(SortedList(t_rows), SortedList(s_rows), stats)
    assert _walk(rows, stats) == sorted(HOLES)
    log_n = math.ceil(math.log2(N))
    # Per complement row: one next at each depth and one open, each a ceil of at most
    # 2 + 2 (2 log gap + 1) count queries; 8 log n per row is a generous bound.
    assert stats.counts <= 8 * len(HOLES) * log_n, stats.counts
    assert stats.operations <= 5 * len(HOLES) + 5
    print(f"complement walk: {stats.counts} count queries, {stats.operations} iterator ops")


def test_counter_rule_reads_complement_instead_of_probing():
    """The same through the maintained rule ``r(x, y) :- t(x, y), !s(x, y)`` at load: with
    the containment known, the work and the sensitivity intervals follow |T \\ S|; without
    it, a probe (and an interval) per row of T."""
    t_rows, s_rows = _big()
    prog = load_program(".decl t(a: int, b: int)\n.decl h(a: int, b: int)\n"
                        "s(x, y) :- t(x, y), !h(x, y).\nr(x, y) :- t(x, y), !s(x, y).\n")
    rule = prog.program.rules[1]
    work = {}
    for name, contained in (("complement", supersets(prog)), ("probe", None)):
        store = RelationStore({"t": 2, "s": 2})
        store["t"].commit(dict.fromkeys(t_rows, 1))
        store["s"].commit(dict.fromkeys(s_rows, 1))
        store.settle()
        stats, counters = JoinStats(), WorkCounters()
        m = RuleMaintainer(rule, store, supersets=contained)
        units = m.initialize(store, stats, counters)
        assert sorted(units) == sorted(HOLES)
        work[name] = (stats.operations + stats.counts, counters.intervals_added)
    print(f"load work (ops + counts, intervals): {work}")
    assert work["complement"][0] <= 10 * len(HOLES) * math.ceil(math.log2(N))
    assert work["probe"][0] >= N
    assert work["complement"][1] <= 5 * len(HOLES) + 5
    assert work["probe"][1] >= N


# -- what the planner recognizes -----------------------------------------------------------

DECLS = ".decl e(a: int, b: int)\n.decl f(a: int, b: int)\n.decl u(a: int)\n"


def _pairs(text: str, rule_index: int = -1) -> dict[int, int]:
    prog = load_program(DECLS + text)
    return complement_pairs(prepare(prog.program.rules[rule_index]), supersets(prog))


def test_recognized_shapes():
    # a filter of e, in the same or another variable order, with other atoms around
    assert _pairs("s(x, y) :- e(x, y), u(x).\nr(x) :- e(x, y), !s(x, y).") == {0: 0}
    assert _pairs("s(x, y) :- u(x), e(x, y).\nr(y) :- f(y, z), e(x, y), !s(x, y).") == {1: 0}
    # several rules for s, each a filter of e; and transitively
    assert _pairs("s(x, y) :- e(x, y), u(x).\ns(x, y) :- f(y, x), e(x, y).\n"
                  "r(x) :- e(x, y), !s(x, y).") == {0: 0}
    assert _pairs("s(x, y) :- e(x, y), u(x).\nq(x, y) :- s(x, y), !f(x, y).\n"
                  "r(x) :- e(x, y), !q(x, y).") == {0: 0}
    # recursion that stays inside e
    assert _pairs("s(x, y) :- e(x, y), u(x).\ns(x, y) :- s(x, z), s(z, y), e(x, y).\n"
                  "r(x) :- e(x, y), !s(x, y).") == {0: 0}


def test_shapes_not_recognized():
    # a rule of s without e(head args): a projection, a swap, a union with f, a fact
    assert _pairs("s(x) :- e(x, y).\nr(x) :- u(x), !s(x).") == {}
    assert _pairs("s(y, x) :- e(x, y).\nr(x) :- e(x, y), !s(x, y).") == {}
    assert _pairs("s(x, y) :- e(x, y).\ns(x, y) :- f(x, y).\nr(x) :- e(x, y), !s(x, y).") == {}
    assert _pairs("s(1, 2).\ns(x, y) :- e(x, y).\nr(x) :- e(x, y), !s(x, y).") == {}
    # the negation does not repeat the atom's arguments
    assert _pairs("s(x, y) :- e(x, y).\nr(x) :- e(x, y), !s(y, x).") == {}
    assert _pairs("s(x, y) :- e(x, y).\nr(x) :- e(x, y), !s(x, _).") == {}
    assert _pairs("s(x, y) :- e(x, y).\nr(x) :- e(x, 1), !s(x, 1).") == {}
    # an aggregate is not a filter (even where, as for max, s ⊆ e does hold)
    assert _pairs("s[x] = n <- agg<<n = max(y)>> e(x, y).\nr(x) :- e(x, y), !s[x] = y.") == {}
    # EDB negations: nothing guarantees f ⊆ e
    assert _pairs("r(x) :- e(x, y), !f(x, y).") == {}


@pytest.mark.parametrize("compiled", [True, False])
def test_saved_engine_keeps_reading_the_complement(compiled):
    """A saved and loaded engine still reads T \\ S (the pairs are part of its state) and
    stays exact under changes to t and to s's inputs: on the compiled join, T \\ S kept
    as a coded index of its own (saved with the rule); on the tuple join, counted."""
    from deltalog.engine.evaluate import evaluate
    from deltalog.engine.runtime import IncrementalEngine

    prog = load_program(DECLS + "s(x, y) :- e(x, y), u(y).\nr(x) :- e(x, y), !s(x, y).\n")
    data = {"e": {(0, 1), (1, 2), (2, 2), (3, 4)}, "u": {(2,), (4,)}}
    engine = IncrementalEngine.loads(IncrementalEngine(prog, data, "sensitivity",
                                                       columnar=compiled).dumps())
    heads = [h for _, m in engine.strata for h in getattr(m, "heads", []) if h.pred == "r"]
    assert heads[0].maintainer.complements == {0: 0}
    assert bool(heads[0].maintainer._ccoded) is compiled
    for change in ({"u": {(1,): 1}}, {"e": {(3, 5): 1, (1, 2): -1}}, {"u": {(2,): -1}}):
        engine.apply(change)
        edb = {name: engine.relation(name) for name in prog.edb}
        assert engine.relation("r") == evaluate(prog, edb)["r"]
        work = engine.last_stats.work
        if compiled:
            assert work["compiled_commits"] >= 1 and not work["count_queries"], work
    if not compiled:
        assert engine.last_stats.work["count_queries"] > 0


def test_regression_complement_node_appears_above_the_changed_depth():
    """Why the complement atom is stabbed with the complement's own tree surgery: e gains
    (1, 4) under an existing node 1, so e's surgery inserts at depth 1 only, but T \\ S
    gains node 1 at depth 0, where the trace recorded its interval (e is read below z, so
    its intervals are indexed). Stabbing with e's or s's own surgery misses it."""
    from deltalog.engine.evaluate import evaluate
    from deltalog.engine.runtime import IncrementalEngine

    prog = load_program(DECLS + "s(x, y) :- e(x, y), u(y).\n"
                        "r(z, x) :- f(z, x), e(x, y), !s(x, y).\n")
    data = {"e": {(1, 2), (1, 3)}, "u": {(2,), (3,)}, "f": {(0, 1)}}
    engine = IncrementalEngine(prog, data, "sensitivity")
    assert engine.relation("r") == frozenset()
    assert engine.apply({"e": {(1, 4): 1}}) == {"r": {(0, 1): 1}}
    # and back, then the same through s: u loses 2, so s loses (1, 2)
    assert engine.apply({"e": {(1, 4): -1}}) == {"r": {(0, 1): -1}}
    assert engine.apply({"u": {(2,): -1}}) == {"s": {(1, 2): -1}, "r": {(0, 1): 1}}
    edb = {name: engine.relation(name) for name in prog.edb}
    assert engine.relation("r") == evaluate(prog, edb)["r"]


def test_a_complement_atom_records_on_the_compiled_join():
    """The compiled join reads T \\ S as the complement atom's relation and does not check
    the negation it absorbed (no probe of s is recorded); its commits too, on T \\ S kept
    as a coded index beside the rule (the engine names no slow path); every commit agrees
    with a recompute."""
    import random

    from deltalog.engine.evaluate import evaluate
    from deltalog.engine.runtime import IncrementalEngine

    prog = load_program(DECLS + "s(x, y) :- e(x, y), u(y).\n"
                        "r(z, x) :- f(z, x), e(x, y), !s(x, y).\n")
    rng = random.Random(3)
    data = {"e": {(rng.randrange(20), rng.randrange(20)) for _ in range(120)},
            "u": {(i,) for i in range(0, 20, 3)},
            "f": {(rng.randrange(20), rng.randrange(20)) for _ in range(40)}}
    engine = IncrementalEngine(prog, data, "sensitivity")
    (m,) = [h.maintainer for _, s in engine.strata for h in s.heads if h.pred == "r"]
    assert m.complements == {1: 0} and m.recorded_by == "compiled"
    assert all(key[0] == "atom" for key in m.indices) and m.indices
    assert engine.slow_paths() == []
    compiled = 0
    for _ in range(12):
        pred = rng.choice(["e", "u", "f"])
        row = (rng.randrange(20),) if pred == "u" else (rng.randrange(20), rng.randrange(20))
        engine.apply({pred: {row: -1 if engine.contains(pred, row) else 1}})
        compiled += engine.last_stats.work.get("compiled_commits", 0)
        edb = {name: engine.relation(name) for name in prog.edb}
        assert engine.relation("r") == evaluate(prog, edb)["r"]
    assert compiled >= 10 and engine.slow_paths() == []
    held = {(x, y) for x, y in engine.relation("e") if (x, y) not in engine.relation("s")}
    index = m._ccoded[1]  # (the atom's column order: (x, y), its own)
    assert {tuple(r) for r in index.rows().tolist()} == held


def test_a_complement_row_with_no_code_sends_its_commits_to_the_tuple_join():
    """An int beyond 64 bits entering T: T \\ S has no code for it, so that commit and the
    later ones run on the tuple join (the run's notes say why), still right."""
    from deltalog.engine.evaluate import evaluate
    from deltalog.engine.runtime import IncrementalEngine

    prog = load_program(DECLS + "s(x, y) :- e(x, y), u(y).\nr(x) :- e(x, y), !s(x, y).\n")
    engine = IncrementalEngine(prog, {"e": {(0, 1), (1, 2), (2, 2)}, "u": {(2,)}},
                               "sensitivity")
    assert engine.slow_paths() == []
    for change in ({"e": {(3, 1): 1}}, {"e": {(2**70, 1): 1}}, {"u": {(1,): 1}},
                   {"e": {(2**70, 1): -1, (5, 5): 1}}):
        engine.apply(change)
        edb = {name: engine.relation(name) for name in prog.edb}
        assert engine.relation("r") == evaluate(prog, edb)["r"], change
    assert ("r: rule at <program>:5:1 commits on the tuple join (a value with no 64-bit "
            "code in a complement atom)") in engine.slow_paths()
