"""Support counts on arrays (``deltalog.engine.ivm.stratum._CodedSupport``): random
programs of non-recursive rules under the sensitivity strategy (heads of variables, of
constants, of ints into float columns; functional heads, whose keys take two values;
strings, floats, negative ints and ints beyond 64 bits; program facts of derived
predicates; negations of a derived relation, whose coded rows a higher stratum reads)
under random commits, checked after every commit against a recompute, and the support
counts against those the sensitivity maintainer keeps in Python mappings (columnar
kernel off), with saved-state round trips on the way. Tiny domains, so that rows are
derived several ways and support crosses zero both ways."""

import random

import pytest
from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.dbsp.columnar import natural
from deltalog.engine.errors import DataError
from deltalog.engine.ivm.stratum import SensitivityStratum
from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine
from deltalog.engine.storage import CodedRows
from tests.engine.machines import AgainstRecompute

DECLS = """.decl e(a: int, b: int)
.decl g(a: int, b: float)
.decl s(a: string, b: string)
.decl p(a: int, b: int)
.decl q(a: float, b: int)
.decl r(a: string, b: int)
.decl t(a: int)
.decl f[a: int] = b: int
.decl h[a: int, b: int] = c: int
.decl k[a: string, b: float] = c: string
.decl n[a: int] = c: int
"""
TEMPLATES = [
    "p(x, z) :- e(x, y), e(y, z).",
    "p(x, y) :- e(x, y), !e(y, x).",
    "p(x, {k}) :- e(x, _).",
    "p(y, x) :- e(x, y), x {cmp} {k}.",
    "p(x, z) :- e(x, y), z = y + {k}.",
    "q(w, x) :- g(x, w).",
    "q(x, y) :- e(x, y), y {cmp} {k}.",
    "r(a, x) :- s(a, _), e(x, x).",
    "r(b, y) :- s(a, b), e(y, _), a != b.",
    'r("c", {k}) :- s(_, "b").',
    "t(x) :- e(x, _), !p(x, x).",
    "t(x) :- g(x, w), w > 0.5.",
    "t(x) :- q(_, x), !r(_, x).",
    "f[x] = y :- e(x, y), x = y.",
    "f[x] = y :- e(x, y), y {cmp} {k}.",
    "f[x] = z :- g(x, _), z = x * 2.",
    "h[x, y] = z :- e(x, y), e(y, z).",
    "h[x, {k}] = y :- e(x, y), x {cmp} {k}.",
    "k[a, x] = b :- s(a, b), e(x, _), a != b.",
    "k[a, w] = a :- g(_, w), s(a, _).",
    "p(1, 2).",
    "q(0.5, 3).",
    'r("a", 1).',
]
NODES = st.integers(0, 3)
INTS = st.sampled_from([0, 1, 2, -1, -(2**63), 2**63 - 1, 2**70])
FLOATS = st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.5, -3.0])
WORDS = st.sampled_from(["", "a", "b", "ba"])
ROWS = {"e": st.tuples(NODES, st.one_of(NODES, NODES, INTS)), "g": st.tuples(NODES, FLOATS),
        "s": st.tuples(WORDS, WORDS)}


@st.composite
def programs(draw) -> str:
    picks = draw(st.lists(st.sampled_from(TEMPLATES), min_size=1, max_size=5, unique=True))
    if draw(st.booleans()):  # (a functional head in half the programs: keys meet)
        picks = sorted({*picks, draw(st.sampled_from(
            [t for t in TEMPLATES if t[1] == "["]))})
    if "t(x) :- e(x, _), !p(x, x)." in picks and not any(
            t.startswith("p(x") or t.startswith("p(y") for t in picks):
        picks.append("p(x, y) :- e(x, y), !e(y, x).")
    if "t(x) :- q(_, x), !r(_, x)." in picks and not any(t.startswith("r(") for t in picks):
        picks.append('r("a", 1).')
    if "t(x) :- q(_, x), !r(_, x)." in picks and not any(t.startswith("q(") for t in picks):
        picks.append("q(0.5, 3).")
    filled = [t.replace("{k}", str(draw(NODES))).replace(
        "{cmp}", draw(st.sampled_from(["<", ">=", "!="]))) for t in picks]
    return DECLS + "\n".join(filled) + "\n"


def _support(engine: IncrementalEngine) -> dict[str, dict]:
    return {p: dict(m.support_of(p)) for _, m in engine.strata
            if isinstance(m, SensitivityStratum) for p in m.preds}


