"""The compiled inner loop of a linear binary closure (engine/dbsp/linear.py, taken by
``ColumnarStratum._apply_linear``): closures of every shape it takes (either atom
first, either join column, the head either way round, a base rule of its own input or
swapped, int and string columns) under random commits over a few nodes (cycles,
cancellations, retractions and re-derivations), checked after every commit against the
same stratum taking the generic steps (answers and work alike) and a recompute, with
state round trips; the loop is taken (a work counter); shapes it does not take; the
arrays it writes grown in the middle of a commit."""

import random

import numpy as np
from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.dbsp import columnar, linear
from deltalog.engine.dbsp.columnar import ColumnarStratum, Linear
from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine
from deltalog.engine.segments import MemorySegments

INT = ".decl e(a: int, b: int)\n.decl f(a: int, b: int)\n"
STR = ".decl e(a: string, b: string)\n.decl f(a: string, b: string)\n"
SHAPES = (
    "path(x, y) :- e(x, y).\npath(x, z) :- path(x, y), e(y, z).",
    "path(x, y) :- e(x, y).\npath(x, z) :- e(x, y), path(y, z).",
    "path(y, x) :- f(x, y).\npath(z, x) :- path(x, y), e(z, y).",
    "path(x, y) :- f(x, y).\npath(x, z) :- e(y, z), path(x, y).",
    "path(y, x) :- e(x, y).\npath(z, x) :- e(y, z), path(y, x).",
    "path(x, y) :- f(x, y).\npath(z, x) :- path(y, x), e(y, z).",
)
NODES = st.integers(0, 4)
EDGES = st.sets(st.tuples(NODES, NODES), max_size=10)
# the work both ways of a commit count alike (not the rows read: the loop reads the rows
# ΔE joins once per commit, in P's old version, the generic steps at each iteration)
SAME_WORK = ("delta_queries", "inner_iterations", "facts_touched", "iterations_skipped")
TC = INT + SHAPES[0]


def _stratum(engine: IncrementalEngine) -> ColumnarStratum:
    [m] = [m for _, m in engine.strata if isinstance(m, ColumnarStratum)]
    return m


def _rows(edges: set[tuple[int, int]], strings: bool) -> set[tuple[object, ...]]:
    return {(f"n{a}", f"n{b}") for a, b in edges} if strings else set(edges)


class FusedMachine(RuleBasedStateMachine):
    """The compiled loop, the generic steps and a recompute on the same commits."""

    @initialize(shape=st.sampled_from(SHAPES), strings=st.booleans(), e=EDGES, f=EDGES,
                tiny=st.booleans())
    def load(self, shape, strings, e, f, tiny):
        note(shape)
        self.strings = strings
        self.saved = (columnar.NURSERY_MAX, columnar.YOUNG_MIN, columnar.PURGE_MIN,
                      columnar.POOL_SLACK, columnar.LINEAR_ROOM, columnar.LINEAR_KEEP)
        if tiny:  # every housekeeping step at every chance (and arrays grown in every loop)
            columnar.NURSERY_MAX = columnar.YOUNG_MIN = columnar.PURGE_MIN = 0
            columnar.POOL_SLACK, columnar.LINEAR_ROOM, columnar.LINEAR_KEEP = 0, 1, 0
        self.prog = load_program((STR if strings else INT) + shape)
        data = {"e": _rows(e, strings), "f": _rows(f, strings)}
        self.fused = IncrementalEngine(self.prog, data, "auto")
        self.generic = IncrementalEngine(self.prog, data, "auto")
        _stratum(self.generic).fused = False
        self.rec = RecomputeEngine(self.prog, data)
        assert _stratum(self.fused).linear is not None
        self.store = MemorySegments()

    @rule(pred=st.sampled_from(["e", "f"]),
          change=st.dictionaries(st.tuples(NODES, NODES), st.sampled_from([1, -1]),
                                 min_size=1, max_size=4))
    def commit(self, pred, change):
        # (inserting a present edge or deleting an absent one: nothing changes)
        if self.strings:
            change = {(f"n{a}", f"n{b}"): w for (a, b), w in change.items()}
        deltas = {pred: change}
        note(repr(deltas))
        out = self.fused.apply(deltas)
        fused = self.fused.last_stats.work
        assert out == self.generic.apply(deltas) == self.rec.apply(deltas)
        generic = self.generic.last_stats.work
        assert "fused_commits" not in generic
        if fused:  # (none when the stratum's inputs did not change)
            assert fused["fused_commits"] == 1
            for name in SAME_WORK:
                assert fused[name] == generic[name], (name, fused, generic)

    @rule(segments=st.booleans())
    def round_trip(self, segments):
        if segments:
            self.fused = IncrementalEngine.loads(self.fused.dumps(self.store), self.store)
        else:
            self.fused = IncrementalEngine.loads(self.fused.dumps())

    @invariant()
    def equal(self):
        if hasattr(self, "fused"):
            want = self.rec.relation("path")
            assert self.fused.relation("path") == want == self.generic.relation("path")

    def teardown(self):
        if hasattr(self, "saved"):
            (columnar.NURSERY_MAX, columnar.YOUNG_MIN, columnar.PURGE_MIN,
             columnar.POOL_SLACK, columnar.LINEAR_ROOM, columnar.LINEAR_KEEP) = self.saved


