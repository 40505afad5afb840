"""A load takes the EDB rows as the relations store them: a relation without a float
column takes its rows as given (lists made tuples), one with a float column widens its
ints; a row of the wrong arity is refused naming the relation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.runtime import IncrementalEngine

PROGRAM = """\
.decl e(x: int, y: string)
.decl w(x: int, v: float)
p(x, y) :- e(x, y).
q(x, v) :- w(x, v), v > 1.5."""


@pytest.mark.parametrize("strategy", ["auto", "dbsp"])
def test_rows_are_stored_as_their_columns_say(strategy):
    prog = load_program(PROGRAM)
    engine = IncrementalEngine(prog, {"e": [[1, "a"], (2, "b")], "w": [(1, 2), (2, 1.0)]},
                               strategy)
    assert engine.relation("e") == {(1, "a"), (2, "b")}
    assert engine.relation("w") == {(1, 2.0), (2, 1.0)}
    assert all(type(v) is float for _, v in engine.relation("w"))
    assert engine.relation("q") == {(1, 2.0)}
    engine.apply({"e": {(1, "a"): -1}})
    assert engine.relation("p") == {(2, "b")}


def test_a_row_of_the_wrong_arity_is_refused_naming_the_relation():
    prog = load_program(PROGRAM)
    with pytest.raises(ValueError, match="a row of 3 values for e, of arity 2"):
        IncrementalEngine(prog, {"e": [(1, "a", 3)]})


def test_a_compiled_load_builds_the_store_indexes_from_its_sorted_codes(monkeypatch):
    """The sorted indexes the tuple join's commits read (here every rule's: its compiled
    join refused) are built from the compiled join's sorted code arrays (decoded), in
    every column order the rule reads: they hold the relation's rows, in the order Python
    sorts them (strings, negative ints, floats incl. -0.0)."""
    from deltalog.engine.columnar.encoding import NotColumnar
    from deltalog.engine.ivm import rule as rule_module

    def refused(*args: object, **kwargs: object) -> None:
        raise NotColumnar("refused by the test")

    monkeypatch.setattr(rule_module, "CommitJoin", refused)
    prog = load_program(""".decl e(x: int, y: string)
