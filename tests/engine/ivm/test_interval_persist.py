"""Sensitivity indices kept in a segment store (``StaticIntervals`` and ``IntervalIndex``,
``__persist__`` and ``__restore__``): opened, stabbed, killed, added to and saved again any
number of times, they answer as intervals kept in memory do; a save writes what changed
since the open (the positions killed, the dynamic intervals added and removed), an open
reads the page index and the dynamic part's short chain, and a stab the pages holding
what it finds."""

import random
from collections import Counter
from collections.abc import Callable
from functools import partial
from itertools import pairwise
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from deltalog.engine import state_codec
from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.evaluate import evaluate
from deltalog.engine.ivm import interval_index
from deltalog.engine.ivm.interval_index import IntervalIndex, Record, StaticIntervals
from deltalog.engine.runtime import IncrementalEngine
from deltalog.engine.segments import CorruptSegment, MemorySegments, pack_rows
from deltalog.engine.sentinels import BOTTOM, TOP
from deltalog.pipelines.state_store import StratumState, load_state, save_state


class CollectingSegments(MemorySegments):
    """A segment store in memory that, like ``deltalog.pipelines.state_store``, forgets after each
    save every segment the save neither wrote nor kept; counts the bytes written."""

    PAGE = 4096

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.written = 0
        self.opened: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def write(self, parts: list[bytes], paged: bool = False) -> str:
        name = f"c{self.count}"
        self.count += 1
        self.segments[name] = b"".join(parts)
        self.written += len(self.segments[name])
        return name

    def array(self, arr: np.ndarray) -> Any:
        """Counts what the pipelines' store writes: an array opened from here, the pages
        that changed since; any other, whole."""
        got = self.opened.get(id(arr))
        if got is not None and got[0] is arr:
            new = np.frombuffer(np.ascontiguousarray(arr).tobytes(), np.uint8)
            old = np.frombuffer(got[1].tobytes(), np.uint8)
            pages = -(-len(new) // self.PAGE)
            pad = pages * self.PAGE - len(new)
            if pages:
                changed = (np.pad(new, (0, pad)) != np.pad(old, (0, pad))).reshape(pages, -1)
                self.written += int(changed.any(axis=1).sum()) * self.PAGE
        else:
            self.written += arr.nbytes
        return super().array(arr)

    def open_array(self, ref: Any) -> np.ndarray:
        arr = super().open_array(ref)
        self.opened[id(arr)] = (arr, arr.copy())
        return arr

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


def _stab_both(index: IntervalIndex, oracle: list[Record], bucket: tuple[Any, ...],
               x: Any) -> list[Record]:
    """Stab ``index`` and check it finds what ``oracle`` holds; returns the list without
    what was found. (An interval added twice may be kept once: a part made or merged
    drops repeats, which a stab would answer twice with the same region.)"""
    got = index.stab(bucket, x)
    hit = [r for r in oracle if _contains(r, bucket, x)]
    assert set(got) == {(lo, hi, p) for _, lo, hi, p in hit}
    assert len(got) <= len(hit)
    return [r for r in oracle if not _contains(r, bucket, x)]


def _holds(index: IntervalIndex, oracle: list[Record]) -> None:
    """``index`` holds what ``oracle`` holds, each interval at least once and at most as
    often as it was added."""
    assert set(index.intervals()) == set(oracle)
    assert len(set(oracle)) <= len(index) <= len(oracle)
    assert len(index.intervals()) == len(index)


class AgainstAList(RuleBasedStateMachine):
    """An ``IntervalIndex`` saved to a segment store and opened again (and copied without
    one) between the rules of a subclass, against a plain list. Tiny pages and
    thresholds, so that every path is taken. ``seen`` counts the ways the dynamic part
    was saved."""

    seen: ClassVar[Counter[str]] = Counter()

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

    def add(self, batch: list[Record]) -> None:
        self.index.add_many(list(batch))
        self.oracle += batch

    def stab(self, bucket: tuple[Any, ...], x: Any) -> None:
        self.oracle = _stab_both(self.index, self.oracle, bucket, x)

    @rule()
    def save_and_open(self) -> None:
        chain = self.index._chain
        dynamic = len(self.index.dynamic)
        root = self.store.save(partial(state_codec.dumps, self.index))
        self.index = state_codec.loads(root, self.store)
        static = self.index.static
        if static is not None:
            assert static.pages_read == 0  # opening reads the index, no page
        now = self.index._chain
        assert len(now) <= interval_index.COMPACT_CHAIN
        if dynamic and not len(self.index.dynamic):
            self.seen["fold"] += 1
        elif chain and now[:-1] == chain:
            self.seen["delta"] += 1
        elif chain and now and now[0] != chain[0]:
            full = len(chain) == interval_index.COMPACT_CHAIN
            self.seen["whole, chain full" if full else "whole"] += 1
        written = self.store.written
        root = self.store.save(partial(state_codec.dumps, self.index))
        assert self.store.written == written  # nothing changed: nothing written
        self.index = state_codec.loads(root, self.store)

    @rule()
    def copy_without_a_store(self) -> None:
        self.index = state_codec.loads(state_codec.dumps(self.index))

    @invariant()
    def holds_what_the_list_holds(self) -> None:
        _holds(self.index, self.oracle)
        static = self.index.static
        if static is not None:
            assert static.live == len(static.live_records())


BUCKETS = [(0,), (1,), (2,)]
ENDS = st.one_of(st.integers(0, 5), st.sampled_from([BOTTOM, TOP]))
POINTS = st.one_of(st.integers(-1, 6), st.sampled_from([BOTTOM, TOP]))
RECORDS = st.tuples(st.sampled_from(BUCKETS), ENDS, ENDS, st.integers(0, 3))


def _short_strategy(buckets: list[tuple[int]]) -> st.SearchStrategy[Record]:
    """Short intervals, as maintenance records them: a stab takes a few."""
    return st.tuples(st.sampled_from(buckets), st.integers(0, 40), st.integers(0, 3),
                     st.integers(0, 3)).map(lambda t: (t[0], t[1], t[1] + t[2], t[3]))


class IndexAgainstAList(AgainstAList):
    """Intervals of a few ends, sentinels among them, added in batches large (a rebuild
    of the static part) and small (the dynamic part), and stabbed: several pages per
    bucket, inline and segment parts, delta chains, compactions by share and by chain
    length."""

    @rule(batch=st.lists(RECORDS, max_size=40))
    def add_many(self, batch: list[Record]) -> None:
        self.add(batch)

    @rule(batch=st.lists(RECORDS, min_size=1, max_size=3))
    def add_few(self, batch: list[Record]) -> None:
        self.add(batch)

    @rule(bucket=st.sampled_from(BUCKETS), x=POINTS)
    def stab_at(self, bucket: tuple[Any, ...], x: Any) -> None:
        self.stab(bucket, x)


TestIndexAgainstAList = IndexAgainstAList.TestCase
TestIndexAgainstAList.settings = settings(stateful_step_count=30, deadline=None)


class DynamicPartAgainstAList(AgainstAList):
    """Maintenance runs: from a static part of short intervals, each run stabs a few
    points, records a few intervals (to the dynamic part) and is saved: the dynamic part
    written as deltas, whole (by volume and by chain length), and folded into the static
    part."""

    @initialize(batch=st.lists(_short_strategy(BUCKETS), min_size=30, max_size=60))
    def load(self, batch: list[Record]) -> None:
        self.add(batch)

    @rule(points=st.lists(st.tuples(st.sampled_from([*BUCKETS, (3,), (4,)]),
                                    st.integers(0, 45)), max_size=3),
          batch=st.lists(_short_strategy([(2,), (3,), (4,)]), max_size=3))
    def run(self, points: list[tuple[tuple[Any, ...], Any]], batch: list[Record]) -> None:
        for bucket, x in points:
            self.stab(bucket, x)
        self.add(batch)
        self.save_and_open()


def test_the_dynamic_part_against_a_list(monkeypatch):
    """The dynamic part's machine, with a fixed seed: every way of saving it is taken."""
    monkeypatch.setattr(DynamicPartAgainstAList, "seen", Counter())
    run_state_machine_as_test(DynamicPartAgainstAList, settings=settings(
        max_examples=100, stateful_step_count=40, deadline=None, derandomize=True))
    assert set(DynamicPartAgainstAList.seen) == {
        "delta", "whole", "whole, chain full", "fold"}, DynamicPartAgainstAList.seen


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
    """Saved and opened through ``deltalog.pipelines.state_store`` (files, a manifest, checks,
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
            oracle = _stab_both(index, oracle, (rng.randrange(200),), rng.randrange(1_000))
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


def test_values_beyond_64_bits_are_saved_and_read_back():
    """An int beyond 64 bits (an aggregate's sum, say): the part is written (its pages
    hold such ints) and reads back the same."""
    records = [((0,), k, k + 2**70, None) for k in range(5_000)]
    store = CollectingSegments()
    root = store.save(partial(state_codec.dumps, StaticIntervals(list(records))))
    static = state_codec.loads(root, store)
    assert static.live_records() == records
    assert [static.record(p) for p in static.stab((0,), 2**69)] == records


def _reopen(store: CollectingSegments, index: IntervalIndex) -> tuple[IntervalIndex, int]:
    """``index`` saved to ``store`` and opened again, and the bytes the save wrote."""
    written = store.written
    root = store.save(partial(state_codec.dumps, index))
    return state_codec.loads(root, store), store.written - written


def _short(n: int, buckets: int, rng: random.Random) -> list[Record]:
    """``n`` intervals as a maintenance run records them: short, anywhere in a bucket."""
    out: list[Record] = []
    for _ in range(n):
        lo = rng.randrange(10_000)
        out.append(((rng.randrange(buckets),), lo, lo + rng.randrange(1, 30),
                    (rng.randrange(10**6),)))
    return out


def test_a_run_that_changes_the_dynamic_part_a_little_writes_little():
    """10^5 static intervals and 2,000 dynamic ones, saved and opened: a save after a run
    that adds 50 intervals and stabs a few (in both parts) writes what that run changed,
    a few KiB, not the dynamic part; a save after none writes nothing."""
    rng = random.Random(11)
    oracle = _sparse(100_000, 1_000, rng)
    index = IntervalIndex()
    index.add_many(list(oracle))
    store = CollectingSegments()
    index, _ = _reopen(store, index)
    for _ in range(20):
        batch = _short(100, 1_000, rng)
        index.add_many(batch)  # to the dynamic part: small against the index
        oracle += batch
    index, whole = _reopen(store, index)  # the dynamic part's first segment
    assert len(index.dynamic) == 2_000 and index.static is not None
    assert index.static.live == 100_000
    batch = _short(50, 1_000, rng)
    index.add_many(batch)
    oracle += batch
    dynamic = oracle[100_000:]
    for r in [*rng.sample(dynamic[:2_000], 3), *rng.sample(batch, 2),
              *rng.sample(oracle[:100_000], 3)]:
        oracle = _stab_both(index, oracle, r[0], r[1])
    index, written = _reopen(store, index)
    assert written < 16 * 1024 and written < whole / 10
    assert Counter(index.intervals()) == Counter(oracle)
    index, written = _reopen(store, index)
    assert written == 0
    assert Counter(index.intervals()) == Counter(oracle)


def test_each_way_a_save_keeps_the_dynamic_part(monkeypatch):
    """A delta behind the chain's first segment while the changes are few; the dynamic
    part whole when they would pass that segment, or past ``COMPACT_CHAIN`` segments;
    nothing when nothing changed; folded into the static part past ``COMPACT_SHARE`` of
    it, or when the static part writes a new base anyway; a value beyond 64 bits alike."""
    monkeypatch.setattr(interval_index, "PAGED_MIN", 64)
    monkeypatch.setattr(interval_index, "COMPACT_CHAIN", 3)
    rng = random.Random(12)
    store = CollectingSegments()
    oracle = _sparse(400, 4, rng)  # buckets 0-3; the dynamic intervals go to bucket 9
    index = IntervalIndex()
    index.add_many(list(oracle))
    fresh = iter(range(10**6))

    def run(add: int = 0, take: int = 0, kill: int = 0, value: int = 0) -> int:
        """Stab ``take`` of the dynamic intervals there, add ``add`` disjoint ones (ending
        at ``value`` when given), stab ``kill`` static ones; save, open, and check.
        Returns the bytes the save wrote."""
        nonlocal index, oracle
        for r in rng.sample([r for r in oracle if r[0] == (9,)], take):
            oracle = _stab_both(index, oracle, (9,), r[1])
        for _ in range(add):
            k = next(fresh)
            r = ((9,), 10 * k, value or 10 * k + 5, k)
            index.add_many([r])
            oracle.append(r)
        for _ in range(kill):
            r = rng.choice([r for r in oracle if r[0] != (9,)])
            oracle = _stab_both(index, oracle, r[0], r[1])
        index, written = _reopen(store, index)
        assert Counter(index.intervals()) == Counter(oracle)
        return written

    assert run() > 0 and index._chain == ()  # the static base; no dynamic part
    run(add=20)
    (first,) = index._chain  # written whole: the chain's first segment
    run(add=5, take=1)
    assert index._chain[0] == first and len(index._chain) == 2  # a delta
    assert (index._whole, index._behind) == (20, 6)
    assert run() == 0 and len(index._chain) == 2
    run(take=4)
    assert index._chain[0] == first and len(index._chain) == 3
    assert (index._whole, index._behind) == (20, 10)
    run(add=1)  # a fourth segment would pass COMPACT_CHAIN: whole
    assert len(index._chain) == 1 and index._chain[0] != first
    (first,) = index._chain  # 21 intervals
    run(add=2)
    assert len(index._chain) == 2
    run(add=10, take=10)  # 2 + 20 changes behind 21: whole
    assert len(index._chain) == 1 and index._chain[0] != first
    assert index.static is not None and index.static.live == 400
    run(add=30)  # 53 dynamic intervals, past COMPACT_SHARE of 400: folded
    assert index._chain == () and len(index.dynamic) == 0
    assert index.static is not None and index.static.live == len(oracle)
    run(add=5)
    assert len(index._chain) == 1
    run(kill=60)  # the static part compacts: the dynamic part folded in with it
    assert index._chain == () and len(index.dynamic) == 0
    assert index.static is not None and index.static.n == index.static.live == len(oracle)
    run(add=1, value=2**70)  # an int beyond 64 bits: a segment as any other, read back
    assert len(index._chain) == 1 and len(index.dynamic) == 1


def test_a_dynamic_delta_naming_an_unknown_interval_is_refused():
    store = CollectingSegments()
    index = IntervalIndex()
    index.add_many(_sparse(8_192, 8, random.Random(13)))
    index, _ = _reopen(store, index)
    index.add_many([((9,), 1, 2, None)])
    index, _ = _reopen(store, index)
    index.add_many([((9,), 3, 4, None)])
    root = store.save(partial(state_codec.dumps, index))
    delta = state_codec.loads(root, store)._chain[-1]
    store.segments[delta] = pack_rows([[], [10**6]])
    with pytest.raises(CorruptSegment):
        state_codec.loads(root, store)


TRIANGLE = """\
.decl e(x: int, y: int)
tri(x, y, z) :- e(x, y), e(y, z), e(x, z)."""


def test_a_triangle_engine_kept_in_segments_maintains_like_a_recompute():
    """The triangle workload of bench/maintain_vs_recompute.py at 20,000 edges: saved to a
    segment store, opened, changed (5 erasures, 5 insertions), saved and opened again; the
    root stays small and does not grow from run to run (the intervals each run records are
    in segments, not in the root), each save writes little, and ``tri`` is what a
    recompute gives."""
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
    roots: list[int] = []
    for step in range(6):
        written = store.written
        root = store.save(engine.dumps)
        roots.append(len(root))
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
    # (the root holds the arrays below a segment's size, ``state_codec.ARRAY_MIN``: here
    # tri's support counts on arrays, its coded rows and the table of its column pairs,
    # about 60 KiB of it)
    assert max(roots) < 128 * 1024 and roots[-1] < 2 * roots[0], roots
