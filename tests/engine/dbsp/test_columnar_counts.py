"""A non-recursive columnar stratum keeps sorted keys and one derivation count per fact
(``columnar._Counts``): counts checked against derivations counted by brute force over
many commits (one fact derived several ways, its derivations removed and added back),
through merges of the nursery, young and main parts at every chance, across saves and
loads, past int32; the bytes a save writes per base tuple; a state of the previous
format refused with the reason."""

import random

import numpy as np
import pytest

from deltalog.engine import state_codec
from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.dbsp import columnar
from deltalog.engine.dbsp.columnar import ColumnarStratum, _Counts
from deltalog.engine.errors import DataError, NotSupportedError
from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine
from deltalog.engine.segments import MemorySegments

THREE_WAY = (".decl a(x: int, y: int)\n.decl b(y: int, z: int)\n.decl c(z: int, w: int)\n"
             "r(x, w) :- a(x, y), b(y, z), c(z, w).\n")
TWO_RULES = (".decl a(x: int, y: int)\n.decl b(y: int, z: int)\n"
             "s(x, z) :- a(x, y), b(y, z).\ns(x, z) :- b(x, z), x < z.\n")


def _counted(engine: IncrementalEngine, pred: str) -> _Counts:
    for _, m in engine.strata:
        if isinstance(m, ColumnarStratum) and pred in m.counted:
            assert not m.rels
            return m.counted[pred]
    raise AssertionError(f"{pred} is not kept as counts")


def _counts(engine: IncrementalEngine, pred: str) -> dict[tuple[int, ...], int]:
    """The kept count of every fact of ``pred`` (decoded)."""
    rel = _counted(engine, pred)
    keys = rel.facts()
    old, _ = rel.lookup(keys)
    m = next(m for _, m in engine.strata if isinstance(m, ColumnarStratum)
             and pred in m.counted)
    return dict(zip(m._decode(pred, keys), old.tolist(), strict=True))


def _three_way_derivations(edb) -> dict[tuple[int, ...], int]:
    out: dict[tuple[int, ...], int] = {}
    for x, y in edb["a"]:
        for y2, z in edb["b"]:
            if y2 != y:
                continue
            for z2, w in edb["c"]:
                if z2 == z:
                    out[(x, w)] = out.get((x, w), 0) + 1
    return out


def _two_rule_derivations(edb) -> dict[tuple[int, ...], int]:
    out: dict[tuple[int, ...], int] = {}
    for x, y in edb["a"]:
        for y2, z in edb["b"]:
            if y2 == y:
                out[(x, z)] = out.get((x, z), 0) + 1
    for x, z in edb["b"]:
        if x < z:
            out[(x, z)] = out.get((x, z), 0) + 1
    return out


@pytest.fixture(params=["default", "tiny"])
def thresholds(request, monkeypatch):
    """``tiny``: the nursery joins the young part, and the young part and tombstones the
    main part, at every commit."""
    if request.param == "tiny":
        monkeypatch.setattr(columnar, "NURSERY_MAX", 0)
        monkeypatch.setattr(columnar, "YOUNG_MIN", 0)
        monkeypatch.setattr(columnar, "PURGE_MIN", 0)
    return request.param


def test_one_fact_of_two_derivations_goes_and_comes_back(thresholds):
    """r(1, 9) is derived through y = 2 and y = 3: it stays while one derivation is left,
    goes with the last one, and comes back with either."""
    prog = load_program(THREE_WAY)
    edb = {"a": {(1, 2), (1, 3)}, "b": {(2, 5), (3, 5)}, "c": {(5, 9)}}
    engine, rec = IncrementalEngine(prog, edb), RecomputeEngine(prog, edb)
    assert _counts(engine, "r") == {(1, 9): 2}
    steps = [
        ({"a": {(1, 2): -1}}, {}, {(1, 9): 1}),
        ({"a": {(1, 3): -1}}, {"r": {(1, 9): -1}}, {}),
        ({"a": {(1, 2): 1}}, {"r": {(1, 9): 1}}, {(1, 9): 1}),
        ({"a": {(1, 3): 1}}, {}, {(1, 9): 2}),
        ({"a": {(1, 2): -1, (1, 3): -1}}, {"r": {(1, 9): -1}}, {}),
        ({"a": {(1, 2): 1, (1, 3): 1}}, {"r": {(1, 9): 1}}, {(1, 9): 2}),
        ({"c": {(5, 9): -1, (5, 8): 1}}, {"r": {(1, 9): -1, (1, 8): 1}}, {(1, 8): 2}),
        ({"c": {(5, 9): 1}, "b": {(3, 5): -1}}, {"r": {(1, 9): 1}}, {(1, 8): 1, (1, 9): 1}),
    ]
    for change, out, counts in steps:
        assert engine.apply(change) == rec.apply(change) == out, change
        assert _counts(engine, "r") == counts, change
        assert engine.relation("r") == rec.relation("r")
        engine = IncrementalEngine.loads(engine.dumps())
        assert _counts(engine, "r") == counts, change


