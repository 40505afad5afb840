"""The columnar DBSP kernel (engine/dbsp/columnar.py): random graph-shaped recursive
programs (linear, non-linear, mutual, constants in heads and atoms, repeated variables,
comparisons and integer assignments, relations of none, one, two and three columns, negations of
inputs and of a lower stratum with bound variables, constants and wildcards)
under random insert/delete batches, checked after every commit against the
tuple-at-a-time DbspStratum and a recompute; which strata qualify; state round trip;
work that follows the change."""


import numpy as np
from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from deltalog.engine import segments as seg
from deltalog.engine import state_codec, storage
from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.dbsp import columnar
from deltalog.engine.dbsp.columnar import (
    NURSERY_MAX,
    PATCH_MAX,
    POOL_SLACK,
    PURGE_MIN,
    SMALL,
    YOUNG_MIN,
    ColumnarStratum,
    _Hash,
    columnar_reason,
)
from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine
from deltalog.engine.segments import MemorySegments
from tests.engine.dbsp.recursive_programs import chains_beside

DECLS = (".decl e(a: int, b: int)\n.decl f(a: int, b: int)\n.decl u(a: int)\n"
         ".decl t(a: int, b: int, c: int)\n.decl on()\n")
INPUTS = {"e": 2, "f": 2, "u": 1, "t": 3, "on": 0}
ARITY = {**INPUTS, "low": 1}
VARS = ("x", "y", "z", "q")
DOMAIN = st.integers(0, 4)


@st.composite
def _atom(draw, preds: dict[str, int]) -> tuple[str, tuple[str, ...]]:
    pred = draw(st.sampled_from(sorted(preds)))
    args = tuple(draw(st.permutations(VARS))[: preds[pred]])
    return pred, args


@st.composite
def _rule(draw, head: str, arity: int, preds: dict[str, int], must: str | None) -> str:
    atoms = draw(st.lists(_atom(preds), min_size=1, max_size=3))
    if must is not None and all(p != must for p, _ in atoms):
        atoms.append((must, tuple(draw(st.permutations(VARS))[: preds[must]])))
    wide = [i for i, (_, args) in enumerate(atoms) if args]
    if wide and draw(st.integers(0, 3)) == 0:  # a constant or a repeated variable in an atom
        i = draw(st.sampled_from(wide))
        pred, args = atoms[i]
        j = draw(st.integers(0, len(args) - 1))
        arg = str(draw(DOMAIN)) if draw(st.booleans()) else args[0]
        atoms[i] = (pred, (*args[:j], arg, *args[j + 1:]))
    bound = sorted({v for _, args in atoms for v in args if v in VARS})
    extras = [draw(_constraint(bound)) for _ in range(draw(st.integers(0, 2)))]
    if bound and draw(st.integers(0, 2)) == 0:  # an assignment, its values kept small
        a, b = draw(st.sampled_from(bound)), draw(st.sampled_from(bound))
        expr = draw(st.sampled_from([f"{a} + 1", f"{a} - 1", f"{a} * 2", f"{a} / 2",
                                     f"{a} % 3", f"{a} + {b}", f"{b} - {a} * 3"]))
        extras.append(f"w = {expr}, w >= -1, w <= 5")
        bound.append("w")
    if not bound:
        bound = ["x"]
        atoms.append(("u", ("x",)))
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):  # a negation of an input or lower stratum
        neg = draw(st.sampled_from([*sorted(INPUTS), "low"]))
        args = [draw(st.sampled_from([*bound, "_", str(draw(DOMAIN))]))
                for _ in range(ARITY[neg])]
        extras.append(f"!{neg}({', '.join(args)})")
    head_args = [draw(st.sampled_from(bound)) if draw(st.integers(0, 4)) else
                 str(draw(DOMAIN)) for _ in range(arity)]
    body = ", ".join([*(f"{p}({', '.join(args)})" for p, args in atoms), *extras])
    return f"{head}({', '.join(head_args)}) :- {body}."


@st.composite
def _constraint(draw, bound: list[str]) -> str:
    if not bound:
        return "1 < 2"
    a, b = draw(st.sampled_from(bound)), draw(st.sampled_from(bound))
    op = draw(st.sampled_from(["<", "<=", "!=", "=", ">"]))
    return f"{a} {op} {draw(st.sampled_from([b, str(draw(DOMAIN)), f'{b} + 1']))}"


