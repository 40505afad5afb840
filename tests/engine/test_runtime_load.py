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
