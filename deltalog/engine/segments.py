"""Relations kept on disk between runs: sorted runs read a page at a time, with the changes
since they were written kept beside them (a log-structured merge of one level).

A *sorted run* is one immutable segment: the rows of a relation (or of one of its indexes,
columns permuted) in order, cut into pages of ``PAGE_ROWS`` rows, each page one MessagePack
array with a CRC-32, and at the end an index (the number of rows, each page's offset,
first row and checksum) with a checksum of its own. Opening a run reads the index only
(one row per page): O(n / ``PAGE_ROWS``); a page is decoded when a seek lands on it and
kept for the rest of the run.

A ``PagedRows`` is a run plus the changes made since it was written: rows inserted (a
``SortedList``) and rows of the run erased (a set). Saving it writes only the rows this
run changed, as a delta segment the next open replays; when the deltas pass a share of
the run, the merged rows are written as a new run instead (compaction). So a run that
changes k rows of an n-row relation reads O(k) pages and writes O(k) rows, amortized.

A ``PagedDict`` is the same for a dict of rows (support counts, a functional head's rows
by key): a run of (key, value) pairs and the entries set and deleted since, saved as a
delta of the entries changed (a chain past ``COMPACT_CHAIN`` folded into one delta of all
entries changed since the run). A state marks a large dict ``PagedMapping`` to keep it so.

Pure: the bytes come from and go to a ``SegmentSource`` / ``SegmentSink`` that the store
outside the engine hands in (``pipelines/state_store.py`` maps files); nothing here opens
a file. Reading a segment decodes data only (MessagePack with the two seek sentinels as
the only extension), never code.
"""

import heapq
import uuid
import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable, ItemsView, Iterable, Iterator, MutableMapping
from typing import Any, Protocol

import msgpack
import numpy as np
from sortedcontainers import SortedList

from deltalog.engine.sentinels import BOTTOM, TOP
from deltalog.engine.values import Row

PAGE_ROWS = 512
# A relation (or index) smaller than this is kept inline in the state, not as a run.
PAGED_MIN = 4096
# Compaction: a new run when the rows changed since the last one pass this share of it.
COMPACT_SHARE = 0.125
# ... or when this many delta segments are chained behind it.
COMPACT_CHAIN = 32


class CorruptSegment(ValueError):
    """A segment's bytes are not what was written (a checksum or a layout mismatch)."""


class SegmentSource(Protocol):
    """Where an engine being opened reads its segments (read-only buffers)."""

    def read(self, name: str) -> memoryview: ...

    def open_array(self, ref: Any) -> np.ndarray: ...


class SegmentSink(Protocol):
    """Where an engine being saved writes segments; ``write`` returns the new segment's
    name. ``array`` persists an array (only its changed pages when it was opened from a
    segment) and returns a reference ``SegmentSource.open_array`` reads back."""

    def write(self, parts: list[bytes], paged: bool = False) -> str:
        """A new segment of ``parts``; ``paged``: it checks itself a page at a time (a
        store need not check it whole when reading it)."""
        ...

    def keep(self, names: list[str]) -> None:
        """Segments of the opened state that the saved one still uses."""
        ...

    def array(self, arr: np.ndarray) -> Any: ...


# Rows are plain MessagePack: scalars and arrays, and two extensions: the seek sentinels
# (in sensitivity intervals) and ints beyond 64 bits (the language's ints are unbounded).
CONST_EXT = 20
BIGINT_EXT = 25  # (a code the state codec's own extensions do not use)
CONSTS: dict[str, Any] = {"BOTTOM": BOTTOM, "TOP": TOP}
CONST_EXTS = {id(v): msgpack.ExtType(CONST_EXT, k.encode()) for k, v in CONSTS.items()}


def sentinel_default(obj: Any) -> Any:
    """The seek sentinels as their extension; nothing else."""
    ext = CONST_EXTS.get(id(obj))
    if ext is None:
        raise TypeError(f"a {type(obj).__name__} is not plain")
    return ext