@st.composite
def graph_programs(draw) -> str:
    """One recursive stratum of one or two predicates (mutual when two), its rules
    conjunctions of atoms over distinct variables; a non-recursive reader above."""
    own = {"a": draw(st.integers(1, 3))}
    if draw(st.booleans()):
        own["b"] = draw(st.integers(0, 3))  # (0: a predicate of no columns)
    preds = {**INPUTS, **own}
    rules = []
    for head, arity in own.items():
        rules.append(draw(_rule(head, arity, dict(INPUTS), None)))
        others = [p for p in own if p != head] or [head]
        rules.append(draw(_rule(head, arity, preds, others[0])))
    if draw(st.booleans()):
        rules.append(draw(_rule("a", own["a"], preds, "a")))
    rules.append("top(x) :- a(x" + ", _" * (own["a"] - 1) + ").")
    rules.append("low(x) :- f(x, y), y < 3.")
    return DECLS + "\n".join(rules) + "\n"


def _batch():
    return st.lists(st.tuples(st.sampled_from(sorted(INPUTS)),
                              st.tuples(DOMAIN, DOMAIN, DOMAIN), st.booleans()),
                    min_size=1, max_size=6)


def _deltas(batch) -> dict[str, dict[tuple[int, ...], int]]:
    out: dict[str, dict[tuple[int, ...], int]] = {}
    for pred, row, insert in batch:
        out.setdefault(pred, {})[row[: INPUTS[pred]]] = 1 if insert else -1
    return out


def _columnar(engine: IncrementalEngine) -> list[ColumnarStratum]:
    return [m for _, m in engine.strata if isinstance(m, ColumnarStratum)]


class ColumnarMachine(RuleBasedStateMachine):
    """Columnar kernel, tuple kernel and recompute on the same commits."""

    @initialize(text=graph_programs(), data=st.fixed_dictionaries(
        {p: st.sets(st.tuples(*[DOMAIN] * a), min_size=min(4, 5 ** a), max_size=14)
         for p, a in INPUTS.items()}),  # (dense enough that most programs derive facts)
        tiny=st.booleans(), nursery=st.booleans())
    def load(self, text, data, tiny, nursery):
        note(text)
        self.saved = (seg.PAGE_ROWS, seg.PAGED_MIN, storage.PAGED_MIN, state_codec.ARRAY_MIN,
                      columnar.CODES_MIN, storage.FOLD_MIN, storage.FENCE)
        self.store = MemorySegments()  # every save goes to the store the engine came from
        if tiny:  # purge tombstones, compact the births pool and the input patches, and
            # keep rows, arrays and codes in segments, at every chance; look up with numpy
            columnar.PURGE_MIN, columnar.POOL_SLACK, columnar.YOUNG_MIN = 0, 0, 0
            columnar.PATCH_MAX, columnar.SMALL = 0, 0
            seg.PAGE_ROWS, seg.PAGED_MIN, storage.PAGED_MIN = 2, 2, 2
            state_codec.ARRAY_MIN, columnar.CODES_MIN = 16, 2
            storage.FOLD_MIN = 0  # the store's coded rows fold their changes in at once
            storage.FENCE = 2  # ... and find rows through fences of two keys
        if nursery:  # facts first seen join the young part at once (which stays)
            columnar.NURSERY_MAX = 0
        self.prog = load_program(text)
        self.col = IncrementalEngine(self.prog, data, "auto")
        self.tup = IncrementalEngine(self.prog, data, "auto", columnar=False)
        self.rec = RecomputeEngine(self.prog, data)
        assert _columnar(self.col) and not _columnar(self.tup)

    @rule(batch=_batch())
    def commit(self, batch):
        deltas = _deltas(batch)
        note(repr(deltas))
        out = self.col.apply(deltas)
        assert out == self.tup.apply(deltas) == self.rec.apply(deltas)

    @rule(segments=st.booleans())
    def round_trip(self, segments):
        if segments:
            self.col = IncrementalEngine.loads(self.col.dumps(self.store), self.store)
        else:
            self.col = IncrementalEngine.loads(self.col.dumps())

    def teardown(self):
        columnar.PURGE_MIN, columnar.POOL_SLACK = PURGE_MIN, POOL_SLACK
        columnar.YOUNG_MIN, columnar.PATCH_MAX = YOUNG_MIN, PATCH_MAX
        columnar.SMALL, columnar.NURSERY_MAX = SMALL, NURSERY_MAX
        if hasattr(self, "saved"):
            (seg.PAGE_ROWS, seg.PAGED_MIN, storage.PAGED_MIN, state_codec.ARRAY_MIN,
             columnar.CODES_MIN, storage.FOLD_MIN, storage.FENCE) = self.saved

    @invariant()
    def equal(self):
        if not hasattr(self, "col"):
            return
        for p in self.prog.idb:
            assert self.col.relation(p) == self.rec.relation(p) == self.tup.relation(p), p

    def columnar_preds(self) -> set[str]:
        return {p for m in _columnar(self.col) for p in m.own}

    @invariant()
    def coded_rows_answer_as_sets(self):
        """A columnar stratum's relations stay coded in the store: size, membership (of
        rows held, rows not held and rows of values never coded) and columns as the set."""
        if not hasattr(self, "col"):
            return
        coded = 0
        for p in self.prog.idb:
            held = self.col.store[p].rows
            if type(held) is not storage.CodedRows:
                assert not self.prog.schemas[p].arity or p not in self.columnar_preds(), p
                continue
            coded += 1
            want = self.rec.relation(p)
            assert len(held) == len(want), p
            cols = held.columns()
            assert set(zip(*(c.tolist() for c in cols), strict=True)) == want, p
            arity = self.prog.schemas[p].arity
            probes = [*sorted(want), *((v,) * arity for v in (0, 3, 99)),
                      (0,) * (arity - 1) + (99,)]
            assert held.contains_all(probes).tolist() == [r in want for r in probes], p
            assert [r in held for r in probes] == [r in want for r in probes], p
        assert coded or not _columnar(self.col)


