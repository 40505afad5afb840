"""Commits of rules over string columns on the compiled join: the store's dictionary of
string codes (``columnar.strings.StringCodes``) orders codes as the strings, keeps every
code it gave until it relabels, and then remaps every coded index that uses it; an engine
whose rules over strings commit on the compiled join maintains what the tuple join's
commits and a recompute give, through relabellings (the code range made tiny, so that
they happen every few commits), saves and reopenings."""

import random
import string
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.columnar import strings as strings_mod
from deltalog.engine.columnar.strings import StringCodes
from deltalog.engine.columnar.versions import CodedIndex, coded_index
from deltalog.engine.evaluate import evaluate
from deltalog.engine.ivm.compiled import CommitJoin
from deltalog.engine.runtime import IncrementalEngine
from deltalog.engine.segments import CorruptSegment, MemorySegments
from tests.engine.ivm.test_compiled_commits import _maintainers, _reopen, _tuple_commits
from tests.engine.programs import draw_change, head_or_aggregate, positive_body


def _tiny_codes(monkeypatch: pytest.MonkeyPatch, span: int = 64, step: int = 4) -> None:
    """Codes in [-span, span], ``step`` apart at most: a gap fills in a few strings."""
    monkeypatch.setattr(strings_mod, "LOW", -span)
    monkeypatch.setattr(strings_mod, "HIGH", span)
    monkeypatch.setattr(strings_mod, "STEP", step)


def _check_dictionary(codes: StringCodes) -> None:
    ordered = list(codes._sorted)
    got = [codes.code(s) for s in ordered]
    assert all(c is not None for c in got)
    assert all(a < b for a, b in pairwise(got)), "codes out of order"
    assert all(strings_mod.LOW <= c <= strings_mod.HIGH for c in got)  # type: ignore[operator]
    assert [codes.value(c) for c in got] == ordered  # type: ignore[arg-type]


# -- 1. the dictionary --------------------------------------------------------------------

WORDS = st.text(alphabet="abc", max_size=4)


@given(batches=st.lists(st.lists(WORDS, max_size=6), min_size=1, max_size=12),
       tiny=st.booleans())
@settings(max_examples=200, deadline=None)
def test_codes_order_as_strings_and_stay_until_a_relabelling(batches, tiny):
    with pytest.MonkeyPatch.context() as mp:
        if tiny:
            _tiny_codes(mp)
        codes = StringCodes(batches[0])
        _check_dictionary(codes)
        for batch in batches[1:]:
            before = {s: codes.code(s) for s in codes._sorted}
            epoch = codes.epoch
            codes.add(batch)
            _check_dictionary(codes)
            assert set(batch) <= set(codes._sorted)
            if codes.epoch == epoch:  # no relabelling: no code changed
                assert all(codes.code(s) == c for s, c in before.items())
            event(f"relabelled: {codes.epoch > epoch}")


def test_strings_arriving_in_order_use_the_room_at_the_end_step_by_step():
    """Increasing strings (dates) take STEP after the largest: no relabelling for as many
    as the room past it holds."""
    codes = StringCodes(["2020-01-01"])
    for day in range(1, 3000):
        codes.add([f"2020-01-01+{day:05d}"])
    assert codes.epoch == 0
    assert codes.code("2020-01-01+02999") - codes.code("2020-01-01+02998") == strings_mod.STEP


@given(rows=st.lists(st.tuples(WORDS, st.integers(0, 3)), max_size=8),
       commits=st.lists(st.lists(st.tuples(st.tuples(WORDS, st.integers(0, 3)),
                                           st.booleans()), max_size=5), max_size=8))