def plain_default(obj: Any) -> Any:
    """The ``default`` of a page of rows: the seek sentinels, and ints MessagePack cannot
    hold (its ints end at 64 bits), as their two's-complement bytes; nothing else."""
    ext = CONST_EXTS.get(id(obj))
    if ext is not None:
        return ext
    if type(obj) is int:
        return msgpack.ExtType(BIGINT_EXT, obj.to_bytes(obj.bit_length() // 8 + 1, "big",
                                                         signed=True))
    raise TypeError(f"a {type(obj).__name__} in a row of the state")


def _plain_ext(code: int, data: bytes) -> Any:
    if code == BIGINT_EXT:
        return int.from_bytes(data, "big", signed=True)
    if code != CONST_EXT:
        raise CorruptSegment(f"extension {code} in a page of rows")
    return CONSTS[data.decode()]


def pack_rows(rows: Any) -> bytes:
    return msgpack.packb(rows, default=plain_default, use_bin_type=True)


def unpack_rows(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(data, use_list=False, raw=False, ext_hook=_plain_ext,
                           strict_map_key=False)


def write_run(sink: SegmentSink, rows: Iterable[Row]) -> str:
    """``rows`` (sorted, distinct) as one sorted-run segment; returns its name."""
    parts: list[bytes] = []
    offsets: list[int] = []
    firsts: list[Row] = []
    crcs: list[int] = []
    pos = 0
    n = 0
    page: list[Row] = []

    def flush() -> None:
        nonlocal pos
        blob = pack_rows(page)
        offsets.append(pos)
        firsts.append(page[0])
        crcs.append(zlib.crc32(blob))
        parts.append(blob)
        pos += len(blob)
        page.clear()

    for row in rows:
        page.append(row)
        n += 1
        if len(page) == PAGE_ROWS:
            flush()
    if page:
        flush()
    offsets.append(pos)
    index = pack_rows([n, PAGE_ROWS, offsets, firsts, crcs])
    parts.append(index)
    parts.append(pos.to_bytes(8, "big") + len(index).to_bytes(8, "big")
                 + zlib.crc32(index).to_bytes(4, "big"))
    return sink.write(parts, paged=True)


class SortedRun:
    """A sorted-run segment, read a page at a time. ``pages_read`` counts the pages
    decoded (a work counter: a small change reads few)."""

    __slots__ = ("_crcs", "_firsts", "_offsets", "_pages", "_size", "buf", "n", "pages_read")

    def __init__(self, buf: memoryview):
        if len(buf) < 20:
            raise CorruptSegment("a sorted run shorter than its trailer")
        at = int.from_bytes(buf[-20:-12], "big")
        size = int.from_bytes(buf[-12:-4], "big")
        if at + size + 20 != len(buf):
            raise CorruptSegment("a sorted run whose trailer does not match its length")
        if zlib.crc32(buf[at : at + size]) != int.from_bytes(buf[-4:], "big"):
            raise CorruptSegment("a sorted run whose index fails its checksum")
        n, page_rows, offsets, firsts, crcs = unpack_rows(buf[at : at + size])
        if len(offsets) != len(firsts) + 1 or len(crcs) != len(firsts) or offsets[-1] != at:
            raise CorruptSegment("a sorted run whose index does not match its pages")
        self.buf = buf
        self.n: int = n
        self._size = page_rows
        self._offsets: tuple[int, ...] = offsets
        self._firsts: tuple[Row, ...] = firsts
        self._crcs: tuple[int, ...] = crcs
        self._pages: dict[int, tuple[Row, ...]] = {}
        self.pages_read = 0

    def page(self, i: int) -> tuple[Row, ...]:
        got = self._pages.get(i)
        if got is None:
            data = self.buf[self._offsets[i] : self._offsets[i + 1]]
            if zlib.crc32(data) != self._crcs[i]:
                raise CorruptSegment(f"page {i} of a sorted run fails its checksum")
            got = self._pages[i] = unpack_rows(data)
            self.pages_read += 1
        return got

    def ceil(self, key: tuple[Any, ...]) -> Row | None:
        firsts = self._firsts
        i = bisect_right(firsts, key) - 1
        if i < 0:
            return firsts[0] if firsts else None
        page = self.page(i)
        j = bisect_left(page, key)
        if j < len(page):
            return page[j]
        return firsts[i + 1] if i + 1 < len(firsts) else None

    def __contains__(self, row: object) -> bool:
        got = self.ceil(row)  # type: ignore[arg-type]
        return got is not None and got == row

    def __iter__(self) -> Iterator[Row]:
        for i in range(len(self._firsts)):
            yield from self.page(i)

    def __len__(self) -> int:
        return self.n


class Paged:
    """A mark on a large sorted container (a set or ``SortedList`` of rows, or a
    ``PagedRows``) in a state being saved: written as a sorted run when the state goes to
    a segment store (read back as ``PagedRows``), as itself otherwise."""

    __slots__ = ("ordered", "rows")

    def __init__(self, rows: Any, ordered: Callable[[], list[Any]] | None = None):
        """``ordered``: the rows in order made another way than sorting them (the same
        rows: their number is checked)."""
        self.rows = rows
        self.ordered = ordered

    def persist(self, sink: SegmentSink) -> list[Any]:
        rows = self.rows
        if type(rows) is PagedRows:
            return rows.persist(sink)
        if self.ordered is not None:
            listed = self.ordered()
            if len(listed) == len(rows):
                return PagedRows.write(sink, listed)
        return PagedRows.write(sink, rows if isinstance(rows, SortedList) else sorted(rows))


class PagedRows:
    """A sorted set of rows: a ``SortedRun`` on disk and the changes since, in memory.

    Answers what the engine asks of a relation's rows and indexes: ``ceil``, membership,
    size, iteration in order, ``add``/``remove``/``discard``/``update``/
    ``difference_update``. ``rank`` and ``select`` (complement iteration) read a sorted
    copy made once (``materialized``, a work counter)."""

    __slots__ = ("_chain", "_era", "_ins", "_log", "_run", "_run_name", "_sorted",
                 "materialized")

    def __init__(self, run: SortedRun | None, run_name: str | None, chain: list[str],
                 changes: Iterable[tuple[Row, int]] = ()):
        self._run = run
        self._run_name = run_name
        self._chain = chain
        self._ins = SortedList()
        self._era: set[Row] = set()
        self._log: dict[Row, int] = {}
        self._sorted: SortedList | None = None
        self.materialized = 0
        for row, w in changes:
            if w > 0:
                self._insert(row)
            else:
                self._erase(row)

    # -- reading ------------------------------------------------------------------------
    def ceil(self, key: tuple[Any, ...]) -> Row | None:
        run = self._run
        got = run.ceil(key) if run is not None else None
        era = self._era
        if era:
            while got is not None and got in era:
                got = run.ceil((*got, BOTTOM))  # type: ignore[union-attr]
        ins = self._ins
        if ins:
            k = ins.bisect_left(key)
            if k < len(ins):
                other = ins[k]
                if got is None or other < got:
                    return other  # type: ignore[no-any-return]
        return got

    def __contains__(self, row: object) -> bool:
        if row in self._era:
            return False
        if self._run is not None and row in self._run:
            return True
        return row in self._ins

    def __len__(self) -> int:
        return (self._run.n if self._run is not None else 0) - len(self._era) + len(self._ins)

    def __iter__(self) -> Iterator[Row]:
        run = self._run
        era = self._era
        base: Iterable[Row] = ()
        if run is not None:
            base = (r for r in run if r not in era) if era else run
        return heapq.merge(base, self._ins) if self._ins else iter(base)

    @property
    def pages_read(self) -> int:
        return self._run.pages_read if self._run is not None else 0

    # -- rank and select, for complement iteration ----------------------------------------
    def _copy(self) -> SortedList:
        if self._sorted is None:
            self._sorted = SortedList(self)
            self.materialized += 1
        return self._sorted

    def bisect_left(self, key: Any) -> int:
        return self._copy().bisect_left(key)  # type: ignore[no-any-return]

    def bisect_right(self, key: Any) -> int:
        return self._copy().bisect_right(key)  # type: ignore[no-any-return]

    def __getitem__(self, i: int) -> Row:
        return self._copy()[i]  # type: ignore[no-any-return]

    # -- changes ------------------------------------------------------------------------
    def _insert(self, row: Row) -> None:
        if row in self._era:
            self._era.discard(row)
        else:
            self._ins.add(row)

    def _erase(self, row: Row) -> None:
        if row in self._ins:
            self._ins.remove(row)
        else:
            self._era.add(row)

    def add(self, row: Row) -> None:
        if row in self:
            return
        self._insert(row)
        self._note(row, 1)

    def remove(self, row: Row) -> None:
        if row not in self:
            raise KeyError(row)
        self._erase(row)
        self._note(row, -1)

    def discard(self, row: Row) -> None:
        if row in self:
            self._erase(row)
            self._note(row, -1)

    def update(self, rows: Iterable[Row]) -> None:
        for row in rows:
            self.add(row)

    def difference_update(self, rows: Iterable[Row]) -> None:
        for row in rows:
            self.discard(row)

    def _note(self, row: Row, w: int) -> None:
        self._sorted = None
        got = self._log.get(row, 0) + w
        if got:
            self._log[row] = got
        else:
            del self._log[row]

    # -- persistence --------------------------------------------------------------------
    def persist(self, sink: SegmentSink) -> list[Any]:
        """Save: ``[run, chain]`` naming the segments to open it from. Writes the rows
        changed since it was opened as one delta segment (when the chain is full, one
        delta of every row changed since the run: O(overlay), under a share of the run),
        or, past ``COMPACT_SHARE`` of the run changed, all rows as a new run."""
        overlay = len(self._ins) + len(self._era)
        base = self._run.n if self._run is not None else 0
        if self._run is None or overlay > max(PAGED_MIN, COMPACT_SHARE * base):
            return [write_run(sink, iter(self)), []]
        if not self._log:
            sink.keep([self._run_name, *self._chain])  # type: ignore[list-item]
            return [self._run_name, list(self._chain)]
        if len(self._chain) >= COMPACT_CHAIN:  # the chain as one delta: every change since
            sink.keep([self._run_name])  # type: ignore[list-item]
            changes = [(r, 1) for r in self._ins] + [(r, -1) for r in sorted(self._era)]
            return [self._run_name, [sink.write([pack_rows(changes)])]]
        sink.keep([self._run_name, *self._chain])  # type: ignore[list-item]
        return [self._run_name, [*self._chain, sink.write([pack_rows(list(self._log.items()))])]]

    @classmethod
    def open(cls, source: SegmentSource, ref: Any) -> "PagedRows":
        run_name, chain = ref
        run = SortedRun(source.read(run_name))
        changes: list[tuple[Row, int]] = []
        for name in chain:
            changes.extend(unpack_rows(source.read(name)))
        return cls(run, run_name, list(chain), changes)

    @classmethod
    def write(cls, sink: SegmentSink, rows: Iterable[Row]) -> list[Any]:
        """A reference for ``rows`` (sorted, distinct), written as a new run."""
        return [write_run(sink, rows), []]


_MISSING = object()


class PagedDict(MutableMapping[Any, Any]):
    """A dict of rows (keys) to plain values (ints, rows): a ``SortedRun`` of (key, value)
    pairs in key order on disk, and the entries set and deleted since, in memory.

    A key is looked up with ``ceil((key,))``: ``(key,)`` sorts before every ``(key,
    value)`` and after every pair of a smaller key. The size is kept, not counted; opening
    reads the run's index and the delta chain, no page. Iteration (keys, ``items``) is in
    key order."""

    __slots__ = ("_chain", "_del", "_log", "_n", "_run", "_run_name", "_set")

    def __init__(self, run: SortedRun, run_name: str, chain: list[str], n: int,
                 changes: Iterable[tuple[Any, ...]] = ()):
        self._run = run
        self._run_name = run_name
        self._chain = chain
        self._n = n
        self._set: dict[Any, Any] = {}  # key -> value, for keys set since the run
        self._del: set[Any] = set()  # keys deleted since the run (not all in it)
        self._log: dict[Any, tuple[Any, ...]] = {}  # key -> (value,) or () since the open
        for key, *entry in changes:
            self._change(key, tuple(entry))

    # -- reading ------------------------------------------------------------------------
    def _find(self, key: Any) -> Any:
        """The value of ``key``, or ``_MISSING``."""
        got = self._set.get(key, _MISSING)
        if got is not _MISSING or key in self._del:
            return got
        row = self._run.ceil((key,))
        return row[1] if row is not None and row[0] == key else _MISSING

    def __getitem__(self, key: Any) -> Any:
        got = self._find(key)
        if got is _MISSING:
            raise KeyError(key)
        return got

    def get(self, key: Any, default: Any = None) -> Any:
        got = self._find(key)
        return default if got is _MISSING else got

    def __contains__(self, key: object) -> bool:
        return self._find(key) is not _MISSING

    def __len__(self) -> int:
        return self._n

    def _rows(self) -> Iterator[tuple[Any, Any]]:
        """The (key, value) pairs in key order."""
        changed, gone = self._set, self._del
        base = (r for r in self._run if r[0] not in changed and r[0] not in gone)
        return heapq.merge(base, sorted(changed.items()))

    def __iter__(self) -> Iterator[Any]:
        return (key for key, _ in self._rows())

    def items(self) -> "_PagedItems":
        return _PagedItems(self)

    @property
    def pages_read(self) -> int:
        return self._run.pages_read

    # -- changes ------------------------------------------------------------------------
    def _change(self, key: Any, entry: tuple[Any, ...]) -> None:
        """Set (``entry`` is ``(value,)``) or delete (``()``) ``key`` over the run."""
        if entry:
            self._set[key] = entry[0]
            self._del.discard(key)
        else:
            self._set.pop(key, None)
            self._del.add(key)

    def _put(self, key: Any, entry: tuple[Any, ...]) -> None:
        self._change(key, entry)
        self._log[key] = entry

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._find(key) is _MISSING:
            self._n += 1
        self._put(key, (value,))

    def setdefault(self, key: Any, default: Any = None) -> Any:
        got = self._find(key)
        if got is not _MISSING:
            return got
        self._n += 1
        self._put(key, (default,))
        return default

    def __delitem__(self, key: Any) -> None:
        if self._find(key) is _MISSING:
            raise KeyError(key)
        self._n -= 1
        self._put(key, ())

    # -- persistence --------------------------------------------------------------------
    def persist(self, sink: SegmentSink) -> list[Any]:
        """Save: ``[run, chain, size]``. Writes the entries changed since the open as one
        delta segment; with ``COMPACT_CHAIN`` deltas behind the run, all entries changed
        since the run as the one delta instead; past a share of the run, a new run."""
        name, chain = self._run_name, self._chain
        if len(self._set) + len(self._del) > max(PAGED_MIN, COMPACT_SHARE * self._run.n):
            return self.write(sink, self._rows(), self._n)
        if not self._log:
            sink.keep([name, *chain])
            return [name, list(chain), self._n]
        if len(chain) >= COMPACT_CHAIN:
            blob = pack_rows([*self._set.items(), *((key,) for key in self._del)])
            sink.keep([name])
            return [name, [sink.write([blob])], self._n]
        blob = pack_rows([(key, *entry) for key, entry in self._log.items()])
        sink.keep([name, *chain])
        return [name, [*chain, sink.write([blob])], self._n]

    @classmethod
    def open(cls, source: SegmentSource, ref: Any) -> "PagedDict":
        run_name, chain, n = ref
        changes: list[tuple[Any, ...]] = []
        for name in chain:
            changes.extend(unpack_rows(source.read(name)))
        return cls(SortedRun(source.read(run_name)), run_name, list(chain), n, changes)

    @classmethod
    def write(cls, sink: SegmentSink, items: Iterable[tuple[Any, Any]], n: int) -> list[Any]:
        """A reference for the ``n`` ``items`` ((key, value) pairs in key order, distinct
        keys), written as a new run."""
        return [write_run(sink, items), [], n]


class _PagedItems(ItemsView[Any, Any]):
    """``PagedDict.items()``: iterated from the run and the changes (one pass), not a
    lookup per key."""

    __slots__ = ()
    _mapping: PagedDict

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return self._mapping._rows()


class PagedMapping:
    """A mark on a large dict of rows (or a ``PagedDict``) in a state being saved
    (``__persist__``): written as a ``PagedDict`` when the state goes to a segment store
    and read back as one; otherwise (no store, or a key or value not plain, an int past
    64 bits) saved as a dict and read back as this mark around the dict (``unwrap``)."""

    __slots__ = ("mapping",)

    def __init__(self, mapping: MutableMapping[Any, Any]):
        self.mapping = mapping

    @staticmethod
    def unwrap(value: Any) -> Any:
        """A value of a state read back: the dict or ``PagedDict`` a mark held, or the
        value itself when it is no mark."""
        return value.mapping if type(value) is PagedMapping else value

    def __getstate__(self) -> dict[Any, Any]:
        mapping = self.mapping
        return mapping if type(mapping) is dict else dict(mapping.items())

    def __setstate__(self, state: dict[Any, Any]) -> None:
        self.mapping = state

    def __persist__(self, sink: SegmentSink) -> list[Any] | None:
        mapping = self.mapping
        try:
            if type(mapping) is PagedDict:
                return mapping.persist(sink)
            return PagedDict.write(sink, sorted(mapping.items()), len(mapping))
        except (OverflowError, TypeError, ValueError):  # not plain: saved inline
            return None

    @classmethod
    def __restore__(cls, source: SegmentSource, ref: Any) -> PagedDict:
        return PagedDict.open(source, ref)



def save_dead(sink: SegmentSink, chain: tuple[str, ...], dead: set[int],
              killed: set[int]) -> list[str]:
    """The chain of delta segments listing the dead positions of a part kept in segments
    (``dead``: dead when it was opened from ``chain``; ``killed``: since): unchanged when
    nothing died, one more delta of the new positions, or past ``COMPACT_CHAIN`` deltas
    one delta of every position dead."""
    if not killed:
        sink.keep(list(chain))
        return list(chain)
    if len(chain) >= COMPACT_CHAIN:
        return [sink.write([pack_rows(sorted(dead | killed))])]
    sink.keep(list(chain))
    return [*chain, sink.write([pack_rows(sorted(killed))])]


def read_dead(source: SegmentSource, chain: Iterable[str], n: int, what: str) -> set[int]:
    """The positions a chain written by ``save_dead`` lists, each checked to be one of the
    ``n`` and listed once."""
    dead: set[int] = set()
    for delta in chain:
        for pos in unpack_rows(source.read(delta)):
            if type(pos) is not int or not 0 <= pos < n or pos in dead:
                raise CorruptSegment(f"{what} delta {delta} names position {pos!r}")
            dead.add(pos)
    return dead


class MemorySegments:
    """A segment store in memory (a ``SegmentSink`` and ``SegmentSource`` at once): for
    tests, and for copies of an engine that never reach a disk. Arrays are copied."""

    def __init__(self) -> None:
        self.segments: dict[str, bytes] = {}
        self.arrays: list[np.ndarray] = []
        self.kept: set[str] = set()
        self.count = 0
        self.prefix = f"m{uuid.uuid4().hex[:8]}-"  # no two stores share a name

    def write(self, parts: list[bytes], paged: bool = False) -> str:
        name = f"{self.prefix}{self.count}"  # never reused, even when segments are dropped
        self.count += 1
        self.segments[name] = b"".join(parts)
        return name

    def keep(self, names: list[str]) -> None:
        for name in names:
            if name not in self.segments:
                raise KeyError(name)
            self.kept.add(name)

    def array(self, arr: np.ndarray) -> Any:
        self.arrays.append(np.array(arr, copy=True))
        return len(self.arrays) - 1

    def read(self, name: str) -> memoryview:
        return memoryview(self.segments[name])

    def open_array(self, ref: Any) -> np.ndarray:
        return np.array(self.arrays[ref], copy=True)
