"""The first evaluation of a sensitivity stratum on the compiled join, its intervals kept as
arrays (``deltalog.engine.ivm.compiled``, ``deltalog.engine.ivm.coded_intervals``): the
engine that recorded this way maintains exactly what a recompute gives and what the
engine that recorded on the tuple join gives, commit after commit, over ints, floats and
strings (values the first evaluation never saw included), saved to a segment store and
opened again between commits; and the array part answers stabs as a list of intervals
does."""

import random
from collections import Counter
from functools import partial
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from deltalog.engine import state_codec
from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.columnar import rules
from deltalog.engine.evaluate import evaluate
from deltalog.engine.ivm import compiled as compiled_module
from deltalog.engine.ivm.coded_intervals import CodeBook, CodedIntervals
from deltalog.engine.ivm.compiled import UnitColumns, _uncontained
from deltalog.engine.ivm.interval_index import IntervalIndex
from deltalog.engine.ivm.stratum import SensitivityStratum
from deltalog.engine.runtime import IncrementalEngine
from deltalog.engine.segments import CorruptSegment, MemorySegments, pack_rows
from deltalog.engine.sentinels import BOTTOM, TOP
from tests.engine.ivm.test_interval_persist import CollectingSegments
from tests.engine.programs import positive_body

# Values of each type, in order; a program's data use the first few, commits all of them
# (strings and floats that sort between the ones loaded included).
VALUES: dict[str, list[Any]] = {
    "int": [-3, 0, 1, 2, 5, 9],
    "string": ["a", "ab", "b", "ba", "c", "d"],
    "float": [-2.5, -0.0, 0.5, 1.0, 2.75, 1e300],
}
LOADED = [0, 2, 4]  # indexes of the values the first load draws from (then any)
# The type of g's first column (g is only ever negated): another than the program's, so
# a negation's bucket may hold a constant coded unlike the variables around it.
OTHER = {"int": "float", "float": "int", "string": "int"}


def _lit(typ: str, i: int) -> str:
    v = VALUES[typ][i]
    if typ == "string":
        return f'"{v}"'
    if typ == "float":
        return repr(float(v))
    return str(v)


@st.composite
def compiled_programs(draw: Any) -> tuple[str, str]:
    """(type, program): 1-2 rules over e/f/u of one column type, positive atoms with
    constants, repeated variables and wildcards, a negation (of bound variables,
    constants and wildcards), a variable computed by arithmetic (ints and floats), and
    comparisons of two variables or a variable and a constant (the bounds the compiled
    join seeks past)."""
    typ = draw(st.sampled_from(sorted(VALUES)))
    decls = (f".decl e(a: {typ}, b: {typ})\n.decl f(a: {typ}, b: {typ})\n"
             f".decl u(a: {typ})\n.decl g(a: {OTHER[typ]}, b: {typ})\n")
    arity = {"e": 2, "f": 2, "u": 1}
    negated = {**arity, "g": 2}  # g only ever negated: its probes alone see its changes
    rules = []
    for r in range(draw(st.integers(1, 2))):
        body, bound = positive_body(draw, arity, lambda: _lit(typ, draw(st.integers(0, 5))))
        names = sorted(set(bound))
        for _ in range(draw(st.integers(0, 1))):
            pred = draw(st.sampled_from(sorted(negated)))
            args = [draw(st.sampled_from([*names, "_", "const"])) for _ in range(negated[pred])]
            args = [_lit(typ, draw(st.integers(0, 5))) if a == "const" else a for a in args]
            if pred == "g":
                args[0] = draw(st.sampled_from(["_", _lit(OTHER[typ], draw(st.integers(0, 5)))]))
            body.append(f"!{pred}({', '.join(args)})")
        if typ != "string" and draw(st.booleans()):
            # a variable computed by arithmetic, sometimes compared with another
            x = draw(st.sampled_from(names))
            step = _lit(typ, draw(st.integers(1, 3)))
            body.append(f"t = {x} {draw(st.sampled_from(['+', '-', '*']))} {step}")
            if draw(st.booleans()):
                body.append(f"t {draw(st.sampled_from(['<', '>=', '!=']))} "
                            f"{draw(st.sampled_from(names))}")
            names = [*names, "t"]
        for _ in range(draw(st.integers(0, 2))):
            op = draw(st.sampled_from(["<", "<=", ">", ">=", "!=", "="]))
            left = draw(st.sampled_from(names))
            right = (draw(st.sampled_from(names)) if draw(st.booleans())
                     else _lit(typ, draw(st.integers(0, 5))))
            body.append(f"{left} {op} {right}")
        head = [draw(st.sampled_from(names)) for _ in range(draw(st.integers(1, 2)))]
        rules.append(f"p{r}({', '.join(head)}) :- {', '.join(body)}.")
    return typ, decls + "\n".join(rules) + "\n"