TestColumnarOracle = ColumnarMachine.TestCase
TestColumnarOracle.settings = settings(max_examples=250, stateful_step_count=12,
                                       deadline=None)


@given(text=graph_programs())
def test_generated_programs_qualify(text):
    prog = load_program(text)
    rec = [s for s in prog.strata if s.recursive]
    assert all(columnar_reason(prog, s) is None for s in rec)


def test_strata_that_do_not_qualify_stay_with_the_tuple_kernel():
    cases = {
        "path[x] = n <- agg<<n = count()>> e(x, _).": "aggregate rules outside recursion",
    }
    for body, reason in cases.items():
        prog = load_program(DECLS + body)
        stratum = next(s for s in prog.strata if "path" in s.preds)
        got = columnar_reason(prog, stratum)
        assert got is not None and reason in got, (body, got)
        engine = IncrementalEngine(prog, {"e": {(1, 2), (2, 3)}}, "dbsp", columnar=False)
        assert not _columnar(engine)
        want = ["path: aggregate rules kept per group in Python objects (the columnar "
                "kernel is off)",
                "path: maintained by the tuple-at-a-time DBSP kernel (the columnar kernel "
                "is off)"]
        assert [line for line in engine.slow_paths() if line.startswith("path:")] == want
        # (with it on, a stratum of aggregate rules is kept on arrays: dbsp.aggregates)
        engine = IncrementalEngine(prog, {"e": {(1, 2), (2, 3)}}, "dbsp")
        assert engine.slow_paths() == []


LECTURE_GRAPH = {(1, 2), (1, 4), (2, 1), (2, 3), (3, 4), (4, 5)}
TC = DECLS + "path(x, y) :- e(x, y).\npath(x, z) :- path(x, y), e(y, z).\n"


def test_dred_example_of_the_lectures():
    engine = IncrementalEngine(load_program(TC), {"e": LECTURE_GRAPH})
    assert _columnar(engine)
    assert len(engine.relation("path")) == 13
    out = engine.apply({"e": {(2, 3): -1}})
    assert len(engine.relation("path")) == 11
    assert out == {"path": {(2, 3): -1, (1, 3): -1}}