@pytest.mark.parametrize("program, derivations", [(THREE_WAY, _three_way_derivations),
                                                  (TWO_RULES, _two_rule_derivations)])
def test_counts_are_the_derivations_over_many_commits(thresholds, program, derivations):
    """Random batches over a small domain (facts derived many ways, tombstones reused),
    each commit against a recompute and every count against one counted by brute force;
    saves to a segment store and plain ones, loaded back, between commits."""
    rng = random.Random(7)
    prog = load_program(program)
    preds = sorted(prog.edb)
    edb = {p: {(rng.randrange(6), rng.randrange(6)) for _ in range(12)} for p in preds}
    head = next(iter(prog.idb))
    engine, rec = IncrementalEngine(prog, edb), RecomputeEngine(prog, edb)
    store = MemorySegments()
    for step in range(150):
        change: dict[str, dict[tuple[int, int], int]] = {}
        for _ in range(rng.randrange(1, 6)):
            p = rng.choice(preds)
            row = (rng.randrange(6), rng.randrange(6))
            change.setdefault(p, {})[row] = -1 if row in edb[p] else 1
        for p, d in change.items():
            edb[p] = {r for r in edb[p] if d.get(r) != -1} | {r for r, w in d.items() if w > 0}
        assert engine.apply(change) == rec.apply(change), (step, change)
        assert _counts(engine, head) == derivations(edb), step
        if step % 10 == 3:
            engine = IncrementalEngine.loads(engine.dumps(store), store)
        elif step % 10 == 8:
            engine = IncrementalEngine.loads(engine.dumps())
    assert engine.relation(head) == rec.relation(head)


def test_counts_widen_past_int32(monkeypatch):
    """A count past what int32 holds (here: a bound of 2) makes every part's counts int64;
    none wraps, and the fact goes with its last derivation."""
    monkeypatch.setattr(columnar, "I32_MAX", 2)
    prog = load_program(THREE_WAY)
    edb = {"a": {(1, 2)}, "b": {(2, 5)}, "c": {(5, 9)}}
    engine, rec = IncrementalEngine(prog, edb), RecomputeEngine(prog, edb)
    assert _counted(engine, "r").cnt.dtype == np.int32
    change = {"b": {(2, 6): 1, (2, 7): 1}, "c": {(6, 9): 1, (7, 9): 1}}
    assert engine.apply(change) == rec.apply(change) == {}
    rel = _counted(engine, "r")
    assert rel.cnt.dtype == rel.ycnt.dtype == rel.ncnt.dtype == np.int64
    assert _counts(engine, "r") == {(1, 9): 3}
    engine = IncrementalEngine.loads(engine.dumps())
    for change in ({"b": {(2, 6): -1}}, {"b": {(2, 5): -1}}):
        assert engine.apply(change) == rec.apply(change) == {}
    assert engine.apply({"c": {(7, 9): -1}}) == {"r": {(1, 9): -1}}
    assert _counts(engine, "r") == {}