.decl w(x: int, v: float)
.decl n(y: string)
r(x, y, v) :- e(x, y), w(x, v), !n(y).
s(y, x) :- e(x, y), w(x, 0.5).""")
    rows = {"e": {(1, "b"), (-3, "a"), (1, ""), (7, "é"), (-3, "zz")},
            "w": {(1, -0.0), (1, 0.5), (-3, -2.5), (7, 1e300)}, "n": {("b",), ("x",)}}
    engine = IncrementalEngine(prog, rows, "sensitivity")
    assert {h.maintainer.recorded_by for _, m in engine.strata for h in m.heads} == {
        "compiled"}
    built = 0
    for name in rows:
        rel = engine.store[name]
        for perm in list(rel._indexes):
            want = sorted(tuple(r[c] for c in perm) for r in rel.rows)
            assert list(rel.kept_index(perm)) == want, (name, perm)
            built += 1
    assert built >= 3
    assert {type(v) for _, v in engine.store["w"].kept_index((0, 1))} == {float}
    engine.apply({"n": {("b",): -1}, "w": {(1, -0.0): -1}})
    assert engine.relation("r") == {(x, y, v) for x, y in rows["e"] for xx, v in rows["w"]
                                    if x == xx and (x, v) != (1, -0.0) and y != "x"}


# -- inputs given by column -------------------------------------------------------------

COLUMNS_PROGRAM = """\
.decl e(x: int, y: string)
.decl w(x: int, v: float)
.decl k[x: int] = y: int
.decl on()
e(9, "fact").
p(x, y, v) :- e(x, y), w(x, v), on().
q(y) :- e(x, y), !w(x, _).
r(x, z) :- k[x] = y, k[y] = z."""


def _columns_data():
    from deltalog.engine.columnar.evaluate import Columns, Dictionary

    rows = {"e": {(1, "a"), (2, "b"), (3, "a"), (9, "fact"), (-(2**62), "é")},
            "w": {(1, -0.0), (2, 2.0), (-(2**62), 1e300)},
            "k": {(1, 2), (2, 3)}, "on": {()}}
    strings = np.array(["a", "b", "fact", "é", "a"], dtype=object)  # (values repeat)
    columns = {
        "e": Columns([np.array([1, 2, 3, 9, -(2**62)]), Dictionary(strings, np.array(
            [0, 1, 4, 2, 3], np.int32))]),
        "w": Columns([np.array([1, 2, -(2**62)]), np.array([-0.0, 2, 1e300])]),
        "k": Columns([np.array([1, 2]), np.array([2, 3])]),
        "on": Columns([], 1),
    }
    return rows, columns


@pytest.mark.parametrize("strategy", ["auto", "dbsp", "sensitivity", "recompute"])
def test_inputs_given_by_column_load_as_their_rows_do(strategy):
    """Strings as a dictionary and its indices, -0.0 and ints in a float column, the
    program's facts of an input, a functional input and one of no columns: the same
    relations as from the rows, then the same commits."""
    from deltalog.engine.runtime import make_engine

    prog = load_program(COLUMNS_PROGRAM)
    rows, columns = _columns_data()
    by_rows, by_cols = make_engine(prog, rows, strategy), make_engine(prog, columns, strategy)
    for name in ("e", "w", "k", "on", "p", "q", "r"):
        assert by_cols.relation(name) == by_rows.relation(name), name
    assert {type(v) for _, v in by_cols.relation("w")} == {float}
    assert (1, "a", 0.0) in by_cols.relation("p")
    change = {"e": {(1, "a"): -1, (4, "b"): 1, (9, "fact"): 1}, "w": {(3, 0.5): 1},
              "on": {(): -1}}
    assert by_cols.apply(change) == by_rows.apply(change)
    for name in ("e", "w", "p", "q"):
        assert by_cols.relation(name) == by_rows.relation(name), name


def test_an_input_given_by_column_is_kept_coded_and_saved_so():
    """The store keeps such an input as coded rows (no Python row made at load); a state
    saved to segments and opened again commits as the engine loaded from rows does."""
    from deltalog.engine.segments import MemorySegments
    from deltalog.engine.storage import CodedRows

    prog = load_program(COLUMNS_PROGRAM)
    rows, columns = _columns_data()
    by_cols = IncrementalEngine(prog, columns)
    assert type(by_cols.store["e"].rows) is CodedRows
    assert type(by_cols.store["k"].rows) is set  # (functional: checked as rows)
    by_rows = IncrementalEngine(prog, rows)
    store = MemorySegments()
    reopened = IncrementalEngine.loads(by_cols.dumps(store), store)
    for i in range(6):
        change = {"e": {(i, "a"): 1, (1, "a"): -1 if i % 2 == 0 else 1}, "w": {(i, 0.5): 1}}
        assert reopened.apply(change) == by_rows.apply(change)
    for name in ("e", "w", "p", "q"):
        assert reopened.relation(name) == by_rows.relation(name), name


@pytest.mark.parametrize("strategy", ["auto", "dbsp", "sensitivity", "recompute"])
def test_columns_of_the_wrong_number_or_length_are_refused(strategy):
    """(Found by a probe: columns of 3 and 1 rows were broadcast into three rows.)"""
    from deltalog.engine.columnar.evaluate import Columns
    from deltalog.engine.runtime import make_engine

    prog = load_program(COLUMNS_PROGRAM)
    with pytest.raises(ValueError, match="1 columns for e, of arity 2"):
        make_engine(prog, {"e": Columns([np.array([1])])}, strategy)
    with pytest.raises(ValueError, match="columns of 1 and 3 rows for e"):
        make_engine(prog, {"e": Columns([np.array([1, 2, 3]), ["a"]])}, strategy)


@pytest.mark.parametrize("strategy", ["auto", "dbsp", "sensitivity", "recompute"])
def test_string_columns_given_as_lists_keep_every_value(strategy):
    """(Found by a probe: a list went through numpy's fixed-width text, which drops a
    string's trailing NULs, so "a\x00" became "a".)"""
    from deltalog.engine.columnar.evaluate import Columns, Dictionary
    from deltalog.engine.runtime import make_engine

    prog = load_program(".decl s(a: string)\np(x) :- s(x).")
    for held in (Columns([["a\x00", "a"]]),
                 Columns([Dictionary(["a\x00", "a"], np.array([0, 1]))])):
        engine = make_engine(prog, {"s": held}, strategy)
        assert engine.relation("p") == {("a\x00",), ("a",)}


def test_a_functional_conflict_given_by_column_is_refused():
    from deltalog.engine.columnar.evaluate import Columns
    from deltalog.engine.errors import DataError

    prog = load_program(COLUMNS_PROGRAM)
    with pytest.raises(DataError):
        IncrementalEngine(prog, {"k": Columns([np.array([1, 1]), np.array([2, 3])])})


def test_columnar_strata_and_inputs_by_column_share_one_coding():
    """An input loaded by column and a lower columnar stratum's relation are read by a
    columnar stratum as their keys (the same array: nothing recoded), every value is in
    one dictionary of the engine, and a saved state opened again still shares it."""
    from deltalog.engine.dbsp.columnar import ColumnarStratum
    from deltalog.engine.segments import MemorySegments

    prog = load_program(""".decl e(x: int, y: string)
a(x, y) :- e(x, y).
a(x, z) :- a(x, y), e(w, y), w < x, z = y.
b(y) :- a(_, y), !e(7, y).""")
    rows, columns = _columns_data()
    engine = IncrementalEngine(prog, {"e": columns["e"]})
    strata = [m for _, m in engine.strata if isinstance(m, ColumnarStratum)]
    assert len(strata) == 2
    first, second = strata
    assert first.codes is second.codes and first.packing is second.packing
    held = engine.store["e"].rows
    assert held.coding.codes is first.codes
    nat = first._natural("e")
    assert first.input_keys["e"][nat] is held.keys  # (its facts are in the keys already)
    assert second.input_keys["a"][second._natural("a")] is engine.store["a"].rows.keys
    store = MemorySegments()
    reopened = IncrementalEngine.loads(engine.dumps(store), store)
    again = [m for _, m in reopened.strata if isinstance(m, ColumnarStratum)]
    assert again[0].codes is again[1].codes is reopened.store["e"].rows.coding.codes
    change = {"e": {(7, "a"): 1, (1, "a"): -1, (8, "new"): 1}}
    oracle = IncrementalEngine(prog, {"e": rows["e"]})
    assert reopened.apply(change) == oracle.apply(change)
    for name in ("a", "b"):
        assert reopened.relation(name) == oracle.relation(name)


NEGATIONS_PROGRAM = """\
.decl e(a: int, b: int)
.decl s(a: string, b: string)
.decl w(a: int, b: float)
r1(x, y) :- e(x, y), !e(y, x).
r2(x) :- e(x, _), !e(x, x).
r3(x, y) :- e(x, y), !e(2, y).
r4(a) :- s(a, _), !s(a, "b").
r5(x) :- w(x, _), !w(x, 0.5).
r6(x, v) :- w(x, v), !e(x, 1), !s("a", _).
r7[x] = n <- agg<<n = count()>> e(x, y), !e(y, y), !w(y, 2.5).
"""


@settings(max_examples=60, deadline=None)
@given(e=st.sets(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=10),
       s=st.sets(st.tuples(st.sampled_from(["a", "b", ""]), st.sampled_from(["a", "b"])),
                 max_size=6),
       w=st.sets(st.tuples(st.integers(0, 3), st.sampled_from([0.5, 2.5, -0.0, 1.0])),
                 max_size=6),
       change=st.sets(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=4))
def test_negations_of_inputs_given_by_column_key_as_their_rows_do(e, s, w, change):
    """A columnar stratum's negation of an input the store keeps coded takes its keys
    from the columns at load (constants, a variable twice, strings, floats); the
    relations and a commit after are a recompute's."""
    from deltalog.engine.columnar.evaluate import Columns
    from deltalog.engine.runtime import RecomputeEngine
    from deltalog.engine.storage import CodedRows

    prog = load_program(NEGATIONS_PROGRAM)
    data = {"e": e, "s": s, "w": w}

    def columns(rows, types):
        cols = list(zip(*sorted(rows), strict=True)) or [[] for _ in types]
        return Columns([np.array(c, dtype=t) for c, t in zip(cols, types, strict=True)],
                       len(rows))

    given_cols = {"e": columns(e, [np.int64, np.int64]), "s": columns(s, [object, object]),
                  "w": columns(w, [np.int64, np.float64])}
    engine, rec = IncrementalEngine(prog, given_cols), RecomputeEngine(prog, data)
    assert type(engine.store["e"].rows) is CodedRows
    for name in ("r1", "r2", "r3", "r4", "r5", "r6", "r7"):
        assert engine.relation(name) == rec.relation(name), name
    d = {"e": {row: -1 if row in e else 1 for row in change}}
    assert engine.apply(d) == rec.apply(d)
