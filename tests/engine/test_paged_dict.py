"""Dicts on disk (``deltalog.engine.segments.PagedDict``): a dict of rows opened from its segments
answers every question a dict answers, after any interleaving of changes, saves and opens
(tiny pages and thresholds, so pages, deltas, folded chains and compactions all happen),
against a plain dict; an opened dict reads no page, and a save writes the entries changed
since the open; a sensitivity stratum keeps its support counts and functional heads' rows
so, and its engine's root no longer grows with the rows it derives."""

import random

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import deltalog.engine.ivm.interval_index as interval_index
import deltalog.engine.ivm.stratum as stratum_module
import deltalog.engine.segments as seg
import deltalog.engine.storage as storage
from deltalog.engine import state_codec
from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.errors import DataError
from deltalog.engine.ivm.stratum import SensitivityStratum
from deltalog.engine.naive import evaluate_naive
from deltalog.engine.runtime import IncrementalEngine
from deltalog.engine.segments import MemorySegments, PagedDict, PagedMapping
from deltalog.engine.storage import CodedRows
from tests.engine.test_segments import _Store

KEYS = [(i, j) for i in range(10) for j in range(2)]
KEY = st.sampled_from(KEYS)
VALUE = st.one_of(st.integers(-2, 3), st.tuples(st.integers(0, 3), st.integers(0, 3)))


def _save(store: _Store, d) -> bytes:
    """``d``, marked ``PagedMapping``, saved through a store that drops every segment the
    save neither wrote nor kept."""
    store.begin()
    root = state_codec.dumps(PagedMapping(d), store)
    store.end()
    return root


def _open(store: MemorySegments, root: bytes):
    return PagedMapping.unwrap(state_codec.loads(root, store))


class PagedDictMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.oracle: dict = {}
        self.d: dict | PagedDict = {}
        self.store = _Store()
        self.old = (seg.PAGE_ROWS, seg.PAGED_MIN, seg.COMPACT_SHARE, seg.COMPACT_CHAIN)
        seg.PAGE_ROWS, seg.PAGED_MIN, seg.COMPACT_SHARE, seg.COMPACT_CHAIN = 2, 2, 0.5, 2

    def teardown(self) -> None:
        seg.PAGE_ROWS, seg.PAGED_MIN, seg.COMPACT_SHARE, seg.COMPACT_CHAIN = self.old

    @initialize(entries=st.dictionaries(KEY, VALUE, max_size=12))
    def start(self, entries):
        self.oracle = dict(entries)
        self.d = dict(entries)
        self.save_and_open()

    @rule(key=KEY, value=VALUE)
    def set(self, key, value):
        self.d[key] = value
        self.oracle[key] = value

    @rule(key=KEY)
    def set_past_64_bits(self, key):
        self.d[key] = 2**70  # beyond 64 bits: its pages hold it as any int
        self.oracle[key] = 2**70

    @rule(key=KEY)
    def delete(self, key):
        if key in self.oracle:
            del self.d[key]
            del self.oracle[key]
        else:
            with pytest.raises(KeyError):
                del self.d[key]

    @rule(key=KEY, value=VALUE)
    def setdefault(self, key, value):
        assert self.d.setdefault(key, value) == self.oracle.setdefault(key, value)

    @rule(batch=st.lists(st.tuples(KEY, st.none() | VALUE), max_size=3))
    def save_and_open(self, batch=()):
        """A few changes (or none), then a save and an open."""
        for key, value in batch:
            if value is not None:
                self.set(key, value)
            elif key in self.oracle:
                self.delete(key)
        self.d = _open(self.store, _save(self.store, self.d))
        assert type(self.d) is PagedDict

    @rule()
    def copy_without_store(self):
        self.d = PagedMapping.unwrap(state_codec.loads(state_codec.dumps(PagedMapping(self.d))))
        assert type(self.d) is dict

    @invariant()
    def same_entries(self):
        d = self.d
        for key in KEYS:
            assert d.get(key, "none") == self.oracle.get(key, "none")
            assert (key in d) == (key in self.oracle)
            if key in self.oracle:
                assert d[key] == self.oracle[key]
            else:
                with pytest.raises(KeyError):
                    d[key]
        assert len(d) == len(self.oracle)
        assert dict(d.items()) == dict(d) == self.oracle
        assert set(d) == set(self.oracle)
        if type(d) is PagedDict:
            assert list(d) == sorted(self.oracle)


PagedDictMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30,
                                              deadline=None)
test_paged_dict = PagedDictMachine.TestCase


def test_a_save_writes_a_delta_folds_a_full_chain_and_compacts_past_a_share(monkeypatch):
    monkeypatch.setattr(seg, "PAGE_ROWS", 8)
    monkeypatch.setattr(seg, "PAGED_MIN", 4)
    monkeypatch.setattr(seg, "COMPACT_SHARE", 0.25)
    monkeypatch.setattr(seg, "COMPACT_CHAIN", 2)
    store = _Store()
    oracle = {(i,): i * i for i in range(64)}
    store.begin()
    ref = PagedDict.write(store, sorted(oracle.items()), len(oracle))
    store.end()
    run = ref[0]

    def change_and_save(changes: dict) -> list:
        d = PagedDict.open(store, ref)
        for key, value in changes.items():
            if value is None:
                del d[key]
                del oracle[key]
            else:
                d[key] = oracle[key] = value
        store.begin()
        new = d.persist(store)
        store.end()
        again = PagedDict.open(store, new)
        assert again.pages_read == 0 and len(again) == len(oracle)
        assert dict(again.items()) == oracle
        return new

    ref = change_and_save({(1,): -1, (100,): 5})
    assert ref[0] == run and len(ref[1]) == 1  # a delta
    first = ref[1][0]
    ref = change_and_save({(2,): None})
    assert ref[0] == run and ref[1][0] == first and len(ref[1]) == 2  # chained
    ref = change_and_save({(3,): None})
    assert ref[0] == run and len(ref[1]) == 1 and ref[1][0] != first  # the chain folded
    assert sorted(seg.unpack_rows(store.segments[ref[1][0]])) == [
        ((1,), -1), ((2,),), ((3,),), ((100,), 5)]
    ref = change_and_save({(i,): None for i in range(10, 30)})
    assert ref[0] != run and ref[1] == [] and ref[2] == len(oracle)  # compacted
    assert run not in store.segments  # the old run dropped: nothing kept it


def test_an_opened_dict_reads_no_page_and_a_save_writes_the_change():
    store = MemorySegments()
    entries = {(i, i % 7): i % 5 + 1 for i in range(100_000)}
    opened = _open(store, state_codec.dumps(PagedMapping(entries), store))
    assert type(opened) is PagedDict
    assert opened.pages_read == 0 and len(opened) == 100_000  # the index only
    for i in range(0, 100_000, 25_000):
        opened[(i, i % 7)] += 1
        del opened[(i + 1, (i + 1) % 7)]
        opened[(-i - 1, 0)] = 1
    assert opened.setdefault((-1, 1), 9) == 9
    assert opened.pages_read <= 10 and len(opened) == 100_001
    before = sum(len(b) for b in store.segments.values())
    root = state_codec.dumps(PagedMapping(opened), store)
    assert sum(len(b) for b in store.segments.values()) - before < 2048
    assert len(root) < 200
    again = _open(store, root)
    assert again.pages_read == 0 and len(again) == 100_001
    assert again[(0, 0)] == 2 and (1, 1) not in again and again.get((-25_001, 0)) == 1
    segments = dict(store.segments)
    assert state_codec.dumps(PagedMapping(again), store) == root  # nothing changed
    assert store.segments == segments  # nothing written


PROGRAM = """
.decl e(x: int, y: int)
.decl k(x: int, y: int)
p(x, z) :- e(x, y), e(y, z).
f[x, y] = s :- e(x, y), s = x + y.
h[x, 0] = y :- k(x, y).
"""


def _support(engine: IncrementalEngine) -> dict[str, object]:
    """The support counts of every derived predicate kept in a mapping (with the columnar
    kernel off: on, they are on arrays, ``_CodedSupport``)."""
    return {p: d for _, m in engine.strata for p, d in m.support.items()}


def _by_key(engine: IncrementalEngine) -> dict[str, object]:
    """The rows by key of every functional head."""
    return {p: d for _, m in engine.strata for p, d in m.by_key.items()}


