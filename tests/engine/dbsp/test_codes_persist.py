"""The columnar kernel's value dictionaries (``deltalog.engine.dbsp.columnar._Codes``) kept in a
segment store: encoded, decoded, saved and opened again any number of times (in memory
and through the store of ``deltalog.pipelines.state_store``), they give the codes a dict gives
(the same code for values a dict takes as one key, 1 and 1.0; decode the inverse of
encode); a save writes what was coded since the open, an open decodes nothing; engines
saved and opened through segments agree with engines built afresh."""

import math
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from deltalog.engine import state_codec
from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.dbsp import columnar
from deltalog.engine.dbsp.columnar import ColumnarStratum, _Codes
from deltalog.engine.runtime import IncrementalEngine
from deltalog.engine.segments import MemorySegments
from deltalog.pipelines.state_store import Reader, StratumState, load_state, save_state


class CollectingSegments(MemorySegments):
    """A segment store in memory that, like ``deltalog.pipelines.state_store``, forgets after each
    save every segment the save neither wrote nor kept; counts the bytes of segments
    written (arrays, which this store copies whole, apart)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.written = 0

    def write(self, parts: list[bytes], paged: bool = False) -> str:
        name = f"c{self.count}"
        self.count += 1
        self.segments[name] = b"".join(parts)
        self.written += len(self.segments[name])
        return name

    def save(self, dump: Callable[[Any], bytes]) -> bytes:
        """The root ``dump(self)`` returns; the segments it does not use are dropped."""
        before = set(self.segments)
        self.kept = set()
        root = dump(self)
        live = (set(self.segments) - before) | self.kept
        self.segments = {k: v for k, v in self.segments.items() if k in live}
        return root


class FileStore:
    """The store of ``deltalog.pipelines.state_store`` in a folder: each save commits a state
    whose engine is ``dump``'s root, opened from the last state read."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.seq = 0
        self.reader: Reader | None = None

    def save(self, dump: Callable[[Any], bytes]) -> tuple[int, int]:
        """Commits; (bytes of the segments written beside the root, bytes of the root)."""
        self.seq += 1
        state = StratumState(digest="codes", seq=self.seq, input_versions={},
                             edb_versions={}, written={}, table_versions={})
        roots: list[bytes] = []
        writers: list[Any] = []

        def root_of(writer: Any) -> bytes:
            writers.append(writer)
            roots.append(dump(writer))
            return roots[0]

        save_state(self.folder, state, root_of, self.reader)
        return writers[0].bytes_written - len(roots[0]), len(roots[0])

    def open(self) -> Any:
        state = load_state(self.folder)
        assert state is not None
        self.reader = state.open()
        return state_codec.loads(self.reader.read(state.root), self.reader)

    def cycle(self, value: Any) -> Any:
        """``value`` saved and opened again."""
        self.save(lambda sink: state_codec.dumps(value, sink))
        return self.open()


def _same(v: Any) -> tuple[type, str]:
    """A value and its type: 1, 1.0 and True, 0.0 and -0.0 apart."""
    return type(v), repr(v)


BIG = [2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 2**100, -(2**90)]
FLOATS = [0.0, -0.0, 1.0, 0.5, -2.5, 2.0**63, 1e300, math.inf, -math.inf]
STRINGS = ["", "a", "b", "ab", "é", "\x00", "a\x00", "0"]
# per column type: values of a tiny domain (equal ones: 1 and 1.0) or fresh ones, and the
# values of ``encode_many`` (past a page of a sorted run)
FRESH = st.integers(-(10**6), 10**6)
DOMAINS: dict[str, st.SearchStrategy[Any]] = {
    "int64": st.integers(-3, 3) | st.sampled_from([2**63 - 1, -(2**63)]) | FRESH,
    "int": st.integers(-3, 3) | st.sampled_from(BIG) | FRESH | FRESH.map(lambda i: i << 70),
    "number": st.integers(-3, 3) | st.sampled_from(FLOATS + BIG[:3]) | FRESH
    | st.floats(allow_nan=False),
    "string": st.sampled_from(STRINGS) | st.text(max_size=3),
}
MANY: dict[str, Callable[[int], Any]] = {
    "int64": lambda i: i * 3,
    "int": lambda i: i * 3 if i % 5 else 2**64 + i,
    "number": lambda i: i / 4,
    "string": lambda i: f"s{i}",
}