def _data(draw: Any, typ: str, indexes: list[int]) -> dict[str, set[tuple[Any, ...]]]:
    vals = st.sampled_from([VALUES[typ][i] for i in indexes])
    others = st.sampled_from([VALUES[OTHER[typ]][i] for i in indexes])
    return {
        "e": draw(st.sets(st.tuples(vals, vals), max_size=14)),
        "f": draw(st.sets(st.tuples(vals, vals), max_size=14)),
        "u": draw(st.sets(st.tuples(vals), max_size=5)),
        "g": draw(st.sets(st.tuples(others, vals), max_size=8)),
    }


@given(program=compiled_programs(), data=st.data(), cut=st.integers(0, 3))
@settings(max_examples=400, deadline=None)
def test_compiled_recording_maintains_like_recompute_and_the_tuple_join(program, data, cut):
    typ, text = program
    note(text)
    prog = load_program(text)
    loaded = _data(data.draw, typ, LOADED)
    compiled = IncrementalEngine(prog, loaded, "sensitivity")
    tuples = IncrementalEngine(prog, loaded, "sensitivity", columnar=False)
    event(f"rules recorded on the compiled join: {compiled.last_stats.work['compiled_rules']}")
    current = {k: set(v) for k, v in loaded.items()}
    for p in prog.idb:
        assert compiled.relation(p) == tuples.relation(p)
    value = st.sampled_from(VALUES[typ])
    for step in range(4):
        if step == cut:  # a new run: saved to a segment store and opened from it
            store = MemorySegments()
            compiled = IncrementalEngine.loads(compiled.dumps(store), store)
        deltas: dict[str, dict[tuple[Any, ...], int]] = {}
        for _ in range(data.draw(st.integers(1, 5))):
            name = data.draw(st.sampled_from(["e", "f", "u", "g"]))
            row = tuple(data.draw(value) for _ in range(1 if name == "u" else 2))
            if name == "g":
                row = (data.draw(st.sampled_from(VALUES[OTHER[typ]])), row[1])
            deltas.setdefault(name, {})[row] = data.draw(st.sampled_from([1, -1]))
        out = compiled.apply(deltas)
        assert out == tuples.apply(deltas), deltas
        for name, d in deltas.items():
            for row, w in d.items():
                (current[name].add if w > 0 else current[name].discard)(row)
        want = evaluate(prog, current)
        for p in prog.idb:
            assert compiled.relation(p) == want[p], (p, deltas)



def _draw_deltas(data: Any, typ: str) -> dict[str, dict[tuple[Any, ...], int]]:
    """One to four changed rows of e, f and u, of any of the type's values."""
    value = st.sampled_from(VALUES[typ])
    deltas: dict[str, dict[tuple[Any, ...], int]] = {}
    for _ in range(data.draw(st.integers(1, 4))):
        name = data.draw(st.sampled_from(["e", "f", "u"]))
        row = tuple(data.draw(value) for _ in range(1 if name == "u" else 2))
        deltas.setdefault(name, {})[row] = data.draw(st.sampled_from([1, -1]))
    return deltas


def _recorded(prog: Any, data: dict[str, set[tuple[Any, ...]]], threads: int) -> Any:
    """A load's engine, its recording join split over ``threads`` threads wherever it can
    be (1: never), and every index's intervals, in the order its part keeps them."""
    saved = rules.THREADS, rules.SPLIT_MIN
    rules.THREADS, rules.SPLIT_MIN = threads, 1
    try:
        engine = IncrementalEngine(prog, data, "sensitivity")
    finally:
        rules.THREADS, rules.SPLIT_MIN = saved
    return engine, [(m.rule.head.pred, key, index.intervals())
                    for m in _maintainers(engine) for key, index in sorted(
                        m.indices.items(), key=lambda kv: repr(kv[0]))]


@given(program=compiled_programs(), data=st.data(), threads=st.integers(2, 3))
@settings(max_examples=300, deadline=None)
def test_a_recording_split_over_threads_records_what_the_whole_join_records(
        program, data, threads):
    """Pieces of the first variable start where the whole join's leapfrog agrees, so the
    split recording keeps the same intervals in the same order, and maintains alike."""
    typ, text = program
    note(text)
    prog = load_program(text)
    loaded = _data(data.draw, typ, LOADED)
    split, got = _recorded(prog, loaded, threads)
    whole, want = _recorded(prog, loaded, 1)
    assert got == want
    current = {k: set(v) for k, v in loaded.items()}
    for _ in range(3):
        deltas = _draw_deltas(data, typ)
        assert split.apply(deltas) == whole.apply(deltas), deltas
        for name, d in deltas.items():
            for row, w in d.items():
                (current[name].add if w > 0 else current[name].discard)(row)
        want_now = evaluate(prog, current)
        for p in prog.idb:
            assert split.relation(p) == want_now[p], (p, deltas)