def test_a_stratum_saved_to_segments_writes_its_changes_and_opens_paged(monkeypatch):
    """Support counts of 10^4 derived rows and of two functional heads in paged mappings
    (the columnar kernel off, as a user may run it; on, they are on arrays), and the
    functional heads' rows by key, through random 10-row changes each saved to a store
    (dropping what it did not keep) and opened again: the relations are what a fresh
    engine derives, and the root does not grow."""
    for module in (seg, storage, interval_index, stratum_module):
        monkeypatch.setattr(module, "PAGED_MIN", 256)
    monkeypatch.setattr(seg, "PAGE_ROWS", 64)
    monkeypatch.setattr(seg, "COMPACT_SHARE", 0.01)  # compactions ...
    monkeypatch.setattr(seg, "COMPACT_CHAIN", 2)  # ... and folded chains happen
    # arrays (the compiled commits' coded indexes) in segments of their own, as at scale
    monkeypatch.setattr(state_codec, "ARRAY_MIN", 4096)
    prog = load_program(PROGRAM, "<test>")
    rng = random.Random(7)
    edges = {(rng.randrange(300), rng.randrange(300)) for _ in range(2000)}
    keyed = {(x, 2 * x) for x in range(1000)}
    engine = IncrementalEngine(prog, {"e": edges, "k": keyed}, strategy="sensitivity",
                               columnar=False)
    assert engine.size("p") > 10_000
    store = _Store()
    store.begin()
    first = engine.dumps(store)
    store.end()
    assert len(first) < 16_384  # the support counts alone take 10^5 bytes inline
    root = first
    for step in range(6):
        engine = IncrementalEngine.loads(root, store)
        assert all(isinstance(m, SensitivityStratum) for _, m in engine.strata)
        assert not [p for _, m in engine.strata for p in m.coded]
        assert sorted(_support(engine)) == ["f", "h", "p"]
        assert all(type(d) is PagedDict for d in _support(engine).values())
        assert sorted(_by_key(engine)) == ["f", "h"]
        assert all(type(d) is PagedDict for d in _by_key(engine).values())
        gone = rng.sample(sorted(edges), 5)
        new = set()
        while len(new) < 5:
            edge = (rng.randrange(300), rng.randrange(300))
            if edge not in edges:
                new.add(edge)
        edges = (edges - set(gone)) | new
        moved = {(step, 2 * step): -1, (step, -step): 1}  # h[step, 0] takes another value
        engine.apply({"e": {**dict.fromkeys(gone, -1), **dict.fromkeys(new, 1)}, "k": moved})
        keyed = (keyed - {(step, 2 * step)}) | {(step, -step)}
        fresh = IncrementalEngine(prog, {"e": edges, "k": keyed}, strategy="sensitivity")
        assert all(engine.relation(p) == fresh.relation(p) for p in prog.idb)
        store.begin()
        root = engine.dumps(store)
        store.end()
        # segment names in chains, not rows; and the compiled commits' coded indexes'
        # overlays (the rows changed since their base, bounded: folded past 1/32 of it
        # or 1,024 rows)
        overlays = sum(c.minus.nbytes + c.plus.nbytes for rel in engine.store.relations.values()
                       for c in rel._coded.values() if c is not None)
        assert overlays <= 2 * 16 * 1024 * len(engine.store.relations)
        # and p's support counts: the arrays below a segment's size (a commit's new rows,
        # in ``_Counts``' nursery and young part) are written inline
        inline = sum(a.nbytes for _, m in engine.strata for c in m.coded.values()
                     for a in vars(c.counts).values()
                     if isinstance(a, np.ndarray) and a.nbytes < state_codec.ARRAY_MIN)
        # and p's coded rows in the store: the rows changed since their keys were
        # written, kept beside as rows (folded into the keys past a share of them)
        inline += sum(16 * (len(rel.rows.ins) + len(rel.rows.era))
                      for rel in engine.store.relations.values()
                      if type(rel.rows) is CodedRows)
        assert len(root) <= len(first) + 1024 + overlays + inline
    engine = IncrementalEngine.loads(root, store)
    want = evaluate_naive(prog, {"e": edges, "k": keyed})
    assert all(engine.relation(p) == want[p] for p in prog.idb)
    _, copy = state_codec.loads(engine.dumps())  # no store: dicts in memory again
    support, by_key = _support(copy), _by_key(copy)
    assert all(type(d) is dict for d in (*support.values(), *by_key.values()))
    assert support == {p: dict(d.items()) for p, d in _support(engine).items()}
    assert by_key == {p: dict(d.items()) for p, d in _by_key(engine).items()}
    with pytest.raises(DataError, match=r"h\[7, 0\] = 14\..*h\[7, 0\] = 15\."):
        engine.apply({"k": {(7, 15): 1}})  # a second value, caught through the opened rows