TestFusedAgainstGenericAndRecompute = FusedMachine.TestCase
TestFusedAgainstGenericAndRecompute.settings = settings(
    max_examples=150, stateful_step_count=10, deadline=None)


def test_a_single_edge_takes_the_compiled_loop():
    prog = load_program(TC)
    engine = IncrementalEngine(prog, {"e": {(0, 1), (1, 2), (2, 3)}})
    m = _stratum(engine)
    assert m.linear == Linear("path", "e", False, "e", 1, 0, True)
    engine.apply({"e": {(3, 4): 1}})
    work = engine.last_stats.work
    assert work["fused_commits"] == 1 and work["facts_touched"] == 4
    m.fused = False
    engine.apply({"e": {(3, 4): -1}})
    assert "fused_commits" not in engine.last_stats.work
    assert engine.relation("path") == RecomputeEngine(
        prog, {"e": {(0, 1), (1, 2), (2, 3)}}).relation("path")


def test_a_change_of_many_rows_takes_the_loop_and_agrees_with_the_generic_steps():
    """A change of 60 edges (half deleted) on a random graph of 30 nodes: the loop, as
    for one edge, with the generic steps' answers and work."""
    rng = random.Random(5)
    edges = {(rng.randrange(30), rng.randrange(30)) for _ in range(120)}
    prog = load_program(TC)
    fused = IncrementalEngine(prog, {"e": edges})
    generic = IncrementalEngine(prog, {"e": edges})
    _stratum(generic).fused = False
    gone = set(rng.sample(sorted(edges), 30))
    new = set()
    while len(new) < 30:
        e = (rng.randrange(30), rng.randrange(30))
        if e not in edges:
            new.add(e)
    change = {e: -1 for e in gone} | {e: 1 for e in new}
    for step in (change, {e: -w for e, w in change.items()}):
        assert fused.apply({"e": step}) == generic.apply({"e": step})
        assert fused.last_stats.work["fused_commits"] == 1
        for name in SAME_WORK:
            assert fused.last_stats.work[name] == generic.last_stats.work[name], name
    assert fused.relation("path") == RecomputeEngine(prog, {"e": edges}).relation("path")


def test_other_shapes_take_the_generic_steps():
    for text in (
        "path(x, y) :- e(x, y).\npath(x, z) :- path(x, y), path(y, z).",  # not linear
        "path(x, y) :- e(x, y).\npath(x, z) :- path(x, y), e(y, z).\n"
        "path(x, z) :- e(x, y), path(y, z).",  # two recursive rules
        "path(x, y) :- e(x, y).\npath(x, y) :- f(x, y).\n"
        "path(x, z) :- path(x, y), e(y, z).",  # two base rules
        "path(x, y) :- e(x, y).\npath(x, z) :- path(x, y), e(y, z), !f(x, z).",
        "path(x, y) :- e(x, y).\npath(x, z) :- path(x, y), e(y, z), x != z.",
        "path(x, y) :- e(x, y).\npath(x, x) :- path(x, y), e(y, x).",
        "path(x, y) :- e(x, y).\npath(x, 3) :- path(x, y), e(y, z).",
    ):
        engine = IncrementalEngine(load_program(INT + text), {"e": {(0, 1)}, "f": set()})
        assert _stratum(engine).linear is None, text


def test_arrays_grow_in_the_middle_of_a_commit():
    """Joining two chains of 40 nodes: 1,600 facts first seen, past the touched facts'
    arrays, the log, the ids' room and the hash index, each grown between iterations."""
    prog = load_program(TC)
    chains = {(i, i + 1) for i in range(39)} | {(i, i + 1) for i in range(40, 79)}
    engine = IncrementalEngine(prog, {"e": chains})
    saved = columnar.LINEAR_ROOM, columnar.LINEAR_KEEP
    columnar.LINEAR_ROOM, columnar.LINEAR_KEEP = 1, 0  # (grown in every commit)
    try:
        for change in ({(39, 40): 1}, {(39, 40): -1}, {(39, 40): 1}, {(10, 11): -1}):
            chains = {r for r in chains | set(change) if change.get(r, 1) > 0}
            engine.apply({"e": change})
            assert engine.last_stats.work["fused_commits"] == 1
            assert engine.relation("path") == RecomputeEngine(
                prog, {"e": chains}).relation("path"), change
    finally:
        columnar.LINEAR_ROOM, columnar.LINEAR_KEEP = saved