@given(program=compiled_programs(), data=st.data())
@settings(max_examples=150, deadline=None)
def test_a_recording_buffer_too_small_is_run_again_with_room_for_all(program, data):
    """A recording join counts the records past its buffer's end without writing them and
    is run again with room for all (``rules.run_recording``): with buffers of one record
    at the load and at every commit, the intervals, the commits' answers and their work
    are those of an engine whose buffers had room."""
    typ, text = program
    note(text)
    prog = load_program(text)
    loaded = _data(data.draw, typ, LOADED)
    _, want = _recorded(prog, loaded, 1)
    roomy = IncrementalEngine(prog, loaded, "sensitivity")
    runs = Counter[str]()
    real = rules.run_recording

    def counted(run: Any, width: int, room: int) -> Any:
        def once(rec: Any) -> Any:
            runs["join"] += 1
            return run(rec)

        runs["recording"] += 1
        return real(once, width, room)

    join = compiled_module.CommitJoin
    saved = (compiled_module.RECORD_ROOM_MIN, compiled_module.RECORD_ROOM_PER_ROW,
             join.rec_room)
    compiled_module.RECORD_ROOM_MIN = compiled_module.RECORD_ROOM_PER_ROW = 0
    join.rec_room = 1
    compiled_module.run_recording = counted  # type: ignore[assignment]
    try:
        tight, got = _recorded(prog, loaded, 1)
        assert got == want
        for _ in range(3):
            deltas = _draw_deltas(data, typ)
            assert tight.apply(deltas) == roomy.apply(deltas), deltas
            assert tight.last_stats.work == roomy.last_stats.work
            for p in prog.idb:
                assert tight.relation(p) == roomy.relation(p), p
    finally:
        (compiled_module.RECORD_ROOM_MIN, compiled_module.RECORD_ROOM_PER_ROW,
         join.rec_room) = saved
        compiled_module.run_recording = real  # type: ignore[assignment]
    event(f"joins run again: {min(runs['join'] - runs['recording'], 3)}")


def test_a_triangle_recording_past_its_first_buffer_is_run_once_more():
    """The load's buffer sized for a tenth of what the triangles record, and a commit's for
    none: each recording join runs twice, and records what a roomy one records."""
    prog = load_program(".decl e(x: int, y: int)\ntri(x, y, z) :- e(x, y), e(y, z), e(x, z).")
    edges = _random_edges(11, 60, 400)
    _, want = _recorded(prog, {"e": edges}, 1)
    roomy = IncrementalEngine(prog, {"e": edges}, "sensitivity")
    runs: list[int] = []
    real = rules.run_recording

    def counted(run: Any, width: int, room: int) -> Any:
        def once(rec: Any) -> Any:
            got = run(rec)
            runs.append(len(rec))
            return got

        return real(once, width, room)

    join = compiled_module.CommitJoin
    saved = (compiled_module.RECORD_ROOM_MIN, compiled_module.RECORD_ROOM_PER_ROW,
             join.rec_room)
    compiled_module.RECORD_ROOM_MIN, compiled_module.RECORD_ROOM_PER_ROW = 0, 0
    compiled_module.run_recording = counted  # type: ignore[assignment]
    try:
        total = sum(len(index) for _, _, index in want)
        compiled_module.RECORD_ROOM_MIN = total // 10
        tight, got = _recorded(prog, {"e": edges}, 1)
        assert got == want
        assert len(runs) == 2 and runs[0] == total // 10 < runs[1]
        runs.clear()
        join.rec_room = 1
        compiled_module.RECORD_ROOM_MIN = 0
        change = {"e": {(1, 2): 1, (2, 3): 1, (1, 3): 1}}
        assert tight.apply(change) == roomy.apply(change)
        assert tight.last_stats.work == roomy.last_stats.work
        assert len(runs) >= 2 and runs[0] == 1 < runs[1]
    finally:
        (compiled_module.RECORD_ROOM_MIN, compiled_module.RECORD_ROOM_PER_ROW,
         join.rec_room) = saved
        compiled_module.run_recording = real  # type: ignore[assignment]
    assert tight.relation("tri") == evaluate(prog, {"e": edges | {(1, 2), (2, 3), (1, 3)}}
                                             )["tri"]


def _random_edges(seed: int, nodes: int, count: int) -> set[tuple[int, int]]:
    rng = random.Random(seed)
    edges: set[tuple[int, int]] = set()
    while len(edges) < count:
        edges.add((rng.randrange(nodes), rng.randrange(nodes)))
    return edges