def test_state_saves_and_strings_encode():
    text = (".decl e(a: string, b: string)\n"
            "path(x, y) :- e(x, y).\npath(x, z) :- path(x, y), e(y, z).\n"
            "hub(x, \"hub\") :- path(x, y), path(y, x).\n")
    prog = load_program(text)
    engine = IncrementalEngine(prog, {"e": {("a", "b"), ("b", "c")}})
    engine = IncrementalEngine.loads(engine.dumps())
    engine.apply({"e": {("c", "a"): 1}})
    engine = IncrementalEngine.loads(engine.dumps())
    assert ("a", "a") in engine.relation("path")
    assert engine.apply({"e": {("b", "c"): -1}}) == {
        "path": {r: -1 for r in [("a", "a"), ("a", "c"), ("b", "a"), ("b", "b"), ("b", "c"),
                                 ("c", "c")]},
        "hub": {(x, "hub"): -1 for x in "abc"}}


def test_facts_first_seen_pass_through_the_nursery_into_the_young_part():
    """Every commit makes new facts (ids in the nursery, merged into the young part at
    once here), read by the next commits in both column orders."""
    saved = columnar.NURSERY_MAX
    columnar.NURSERY_MAX = 0
    try:
        prog = load_program(TC)
        edb = {"e": {(1, 2)}}
        engine, rec = IncrementalEngine(prog, edb), RecomputeEngine(prog, edb)
        for change in ({(2, 3): 1, (3, 4): 1}, {(4, 5): 1}, {(0, 1): 1}, {(5, 6): 1},
                       {(2, 3): -1}, {(6, 0): 1}, {(2, 3): 1}):
            assert engine.apply({"e": change}) == rec.apply({"e": change})
            assert engine.relation("path") == rec.relation("path")
        [rel] = _columnar(engine)[0].rels.values()
        assert len(rel.ykeys) and not len(rel.nkeys)
    finally:
        columnar.NURSERY_MAX = saved


def _gathered(n: int) -> tuple[int, int]:
    """Rows gathered by one insert and one delete in a small component, beside ``n``
    unrelated 3-node chains (the same depth whatever n)."""
    engine = IncrementalEngine(load_program(TC), {"e": chains_beside(n)})
    engine.apply({"e": {(3, 0): 1}})
    ins = engine.last_stats.work["rows_gathered"]
    engine.apply({"e": {(1, 2): -1}})
    dele = engine.last_stats.work["rows_gathered"]
    return ins, dele


def test_work_follows_the_change_not_the_data():
    small, large = _gathered(50), _gathered(2000)
    assert small == large
    assert 0 < small[0] < 100 and 0 < small[1] < 100


def test_iterations_where_nothing_can_change_are_skipped():
    """A shortcut on a chain of 60 changes the depths of the facts it reaches at
    iterations 0-2 and at their old depths (the chain's far end), nothing in between:
    those iterations are skipped. An edge beside the chain stops after the last
    iteration that changes anything, not at the chain's deepest fact."""
    prog = load_program(TC)
    chain = {(i, i + 1) for i in range(60)}
    engine = IncrementalEngine(prog, {"e": chain})
    for change, ran in (({(0, 58): 1}, 9), ({(0, 58): -1}, 9), ({(300, 301): 1}, 2)):
        engine.apply({"e": change})
        chain = {r for r in chain | set(change) if change.get(r, 1) > 0}
        want = RecomputeEngine(prog, {"e": chain})
        assert engine.relation("path") == want.relation("path"), change
        work = engine.last_stats.work
        assert work["inner_iterations"] <= ran, (change, work)
        assert work["iterations_skipped"] >= (50 if ran > 2 else 0), (change, work)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.integers(0, 1 << 40), max_size=700), max_size=4),
       st.sets(st.integers(0, 1 << 40), max_size=50))
def test_hash_index_finds_every_key_and_only_those(batches, probes):
    """Keys come in batches (the index grows past half full and is rebuilt); the
    multiplicative hash puts many of these keys in the same run of slots."""
    held: dict[int, int] = {}
    index = _Hash(np.zeros(0, np.int64), np.zeros(0, np.int64))
    for batch in batches:
        new = sorted(set(batch) - held.keys())
        ids = list(range(len(held), len(held) + len(new)))
        index.insert(np.array(new, np.int64), np.array(ids, np.int64))
        held.update(zip(new, ids, strict=True))
        keys = sorted(held.keys() | probes)
        got = index.get(np.array(keys, np.int64))
        assert got.tolist() == [held.get(k, -1) for k in keys]
    assert index.n == len(held) and 2 * index.n <= len(index.tk)