def test_a_change_reaching_many_facts_agrees_with_the_generic_steps():
    """Two cliques of 12 nodes joined by an edge: Δc of an iteration past 64 keys (summed
    through a hash table, in no order), the edge deleted again, and one of a clique."""
    prog = load_program(TC)
    cliques = {(a + o, b + o) for o in (0, 12) for a in range(12) for b in range(12) if a != b}
    fused = IncrementalEngine(prog, {"e": cliques})
    generic = IncrementalEngine(prog, {"e": cliques})
    _stratum(generic).fused = False
    for change in ({(0, 12): 1}, {(0, 12): -1}, {(0, 12): 1}, {(3, 4): -1, (5, 14): 1}):
        cliques = {r for r in cliques | set(change) if change.get(r, 1) > 0}
        assert fused.apply({"e": change}) == generic.apply({"e": change})
        assert fused.last_stats.work["fused_commits"] == 1
        for name in SAME_WORK:
            assert fused.last_stats.work[name] == generic.last_stats.work[name], name
        assert fused.relation("path") == generic.relation("path") == RecomputeEngine(
            prog, {"e": cliques}).relation("path"), change


def test_the_rows_a_changed_edge_joins_are_read_once():
    """A ring of 40 nodes and an edge into it: every node reaches the edge's source at its
    own depth, so ΔE's term has rows at 40 depths. The loop reads them once (grouped by
    depth), the generic steps at every iteration; answers and the other counters agree."""
    n = 40
    ring = {(a, (a + 1) % n) for a in range(n)}
    prog = load_program(TC)
    fused = IncrementalEngine(prog, {"e": ring | {(100, 101)}})
    generic = IncrementalEngine(prog, {"e": ring | {(100, 101)}})
    _stratum(generic).fused = False
    for change in ({(0, 100): 1}, {(0, 100): -1}):
        assert fused.apply({"e": change}) == generic.apply({"e": change})
        f, g = fused.last_stats.work, generic.last_stats.work
        assert f["fused_commits"] == 1 and f["inner_iterations"] >= n
        for name in SAME_WORK:
            assert f[name] == g[name], name
        # the 40 rows of path(x, 0) once, and the Δδo term's rows of e(100, 101)
        assert f["rows_gathered"] <= 2 * n < g["rows_gathered"] // 10
    assert fused.relation("path") == RecomputeEngine(prog, {"e": ring | {(100, 101)}}
                                                     ).relation("path")
    # the loop's scratch arrays stay for the next commit, and are not saved
    assert _stratum(fused)._linear_tc is not None
    again = IncrementalEngine.loads(fused.dumps())
    assert _stratum(again)._linear_tc is None
    assert again.apply({"e": {(5, 100): 1}}) == generic.apply({"e": {(5, 100): 1}})
    assert again.relation("path") == generic.relation("path")


def test_delta_c_sums_alike_however_many_pairs():
    """Δc's pairs summed by key: a few sorted, more through a hash table, many by a radix
    sort of the bytes that vary (keys of 62 bits: nearly every byte; keys of two small
    codes, as a closure's: a few)."""
    rng = np.random.default_rng(7)
    for n in (5, 64, 65, 1000, 20_000, linear.RADIX_MIN + 1, 3 * linear.RADIX_MIN):
        for small in (False, True):
            m = n // 3 + 1
            if small:
                distinct = (rng.integers(0, 3000, m) << 32) | rng.integers(0, 3000, m)
            else:
                distinct = rng.integers(0, 1 << 62, m, dtype=np.int64)
            keys = distinct[rng.integers(0, m, n)]
            w = rng.choice(np.array([-1, 1, 2], np.int64), n)
            want: dict[int, int] = {}
            for k, x in zip(keys.tolist(), w.tolist(), strict=True):
                want[k] = want.get(k, 0) + x
            k, x = linear._zset(np.concatenate([keys, keys[:3]]), np.concatenate([w, w[:3]]),
                                n)
            assert dict(zip(k.tolist(), x.tolist(), strict=True)) == {
                a: b for a, b in want.items() if b}
            assert len(k) == len(set(k.tolist()))
            if n <= 64 or n > linear.RADIX_MIN:
                assert (np.diff(k) > 0).all()