def test_a_split_recording_of_triangles_cuts_where_the_leapfrog_agrees():
    """On a graph large enough to split by default: the pieces' intervals are the whole
    join's, and each piece after the first starts at a node with edges out."""
    rng = random.Random(3)
    edges = {(rng.randrange(3_000), rng.randrange(3_000)) for _ in range(30_000)}
    prog = load_program(".decl e(x: int, y: int)\n"
                        "tri(x, y, z) :- e(x, y), e(y, z), e(x, z), x < y, y < z.")
    saved = rules.THREADS
    rules.THREADS = 2
    try:
        cut = rules.split_recording
        seen: list[list[tuple[int, int]]] = []

        def spy(*args: Any) -> Any:
            seen.append(cut(*args))
            return seen[-1]

        compiled_module.split_recording = spy
        split = IncrementalEngine(prog, {"e": edges}, "sensitivity")
    finally:
        compiled_module.split_recording = cut
        rules.THREADS = saved
    (pieces,) = seen
    assert len(pieces) == 8
    sources = {a for a, _ in edges}
    assert all(lo in sources for lo, _ in pieces[1:])
    assert all(hi + 1 == lo for (_, hi), (lo, _) in pairwise(pieces))
    _, want = _recorded(prog, {"e": edges}, 1)
    got = [(m.rule.head.pred, key, index.intervals()) for m in _maintainers(split)
           for key, index in sorted(m.indices.items(), key=lambda kv: repr(kv[0]))]
    assert got == want
    assert split.relation("tri") == evaluate(prog, {"e": edges})["tri"]

def test_the_recordings_units_are_a_mapping_of_units_to_environments():
    """A load's units come as columns (``UnitColumns``); as a mapping they are what the
    tuple join's dict of units is, and a head of variables takes them all at once."""
    units = UnitColumns(("x", "y"), [[1, 1, 2], ["a", "b", "a"]])
    as_dict = {(1, "a"): {"x": 1, "y": "a"}, (1, "b"): {"x": 1, "y": "b"},
               (2, "a"): {"x": 2, "y": "a"}}
    assert len(units) == 3 and list(units) == list(as_dict)
    assert dict(units.items()) == as_dict and units[(2, "a")] == {"x": 2, "y": "a"}
    assert (1, "b") in units and (2, "b") not in units
    with pytest.raises(KeyError):
        units[(2, "b")]
    prog = load_program(".decl e(x: int, y: string)\np(y, x, y) :- e(x, y).\n"
                        "q(y) :- e(_, y).\nr(x, 7) :- e(x, _).\n")
    engine = IncrementalEngine(prog, {"e": {(1, "a"), (1, "b"), (2, "a")}}, "sensitivity")
    for head in (h for _, m in engine.strata if isinstance(m, SensitivityStratum)
                 for h in m.heads):
        got = head.contributions({}, units)
        assert got == head.contributions({}, as_dict), head.pred
    assert engine.relation("q") == {("a",), ("b",)}


def _maintainers(engine: IncrementalEngine) -> list[Any]:
    return [h.maintainer for _, m in engine.strata if isinstance(m, SensitivityStratum)
            for h in m.heads]


def test_joins_negations_and_arithmetic_record_on_the_compiled_join():
    prog = load_program(
        ".decl e(x: int, y: int)\n"
        "tri(x, y, z) :- e(x, y), e(y, z), e(x, z), x < y, y < z.\n"
        "lone(x) :- e(x, _), !e(_, x).\n"
        "next(x, y) :- e(x, _), y = x + 1.\n"
        "twice(x) :- e(x, y), !e(y, 1), !e(y, 2).\n")
    edges = {(1, 2), (2, 3), (1, 3), (3, 4)}
    engine = IncrementalEngine(prog, {"e": edges}, "sensitivity")
    by_head = {m.rule.head.pred: m for m in _maintainers(engine)}
    assert by_head["tri"].recorded_by == "compiled"
    assert by_head["lone"].recorded_by == "compiled"
    assert by_head["next"].recorded_by == "compiled"
    assert by_head["twice"].recorded_by == "compiled"
    assert engine.last_stats.work["compiled_rules"] == 4
    static = [i.static for i in by_head["tri"].indices.values()]
    assert static and all(type(s) is CodedIntervals for s in static)
    assert engine.relation("tri") == {(1, 2, 3)}
    assert engine.relation("lone") == {(1,)}
    assert engine.relation("twice") == {(1,), (2,), (3,)}
    engine.apply({"e": {(4, 1): 1}})
    assert engine.relation("lone") == set()
    assert engine.relation("twice") == {(1,), (2,)}  # (e(4, 1) rejects 3; e(1, 2), 4)