@settings(max_examples=150, deadline=None)
def test_a_coded_index_of_strings_is_its_rows_through_relabellings(rows, commits):
    """Two indexes sharing a dictionary, committed with new strings (tiny code range: they
    relabel often): each version decodes to its rows, and the arrays stay sorted."""
    with pytest.MonkeyPatch.context() as mp:
        _tiny_codes(mp, span=32, step=2)
        codes = StringCodes()
        current = set(rows)
        a = coded_index(("string", "int"), sorted(current), [], [], codes)
        b = coded_index(("int", "string"), sorted((n, s) for s, n in current), [], [], codes)
        assert a is not None and b is not None
        for changes in commits:
            ins = sorted({r for r, keep in changes if keep and r not in current})
            era = sorted({r for r, keep in changes if not keep and r in current} - set(ins))
            before = set(current)
            current = (current - set(era)) | set(ins)
            assert a.commit(ins, era) and b.commit([(n, s) for s, n in ins],
                                                   [(n, s) for s, n in era])
            for index, flip in ((a, False), (b, True)):
                for old, want in ((False, current), (True, before)):
                    got = _decode(index, old)
                    assert got == ({(n, s) for s, n in want} if flip else want), old
        event(f"relabellings: {min(codes.epoch, 3)}")


def _decode(index: CodedIndex, old: bool) -> set[tuple[Any, ...]]:
    arr = index.rows(old)
    assert (np.diff(arr[:, 0]) >= 0).all()
    assert index.strings is not None
    cols = [index.strings.decode(arr[:, j]).tolist() if t == "string" else arr[:, j].tolist()
            for j, t in enumerate(index.types)]
    return set(zip(*cols, strict=True))


# -- 2. end to end --------------------------------------------------------------------------

NAMES = ["", "a", "ab", "b", "ba", "c", "zz", "é"]
LOADED = 4


@st.composite
def string_programs(draw: Any) -> str:
    """1-3 IDB predicates over e(a: string, b: string), f(a: string, b: int) and
    u(a: string): positive atoms with string constants, repeated variables and
    wildcards, comparisons of strings (order and equality), negations (of variables, and
    now and then of a constant), a string constant assigned, now and then a count, min
    or max."""
    decls = ".decl e(a: string, b: string)\n.decl f(a: string, b: int)\n.decl u(a: string)\n"
    arity = {"e": 2, "u": 1}
    rules = []
    for i in range(draw(st.integers(1, 3))):
        head_arity = draw(st.integers(1, 3))  # (its columns strings: string variables)
        for _ in range(draw(st.integers(1, 2))):
            body, bound = positive_body(draw, arity, lambda: repr(
                draw(st.sampled_from(NAMES[:6]))).replace("'", '"'))
            names = sorted(set(bound))
            numbers = []
            if draw(st.integers(0, 2)) == 0:
                body.append(f"f({draw(st.sampled_from(names))}, k)")
                numbers = ["k"]
            for _ in range(draw(st.integers(0, 2))):
                op = draw(st.sampled_from(["<", "<=", ">", "!=", "="]))
                right = (draw(st.sampled_from(names)) if draw(st.booleans())
                         else f'"{draw(st.sampled_from(NAMES))}"')
                body.append(f"{draw(st.sampled_from(names))} {op} {right}")
            for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
                pred = draw(st.sampled_from(sorted(arity)))
                args = [draw(st.sampled_from([*names, "_", *(
                    [f'"{draw(st.sampled_from(NAMES))}"'] if draw(st.integers(0, 3)) == 0
                    else [])])) for _ in range(arity[pred])]
                body.append(f"!{pred}({', '.join(args)})")
            if draw(st.integers(0, 3)) == 0:
                body.append(f's = "{draw(st.sampled_from(NAMES))}"')
                names.append("s")
            text, aggregate = head_or_aggregate(draw, i, names, names + numbers, body,
                                                head_arity)
            rules.append(text)
            if aggregate:
                break
        if any(r.startswith(f"p{i}(") for r in rules):
            arity[f"p{i}"] = head_arity
    return decls + "\n".join(rules) + "\n"


def _rows(prog: Any, name: str, hot: bool) -> Any:
    cols = []
    for c in prog.schemas[name].columns:
        if c.type == "int":
            cols.append(st.integers(0, 3))
        else:
            cols.append(st.sampled_from(NAMES[1:4] * 3 + NAMES + ["ab" + "z" * k
                                                                for k in range(4)])
                        if hot else st.sampled_from(NAMES[:LOADED]))
    return st.tuples(*cols)


