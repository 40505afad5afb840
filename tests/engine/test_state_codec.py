"""A saved engine state is read without running code from the file: every kind of state
the engine makes (sensitivity indices with aggregates and complements, DBSP on the tuple and
the columnar kernel, floats and strings) reads back and answers like the engine that saved
it, and a crafted state that names anything else is refused before it runs."""

import os
import pickle

import pytest

from engine import state_codec
from engine.analysis.analyze import load_program
from engine.runtime import IncrementalEngine

PROGRAMS = {
    "sensitivity": """
.decl e(a: int, b: int)
.decl w[k: string] = v: float
t(x, z) :- e(x, y), e(y, z), x < z.
deg[x] = n <- agg<<n = count()>> e(x, _).
lo[x] = m <- agg<<m = min(y)>> e(x, y).
tot[k] = s <- agg<<s = total(v)>> w[k] = v.
f(x, y) :- e(x, y), y > 2.
g(x, y) :- e(x, y), !f(x, y).
""",
    "dbsp": """
.decl e(a: int, b: int)
p(x, y) :- e(x, y).
p(x, z) :- p(x, y), e(y, z).
q(x, z) :- q(x, y), e(y, z), z != x.
q(x, y) :- e(x, y), y = x + 1.
""",
}
EDB = {"e": {(1, 2), (2, 3), (3, 1), (3, 4), (2, 5)}, "w": {("a", 1.5), ("b", -0.25)}}
CHANGE = {"e": {(3, 1): -1, (4, 6): 1, (6, 2): 1}}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("strategy", ["auto", "dbsp"])
def test_every_kind_of_state_reads_back_and_maintains_alike(name, strategy):
    prog = load_program(PROGRAMS[name], "<test>")
    edb = {k: v for k, v in EDB.items() if k in prog.schemas}
    engine = IncrementalEngine(prog, edb, strategy=strategy)
    _, loaded = state_codec.loads(engine.dumps())
    assert isinstance(loaded, IncrementalEngine)
    assert all(loaded.relation(p) == engine.relation(p) for p in prog.idb)
    assert loaded.apply(CHANGE) == engine.apply(CHANGE)


class _RunsCode:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize(
    "payload",
    [
        lambda m: _RunsCode(m),
        lambda m: (1, {"x": _RunsCode(m)}),
    ],
)
def test_a_crafted_state_is_refused_and_runs_nothing(tmp_path, payload):
    marker = tmp_path / "ran"
    blob = pickle.dumps(payload(str(marker)))
    with pytest.raises(state_codec.UnsafeState):
        state_codec.loads(blob)
    assert not marker.exists()


@pytest.mark.parametrize(
    "module,name",
    [("builtins", "eval"), ("builtins", "__import__"), ("os", "system"),
     ("engine.runtime", "pickle"), ("engine.runtime", "gc"), ("engine.storage", "partial"),
     ("engine.runtime", "gc.enable"), ("subprocess", "Popen")],
)
def test_names_that_are_not_state_are_refused(module, name):
    reader = state_codec._Reader(__import__("io").BytesIO(b""))
    with pytest.raises(state_codec.UnsafeState):
        reader.find_class(module, name)
