"""Sensitivity indices kept in a segment store (``StaticIntervals.__persist__`` and
``__restore__``): opened, stabbed, killed and saved again any number of times, they answer
as intervals kept in memory do; a save writes what changed since the open (the positions
killed), an open reads the page index, and a stab the pages holding what it finds."""

import random
from collections import Counter
from collections.abc import Callable
from functools import partial
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from engine import state_codec
from engine.analysis.analyze import load_program
from engine.evaluate import evaluate
from engine.ivm import interval_index
from engine.ivm.interval_index import IntervalIndex, Record, StaticIntervals
from engine.runtime import IncrementalEngine
from engine.segments import CorruptSegment, MemorySegments
from engine.sentinels import BOTTOM, TOP
from pipelines.state_store import StratumState, load_state, save_state


class CollectingSegments(MemorySegments):
    """A segment store in memory that, like ``pipelines.state_store``, forgets after each
    save every segment the save neither wrote nor kept; counts the bytes written."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.written = 0

    def write(self, parts: list[bytes], paged: bool = False) -> str:
        name = f"c{self.count}"
        self.count += 1
        self.segments[name] = b"".join(parts)
        self.written += len(self.segments[name])
        return name

    def save(self, dump: Callable[[Any], bytes]) -> bytes:
        """The root ``dump(self)`` returns; the segments it does not use are dropped."""
        before = set(self.segments)
        self.kept = set()
        root = dump(self)
        live = (set(self.segments) - before) | self.kept
        self.segments = {k: v for k, v in self.segments.items() if k in live}
        return root


def _contains(r: Record, bucket: tuple[Any, ...], x: Any) -> bool:
    return r[0] == bucket and not x < r[1] and not r[2] < x


BUCKETS = [(0,), (1,), (2,)]
ENDS = st.one_of(st.integers(0, 5), st.sampled_from([BOTTOM, TOP]))
POINTS = st.one_of(st.integers(-1, 6), st.sampled_from([BOTTOM, TOP]))
RECORDS = st.tuples(st.sampled_from(BUCKETS), ENDS, ENDS, st.integers(0, 3))


class IndexAgainstAList(RuleBasedStateMachine):
    """An ``IntervalIndex`` saved to a segment store and opened again between stabs (and
    copied without one) against a plain list. Tiny pages and thresholds, so that every
    path is taken: several pages per bucket, inline and segment parts, delta chains,
    compactions by share and by chain length."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = pytest.MonkeyPatch()
        self.patch.setattr(interval_index, "PAGE", 4)
        self.patch.setattr(interval_index, "PAGED_MIN", 6)
        self.patch.setattr(interval_index, "COMPACT_SHARE", 0.5)
        self.patch.setattr(interval_index, "COMPACT_CHAIN", 3)
        self.store = CollectingSegments()
        self.index = IntervalIndex()
        self.oracle: list[Record] = []

    def teardown(self) -> None:
        self.patch.undo()

    @rule(batch=st.lists(RECORDS, max_size=40))
    def add(self, batch: list[Record]) -> None:
        self.index.add_many(list(batch))
        self.oracle += batch

    @rule(bucket=st.sampled_from(BUCKETS), x=POINTS)
    def stab(self, bucket: tuple[Any, ...], x: Any) -> None:
        got = self.index.stab(bucket, x)
        hit = [r for r in self.oracle if _contains(r, bucket, x)]
        assert Counter(got) == Counter((lo, hi, p) for _, lo, hi, p in hit)
        self.oracle = [r for r in self.oracle if not _contains(r, bucket, x)]

    @rule()
    def save_and_open(self) -> None:
        root = self.store.save(partial(state_codec.dumps, self.index))
        self.index = state_codec.loads(root, self.store)
        static = self.index.static
        if static is not None:
            assert static.pages_read == 0  # opening reads the index, no page
        written = self.store.written
        root = self.store.save(partial(state_codec.dumps, self.index))
        assert self.store.written == written  # nothing changed: nothing written
        self.index = state_codec.loads(root, self.store)

    @rule()
    def copy_without_a_store(self) -> None:
        self.index = state_codec.loads(state_codec.dumps(self.index))

    @invariant()
    def holds_what_the_list_holds(self) -> None:
        assert len(self.index) == len(self.oracle)
        assert Counter(self.index.intervals()) == Counter(self.oracle)
        static = self.index.static
        if static is not None:
            assert static.live == len(static.live_records())


