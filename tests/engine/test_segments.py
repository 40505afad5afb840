"""Relations on disk (``deltalog.engine.segments``): a ``PagedRows`` opened from its segments
answers
every question a sorted set answers, after any interleaving of changes, saves and opens
(tiny pages and thresholds, so pages, deltas and compactions all happen), against a plain
``SortedList``; an opened run reads the pages a question needs, and a save writes the rows
changed since the open; a damaged page is told by its checksum."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sortedcontainers import SortedList

import deltalog.engine.segments as seg
from deltalog.engine.segments import CorruptSegment, MemorySegments, PagedRows, SortedRun, write_run
from deltalog.engine.sentinels import BOTTOM, TOP
from deltalog.engine.storage import VersionedRelation

ROW = st.tuples(st.integers(0, 6), st.integers(0, 6))


class _Store(MemorySegments):
    """An in-memory store that, like the file store, drops every segment a save neither
    wrote nor kept."""

    def __init__(self) -> None:
        super().__init__()
        self.live: set[str] = set()

    def begin(self) -> None:
        self.kept = set()
        self.written: set[str] = set()

    def write(self, parts, paged=False):
        name = super().write(parts, paged)
        self.written.add(name)
        return name

    def end(self) -> None:
        self.live = self.kept | self.written
        for name in [n for n in self.segments if n not in self.live]:
            del self.segments[name]


class PagedRowsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.oracle: SortedList = SortedList()
        self.store = _Store()
        self.rows: PagedRows | None = None
        self.old = (seg.PAGE_ROWS, seg.PAGED_MIN, seg.COMPACT_SHARE, seg.COMPACT_CHAIN)
        seg.PAGE_ROWS, seg.PAGED_MIN, seg.COMPACT_SHARE, seg.COMPACT_CHAIN = 2, 2, 0.5, 3

    def teardown(self) -> None:
        seg.PAGE_ROWS, seg.PAGED_MIN, seg.COMPACT_SHARE, seg.COMPACT_CHAIN = self.old

    @rule(rows=st.sets(ROW, min_size=1, max_size=12))
    @precondition(lambda self: self.rows is None)
    def start(self, rows):
        self.oracle.update(rows)
        self.store.begin()
        ref = PagedRows.write(self.store, sorted(rows))
        self.store.end()
        self.rows = PagedRows.open(self.store, ref)

    @rule(row=ROW)
    @precondition(lambda self: self.rows is not None)
    def add(self, row):
        self.rows.add(row)
        if row not in self.oracle:
            self.oracle.add(row)

    @rule(row=ROW)
    @precondition(lambda self: self.rows is not None)
    def discard(self, row):
        if row in self.oracle:
            self.rows.remove(row)
            self.oracle.remove(row)
        else:
            self.rows.discard(row)
            with pytest.raises(KeyError):
                self.rows.remove(row)

    @rule(rows=st.sets(ROW, max_size=5), gone=st.sets(ROW, max_size=5))
    @precondition(lambda self: self.rows is not None)
    def bulk(self, rows, gone):
        self.rows.update(rows)
        self.rows.difference_update(gone)
        for r in rows:
            if r not in self.oracle:
                self.oracle.add(r)
        for r in gone:
            self.oracle.discard(r)

    @rule()
    @precondition(lambda self: self.rows is not None)
    def save_and_open(self):
        self.store.begin()
        ref = self.rows.persist(self.store)
        self.store.end()
        self.rows = PagedRows.open(self.store, ref)

    @rule(key=st.one_of(ROW, st.tuples(st.integers(-1, 7)),
                        st.tuples(st.integers(0, 6), st.sampled_from([BOTTOM, TOP]))))
    @precondition(lambda self: self.rows is not None)
    def ceil(self, key):
        i = self.oracle.bisect_left(key)
        want = self.oracle[i] if i < len(self.oracle) else None
        assert self.rows.ceil(key) == want

    @rule(key=ROW)
    @precondition(lambda self: self.rows is not None)
    def rank_and_select(self, key):
        assert self.rows.bisect_left(key) == self.oracle.bisect_left(key)
        assert self.rows.bisect_right(key) == self.oracle.bisect_right(key)
        if self.oracle:
            assert self.rows[len(self.oracle) // 2] == self.oracle[len(self.oracle) // 2]

    @invariant()
    def same_rows(self):
        if self.rows is not None:
            assert list(self.rows) == list(self.oracle)
            assert len(self.rows) == len(self.oracle)
            for r in list(self.oracle)[:3]:
                assert r in self.rows


PagedRowsMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30,
                                              deadline=None)
test_paged_rows = PagedRowsMachine.TestCase


def test_an_opened_run_reads_few_pages_and_a_save_writes_the_change():
    store = MemorySegments()
    rows = [(i, i % 7) for i in range(100_000)]
    ref = PagedRows.write(store, rows)
    opened = PagedRows.open(store, ref)
    assert opened.pages_read == 0  # the index only
    for i in range(0, 100_000, 20_000):
        assert opened.ceil((i,)) == (i, i % 7)
    opened.add((5, 99))
    opened.remove((7, 0))
    assert opened.pages_read <= 10
    before = sum(len(b) for b in store.segments.values())
    new = opened.persist(store)
    written = sum(len(b) for b in store.segments.values()) - before
    assert new[0] == ref[0] and len(new[1]) == 1  # the same run, one delta
    assert written < 100
    again = PagedRows.open(store, new)
    assert (5, 99) in again and (7, 0) not in again and len(again) == 100_000
    before = sum(len(b) for b in store.segments.values())
    assert again.persist(store) == new  # nothing changed: nothing written
    assert sum(len(b) for b in store.segments.values()) == before


def test_a_damaged_page_or_index_is_told():
    store = MemorySegments()
    name = write_run(store, [(i,) for i in range(5000)])
    blob = bytearray(store.segments[name])
    blob[3] ^= 0x04  # in the first page
    run = SortedRun(memoryview(bytes(blob)))
    with pytest.raises(CorruptSegment):
        run.ceil((0,))
    blob = bytearray(store.segments[name])
    blob[-30] ^= 0x04  # in the index
    with pytest.raises(CorruptSegment):
        SortedRun(memoryview(bytes(blob)))


def test_a_relation_saved_to_segments_opens_paged_and_commits():
    """``VersionedRelation`` marks its large rows and indexes ``Paged``: saved through a
    store they come back as runs; saved without, as the in-memory set and lists."""
    from deltalog.engine import state_codec

    rel = VersionedRelation("r", 2, [(i, i % 3) for i in range(10_000)])
    rel.index((1, 0))
    store = MemorySegments()
    root = state_codec.dumps(rel, store)
    assert len(root) < 1000
    opened = state_codec.loads(root, store)
    assert type(opened.rows) is PagedRows and type(opened.index((1, 0))) is PagedRows
    opened.commit({(1, 1): -1, (20_000, 2): 1})
    assert opened.current((1, 0)).ceil((2, 20_000)) == (2, 20_000)
    assert opened.previous((1, 0)).ceil((1, 1)) == (1, 1)
    assert opened.delta() == {(1, 1): -1, (20_000, 2): 1}
    copy = state_codec.loads(state_codec.dumps(opened))  # no store: in memory again
    assert type(copy.rows) is set and copy.rows == set(opened.rows)


@given(st.lists(st.tuples(st.integers(), st.integers(-(2**70), 2**70)), max_size=20))
def test_rows_with_ints_beyond_64_bits_round_trip(rows):
    """The language's ints are unbounded: a page of rows holds them too."""
    from deltalog.engine.segments import pack_rows, unpack_rows

    assert list(unpack_rows(pack_rows(rows))) == rows


def test_a_large_relation_that_gains_an_int_beyond_64_bits_saves_and_reopens(monkeypatch):
    """A paged relation (its rows in sorted runs and a delta log) gains 2**80 in a commit:
    the segment store saves it, and the reopened engine holds it."""
    import deltalog.engine.segments
    import deltalog.engine.storage
    from deltalog.engine.analysis.analyze import load_program
    from deltalog.engine.runtime import IncrementalEngine
    from deltalog.engine.segments import MemorySegments

    monkeypatch.setattr(deltalog.engine.segments, "PAGED_MIN", 8)
    monkeypatch.setattr(deltalog.engine.storage, "PAGED_MIN", 8)
    prog = load_program(".decl a(x: int)\np(x, t) :- a(x), t = x * x.\n")
    engine = IncrementalEngine(prog, {"a": {(i,) for i in range(50)}})
    store = MemorySegments()
    engine = IncrementalEngine.loads(engine.dumps(store), store)
    engine.apply({"a": {(2**40,): 1, (-(2**45),): 1}})
    again = IncrementalEngine.loads(engine.dumps(store), store)
    assert (2**40, 2**80) in again.relation("p") and (-(2**45), 2**90) in again.relation("p")
    assert again.relation("p") == engine.relation("p")