BEYOND_INT64 = """.decl isa(x: int, y: int)
.decl root(x: int)
.decl name(x: int, s: string)
r(x, v) :- root(x), v = 9223372036854775806.
r(x, w) :- r(y, v), isa(y, x), v >= 9223372036854775806, w = v + 1, w - 3 < 9223372036854775807.
r(x, w) :- r(y, v), isa(y, x), w = v / -3 % 7, w != 2.
n(s, t) :- name(x, s), name(x, t).
n(s, u) :- n(s, t), name(y, t), name(y, u), t != "b", u = "c".
n(s, s) :- n(s, t), name(y, t), isa(y, y).
"""


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_integers_beyond_int64_and_string_equality_agree_with_the_tuple_kernel(data):
    # r's values pass 2^63 - 1 (the language's integers are unbounded): those columns are
    # computed row by row; n compares strings by their codes
    prog = load_program(BEYOND_INT64)
    small = st.integers(0, 9)
    isa = st.sets(st.tuples(small, small), max_size=25)
    name = st.sets(st.tuples(small, st.sampled_from("abcd")), max_size=12)
    start = {"isa": data.draw(isa), "root": {(0,), (1,)}, "name": data.draw(name)}
    col = IncrementalEngine(prog, start, "auto")
    tup = IncrementalEngine(prog, start, "auto", columnar=False)
    assert len(_columnar(col)) == 2
    for _ in range(3):
        d = {"isa": {r: data.draw(st.sampled_from([1, -1])) for r in data.draw(isa)},
             "name": {r: data.draw(st.sampled_from([1, -1])) for r in data.draw(name)}}
        d = {p: {r: w for r, w in rows.items() if (w > 0) != tup.contains(p, r)}
             for p, rows in d.items()}
        assert col.apply(d) == tup.apply(d)
        col = IncrementalEngine.loads(col.dumps())
        for p in ("r", "n"):
            assert col.relation(p) == tup.relation(p), p


def test_a_column_beyond_int64_is_exact():
    prog = load_program(BEYOND_INT64)
    data = {"isa": {(0, 1), (1, 2), (2, 3)}, "root": {(0,)}}
    engine, rec = IncrementalEngine(prog, data), RecomputeEngine(prog, data)
    assert len(_columnar(engine)) == 2
    big = {v for x, v in engine.relation("r") if x == 3 and v > 7}
    assert big == {2**63 + 1} and engine.relation("r") == rec.relation("r")
    engine.apply({"isa": {(1, 2): -1}})
    rec.apply({"isa": {(1, 2): -1}})
    assert {x for x, _ in engine.relation("r")} == {0, 1}
    assert engine.relation("r") == rec.relation("r")


def test_a_negation_fixing_every_column_reads_no_sorted_index_of_its_relation():
    """``!u(z)`` with z bound: the change of u is the change of the negation's key set,
    so the store never sorts u (a wildcard, ``!f(z, _)``, needs f's sorted rows)."""
    prog = load_program(DECLS + "path(x, y) :- e(x, y).\n"
                        "path(x, z) :- path(x, y), e(y, z), !u(z), !f(z, _).\n")
    data = {"e": {(1, 2), (2, 3), (3, 4)}, "u": {(3,)}, "f": {(4, 0)}}
    engine, rec = IncrementalEngine(prog, data), RecomputeEngine(prog, data)
    assert _columnar(engine)
    for change in ({"u": {(3,): -1}}, {"f": {(4, 0): -1}, "u": {(2,): 1}}):
        assert engine.apply(change) == rec.apply(change)
    assert engine.relation("path") == rec.relation("path") == {
        (1, 2), (2, 3), (3, 4), (1, 3), (1, 4), (2, 4)}
    assert not engine.store["u"]._indexes and engine.store["f"]._indexes