def test_a_single_edge_on_a_compiled_triangle_engine_stabs_a_few_intervals():
    """Work follows the change: one edge inserted into 20,000 matches a handful of the
    intervals the compiled load recorded (a tuple-join load records the same kind)."""
    rng = random.Random(7)
    nodes = 2_500
    edges: set[tuple[int, int]] = set()
    while len(edges) < 20_000:
        edges.add((rng.randrange(nodes), rng.randrange(nodes)))
    prog = load_program(".decl e(x: int, y: int)\ntri(x, y, z) :- e(x, y), e(y, z), e(x, z).")
    engine = IncrementalEngine(prog, {"e": edges}, "sensitivity")
    assert engine.last_stats.work["compiled_rules"] == 1
    added = engine.last_stats.work["intervals_added"]
    edge = next((a, b) for a in range(nodes) for b in range(nodes) if (a, b) not in edges)
    engine.apply({"e": {edge: 1}})
    work = engine.last_stats.work
    assert work["intervals_matched"] < 200 < added / 100
    want = evaluate(prog, {"e": edges | {edge}})["tri"]
    assert engine.relation("tri") == want


# -- the array part against a list of intervals ----------------------------------------

def _part(typ: str, rng: random.Random, n: int) -> tuple[CodedIntervals, list[Any]]:
    """A coded part of ``n`` random intervals (context width 2, bucket = column 0) over
    the loaded values of ``typ``, and the same intervals as values."""
    book = CodeBook(sorted(v for v in VALUES["string"][::2]) if typ == "string" else [])
    loaded = [VALUES[typ][i] for i in LOADED]
    codes = [book.code(v, typ) for v in loaded]
    ctx = np.array([[rng.choice(codes), rng.choice(codes)] for _ in range(n)], np.int64)
    ends = sorted(codes)
    lo = np.empty(n, np.int64)
    hi = np.empty(n, np.int64)
    for i in range(n):
        a, b = sorted(rng.sample([-1, *range(len(ends)), len(ends)], 2))
        lo[i] = -(2**63) if a < 0 else ends[min(a, len(ends) - 1)]
        hi[i] = 2**63 - 1 if b >= len(ends) else ends[b]
    part = CodedIntervals(book, [typ, typ], typ, [(0, 0, typ)], ctx, lo, hi)
    return part, part.live_records()


def _contains(rec: Any, bucket: tuple[Any, ...], x: Any) -> bool:
    _, lo, hi, _ = rec
    return rec[0] == bucket and (lo is BOTTOM or not x < lo) and (hi is TOP or not hi < x)


@pytest.mark.parametrize("typ", sorted(VALUES))
def test_the_array_part_stabs_kills_and_reopens_like_a_list(typ):
    rng = random.Random(hash(typ) & 0xFFFF)
    part, records = _part(typ, rng, 3000)
    assert len(records) == 3000
    assert part.lo.dtype == (np.int64 if typ == "float" else np.int32)  # floats' bits: wide
    alive = Counter(records)  # the live intervals, as a multiset of values
    store = CollectingSegments()
    for round_ in range(6):
        # ints beyond what an int32 part holds are asked too (clamped to its sentinels)
        asked = VALUES[typ] + ([2**31, -(2**31), 2**40, -(2**40)] if typ == "int" else [])
        for _ in range(40):
            bucket = (rng.choice(asked),)
            x = rng.choice(asked)
            got = part.stab(bucket, x)
            want = Counter({r: k for r, k in alive.items() if _contains(r, bucket, x)})
            assert Counter(part.record(p) for p in got) == want, (bucket, x)
            for p in got[:2]:
                alive[part.record(p)] -= 1
                part.kill(p)
            alive = +alive
        assert part.live == len(part.live_records()) == alive.total()
        written = store.written
        root = store.save(partial(state_codec.dumps, part))
        if round_:
            # arrays kept as they are; the kills are a small delta (or a new part when
            # past the compaction threshold)
            assert store.written - written < 4096 or part.writes_base()
        part = state_codec.loads(root, store)
        assert Counter(part.live_records()) == alive


def test_a_merged_part_codes_strings_it_never_saw():
    rng = random.Random(3)
    part, _ = _part("string", rng, 500)
    new = [(("b",), "ab", "bb", ("b", "zz")), (("zz",), BOTTOM, "a", ("zz", "a"))]
    merged = part.merged(new)
    assert merged.book.strings[-1] == "zz"
    # (a repeated interval is kept once: a stab would ask for the same region twice)
    assert sorted(merged.live_records()) == sorted(set(part.live_records() + new))
    assert [merged.record(p) for p in merged.stab(("zz",), "0")] == [new[1]]
    assert new[0] in [merged.record(p) for p in merged.stab(("b",), "b")]