class CodesMachine(RuleBasedStateMachine):
    """A ``_Codes`` of one column type (``kind``) beside a dict oracle, saved and opened
    through segment stores (its levels small: ``CODES_MIN`` lowered)."""

    kind = "int"

    @initialize(least=st.sampled_from([0, 5, 600]))
    def start(self, least: int) -> None:
        self.least = columnar.CODES_MIN
        columnar.CODES_MIN = least
        self.codes = _Codes()
        self.oracle: dict[Any, int] = {}
        self.values: list[Any] = []
        self.memory: CollectingSegments | None = CollectingSegments()
        self.folder = Path(tempfile.mkdtemp())
        self.file: FileStore | None = None

    def _expect(self, values: list[Any]) -> list[int]:
        out = []
        for v in values:
            if v not in self.oracle:
                self.oracle[v] = len(self.values)
                self.values.append(v)
            out.append(self.oracle[v])
        return out

    @rule(data=st.data())
    def encode(self, data: st.DataObject) -> None:
        values = data.draw(st.lists(DOMAINS[self.kind], max_size=8))
        assert self.codes.encode(values).tolist() == self._expect(values)

    @rule(first=st.integers(0, 3000), n=st.integers(1, 700))
    def encode_many(self, first: int, n: int) -> None:
        values = [MANY[self.kind](i) for i in range(first, first + n)]
        assert self.codes.encode(values).tolist() == self._expect(values)

    @precondition(lambda self: self.kind.startswith("int"))
    @rule(data=st.data())
    def encode_ints(self, data: st.DataObject) -> None:
        values = data.draw(st.lists(DOMAINS["int64"] | st.integers(0, 1200), max_size=8))
        got = self.codes.encode_array(np.array(values, np.int64))
        self._expect(sorted(set(values)))  # new values are coded in order
        assert got.tolist() == [self.oracle[v] for v in values]

    @rule(data=st.data())
    def decode(self, data: st.DataObject) -> None:
        if not self.values:
            return
        ids = data.draw(st.lists(st.integers(0, len(self.values) - 1), max_size=8))
        got = self.codes.decode(np.array(ids, np.int64))
        assert [_same(v) for v in got] == [_same(self.values[i]) for i in ids]

    @precondition(lambda self: self.kind.startswith("int"))
    @rule(data=st.data())
    def ints(self, data: st.DataObject) -> None:
        if not self.values:
            return
        ids = data.draw(st.lists(st.integers(0, len(self.values) - 1), max_size=8))
        vals, big = self.codes.ints(np.array(ids, np.int64))
        want = [self.values[i] for i in ids]
        assert big.tolist() == [not -(2**63) <= v < 2**63 for v in want]
        assert vals.tolist() == [0 if b else v for v, b in zip(want, big.tolist(), strict=True)]

    @rule()
    def reopen(self) -> None:
        """Saved to the store it was opened from (or last saved to), and opened from it."""
        if self.memory is not None:
            memory = self.memory
            root = memory.save(lambda sink: state_codec.dumps(self.codes, sink))
            self.codes = state_codec.loads(root, memory)
        else:
            assert self.file is not None
            self.file.save(lambda sink: state_codec.dumps(self.codes, sink))
            self.codes = self.file.open()

    @rule(to_file=st.booleans())
    def move(self, to_file: bool) -> None:
        """An in-memory copy (no store), then saved to a new store and opened from it."""
        self.codes = state_codec.loads(state_codec.dumps(self.codes))
        if to_file:
            shutil.rmtree(self.folder / "store", ignore_errors=True)
            self.memory, self.file = None, FileStore(self.folder / "store")
        else:
            self.memory, self.file = CollectingSegments(), None
        self.reopen()

    @invariant()
    def every_code_decodes(self) -> None:
        if hasattr(self, "codes"):
            got = self.codes.decode(np.arange(len(self.values), dtype=np.int64))
            assert [_same(v) for v in got] == [_same(v) for v in self.values]

    def teardown(self) -> None:
        if hasattr(self, "least"):
            columnar.CODES_MIN = self.least
            shutil.rmtree(self.folder, ignore_errors=True)


def _oracle_test(kind: str) -> Any:
    test = type(f"{kind}Machine", (CodesMachine,), {"kind": kind}).TestCase
    test.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
    return test


TestInt64Codes = _oracle_test("int64")
TestIntCodes = _oracle_test("int")
TestNumberCodes = _oracle_test("number")
TestStringCodes = _oracle_test("string")


def test_each_column_type_through_the_file_store(tmp_path: Path) -> None:
    for kind, many in MANY.items():
        store = FileStore(tmp_path / kind)
        codes, values = _Codes(), [many(i) for i in range(5000)]
        codes.encode(values)
        codes = store.cycle(codes)
        assert codes._levels, kind
        more = [*values[::7], *(many(i) for i in range(5000, 5100))]
        assert codes.encode(more).tolist() == [*range(0, 5000, 7), *range(5000, 5100)]
        codes = store.cycle(codes)
        assert codes.decode(np.arange(5100, dtype=np.int64)) == [many(i) for i in range(5100)]


SIZE = 100_000
NEW = 10