class StringsAgainstTuples(RuleBasedStateMachine):
    """An engine committing rules over strings on the compiled join and one committing on
    the tuple join, on the same commits: both equal a recompute after every commit, and
    give the same deltas; the first is saved and reopened now and then."""

    @initialize(text=string_programs(), data=st.data(), segments=st.booleans())
    def load(self, text, data, segments):
        note(text)
        self.prog = load_program(text)
        start = {name: data.draw(st.sets(_rows(self.prog, name, False), max_size=8))
                 for name in sorted(self.prog.edb)}
        if data.draw(st.integers(0, 3)) == 0:
            start = {}
        note(f"data {start}")
        self.compiled = IncrementalEngine(self.prog, start, "sensitivity")
        self.tuples = _tuple_commits(IncrementalEngine(self.prog, start, "sensitivity"))
        self.store = MemorySegments() if segments else None
        self.rows = {name: _rows(self.prog, name, True) for name in self.prog.edb}
        self.compiled_commits = 0

    @rule(data=st.data())
    def commit(self, data):
        deltas = draw_change(data, self.rows, 5)
        note(f"apply {deltas}")
        out = self.compiled.apply(deltas)
        assert self.tuples.apply(deltas) == out
        self.compiled_commits += self.compiled.last_stats.work.get("compiled_commits", 0)
        if data.draw(st.integers(0, 3)) == 0:
            note("saved and reopened")
            self.compiled = _reopen(self.compiled, self.store)

    @invariant()
    def equal_recompute(self):
        if not hasattr(self, "compiled"):
            return
        want = evaluate(self.prog, {n: self.compiled.relation(n) for n in self.prog.edb})
        for p in self.prog.idb:
            assert self.compiled.relation(p) == want[p], ("compiled", p)
            assert self.tuples.relation(p) == want[p], ("tuples", p)
        for rel in self.compiled.store.relations.values():  # every coded index its rows
            for perm, index in rel._coded.items():
                if index is not None and "string" in index.types:
                    assert _decode(index, False) == {tuple(r[c] for c in perm)
                                                     for r in rel.rows}

    def teardown(self):
        if hasattr(self, "compiled"):
            strings = self.compiled.store.strings
            event(f"compiled commits: {min(self.compiled_commits, 5)}")
            event(f"relabellings: {min(strings.epoch if strings is not None else 0, 3)}")


@pytest.mark.parametrize("tiny", [False, True])
def test_string_commits_equal_tuple_commits_and_recompute(tiny, monkeypatch):
    if tiny:
        _tiny_codes(monkeypatch)
    run_state_machine_as_test(StringsAgainstTuples, settings=settings(
        max_examples=90, stateful_step_count=10, deadline=None))


PEOPLE = """.decl knows(a: string, b: string)
.decl city(a: string, c: string)
.decl blocked(a: string)
near(x, y) :- knows(x, y), city(x, c), city(y, c), !blocked(y), x < y.
hub[c] = n <- agg<<n = count()>> city(x, c), knows(x, _).
"""


@pytest.mark.parametrize("segments", [False, True])
def test_rules_over_strings_commit_on_the_compiled_join_saved_and_relabelled(segments,
                                                                           monkeypatch):
    """Every rule of a program over strings commits on the compiled join, before and after
    a save and reopening, with new names in every commit (some relabel: tiny code range),
    and equals a recompute; the run's notes name no slow path."""
    _tiny_codes(monkeypatch, span=4096, step=8)
    rng = random.Random(3)

    def name() -> str:
        return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 3)))

    people = [name() for _ in range(40)]
    cities = ["oslo", "rome", "lima"]
    data = {"knows": {(rng.choice(people), rng.choice(people)) for _ in range(120)},
            "city": {(p, rng.choice(cities)) for p in people},
            "blocked": {(p,) for p in people[:3]}}
    prog = load_program(PEOPLE)
    engine = IncrementalEngine(prog, data, "sensitivity")
    # (the joins' notes; an aggregate's support counts under this strategy have their own)
    assert [line for line in engine.slow_paths() if "support counts" not in line] == []
    store = MemorySegments() if segments else None
    for k in range(12):
        new = [name() + "-" + str(k) for _ in range(3)]
        change = {"knows": {(rng.choice(people), p): 1 for p in new}
                  | {rng.choice(sorted(engine.relation("knows"))): -1},
                  "city": {(p, rng.choice(cities)): 1 for p in new}}
        people += new
        engine.apply(change)
        assert engine.last_stats.work["compiled_commits"] >= 2, k
        assert all(type(m._commit) is CommitJoin for m in _maintainers(engine))
        want = evaluate(prog, {n: engine.relation(n) for n in prog.edb})
        for p in prog.idb:
            assert engine.relation(p) == want[p], (k, p)
        if k % 4 == 1:
            engine = _reopen(engine, store)
    assert engine.store.strings.epoch >= 1  # (relabelled on the way)
    # (the joins' notes; an aggregate's support counts under this strategy have their own)
    assert [line for line in engine.slow_paths() if "support counts" not in line] == []