def test_a_non_recursive_stratum_saves_few_bytes_per_base_tuple():
    """The three-way join's state (inputs, counts, codes, the store's rows), written to a
    segment store, after its load and after commits; and the relation's own part: a key
    and a count (int32) per fact."""
    rng = random.Random(20261123)
    n = 30_000
    edb = {p: {(rng.randrange(n // 6), rng.randrange(n // 6)) for _ in range(n // 3)}
           for p in "abc"}
    base = sum(map(len, edb.values()))
    engine = IncrementalEngine(load_program(THREE_WAY), edb)

    def saved(value) -> int:
        store = MemorySegments()
        root = state_codec.dumps(value, store)
        return len(root) + sum(map(len, store.segments.values())) + sum(
            a.nbytes for a in store.arrays)

    rel = _counted(engine, "r")
    assert len(rel) > base  # (more facts than base tuples)
    assert saved(rel) <= 12.5 * len(rel)
    assert saved(engine) <= 50 * base
    for _ in range(20):
        b = sorted(edb["b"])
        gone = {b[rng.randrange(len(b))] for _ in range(50)}
        came = {(rng.randrange(n // 6), rng.randrange(n // 6)) for _ in range(50)} - edb["b"]
        engine.apply({"b": {**dict.fromkeys(gone, -1), **dict.fromkeys(came, 1)}})
        edb["b"] = (edb["b"] - gone) | came
    assert saved(engine) <= 65 * base


def test_a_state_of_the_previous_format_is_refused_with_the_reason():
    prog = load_program(THREE_WAY)
    engine = IncrementalEngine(prog, {"a": {(1, 2)}, "b": {(2, 5)}, "c": {(5, 9)}})
    blob = state_codec.dumps((IncrementalEngine.STATE_FORMAT - 1, engine))
    with pytest.raises(NotSupportedError, match="rebuild the state from the tables"):
        IncrementalEngine.loads(blob)


FUNCTIONAL = (".decl e(a: int, b: int)\n.decl best[x: int] = y: int\n"
              "best[x] = y :- e(x, y), y > 2.\n")


def test_a_functional_head_of_one_key_column_is_kept_as_counts(thresholds):
    """A second value for a key is DL302, naming both facts, before the state changes;
    values that replace one another in one commit are none."""
    prog = load_program(FUNCTIONAL)
    engine = IncrementalEngine(prog, {"e": {(1, 3), (2, 1)}})
    assert _counts(engine, "best") == {(1, 3): 1}
    assert engine.apply({"e": {(1, 3): -1, (1, 4): 1}}) == {"best": {(1, 3): -1, (1, 4): 1}}
    assert engine.apply({"e": {(2, 5): 1, (1, 4): -1, (1, 6): 1}}) == {
        "best": {(2, 5): 1, (1, 4): -1, (1, 6): 1}}
    assert engine.apply({"e": {(1, 2): 1}}) == {}  # (y > 2: no second value)
    engine = IncrementalEngine.loads(engine.dumps())
    with pytest.raises(DataError) as err:
        engine.apply({"e": {(1, 7): 1}})
    assert err.value.code == "DL302"
    assert "best[1] = 6." in str(err.value) and "best[1] = 7." in str(err.value)
    engine = IncrementalEngine(prog, {"e": {(1, 3), (2, 4)}})
    with pytest.raises(DataError) as err:
        engine.apply({"e": {(3, 5): 1, (3, 6): 1}})
    assert "best[3] = 5." in str(err.value) and "best[3] = 6." in str(err.value)
    assert _counts(engine, "best") == {(1, 3): 1, (2, 4): 1}
    with pytest.raises(DataError):
        IncrementalEngine(prog, {"e": {(1, 3), (1, 4)}})


def _outcome(engine: IncrementalEngine, change: dict) -> object:
    try:
        return engine.apply(change)
    except DataError as err:
        return str(err)


@pytest.mark.parametrize("seed", range(30))
def test_a_functional_head_agrees_with_the_tuple_kernel(seed):
    """Random commits on both kernels: the same deltas, or the same DL302 message."""
    rng = random.Random(seed)
    prog = load_program(FUNCTIONAL.replace("y > 2", "y > 1"))
    edb = {"e": {(x, rng.randrange(5)) for x in range(4)}}
    col = IncrementalEngine(prog, edb)
    tup = IncrementalEngine(prog, edb, columnar=False)
    assert _counted(col, "best") is not None
    for _ in range(12):
        rows = {(rng.randrange(4), rng.randrange(5)) for _ in range(rng.randrange(1, 4))}
        change = {r: -1 if tup.contains("e", r) else 1 for r in rows}
        got = _outcome(col, {"e": change})
        assert got == _outcome(tup, {"e": change}), change
        if isinstance(got, str):
            assert "DL302" in got
            return
        assert col.relation("best") == tup.relation("best")
