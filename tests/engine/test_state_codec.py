"""A saved engine state is data: every kind of state the engine makes (sensitivity indices
with aggregates and complements, DBSP on the tuple and the columnar kernel, floats and
strings) reads back and answers like the engine that saved it; shared and cyclic structures
come back shared; a crafted state that names anything but engine classes is refused, and
no byte string makes the reader run code (a pickle is not a state)."""

import contextlib
import os
import pickle
import random
from collections import defaultdict

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedList

from deltalog.engine import state_codec
from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.runtime import IncrementalEngine
from deltalog.engine.sentinels import BOTTOM, TOP

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


def test_shared_and_cyclic_structures_come_back_shared():
    shared_list: list = [1, 2]
    shared_set = {(1, "a"), (2, "b")}
    node = Node(1)
    node.next = node  # a cycle through an engine-like object
    counts: defaultdict = defaultdict(int, {(1,): 2})
    value = {
        "a": shared_list, "b": shared_list, "s1": shared_set, "s2": shared_set,
        "node": node, "counts": counts, "sl": SortedList([(3,), (1,)]),
        "big": 2**1100, "neg": -(2**70), "arr": np.arange(5, dtype=np.int64),
        "rng": random.Random(7), "sentinel": (BOTTOM, 3, TOP), "fn": min,
    }
    back = state_codec.loads(state_codec.dumps(value))
    assert back["a"] is back["b"] and back["a"] == [1, 2] and type(back["a"]) is list
    assert back["s1"] is back["s2"] and back["s1"] == shared_set
    assert back["node"].next is back["node"]
    assert back["counts"]["missing"] == 0 and back["counts"][(1,)] == 2
    assert list(back["sl"]) == [(1,), (3,)]
    assert back["big"] == 2**1100 and back["neg"] == -(2**70)
    assert back["arr"].tolist() == [0, 1, 2, 3, 4] and back["arr"].flags.writeable
    assert back["rng"].random() == random.Random(7).random()
    assert back["sentinel"][0] is BOTTOM and back["sentinel"][2] is TOP
    assert back["fn"] is min


class Node:  # stands for an engine class in the test above (engine modules only are read)
    def __init__(self, v):
        self.v = v
        self.next = None


Node.__module__ = "deltalog.engine.storage"  # resolved by name when read: see the patch below


@pytest.fixture(autouse=True)
def _node_is_an_engine_class(monkeypatch):
    import deltalog.engine.storage

    monkeypatch.setattr(deltalog.engine.storage, "Node", Node, raising=False)


values = st.recursive(
    st.one_of(
        st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5),
        st.none(), st.booleans(), st.just(BOTTOM), st.just(TOP),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.integers() | st.text(max_size=3), inner, max_size=4),
        st.sets(st.tuples(st.integers(), st.text(max_size=3)), max_size=4),
        st.frozensets(st.integers(), max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(values)
def test_any_state_shaped_value_round_trips_with_its_types(value):
    back = state_codec.loads(state_codec.dumps(value))
    assert _typed(back) == _typed(value)


def _typed(x):
    """``x`` with every container's type spelled out (a list is not a tuple)."""
    if x is BOTTOM or x is TOP:
        return ("sentinel", repr(x))
    if isinstance(x, dict):
        return ("dict", sorted(((repr(k), _typed(v)) for k, v in x.items())))
    if isinstance(x, list | tuple):
        return (type(x).__name__, [_typed(i) for i in x])
    if isinstance(x, set | frozenset):
        return (type(x).__name__, sorted(repr(i) for i in x))
    return (type(x).__name__, repr(x))


class _RunsCode:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _state(tree) -> bytes:
    """A state file's engine part holding ``tree`` and no segments."""
    return msgpack.packb([msgpack.packb(tree, use_bin_type=True)], use_bin_type=True)


def _obj(module: str, name: str, state=None) -> bytes:
    inner = msgpack.packb(state)
    return _state(msgpack.ExtType(state_codec._OBJ, msgpack.packb([module, name, inner])))


def test_the_helpers_write_what_the_reader_reads():
    assert state_codec.loads(_state((1, "a"))) == (1, "a")


@pytest.mark.parametrize(
    "module,name",
    [("builtins", "eval"), ("builtins", "object"), ("os", "system"), ("subprocess", "Popen"),
     ("deltalog.engine.runtime", "gc"), ("deltalog.engine.storage", "partial"),
     ("deltalog.engine.runtime", "gc.enable"), ("deltalog.engine.storage", "add_into"),
     ("deltalog.engine.storage", "BOTTOM")],
)
def test_a_state_naming_anything_but_an_engine_class_is_refused(module, name):
    with pytest.raises(state_codec.UnsafeState):
        state_codec.loads(_obj(module, name))


@pytest.mark.parametrize(
    "module,name",
    [("os", "system"), ("builtins", "eval"), ("deltalog.engine.runtime", "gc.enable")],
)
def test_a_state_naming_a_function_other_than_the_engines_is_refused(module, name):
    blob = _state(msgpack.ExtType(state_codec._FUNC, msgpack.packb([module, name])))
    with pytest.raises(state_codec.UnsafeState):
        state_codec.loads(blob)


def test_a_pickle_is_not_a_state_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    blob = pickle.dumps((2, _RunsCode(str(marker))))
    with pytest.raises(Exception):  # noqa: B017 - any refusal; what matters is below
        state_codec.loads(blob)
    assert not marker.exists()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_run_code_and_fail_cleanly(blob):
    """Any bytes are read (as plain data) or refused with a decoding error, in time
    and memory bounded by their size; never another kind of exception."""
    with contextlib.suppress(
        ValueError, TypeError, KeyError, IndexError, RecursionError, msgpack.UnpackException
    ):
        state_codec.loads(blob)


def test_values_that_are_not_state_are_not_written():
    with pytest.raises(state_codec.UnsafeState):
        state_codec.dumps(_RunsCode("x"))
    with pytest.raises(state_codec.UnsafeState):
        state_codec.dumps(lambda: 0)
    with pytest.raises(state_codec.UnsafeState):
        state_codec.dumps(np.array([object()], dtype=object))


def test_big_containers_are_segments_read_once():
    rows = {(i, str(i)) for i in range(20_000)}
    value = {"a": rows, "b": rows, "nested": [[sorted(rows)]]}
    blob = state_codec.dumps(value)
    parts = msgpack.unpackb(blob)
    assert len(parts) >= 3  # the tree and a segment per big container
    back = state_codec.loads(blob)
    assert back["a"] is back["b"] and back["a"] == rows
    assert back["nested"][0][0] == sorted(rows)
    tree, first, *rest = parts
    reused = msgpack.packb([tree, first, *rest], use_bin_type=True)
    assert state_codec.loads(reused)["a"] == rows
    seg = msgpack.ExtType(state_codec._SEGMENT, msgpack.packb([state_codec._SET, 0]))
    twice = msgpack.packb([msgpack.packb([seg, seg]), first], use_bin_type=True)
    with pytest.raises(state_codec.UnsafeState):
        state_codec.loads(twice)