TestIndexAgainstAList = IndexAgainstAList.TestCase
TestIndexAgainstAList.settings = settings(stateful_step_count=30, deadline=None)


def _sparse(n: int, buckets: int, rng: random.Random) -> list[Record]:
    """``n`` intervals shaped like sensitivity intervals: per bucket, the gaps between
    sorted values (disjoint, the first from BOTTOM, the last to TOP)."""
    out: list[Record] = []
    per = n // buckets
    for b in range(buckets):
        values = sorted(rng.sample(range(10 * per), per - 1))
        ends = [BOTTOM, *values, TOP]
        out += [((b,), lo, hi, (b, k)) for k, (lo, hi) in enumerate(pairwise(ends))]
    return out


def _stab_all(static: StaticIntervals, bucket: tuple[Any, ...], x: Any) -> list[Record]:
    """What ``IntervalIndex.stab`` does with the static part: the intervals found, killed."""
    positions = static.stab(bucket, x)
    found = [static.record(pos) for pos in positions]
    for pos in positions:
        static.kill(pos)
    assert all(_contains(r, bucket, x) for r in found)
    return found


def test_a_small_change_reads_and_writes_little():
    """10^5 intervals: opening decodes no page, a stab that finds one interval decodes
    at most three (the one holding it, and the ends of its bucket's range), a save after
    five kills writes a few bytes, a save after none writes nothing."""
    rng = random.Random(5)
    records = _sparse(100_000, 1_000, rng)
    store = CollectingSegments()
    root = store.save(partial(state_codec.dumps, StaticIntervals(list(records))))
    assert len(root) < 200
    static = state_codec.loads(root, store)
    assert static.pages_read == 0 and static.live == 100_000
    killed = []
    for r in rng.sample(records, 5):
        before = static.pages_read
        found = _stab_all(static, r[0], r[1])
        assert r in found and len(found) <= 2
        assert static.pages_read - before <= 3
        killed += found
    written = store.written
    root = store.save(partial(state_codec.dumps, static))
    assert store.written - written < 1024 and len(root) < 200
    static = state_codec.loads(root, store)
    assert static.live == 100_000 - len(killed)
    for r in killed:
        assert all(static.record(p) != r for p in static.stab(r[0], r[1]))
    written = store.written
    store.save(partial(state_codec.dumps, static))
    assert store.written == written
    assert Counter(static.live_records()) == Counter(records) - Counter(killed)


def test_kills_past_the_share_write_a_new_base_of_the_live_intervals():
    rng = random.Random(6)
    records = _sparse(10_000, 100, rng)
    store = CollectingSegments()
    root = store.save(partial(state_codec.dumps, StaticIntervals(list(records))))
    base = store.written
    static = state_codec.loads(root, store)
    killed: list[Record] = []
    for r in rng.sample(records, 2_000):
        killed += _stab_all(static, r[0], r[1])
    written = store.written
    root = store.save(partial(state_codec.dumps, static))
    assert store.written - written < base  # the live intervals only
    assert len(store.segments) == 1  # the old base (and chain) dropped: not kept
    static = state_codec.loads(root, store)
    assert static.n == static.live == 10_000 - len(killed)  # no dead positions
    assert Counter(static.live_records()) == Counter(records) - Counter(killed)