class SupportOnArrays(AgainstRecompute):
    ROWS = ROWS

    @initialize(text=programs(), data=st.fixed_dictionaries(
        {p: st.sets(rows, max_size=8) for p, rows in ROWS.items()}))
    def load(self, text, data):
        note(text)
        prog = load_program(text)
        # the second engine: the sensitivity maintainer as before, its support counts in
        # Python mappings
        if not self.start_both_ways(sorted(prog.idb), prog, data, "sensitivity"):
            return
        eng, plain = self.engines
        coded = {p for _, m in eng.strata for p in m.coded}
        assert coded == set(self.preds)
        for p in coded:
            assert type(eng.store[p].rows) is CodedRows
        assert not any(m.coded for _, m in plain.strata)

    @invariant()
    def same_support(self):
        if not self.failed and hasattr(self, "rec"):
            assert _support(self.engines[0]) == _support(self.engines[1])


TestSupportOnArrays = SupportOnArrays.TestCase
TestSupportOnArrays.settings = settings(max_examples=100, stateful_step_count=8,
                                        deadline=None)


def test_a_commit_codes_only_the_rows_whose_support_changes():
    """A two-path relation of 40,000 rows on arrays: a commit's delta is the rows whose
    support crossed zero, made from the arrays; rows derived twice lose one derivation
    without leaving; the relation goes to the store as coded rows and stays so."""
    prog = load_program(DECLS + "p(x, z) :- e(x, y), e(y, z).\n")
    rng = random.Random(3)
    edges = {(rng.randrange(400), rng.randrange(400)) for _ in range(4000)}
    eng = IncrementalEngine(prog, {"e": edges}, "sensitivity")
    rec = RecomputeEngine(prog, {"e": edges})
    (_, m), = eng.strata
    assert type(eng.store["p"].rows) is CodedRows and len(m.coded["p"].counts) == eng.size("p")
    assert eng.size("p") > 30_000
    two_ways = next(r for r, n in m.support_of("p").items() if n >= 2)
    for _ in range(5):
        change = {e: -1 for e in rng.sample(sorted(edges), 5)}
        change.update({(rng.randrange(400), rng.randrange(400)): 1 for _ in range(5)})
        change = {e: w for e, w in change.items() if (w > 0) != (e in edges)}
        edges = (edges - {e for e, w in change.items() if w < 0}) | {
            e for e, w in change.items() if w > 0}
        assert eng.apply({"e": change}) == rec.apply({"e": change})
    assert eng.relation("p") == rec.relation("p")
    assert type(eng.store["p"].rows) is CodedRows
    # one of a row's two derivations goes: the support drops, the row stays
    x, z = two_ways
    ways = [y for y in range(400) if (x, y) in edges and (y, z) in edges]
    if len(ways) >= 2:
        before = m.support_of("p")[two_ways]
        assert eng.apply({"e": {(x, ways[0]): -1}}).get("p", {}).get(two_ways) is None
        assert m.support_of("p")[two_ways] == before - 1


def test_a_state_saved_before_support_on_arrays_opens_and_commits():
    """A stratum of a state saved before the support counts went on arrays (no ``coded``:
    every predicate's counts in a mapping) commits as it did."""
    prog = load_program(DECLS + "p(x, z) :- e(x, y), e(y, z).\nt(x) :- g(x, w), w > 0.5.\n")
    data = {"e": {(0, 1), (1, 2), (2, 0)}, "g": {(1, 1.0)}}
    eng = IncrementalEngine(prog, data, "sensitivity", columnar=False)
    for _, m in eng.strata:
        assert m.coded == {}
        del m.coded  # (as a state saved before: the class's default)
    again = IncrementalEngine.loads(eng.dumps())
    rec = RecomputeEngine(prog, data)
    change = {"e": {(2, 0): -1, (2, 3): 1}, "g": {(2, 2.0): 1}}
    assert again.apply(change) == rec.apply(change)
    assert all(again.relation(p) == rec.relation(p) for p in ("p", "t"))