def test_a_negation_of_a_string_constant_probed_by_a_commit_is_stabbed_by_a_later_one():
    """``!e("c", x)``: the probes a commit's join records (a part of its own dictionary,
    the constant coded by it) are found by a later commit's change to e at ("c", x), on
    the compiled join, before and after a save; also when "c" is not the least string."""
    prog = load_program(".decl e(a: string, b: string)\n.decl u(a: string)\n"
                        'p(x) :- u(x), !e("c", x).\n'
                        'q(x, y) :- u(x), u(y), !e(x, "zz"), !e("c", y), x < y.\n')
    engine = IncrementalEngine(prog, {"e": {("a", "b")}, "u": {("b",)}}, "sensitivity")
    oracle_data = {"e": {("a", "b")}, "u": {("b",)}}
    steps = [{"u": {("m",): 1, ("n",): 1, ("a",): 1}}, {"e": {("c", "m"): 1}},
             {"e": {("c", "a"): 1, ("n", "zz"): 1}}, {"e": {("c", "m"): -1}},
             {"u": {("o",): 1}}, {"e": {("c", "o"): 1, ("a", "zz"): 1}}]
    for k, change in enumerate(steps):
        engine.apply(change)
        assert engine.last_stats.work["compiled_commits"] >= 1, k
        for pred, rows in change.items():
            for row, w in rows.items():
                (oracle_data[pred].add if w > 0 else oracle_data[pred].discard)(row)
        want = evaluate(prog, oracle_data)
        assert engine.relation("p") == want["p"], k
        assert engine.relation("q") == want["q"], k
        if k == 2:
            engine = _reopen(engine, None)
    # (the joins' notes; an aggregate's support counts under this strategy have their own)
    assert [line for line in engine.slow_paths() if "support counts" not in line] == []


def test_a_saved_dictionary_writes_what_was_added_since_it_was_opened():
    """In a segment store the dictionary is a base and a delta per save that added
    strings: the second save writes the two new strings, not the thousand; reopened, it
    holds every string at its code; a relabelling writes a new base; a corrupt segment
    is refused."""
    store = MemorySegments()
    codes = StringCodes(f"s{i:04d}" for i in range(1000))
    ref = codes.__persist__(store)
    opened = StringCodes.__restore__(store, ref)
    assert {s: opened.code(s) for s in opened._sorted} == {
        s: codes.code(s) for s in codes._sorted}
    before = sum(map(len, store.segments.values()))
    opened.add(["s0500x", "zzz"])
    ref2 = opened.__persist__(store)
    assert ref2[1] == ref[1] and len(ref2[2]) == 1
    assert sum(map(len, store.segments.values())) - before < 100
    again = StringCodes.__restore__(store, ref2)
    assert again.code("s0500x") == opened.code("s0500x")
    assert again.code("s0500") < again.code("s0500x") < again.code("s0501")
    _check_dictionary(again)
    with pytest.MonkeyPatch.context() as mp:
        _tiny_codes(mp, span=2**20, step=2**10)
        small = StringCodes(["a", "b"])
        small_ref = small.__persist__(store)
        reopened = StringCodes.__restore__(store, small_ref)
        for k in range(1, 40):  # (each just above the last: the gap halves)
            reopened.add(["a" + "z" * k])
        assert reopened.epoch >= 1
        assert reopened.__persist__(store)[2] == []  # (a new base)
    store.segments[ref2[2][0]] = store.segments[ref[1]]  # (a delta repeating the base)
    with pytest.raises(CorruptSegment):
        StringCodes.__restore__(store, ref2)