def test_through_the_files_store(tmp_path):
    """Saved and opened through ``pipelines.state_store`` (files, a manifest, checks,
    removal of what the manifest does not name), stabbed in between."""
    rng = random.Random(8)
    records = _sparse(20_000, 200, rng)
    oracle = list(records)
    index = IntervalIndex()
    index.add_many(list(records))
    reader = None
    for seq in range(6):
        state = StratumState(digest="d", seq=seq, input_versions={}, edb_versions={},
                             written={}, table_versions={})
        save_state(tmp_path, state, partial(state_codec.dumps, index), reader)
        assert {p.name for p in tmp_path.glob("*.seg")} == set(state.segments)
        loaded = load_state(tmp_path)
        assert loaded is not None
        reader = loaded.open()
        index = state_codec.loads(reader.read(loaded.root), reader)
        for _ in range(30):
            bucket, x = (rng.randrange(200),), rng.randrange(1_000)
            got = index.stab(bucket, x)
            hit = [r for r in oracle if _contains(r, bucket, x)]
            assert Counter(got) == Counter((lo, hi, p) for _, lo, hi, p in hit)
            oracle = [r for r in oracle if not _contains(r, bucket, x)]
        assert len(index) == len(oracle)
    assert Counter(index.intervals()) == Counter(oracle)


def test_a_damaged_page_is_refused():
    store = CollectingSegments()
    records = _sparse(8_192, 8, random.Random(9))
    root = store.save(partial(state_codec.dumps, StaticIntervals(list(records))))
    (name,) = store.segments
    data = bytearray(store.segments[name])
    data[10] ^= 0xFF  # inside the first page
    store.segments[name] = bytes(data)
    static = state_codec.loads(root, store)
    with pytest.raises(CorruptSegment):
        static.stab((0,), 5)


def test_values_plain_messagepack_cannot_hold_stay_inline():
    """An int beyond 64 bits (an aggregate's sum, say): the part is written inline, where
    the state codec keeps big ints, and reads back the same."""
    records = [((0,), k, k + 2**70, None) for k in range(5_000)]
    store = CollectingSegments()
    root = store.save(partial(state_codec.dumps, StaticIntervals(list(records))))
    assert not store.segments
    static = state_codec.loads(root, store)
    assert static.live_records() == records
    assert [static.record(p) for p in static.stab((0,), 2**69)] == records


TRIANGLE = """\
.decl e(x: int, y: int)
tri(x, y, z) :- e(x, y), e(y, z), e(x, z)."""


def test_a_triangle_engine_kept_in_segments_maintains_like_a_recompute():
    """The triangle workload of bench/maintain_vs_recompute.py at 20,000 edges: saved to a
    segment store, opened, changed (5 erasures, 5 insertions), saved and opened again; the
    root stays small and each save writes little, and ``tri`` is what a recompute gives."""
    rng = random.Random(20261123)
    n = 20_000
    nodes = n // 8
    edges: set[tuple[int, int]] = set()
    while len(edges) < n:
        edges.add((rng.randrange(nodes), rng.randrange(nodes)))
    prog = load_program(TRIANGLE)
    engine = IncrementalEngine(prog, {"e": edges}, "sensitivity")
    whole = len(engine.dumps())
    store = CollectingSegments()
    present = set(edges)
    first = 0
    for step in range(4):
        written = store.written
        root = store.save(engine.dumps)
        assert len(root) < whole / 10
        if step == 0:
            first = store.written
        else:
            assert store.written - written < first / 20
        engine = IncrementalEngine.loads(root, store)
        delta: dict[tuple[int, int], int] = dict.fromkeys(rng.sample(sorted(present), 5), -1)
        while len(delta) < 10:
            row = (rng.randrange(nodes), rng.randrange(nodes))
            if row not in present:
                delta[row] = 1
        engine.apply({"e": delta})
        present = {r for r in present if delta.get(r) != -1} | {
            r for r, w in delta.items() if w > 0}
        assert engine.relation("tri") == evaluate(prog, {"e": present})["tri"]