def test_the_engine_says_which_strata_run_off_the_compiled_core():
    """A run's notes list them (``IncrementalEngine.slow_paths``): none when everything is
    compiled or columnar; the kernel or join switched off says so."""
    prog = load_program(TC + "hub(x) :- path(x, y), path(y, x).\n")
    assert IncrementalEngine(prog, {"e": LECTURE_GRAPH}).slow_paths() == []
    assert IncrementalEngine(prog, {"e": LECTURE_GRAPH}, columnar=False).slow_paths() == [
        "path: maintained by the tuple-at-a-time DBSP kernel (the columnar kernel is off)",
        "hub: rule at <program>:8:1 recorded its sensitivity intervals on the tuple join (the "
        "compiled join is off)"]


HOUSEKEEPING = DECLS + """path(x, y) :- e(x, y).
path(x, z) :- path(x, y), e(y, z).
back(x, y) :- f(y, x).
back(x, z) :- e(x, y), back(y, z), path(z, x).
"""


@settings(max_examples=120, deadline=None)
@given(st.lists(st.dictionaries(st.tuples(st.integers(0, 7), st.integers(0, 7)),
                                st.sampled_from([1, -1]), min_size=1, max_size=8),
                min_size=2, max_size=8),
       st.sampled_from([0, 1, 4096]), st.sampled_from([0, 8, 4096]), st.sampled_from([0, 1024]))
def test_housekeeping_keeps_every_layout_whole(batches, nursery, young, purge):
    """Facts first seen, the nursery joining the young part, the young part joining the
    main one and tombstones purged, at any thresholds: every commit agrees with a
    recompute (both relations are read by swapped key)."""
    saved = columnar.NURSERY_MAX, columnar.YOUNG_MIN, columnar.PURGE_MIN
    columnar.NURSERY_MAX, columnar.YOUNG_MIN, columnar.PURGE_MIN = nursery, young, purge
    try:
        prog = load_program(HOUSEKEEPING)
        edb = {"e": {(0, 1), (1, 2)}, "f": {(2, 0)}}
        engine, rec = IncrementalEngine(prog, edb), RecomputeEngine(prog, edb)
        assert _columnar(engine)
        for i, batch in enumerate(batches):
            pred = "e" if i % 3 else "f"
            change = {r: w for r, w in batch.items() if (w > 0) != rec.contains(pred, r)}
            assert engine.apply({pred: change}) == rec.apply({pred: change})
            for p in ("path", "back"):
                assert engine.relation(p) == rec.relation(p), p
    finally:
        columnar.NURSERY_MAX, columnar.YOUNG_MIN, columnar.PURGE_MIN = saved


def test_predicates_of_no_columns_run_on_the_columnar_kernel():
    # a flag read by the recursion (an input of no columns) and one it derives (own):
    # the kernel keeps the empty row as the key 0; the store keeps such a relation as rows
    text = DECLS + ("r(x) :- e(0, x), on().\nr(y) :- r(x), e(x, y).\n"
                    "hit() :- r(3).\nr(y) :- hit(), f(3, y).\n"
                    "s(x) :- u(x), hit().\ns(y) :- s(x), e(x, y).\n")  # (hit from below)
    prog = load_program(text)
    data = {"e": {(0, 1), (1, 2), (2, 3)}, "f": {(3, 7)}, "u": {(1,)}, "on": {()}}
    engine = IncrementalEngine(prog, data, "auto")
    oracle = RecomputeEngine(prog, data)
    assert _columnar(engine) and not [line for line in engine.slow_paths()
                                      if "tuple-at-a-time" in line]
    assert engine.relation("hit") == {()} and (7,) in engine.relation("r")
    assert len(_columnar(engine)) == 2 and engine.relation("s") == {(1,), (2,), (3,)}
    for change in ({"e": {(2, 3): -1}}, {"e": {(2, 3): 1}, "on": {(): -1}},
                   {"on": {(): 1}}, {"e": {(1, 3): 1, (2, 3): -1}}):
        assert engine.apply(change) == oracle.apply(change), change
        assert engine.relation("r") == oracle.relation("r"), change
        assert engine.relation("hit") == oracle.relation("hit"), change
        assert engine.relation("s") == oracle.relation("s"), change
    engine = IncrementalEngine.loads(engine.dumps())
    assert engine.apply({"on": {(): -1}}) == oracle.apply({"on": {(): -1}})
    assert engine.relation("r") == oracle.relation("r") == set()