def test_a_functional_head_on_arrays_names_the_two_values_of_a_key():
    """A key of a functional head kept on arrays that takes a second value, at a load and
    at a commit, is DL302 naming both facts; a value that replaces the key's old one in
    the same commit is not."""
    prog = load_program(DECLS + "f[x] = y :- e(x, y).\n")
    with pytest.raises(DataError, match=r"f\[1\] = 2\..*f\[1\] = 3\."):
        IncrementalEngine(prog, {"e": {(1, 2), (1, 3)}}, "sensitivity")
    eng = IncrementalEngine(prog, {"e": {(1, 2), (2, 2)}}, "sensitivity")
    assert "f" in eng.strata[0][1].coded
    assert eng.apply({"e": {(1, 2): -1, (1, 5): 1, (3, 3): 1}}) == {
        "f": {(1, 2): -1, (1, 5): 1, (3, 3): 1}}
    with pytest.raises(DataError, match=r"f\[2\] = 2\..*f\[2\] = 7\."):
        eng.apply({"e": {(2, 7): 1, (1, 5): -1}})


def test_a_functional_head_of_a_key_of_two_columns_on_arrays():
    """A functional head whose key has two columns (a string and a float) keeps its
    support on arrays, its key's group in the keys' high half: a second value of a key
    is DL302 naming both facts, at a load and at a commit, wherever its row sorts among
    the others; keys sharing a first column do not meet; a value that replaces the
    key's old one in the same commit is not a conflict; the store holds natural keys."""
    prog = load_program(DECLS + "k[a, w] = b :- s(a, b), g(_, w).\n")
    with pytest.raises(DataError, match=r'k\["a", 0\.5\] = "a"\..*k\["a", 0\.5\] = "b"\.'):
        IncrementalEngine(prog, {"s": {("a", "a"), ("a", "b")}, "g": {(1, 0.5)}},
                          "sensitivity")
    data = {"s": {("a", "b"), ("b", "b")}, "g": {(1, 0.5), (2, 2.5)}}
    eng = IncrementalEngine(prog, data, "sensitivity")
    rec = RecomputeEngine(prog, data)
    (_, m), = eng.strata
    assert "k" in m.coded and m.mapping_reason("k") is None
    # (natural keys in the store, which a columnar stratum above reads as they are)
    held = eng.store["k"].rows
    assert type(held) is CodedRows and held.coding.layout == natural(3)
    assert m.coded["k"].coding.layout == ((0, 1), (2,))
    assert eng.relation("k") == rec.relation("k")
    change = {"s": {("a", "b"): -1, ("a", "c"): 1, ("c", "c"): 1}}
    assert eng.apply(change) == rec.apply(change)
    assert eng.relation("k") == rec.relation("k")
    with pytest.raises(DataError, match=r'k\["b", 0\.5\] = "b"\..*k\["b", 0\.5\] = "z"\.'):
        eng.apply({"s": {("b", "z"): 1, ("c", "c"): -1}})


def test_every_support_count_is_on_arrays_and_the_runs_notes_say_so():
    """With the compiled core on, every predicate's support counts are on arrays (a
    functional head of a key of two columns, aggregates of an int key and of an int key
    in a float column, whose groups are on arrays too), under the sensitivity strategy
    and under auto, and a run's notes name none; one kept in a mapping (a state saved
    before) would be named, with why."""
    prog = load_program(DECLS + ".decl fk[a: float] = c: int\n"
                        "h[x, y] = z :- e(x, y), e(y, z).\n"
                        "p(x, y) :- e(x, y).\n"
                        "n[x] = c <- agg<<c = count()>> e(x, _).\n"
                        "fk[x] = c <- agg<<c = count()>> e(x, _).\n")
    data = {"e": {(0, 1), (1, 2)}}
    sens = IncrementalEngine(prog, data, "sensitivity")
    assert {p for _, m in sens.strata for p in m.coded} == {"h", "p", "n", "fk"}
    assert all(h.arrays is not None for _, m in sens.strata for h in m.heads
               if h.maintainer.rule.aggregate is not None)
    assert sens.slow_paths() == []
    auto = IncrementalEngine(prog, data)
    (m,) = [m for _, m in auto.strata if isinstance(m, SensitivityStratum)]
    assert m.preds == ("fk",) and m.group_arrays is not None  # (not columnar: int in float)
    assert auto.slow_paths() == []
    assert not [line for line in IncrementalEngine(prog, data, "sensitivity", columnar=False)
                .slow_paths() if "support counts" in line]
    (m,) = [m for _, m in sens.strata if "p" in m.preds]
    m.support["p"] = {}
    del m.coded["p"]  # (as a state saved before: its counts in a mapping)
    assert [line for line in sens.slow_paths() if "support counts" in line] == [
        "p: support counts kept in Python objects (a state saved before they were kept "
        "on arrays)"]