@pytest.mark.parametrize("kind", ["int64", "string"])
def test_a_save_writes_the_values_coded_since_the_open(tmp_path: Path, kind: str) -> None:
    many = MANY[kind]
    store = FileStore(tmp_path)
    codes = _Codes()
    codes.encode([many(i) for i in range(SIZE)])

    def dump(sink: Any) -> bytes:
        return state_codec.dumps(codes, sink)

    whole, _ = store.save(dump)
    assert whole > 10 * SIZE
    codes = store.open()
    assert not codes._ids  # nothing decoded
    top = SIZE
    for k in (1, NEW):
        codes.encode([many(i) for i in range(top - 5, top + k)])  # 5 old values, k new
        top += k
        written, root = store.save(dump)
        assert written < 2048 and root < 1024, (k, written, root)
        codes = store.open()
    assert store.save(dump)[0] == 0  # nothing new: nothing written
    codes = store.open()
    assert codes.decode(np.array([0, SIZE - 1, SIZE + 1], np.int64)) == [
        many(0), many(SIZE - 1), many(SIZE + 1)]


def test_many_saves_write_each_value_a_few_times() -> None:
    """A level is merged with the values saved after it once they are half as many: a
    save of 10 new values writes O(10 log saves) values amortized, the first level is
    never written again, and there are O(log saves) levels."""
    memory = CollectingSegments()
    codes = _Codes()
    codes.encode([f"s{i}" for i in range(SIZE)])

    def dump(sink: Any) -> bytes:
        return state_codec.dumps(codes, sink)

    root = memory.save(dump)
    whole = memory.written
    saves = 300
    for step in range(saves):
        codes = state_codec.loads(root, memory)
        codes.encode([f"t{step}-{j}" for j in range(NEW)])
        root = memory.save(dump)
    codes = state_codec.loads(root, memory)
    assert len(codes._levels) <= 1 + math.log2(saves) + 1
    assert codes._levels[0].n == SIZE
    # 2.5 MB for the first level; about 1.2 KiB per save of 10 values (30 bytes a value in
    # the two runs, written a few times as levels merge) where the dict was written whole
    assert memory.written - whole < saves * 2048, memory.written - whole
    assert codes.encode([f"t{saves - 1}-{NEW - 1}"]).tolist() == [SIZE + saves * NEW - 1]


def test_small_dictionaries_stay_inline() -> None:
    memory = CollectingSegments()
    codes = _Codes()
    codes.encode(list(range(100)))
    state_codec.dumps(codes, memory)
    assert not memory.segments and not memory.arrays
    codes.encode([True, *range(5000)])  # True == 1: no new value, the dictionary grows
    state_codec.dumps(codes, memory)
    assert memory.arrays
    codes.encode([b"bytes"])  # no column type: inline
    memory = CollectingSegments()
    state_codec.dumps(codes, memory)
    assert not memory.segments and not memory.arrays


TC = (".decl edge(src: {t}, dst: {t})\n"
      "path(x, y) :- edge(x, y).\npath(x, z) :- path(x, y), edge(y, z).\n")


@pytest.mark.parametrize("typ", ["int", "string"])
def test_an_engine_opened_from_segments_agrees_with_one_built_afresh(typ: str) -> None:
    rng = random.Random(7)
    edges_n, nodes = 20_000, 40_000
    name: Callable[[int], Any] = (lambda i: i) if typ == "int" else (lambda i: f"node {i}")
    edges: set[tuple[Any, Any]] = set()
    while len(edges) < edges_n:
        a, b = rng.randrange(nodes), rng.randrange(nodes)
        if a != b:
            edges.add((name(a), name(b)))
    prog = load_program(TC.format(t=typ))
    engine = IncrementalEngine(prog, {"edge": set(edges)})
    memory = CollectingSegments()
    fresh_node = nodes
    for _ in range(4):
        root = memory.save(engine.dumps)
        assert len(root) < 16384, len(root)
        engine = IncrementalEngine.loads(root, memory)
        (stratum,) = [m for _, m in engine.strata if isinstance(m, ColumnarStratum)]
        assert stratum.codes[typ]._levels
        change: dict[tuple[Any, Any], int] = dict.fromkeys(rng.sample(sorted(edges), 5), -1)
        while len(change) < 10:  # edges between old nodes, and to nodes never seen
            a = rng.randrange(nodes)
            b = rng.randrange(nodes) if len(change) % 2 else fresh_node
            fresh_node += 1
            if a != b and (name(a), name(b)) not in edges:
                change[name(a), name(b)] = 1
        engine.apply({"edge": change})
        edges = {e for e in edges if change.get(e) != -1} | {e for e, w in change.items()
                                                           if w > 0}
        built = IncrementalEngine(prog, {"edge": set(edges)})
        assert engine.relation("path") == built.relation("path")
    engine = IncrementalEngine.loads(memory.save(engine.dumps), memory)
    assert engine.relation("path") == built.relation("path")