def test_an_index_with_an_array_part_keeps_what_commits_record_on_arrays():
    """Small batches become parts on arrays, merged geometrically; a value with no code
    goes to the treap; a large batch folds everything into one part; saved to a segment
    store and opened, the same intervals, and stabs agree with a list throughout."""
    rng = random.Random(5)
    part, records = _part("int", rng, 5000)
    index = IntervalIndex()
    index.static = part
    everything = Counter(records)
    for k in range(12):
        batch = [((rng.choice([0, 1, 5]),), k, k + 1, (rng.choice([0, 1, 5]), 9))
                 for _ in range(20)]
        batch = [((p[0],), lo, hi, p) for _, lo, hi, p in batch]
        index.add_many(batch)
        everything.update(batch)
    assert not len(index.dynamic) and 1 <= len(index.levels) <= 5
    sizes = [level.live for level in index.levels]
    assert all(2 * b < a for a, b in pairwise(sizes)), sizes
    big = ((0,), 2**70, 2**70, (0, 2**70))
    index.add_many([big])  # no int64 code: the treap
    everything[big] += 1
    assert len(index.dynamic) == 1
    # Each interval at least once, at most as often as added (merged parts keep a
    # repeated interval once).
    assert set(index.intervals()) == set(everything)
    assert len(everything) <= len(index) <= everything.total()
    store = CollectingSegments()
    index = state_codec.loads(store.save(partial(state_codec.dumps, index)), store)
    assert set(index.intervals()) == set(everything)
    for x in (0, 3, 7, 2**70):
        got = Counter((b, lo, hi, p) for (lo, hi, p), b in
                      ((r, (0,)) for r in index.stab((0,), x)))
        want = Counter({r: c for r, c in everything.items() if _contains(r, (0,), x)})
        assert set(got) == set(want) and got.total() <= want.total(), x
        everything -= want
    index.add_many([((4,), 0, 0, (4, 4))] * 4000)  # many: one static part again, on arrays
    assert type(index.static) is CodedIntervals and not index.levels
    assert len(index) == len(everything) + 1  # every repeat dropped by the fold


def test_a_coded_part_naming_a_dead_position_out_of_range_is_refused():
    rng = random.Random(9)
    part, _ = _part("int", rng, 100)
    part.kill(3)
    store = MemorySegments()
    root = state_codec.dumps(part, store)
    reopened = state_codec.loads(root, store)
    assert reopened.live == 99
    (name,) = [n for n in store.segments if store.segments[n] == pack_rows([3])]
    store.segments[name] = pack_rows([1000])
    with pytest.raises(CorruptSegment):
        state_codec.loads(root, store)


def test_a_string_between_a_strict_bound_and_the_next_coded_string_is_stabbed():
    """``z > "a"`` makes the compiled join seek the code after "a"'s (here "b"'s); the
    intervals of that seek must start at "a" itself: a later "ab" sorts between the two
    and passes the comparison."""
    prog = load_program(
        ".decl e(a: string, b: string)\n.decl f(a: string, b: string)\n"
        'p(x, y, z) :- e(x, y), f(y, z), e(x, z), z > "a".')
    data = {"e": {("x1", "y1"), ("x1", "a"), ("b", "b")}, "f": {("y1", "a")}}
    engine = IncrementalEngine(prog, data, "sensitivity")
    assert [m.recorded_by for m in _maintainers(engine)] == ["compiled"]
    change = {"e": {("x1", "ab"): 1}, "f": {("y1", "ab"): 1}}
    engine.apply(change)
    assert engine.relation("p") == {("x1", "y1", "ab")}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(-3, 3),
                          st.integers(0, 3)), max_size=12))
def test_dropping_contained_records_stabs_the_same_regions(rows):
    """``_uncontained`` keeps, for every context and point, some interval holding the
    point wherever the join recorded one (contexts, ends and lengths from tiny domains,
    so neighbours repeat, nest and touch across contexts), and only records it was
    given."""
    part = np.array([(7, lo, lo + n, c0, c1) for c0, c1, lo, n in rows],
                    np.int64).reshape(len(rows), 5)
    out = _uncontained(part, 2)
    assert {tuple(r) for r in out.tolist()} <= {tuple(r) for r in part.tolist()}

    def stabbed(recs: np.ndarray) -> set[tuple[int, int, int]]:
        return {(c0, c1, p) for _, lo, hi, c0, c1 in recs.tolist() for p in range(lo, hi + 1)}

    assert stabbed(out) == stabbed(part)


