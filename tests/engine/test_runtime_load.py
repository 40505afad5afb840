"""A load takes the EDB rows as the relations store them: a relation without a float
column takes its rows as given (lists made tuples), one with a float column widens its
ints; a row of the wrong arity is refused naming the relation."""

import pytest

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


def test_a_compiled_load_builds_the_store_indexes_from_its_sorted_codes():
    """The sorted indexes commits read are built from the compiled join's sorted code
    arrays (decoded), in every column order the rule reads: they hold the relation's rows,
    in the order Python sorts them (strings, negative ints, floats incl. -0.0)."""
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
