"""A columnar stratum's relations stay coded in the store (``storage.CodedRows``): strings,
floats (negative, -0.0), ints beyond 64 bits and three columns decode as they went in;
membership, size, columns and the versions a higher stratum reads agree with a set after
commits, folds and saves. (And the galloping searches of sorted keys the kernel's load
uses.)"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from deltalog.engine import storage
from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.dbsp import kernels
from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine
from deltalog.engine.segments import MemorySegments
from deltalog.engine.storage import CodedRows

TEXT = """
.decl e(a: string, w: float, b: string)
.decl n(a: int, b: int)
.decl m(a: int, b: int)
path(x, w, y) :- e(x, w, y).
path(x, w, z) :- path(x, w, y), e(y, w, z).
reach(x, y) :- n(x, y).
reach(x, z) :- reach(x, y), n(y, z).
far(x) :- path(x, w, _), w < 0.
big(x) :- reach(x, y), y > 100.
round(x, w, z) :- path(x, w, y), path(y, w, z).
round(x, w, z) :- round(x, w, y), e(y, w, z).
twice(x, z) :- reach(x, y), reach(y, z).
twice(x, z) :- twice(x, y), n(y, z).
walk(x, y) :- m(x, y).
walk(x, z) :- walk(x, y), m(y, z).
loop(x, z) :- walk(x, y), walk(y, z), x != z.
loop(x, z) :- loop(x, y), m(y, z).
"""
M = {(1, 2), (2, 3), (3, 1), (3, 4), (-5, 1)}
E = {("a", -1.5, "b"), ("b", -1.5, "c"), ("c", -1.5, "a"), ("a", 0.0, "d"), ("d", 0.0, "é")}
N = {(1, 2), (2, 2**70), (2**70, -(2**65)), (-(2**65), 3)}


@pytest.fixture
def fold_at_once():
    """Changes folded at once, and rows found through fences of three keys."""
    saved = storage.FOLD_MIN, storage.FENCE
    storage.FOLD_MIN, storage.FENCE = 0, 3
    yield
    storage.FOLD_MIN, storage.FENCE = saved


def _check(engine: IncrementalEngine, oracle: RecomputeEngine) -> None:
    for pred in ("path", "reach", "round", "twice", "walk", "loop"):
        held = engine.store[pred].rows
        assert type(held) is CodedRows, pred
        want = oracle.relation(pred)
        assert len(held) == len(want) and set(held) == want, pred
        cols = held.columns()
        assert set(zip(*(c.tolist() for c in cols), strict=True)) == want, pred
        probes = [*sorted(want, key=repr), ("a", -1.5, "zz"), ("a", 2.5, "b"), (7, 2**70),
                  (2**70, 2)]
        probes = [r for r in probes if len(r) == engine.prog.schemas[pred].arity]
        assert held.contains_all(probes).tolist() == [r in want for r in probes]
        assert [r in held for r in probes] == [r in want for r in probes]
    for pred in ("far", "big", "round", "twice", "loop"):  # (the last two: columnar strata
        assert engine.relation(pred) == oracle.relation(pred), pred  # reading coded ones)


def test_values_of_every_type_stay_coded_and_decode_as_they_went_in(fold_at_once):
    prog = load_program(TEXT)
    engine = IncrementalEngine(prog, {"e": E, "n": N, "m": M})
    oracle = RecomputeEngine(prog, {"e": E, "n": N, "m": M})
    _check(engine, oracle)
    path = engine.store["path"].rows.columns()  # type: ignore[union-attr]
    assert [c.dtype.kind for c in path] == ["O", "f", "O"]
    assert all(type(v) is str for v in path[0].tolist())
    reach = engine.store["reach"].rows.columns()  # type: ignore[union-attr]
    assert reach[0].dtype == object  # an int beyond 64 bits: Python ints
    assert ("a", -0.0, "é") in engine.store["path"].rows
    store = MemorySegments()
    changes = [
        {"e": {("é", 0.0, "a"): 1, ("b", -1.5, "c"): -1}, "n": {(3, 1): 1}},
        {"e": {("b", -1.5, "c"): 1, ("x", 9.0, "y"): 1}, "n": {(2, 2**70): -1}},
        {"e": {("a", 0.0, "d"): -1}, "n": {(2, 2**70): 1, (3, 1): -1}},
    ]
    for i, change in enumerate(changes):
        assert engine.apply(change) == oracle.apply(change)
        _check(engine, oracle)
        engine = (IncrementalEngine.loads(engine.dumps(store), store) if i % 2
                  else IncrementalEngine.loads(engine.dumps()))
        _check(engine, oracle)


def test_changes_are_kept_as_rows_until_they_pass_a_share_of_the_keys():
    prog = load_program(TEXT)
    edges = {(f"v{i}", 1.0, f"v{i + 1}") for i in range(40)}
    engine = IncrementalEngine(prog, {"e": edges, "n": N})
    held = engine.store["path"].rows
    assert type(held) is CodedRows
    keys = held.keys
    engine.apply({"e": {("v40", 1.0, "v41"): 1}})
    assert held.keys is keys and len(held.ins) == 41 and not held.era
    engine.apply({"e": {("v0", 1.0, "v1"): -1, ("v40", 1.0, "v41"): -1}})
    assert held.keys is keys and len(held.era) == 40 and not held.ins  # (41 cancelled)
    assert len(held) == len(keys) - 40 == 40 * 41 // 2 - 40
    saved = storage.FOLD_MIN
    storage.FOLD_MIN = 0
    more = {(f"v{i}", 1.0, f"v{i + 1}") for i in range(40, 43)}
    try:  # 41 + 42 + 43 paths more: past 1/32 of the keys
        engine.apply({"e": {("v0", 1.0, "v1"): 1, **dict.fromkeys(more, 1)}})
    finally:
        storage.FOLD_MIN = saved
    assert held.keys is not keys and not held.ins and not held.era
    assert np.all(np.diff(held.keys) > 0) and len(held.keys) == 40 * 41 // 2 + 126
    assert set(held) == RecomputeEngine(prog, {"e": edges | more, "n": N}).relation("path")


def test_an_int_beyond_64_bits_inserted_after_the_load_makes_its_column_objects():
    prog = load_program(TEXT)
    engine = IncrementalEngine(prog, {"e": E, "n": {(1, 2), (2, 3)}})
    held = engine.store["reach"].rows
    assert type(held) is CodedRows and held.columns()[1].dtype == np.int64
    engine.apply({"n": {(3, 2**70): 1}})
    assert held.ins  # (kept as rows: not folded)
    cols = held.columns()
    assert cols[1].dtype == object and 2**70 in cols[1].tolist()
    assert set(zip(*(c.tolist() for c in cols), strict=True)) == RecomputeEngine(
        prog, {"e": E, "n": {(1, 2), (2, 3), (3, 2**70)}}).relation("reach")


@given(a=st.lists(st.integers(-3, 40), max_size=30),
       b=st.lists(st.integers(-5, 45), max_size=30), ordered=st.booleans())
def test_galloping_positions_are_numpys(a, b, ordered):
    """The DBSP kernel's searches of sorted keys (``kernels.gallop``) answer as
    ``np.searchsorted`` for sorted and unsorted queries alike."""
    keys = np.sort(np.array(a, np.int64))
    query = np.array(sorted(b) if ordered else b, np.int64)
    out = np.empty(len(query), np.int64)
    kernels.gallop(keys, query, out)
    assert out.tolist() == np.searchsorted(keys, query).tolist()


_PATCH = st.dictionaries(st.integers(0, 40), st.sampled_from([0, int(kernels.NONE)]),
                         max_size=15)


@given(keys=st.sets(st.integers(0, 40), max_size=25), patch=_PATCH, change=_PATCH)
def test_an_inputs_patch_is_laid_over_and_trimmed_as_dicts_say(keys, patch, change):
    """``kernels.overlay`` lays a change over a patch (its entries win) and
    ``kernels.trim_patch`` then drops the entries the sorted keys say already (a key come
    that they hold, a key gone that they do not): as a dict update and a filter."""
    def arrays(d):
        k = np.array(sorted(d), np.int64)
        return k, np.array([d[x] for x in k.tolist()], np.int32)

    sorted_keys = np.array(sorted(keys), np.int64)
    merged = {**patch, **change}
    ok, od = kernels.overlay(*arrays(patch), *arrays(change))
    assert ok.tolist() == sorted(merged) and od.tolist() == [merged[k] for k in sorted(merged)]
    kept = {k: d for k, d in merged.items() if (d == 0) != (k in keys)}
    rk, rd = kernels.trim_patch(sorted_keys, ok, od)
    assert dict(zip(rk.tolist(), rd.tolist(), strict=True)) == kept
    assert rk.tolist() == sorted(kept)


def test_a_commits_births_wait_for_room_in_the_pool_and_check_membership():
    """``kernels.commit_births``: with too little room in the pool it changes nothing and
    says how many entries it needs; given them, facts whose births outgrow their slice
    move to the pool's end, the others are rewritten in place; a member without births
    is refused before anything changes."""
    i64, i32 = np.int64, np.int32
    none = int(kernels.NONE)
    # two facts (ids 0, 1): fact 0 has births t=1 (count 1) at pool[0:1]; fact 1 is new
    depth, slot = np.array([1, none], i32), np.array([0, 1], i64)
    bstart, blen = np.array([0, 0], i64), np.array([1, 0], i64)
    pool_t, pool_w = np.array([1, 0], i32), np.array([1, 0], i64)
    hist, bhist = np.array([0, 1], i64), np.array([0, 1], i64)
    t_ids, t_old = np.array([0, 1], i64), np.array([1, none], i32)
    t_new = np.array([1, 2], i32)
    t_gstart, t_glen = np.array([0, 1], i64), np.array([1, 0], i64)
    g_t, g_w = np.array([1], i32), np.array([1], i64)
    # the commit's counts: fact 0 one more derivation at t=1 (its births keep their
    # length: in place), fact 1 two at t=2 (it has no slice: it moves to the pool's end)
    log_s, log_t, log_w = np.array([0, 1], i64), np.array([1, 2], i32), np.array([1, 2], i64)
    scratch = (np.empty(2, i64), np.empty(2, i64), np.empty(3, i32), np.empty(3, i64))

    def run(pool_n, pool_t, pool_w, new=t_new):
        return kernels.commit_births(2, t_ids, t_old, new, t_gstart, t_glen, g_t, g_w, 1,
                                     log_s, log_t, log_w, *scratch, hist, bhist, depth,
                                     slot, bstart, blen, pool_t, pool_w, pool_n)

    _, _, outcome, need, _ = run(2, pool_t, pool_w)
    assert outcome == kernels.BIRTHS_ROOM and need == 1  # fact 1's one entry
    assert slot.tolist() == [0, 1] and blen.tolist() == [1, 0]  # nothing changed
    _, _, outcome, _, _ = run(2, pool_t, pool_w, np.array([1, none], i32))
    assert outcome == kernels.BIRTHS_MISMATCH and slot.tolist() == [0, 1]
    pool_t, pool_w = np.zeros(5, i32), np.zeros(5, i64)
    pool_t[0], pool_w[0] = 1, 1
    h, bh, outcome, end, live = run(2, pool_t, pool_w)
    assert outcome == kernels.BIRTHS_DONE and (end, live) == (3, 1)  # 2 written, 1 left
    assert depth.tolist() == [1, 2] and slot.tolist() == [-1, -1]
    assert h.tolist() == [0, 1, 1] and bh.tolist() == [0, 1, 1]
    assert bstart.tolist() == [0, 2]  # fact 0 in place, fact 1 from the pool's old end
    births = {f: list(zip(pool_t[bstart[f]:bstart[f] + blen[f]].tolist(),
                          pool_w[bstart[f]:bstart[f] + blen[f]].tolist(), strict=True))
              for f in (0, 1)}
    assert births == {0: [(1, 2)], 1: [(2, 2)]}


class _Ints:
    """A coding of one int column as itself (keys = values; a value below 0 was never
    coded)."""

    def find(self, rows):
        return np.array([r[0] if r[0] >= 0 else -1 for r in rows], np.int64)

    encode = find

    def decode(self, keys):
        return [(int(k),) for k in keys]

    def columns(self, keys):
        return [keys]


@given(keys=st.sets(st.integers(0, 300), max_size=200),
       queries=st.lists(st.integers(-3, 305), max_size=40), fence=st.sampled_from([1, 2, 3, 7]))
def test_lookups_through_fences_and_by_search_agree_with_the_set(keys, queries, fence):
    """``CodedRows.in_keys`` reads a page of keys per lookup through its fences when the
    lookups are few, and binary-searches otherwise: both give the set's answer, for rows
    below, between, at and past the keys, and values never coded."""
    saved = storage.FENCE
    storage.FENCE = fence
    try:
        held = CodedRows(np.array(sorted(keys), np.int64), _Ints())
    finally:
        storage.FENCE = saved
    assert held.step == fence and held.fences.tolist() == sorted(keys)[::fence]
    for batch in ([[q] for q in queries] + [queries]):  # one at a time (fences), all at once
        rows = [(q,) for q in batch]
        assert held.in_keys(rows).tolist() == [q in keys for q in batch]


@given(st.lists(st.sets(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=8),
                max_size=12),
       st.sets(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=20))
def test_folding_changes_into_the_keys_keeps_the_set(batches, start):
    """Rows inserted and erased, folded into the sorted keys at every change (the keys
    less the erased ones, the inserted ones merged in at their places): the same set."""
    from deltalog.engine.dbsp.columnar import coded_columns

    saved = storage.FOLD_MIN
    storage.FOLD_MIN = 0
    try:
        rows = sorted(start)
        held = coded_columns(["int", "int"], [np.array([r[0] for r in rows], np.int64),
                                              np.array([r[1] for r in rows], np.int64)])
        want = set(start)
        for batch in batches:  # (each row flips: present ones go, absent ones come)
            held.difference_update([r for r in batch if r in want])
            held.update([r for r in batch if r not in want])
            want ^= batch
            assert set(held) == want and len(held) == len(want)
            assert bool((np.diff(held.keys) > 0).all())
            assert held.contains_all(sorted(want)).all()
    finally:
        storage.FOLD_MIN = saved