def test_a_binding_a_negation_rejected_at_load_appears_when_the_negated_row_goes():
    prog = load_program(".decl e(x: int, y: int)\n.decl g(x: int, y: int)\n"
                        "p(x) :- e(x, y), !g(y, 1).")
    engine = IncrementalEngine(prog, {"e": {(1, 2), (3, 4)}, "g": {(2, 1)}}, "sensitivity")
    assert [m.recorded_by for m in _maintainers(engine)] == ["compiled"]
    assert engine.relation("p") == {(3,)}
    engine.apply({"g": {(2, 1): -1, (4, 1): 1}})
    assert engine.relation("p") == {(1,)}


def test_an_interval_recorded_after_a_computed_variable_carries_its_value():
    """Order (x, t, y, z) with t = x + 1 computed on the join's output: the intervals of
    the y and z levels hold t in their context, so a change there re-evaluates under the
    right t."""
    prog = load_program(".decl e(a: int, b: int)\n.decl f(a: int, b: int)\n"
                        "p(x, t, z) :- e(x, y), t = x + 1, f(y, z).")
    data = {"e": {(1, 2)}, "f": {(2, 5), (3, 4)}}
    engine = IncrementalEngine(prog, data, "sensitivity")
    (m,) = _maintainers(engine)
    assert m.recorded_by == "compiled" and m.plan.order == ("x", "t", "y", "z")
    assert all(p == (1, 2) for _, _, _, p in m.indices[("atom", 0, 1)].intervals())
    engine.apply({"e": {(1, 3): 1}})
    assert engine.relation("p") == {(1, 2, 5), (1, 2, 4)}


def test_a_negation_with_a_float_constant_in_its_bucket_over_int_variables():
    """Int contexts make the part int32; the negated atom's float constant stays a 64-bit
    code in its bucket, and a change under it is still found."""
    prog = load_program(".decl e(a: int, b: int)\n.decl g(a: float, b: int)\n"
                        "p(x) :- e(x, y), !g(1.5, y).")
    engine = IncrementalEngine(prog, {"e": {(1, 2), (3, 4)}, "g": {(1.5, 2)}}, "sensitivity")
    (m,) = _maintainers(engine)
    assert m.recorded_by == "compiled"
    part = next(i.static for k, i in m.indices.items() if k[0] == "neg")
    assert part.lo.dtype == np.int32 or part.ctx.dtype == np.int32
    assert engine.relation("p") == {(3,)}
    engine.apply({"g": {(1.5, 2): -1, (1.5, 4): 1}})
    assert engine.relation("p") == {(1,)}


def test_an_integer_beyond_64_bits_records_on_the_tuple_join():
    prog = load_program(".decl e(a: int, b: int)\np(x, z) :- e(x, y), e(y, z).")
    engine = IncrementalEngine(prog, {"e": {(1, 2**70), (2**70, 3)}}, "sensitivity")
    (m,) = _maintainers(engine)
    assert m.recorded_by == "tuples: an integer beyond 64 bits"
    assert engine.relation("p") == {(1, 3)}
    engine.apply({"e": {(3, 4): 1}})
    assert engine.relation("p") == {(1, 3), (2**70, 4)}


def test_a_loads_rules_share_one_coding_and_a_refused_relation_refuses_only_its_readers():
    """The rules of a stratum's load read relations coded once for all of them
    (``LoadCoding``): a relation with no codes (an int beyond 64 bits) sends only the rules
    that read it to the tuple join; the others record compiled, on the shared strings."""
    prog = load_program(
        ".decl e(a: string, b: string)\n.decl big(a: int)\n.decl s(a: string)\n"
        "p(x, z) :- e(x, y), e(y, z).\np(x, y) :- e(x, y), s(y).\n"
        "p(y, y) :- big(_), e(y, \"b\").\n")
    assert [s.preds for s in prog.strata] == [("p",)]
    data = {"e": {("a", "b"), ("b", "c")}, "big": {(2**70,)}, "s": {("b",)}}
    engine = IncrementalEngine(prog, data, "sensitivity")
    assert [m.recorded_by for m in _maintainers(engine)] == [
        "compiled", "compiled", "tuples: an integer beyond 64 bits"]
    assert engine.relation("p") == evaluate(prog, data)["p"] == {
        ("a", "c"), ("a", "b"), ("a", "a")}
    engine.apply({"e": {("c", "b"): 1}, "s": {("c",): 1}})
    data["e"].add(("c", "b"))
    data["s"].add(("c",))
    assert engine.relation("p") == evaluate(prog, data)["p"]


def test_a_rule_constant_at_the_ends_of_the_64_bit_range_records_on_the_tuple_join():
    """Found by a probe: the constant 2^63 - 1 has the code of +inf, so the compiled join
    recorded the interval of ``k[x1]`` at x1 = 2^63 - 1 as (+inf, +inf), which the row
    k[2^63 - 1] inserted later never stabbed: the head row was missed."""
    value = 2**63 - 1
    prog = load_program(".decl k[a: int] = b: int\n.decl p(c: int, d: string)\n"
                        f'p(x + 2, "a") :- x = {value}, k[x] = _.')
    engine = IncrementalEngine(prog, {"k": []}, "sensitivity")
    recorded = {h.maintainer.recorded_by for _, m in engine.strata for h in m.heads}
    assert recorded == {"tuples: a value at the ends of the 64-bit range"}
    assert engine.apply({"k": {(value, 2): 1}}) == {"p": {(value + 2, "a"): 1}}
    assert engine.apply({"k": {(value, 2): -1}}) == {"p": {(value + 2, "a"): -1}}


def _follow(engine: IncrementalEngine, prog: Any, data: dict[str, set[Any]],
            change: dict[str, dict[Any, int]]) -> None:
    """Apply ``change`` to ``engine`` and ``data``; every head as a recompute has it."""
    engine.apply(change)
    for pred, delta in change.items():
        for row, w in delta.items():
            (data[pred].add if w > 0 else data[pred].discard)(row)
    for pred, rows in evaluate(prog, data).items():
        assert engine.relation(pred) == rows, (pred, change)


MIXED = (".decl a(x: int)\n.decl b(x: float)\nq(x) :- a(x), b(x).\n"
         "n(x) :- a(x), z = x / 2.0, !a(z).\np(z, y) :- a(z), b(y), z = y.\n"
         "h(t) :- b(x), a(x), t = x / 2.\n")


def test_a_variable_joining_int_and_float_columns_records_and_commits_compiled():
    """A rule is maintained as ``uncast`` reads it (x read from an int column as x~int,
    with ``x = x~int``), on the tuple join and the compiled one alike: the compiled join
    converts between the codings as the tuple join converts values (``bind_as``), at the
    load and in commits."""
    prog = load_program(MIXED, "mixed.dl")
    data = {"a": {(2,), (4,), (2**53 + 1,)}, "b": {(2.0,), (2.0**53,), (2.5,)}}
    engine = IncrementalEngine(prog, {k: set(v) for k, v in data.items()}, "sensitivity")
    assert {m.rule.head.pred: m.recorded_by for m in _maintainers(engine)} == dict.fromkeys(
        "qnph", "compiled")
    for change in ({"a": {(2**53,): 1}}, {"b": {(2.0,): -1, (4.0,): 1}},
                   {"a": {(5,): 1}, "b": {(5.0,): 1, (2.0**53,): -1}}):
        _follow(engine, prog, data, change)
        assert all(type(m.commit_join(None)) is compiled_module.CommitJoin
                   for m in _maintainers(engine))


def test_a_float_beyond_the_64_bit_ints_read_as_an_int_moves_a_rule_to_the_tuple_join():
    """An integral float beyond the int64s equals a Python int with no code: the tuple
    join looks it up (and notes the interval), the compiled one cannot, so a recording or
    a commit that meets one is refused (``kernels.C_BEYOND``) and the rule goes on on
    the tuple join, which finds the int when it arrives."""
    prog = load_program(MIXED, "mixed.dl")
    # (a larger than b: the join binds x from b first, and converts it for a)
    data = {"a": {(2,), (3,), (4,)}, "b": {(2.0,), (2.0**70,)}}
    engine = IncrementalEngine(prog, {k: set(v) for k, v in data.items()}, "sensitivity")
    by_head = {m.rule.head.pred: m.recorded_by for m in _maintainers(engine)}
    beyond = "tuples: a float beyond the 64-bit integers read as an int"
    assert by_head == {"q": beyond, "h": beyond, "p": beyond, "n": "compiled"}
    _follow(engine, prog, data, {"a": {(2**70,): 1}})
    assert engine.relation("q") == {(2.0,), (2.0**70,)}
    # loaded without one, a commit meets it
    data = {"a": {(2,), (3,), (4,)}, "b": {(2.0,)}}
    engine = IncrementalEngine(prog, {k: set(v) for k, v in data.items()}, "sensitivity")
    assert {m.recorded_by for m in _maintainers(engine)} == {"compiled"}
    _follow(engine, prog, data, {"b": {(2.0**70,): 1}})
    by_head = {m.rule.head.pred: m.commit_join(None) for m in _maintainers(engine)}
    assert by_head["q"] == by_head["h"] == by_head["p"] == beyond
    _follow(engine, prog, data, {"a": {(2**70,): 1}})
    assert engine.relation("h") == {(1.0,), (2.0**69,)}
