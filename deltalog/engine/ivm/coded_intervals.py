"""The static part of a sensitivity index on arrays: the intervals the compiled join
records (``deltalog.engine.columnar.kernels.lftj``) at a rule's first evaluation, kept as
integer codes, stabbed and killed by compiled loops.

An interval of index (atom, depth) is a row: its context (the codes of the rule's
variables bound before its level: the payload, of which the bucket, the atom's earlier
columns, is a choice of columns), its ends ``lo`` and ``hi`` (``BOT``/``TOP`` for
−inf/+inf). A negation's probe (index ("neg", relation, column order, depth)) is the
same with lo = hi, a payload split as the tuple join gives it, and constants of the
negated atom in its bucket. A part holds intervals of one layout (``Layout``: context
types, the ends' type, the bucket's columns); negations probed alike share an index,
and their probes may come in several (``interval_index.IntervalIndex.others``).

Rows are sorted by (bucket, lo). A stab for point x in a bucket finds the bucket's rows
by binary search, then the rows with lo ≤ x before the first with lo > x,
and among them those with hi ≥ x through a max-of-``hi`` tree over blocks of ``BLOCK``
rows: O(log n + (m + 1) · ``BLOCK``) for m found. The arrays do not change once built: a
killed interval's position joins a set the stab's answer is filtered by (the tree still
counts it: a bound, never a wrong answer), so a save writes the positions killed, not
the pages they lie on.

Codes are those of ``deltalog.engine.columnar.encoding``: ints themselves, floats by
their ordered bits, strings by rank in this part's own sorted dictionary (it never
changes: the part only loses intervals). A value to stab that the dictionary lacks sorts
between two ranks: it is asked as "lo ≤ rank below, hi ≥ rank above", which is exactly
"lo ≤ x ≤ hi" for ends that are ranks.

Saved, the arrays are array segments of the store (``SegmentSink.array``), kept as they
are from save to save; the killed positions are a chain of small deltas, and past
``COMPACT_SHARE`` of the part dead a save writes the live intervals as a new part
(``deltalog.engine.segments.save_dead``, as the tuple static part does).
"""

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from deltalog.engine.columnar.encoding import Codes, NotColumnar, float_codes, float_values
from deltalog.engine.columnar.kernels import BOT, TOP, first_rows
from deltalog.engine.columnar.rows import sort_order
from deltalog.engine.columnar.strings import StringCodes
from deltalog.engine.segments import (
    COMPACT_SHARE,
    CorruptSegment,
    SegmentSink,
    SegmentSource,
    pack_rows,
    read_dead,
    save_dead,
    unpack_rows,
)
from deltalog.engine.sentinels import BOTTOM
from deltalog.engine.sentinels import TOP as TOP_VALUE

I64 = NDArray[np.int64]
Record = tuple[tuple[Any, ...], Any, Any, Any]  # (bucket, lo, hi, payload)

BLOCK = 64
_MIN, _MAX = int(BOT), int(TOP)
# A part whose codes all lie strictly inside these keeps its arrays as int32, its ends'
# sentinels the int32 extremes (half the bytes: a graph's ids, a dictionary's ranks).
_N_MIN, _N_MAX = -(2**31), 2**31 - 1


def _narrowed(ctx: I64, lo: I64, hi: I64) -> tuple[Any, Any, Any]:
    """(ctx, lo, hi) as int32 when every code fits with room for the sentinels (BOT and
    TOP becoming the int32 extremes), else as they are."""
    if not len(lo):
        return ctx, lo, hi
    ends = np.concatenate([lo[lo != BOT], hi[hi != TOP]])
    values = [ctx.reshape(-1), ends] if ctx.size else [ends]
    for v in values:
        if len(v) and (int(v.min()) <= _N_MIN + 1 or int(v.max()) >= _N_MAX - 1):
            return ctx, lo, hi
    lo32 = np.where(lo == BOT, _N_MIN, lo).astype(np.int32)
    hi32 = np.where(hi == TOP, _N_MAX, hi).astype(np.int32)
    return ctx.astype(np.int32), lo32, hi32


def _widened(values: Any, ends: bool) -> I64:
    """int64 codes of an int32 array (ends: its sentinels back to BOT and TOP)."""
    if values.dtype == np.int64:
        return values  # type: ignore[no-any-return]
    wide = values.astype(np.int64)
    if ends:
        wide[values == _N_MIN] = _MIN
        wide[values == _N_MAX] = _MAX
    return wide  # type: ignore[no-any-return]


@njit(cache=True, nogil=True)
def _before(ctx, bcols, lo, i, bvals, x):
    """Whether row i's (bucket, lo) sorts before (bvals, x)."""
    for j in range(bcols.shape[0]):
        a = ctx[i, bcols[j]]
        b = bvals[j]
        if a != b:
            return a < b
    return lo[i] < x


@njit(cache=True, nogil=True)
def _first_not_before(ctx, bcols, lo, bvals, x):
    a = 0
    b = lo.shape[0]
    while a < b:
        m = (a + b) >> 1
        if _before(ctx, bcols, lo, m, bvals, x):
            a = m + 1
        else:
            b = m
    return a


@njit(cache=True, nogil=True)
def _stab(ctx, bcols, lo, hi, tree, bvals, qlo, qhi):
    """Positions of the live rows of bucket ``bvals`` with lo ≤ qlo and hi ≥ qhi."""
    first = _first_not_before(ctx, bcols, lo, bvals, BOT)
    stop = _first_not_before(ctx, bcols, lo, bvals, qlo + 1)  # qlo < TOP (``query``)
    out = np.empty(16, np.int64)
    n = 0
    if first >= stop:
        return out[:0]
    width = tree.shape[0] // 2
    b0 = first // BLOCK
    b1 = (stop - 1) // BLOCK
    stack = np.empty(128, np.int64)
    sa = np.empty(128, np.int64)
    sb = np.empty(128, np.int64)
    top = 0
    stack[0] = 1
    sa[0] = 0
    sb[0] = width
    top = 1
    while top > 0:
        top -= 1
        node = stack[top]
        a = sa[top]
        b = sb[top]
        if b <= b0 or a > b1 or tree[node] < qhi:
            continue
        if node >= width:
            blk = node - width
            start = max(blk * BLOCK, first)
            end = min(blk * BLOCK + BLOCK, stop)
            for p in range(start, end):
                if hi[p] >= qhi:
                    if n == out.shape[0]:
                        grown = np.empty(2 * n, np.int64)
                        grown[:n] = out
                        out = grown
                    out[n] = p
                    n += 1
            continue
        mid = (a + b) >> 1
        # right first, so the left child is popped first: positions come out in order
        stack[top] = 2 * node + 1
        sa[top] = mid
        sb[top] = b
        top += 1
        stack[top] = 2 * node
        sa[top] = a
        sb[top] = mid
        top += 1
    return out[:n]


@njit(cache=True, nogil=True)
def _stab_many(ctx, bcols, lo, hi, tree, bvals, qlo, qhi, ok, alive):
    """``_stab`` for every query q with ``ok[q]``: the positions ``alive`` found, each
    once (it is marked dead as it is found), in the order found."""
    out = np.empty(16, np.int64)
    n = 0
    for q in range(qlo.shape[0]):
        if not ok[q]:
            continue
        got = _stab(ctx, bcols, lo, hi, tree, bvals[q], qlo[q], qhi[q])
        if n + got.shape[0] > out.shape[0]:
            grown = np.empty(2 * (n + got.shape[0]), np.int64)
            grown[:n] = out[:n]
            out = grown
        for p in got:
            if alive[p]:
                alive[p] = False
                out[n] = p
                n += 1
    return out[:n]


@njit(cache=True, nogil=True)
def _max_tree(hi):
    blocks = max((hi.shape[0] + BLOCK - 1) // BLOCK, 1)
    width = 1
    while width < blocks:
        width *= 2
    tree = np.full(2 * width, BOT, np.int64)
    for p in range(hi.shape[0]):
        node = width + p // BLOCK
        if hi[p] > tree[node]:
            tree[node] = hi[p]
    for node in range(width - 1, 0, -1):
        a = tree[2 * node]
        b = tree[2 * node + 1]
        tree[node] = a if a > b else b
    return tree


@njit(cache=True, nogil=True)
def _stab_young(ctx, lo, hi, alive, n, bcols, bvals, qlo, qhi):
    """The live rows of the first ``n`` (unsorted) whose bucket columns equal ``bvals[q]``
    with lo ≤ ``qlo[q]`` and hi ≥ ``qhi[q]``, for every query q: each once (marked dead as
    it is found), in the order found. A scan: for a few thousand rows at most."""
    out = np.empty(16, np.int64)
    m = 0
    nb = bcols.shape[0]
    for q in range(qlo.shape[0]):
        x = qlo[q]
        y = qhi[q]
        for p in range(n):
            if not alive[p] or lo[p] > x or hi[p] < y:
                continue
            same = True
            for j in range(nb):
                if ctx[p, bcols[j]] != bvals[q, j]:
                    same = False
                    break
            if not same:
                continue
            alive[p] = False
            if m == out.shape[0]:
                grown = np.empty(2 * m, np.int64)
                grown[:m] = out
                out = grown
            out[m] = p
            m += 1
    return out[:m]


@dataclass
class Batch:
    """Intervals of one index a commit's compiled join recorded, as int64 codes (ends
    ``BOT``/``TOP``), in any order: the layout of a ``CodedIntervals`` (context types,
    the ends' type, the bucket's columns) without its sorting and tree."""

    types: tuple[str, ...]
    xtype: str
    bspec: tuple[tuple[int, Any, str], ...]
    ctx: I64
    lo: I64
    hi: I64
    split: bool = False  # a negation's probes (see ``CodedIntervals``)

    def layout(self) -> "Layout":
        return (tuple(self.types), self.xtype, tuple(self.bspec), self.split)

    def has_strings(self) -> bool:
        return _has_strings(self.types, self.xtype, self.bspec)

    def part(self, strings: StringCodes) -> "CodedIntervals":
        """These intervals as a part with a dictionary of its own strings (their codes
        ``strings``', the store's; a bucket's string constants given as values)."""
        found: set[str] = {v for kind, v, t in self.bspec if kind and t == "string"}
        ctx = self.ctx
        lo, hi = self.lo, self.hi
        columns = [strings.decode(ctx[:, j]) if t == "string" else None
                   for j, t in enumerate(self.types)]
        for col in columns:
            if col is not None:
                found.update(col.tolist())
        inner = [(lo != BOT), (hi != TOP)] if self.xtype == "string" else []
        ends = [strings.decode(lo[inner[0]]), strings.decode(hi[inner[1]])] if inner else []
        for col in ends:
            found.update(col.tolist())
        codes = Codes([found])
        if columns and any(c is not None for c in columns):
            ctx = ctx.copy()
            for j, col in enumerate(columns):
                if col is not None:
                    ctx[:, j] = codes.encode(col, "string")
        if inner:
            lo, hi = lo.copy(), hi.copy()
            lo[inner[0]] = codes.encode(ends[0], "string")
            hi[inner[1]] = codes.encode(ends[1], "string")
        bspec = [(kind, codes.code(v, t) if kind and t == "string" else v, t)
                 for kind, v, t in self.bspec]
        return CodedIntervals(CodeBook(codes.strings.tolist()), self.types, self.xtype,
                              bspec, ctx, lo, hi, split=self.split, distinct=True)


# How a part codes its intervals: (context types, the ends' type, the bucket's columns,
# split). Two negations of one relation probed alike share an index; their probes are
# coded alike when they are probed in the same context with the same bucket columns. A
# bucket's string constant is given as its value (each part codes it by its own
# dictionary), a number as its code.
Layout = tuple[tuple[str, ...], str, tuple[tuple[int, Any, str], ...], bool]


def _has_strings(types: Sequence[str], xtype: str,
                 bspec: Sequence[tuple[int, Any, str]]) -> bool:
    return "string" in types or xtype == "string" or any(t == "string" for _, _, t in bspec)


def canonical_bspec(bspec: Sequence[tuple[int, Any, str]], value: Any
                    ) -> tuple[tuple[int, Any, str], ...]:
    """A bucket's columns as a ``Layout`` gives them: a string constant's code (as
    ``value(code, "string")`` decodes it) replaced by the string."""
    return tuple((kind, value(ref, typ) if kind and typ == "string" else ref, typ)
                 for kind, ref, typ in bspec)


def fits(layout: Layout, book: "CodeBook", record: Record) -> bool:
    """Whether ``record`` (bucket, lo, hi, payload, as values) is an interval coded as
    ``layout`` (constants by ``book``): its payload the shape of the context, its bucket
    the context's columns and the constants the layout names."""
    types, _, bspec, split = layout
    bucket, _, _, payload = record
    if type(payload) is not tuple:
        return False
    if split:
        if len(payload) != 2 or type(payload[0]) is not tuple:
            return False
        values = (*payload[0], payload[1])
    else:
        values = payload
    if len(values) != len(types) or len(bucket) != len(bspec):
        return False
    for v, (kind, ref, typ) in zip(bucket, bspec, strict=True):
        if kind:
            if (typ == "string") != (type(v) is str) or (
                    v != ref if typ == "string" else book.code(v, typ) != ref):
                return False
        elif v != values[ref]:
            return False
    return True


class Young:
    """The intervals recent commits' compiled joins recorded into one index, kept as they
    came (arrays grown by doubling) until ``YOUNG_MAX`` of them: a stab scans them. Past
    that they become a sorted part (``CodedIntervals``, of int and float codes: no
    dictionary); so a commit adds its intervals in O(their number) instead of sorting a
    part and merging parts each time."""

    __slots__ = ("alive", "bcols", "bspec", "ctx", "hi", "live", "lo", "n", "split", "types",
                 "xtype")

    def __init__(self, batch: Batch):
        if any(t not in ("int", "float") for t in (*batch.types, batch.xtype)):
            raise ValueError("young intervals of int and float columns only")
        self.types, self.xtype, self.bspec = batch.types, batch.xtype, batch.bspec
        self.split = batch.split
        # (a bucket's constants are not kept per row: a stab asks for them)
        self.bcols = np.array([ref for kind, ref, _ in batch.bspec if kind == 0], np.int64)
        self.ctx = np.empty((64, len(batch.types)), np.int64)
        self.lo = np.empty(64, np.int64)
        self.hi = np.empty(64, np.int64)
        self.alive = np.zeros(64, np.bool_)
        self.n = 0
        self.live = 0

    def fits(self, batch: Batch) -> bool:
        return batch.layout() == self.layout()

    def has_strings(self) -> bool:
        return False  # (``__init__``)

    def layout(self) -> Layout:
        return (tuple(self.types), self.xtype, tuple(self.bspec), self.split)

    def add(self, batch: Batch) -> None:
        m = len(batch.lo)
        need = self.n + m
        if need > len(self.lo):
            cap = max(need, 2 * len(self.lo))
            for name in ("ctx", "lo", "hi", "alive"):
                old = getattr(self, name)
                grown = np.zeros((cap, *old.shape[1:]), old.dtype)
                grown[: self.n] = old[: self.n]
                setattr(self, name, grown)
        self.ctx[self.n : need] = batch.ctx
        self.lo[self.n : need] = batch.lo
        self.hi[self.n : need] = batch.hi
        self.alive[self.n : need] = True
        self.n = need
        self.live += m

    def stab_codes(self, bvals: I64, xs: I64, qhi: I64 | None = None
                   ) -> tuple[I64, I64, I64]:
        """As ``CodedIntervals.stab_codes`` (``qhi``: see ``CodeBook.query``)."""
        found = _stab_young(self.ctx, self.lo, self.hi, self.alive, self.n, self.bcols,
                            np.ascontiguousarray(bvals, np.int64).reshape(len(xs), -1), xs,
                            xs if qhi is None else qhi)
        self.live -= len(found)
        return self.ctx[found], self.lo[found], self.hi[found]

    def stab(self, bucket: tuple[Any, ...], x: Any) -> list[tuple[Any, Any, Any]]:
        """Every live interval of ``bucket`` containing ``x`` as (lo, hi, payload), in
        values, removed (the tuple join's stab)."""
        book = CodeBook([])
        codes = []
        for v, (kind, ref, t) in zip(bucket, self.bspec, strict=True):
            c = book.code(v, t)
            if c is None or (kind == 1 and c != ref):
                return []
            if kind == 0:
                codes.append(c)
        qlo, qhi = book.query(x, self.xtype)
        ctx, lo, hi = self.stab_codes(np.array([codes], np.int64).reshape(1, len(codes)),
                                      np.array([qlo], np.int64), np.array([qhi], np.int64))
        return [(b, c, p) for _, b, c, p in self._records(ctx, lo, hi)]

    def _records(self, ctx: I64, lo: I64, hi: I64) -> list[Record]:
        book = CodeBook([])
        cols = [book.values(ctx[:, j], t) for j, t in enumerate(self.types)]
        out: list[Record] = []
        for k, values in enumerate(zip(*cols, strict=True) if cols else [()] * len(lo)):
            bucket = tuple(values[ref] if kind == 0 else book.value(ref, t)
                           for kind, ref, t in self.bspec)
            ends = [BOTTOM if c == _MIN else TOP_VALUE if c == _MAX else
                    book.value(c, self.xtype) for c in (int(lo[k]), int(hi[k]))]
            payload = (tuple(values[:-1]), values[-1]) if self.split else tuple(values)
            out.append((bucket, ends[0], ends[1], payload))
        return out

    def records(self) -> list[Record]:
        """The live intervals, as values."""
        keep = np.flatnonzero(self.alive[: self.n])
        return self._records(self.ctx[keep], self.lo[keep], self.hi[keep])

    def part(self) -> "CodedIntervals | None":
        """The live intervals as a sorted part (None: none live)."""
        keep = np.flatnonzero(self.alive[: self.n])
        if not len(keep):
            return None
        return CodedIntervals(CodeBook([]), self.types, self.xtype, self.bspec,
                              self.ctx[keep], self.lo[keep], self.hi[keep], split=self.split,
                              distinct=True)


class CodeBook:
    """How the values of one rule's variables are coded: a type per variable, and the
    sorted strings of the rule's first evaluation (shared by its indices' static parts)."""

    def __init__(self, strings: Sequence[str]):
        self.strings: list[str] = list(strings)
        self.opened_from: str | None = None  # its segment, when opened from a store

    def __getstate__(self) -> list[str]:
        return self.strings

    def __setstate__(self, state: list[str]) -> None:
        if any(type(s) is not str for s in state):
            raise CorruptSegment("a code book holds a value that is not a string")
        self.strings = list(state)
        self.opened_from = None

    def code(self, value: Any, typ: str) -> int | None:
        """The exact code of ``value``, or None when no recorded interval can have it
        (a string not in the dictionary, an int beyond 64 bits)."""
        if typ == "string":
            i = bisect_left(self.strings, value)
            return i if i < len(self.strings) and self.strings[i] == value else None
        if typ == "float":
            return int(float_codes(np.array([float(value)], np.float64))[0])
        return value if _MIN < value < _MAX else None  # type: ignore[no-any-return]

    def query(self, value: Any, typ: str) -> tuple[int, int]:
        """(qlo, qhi): an interval with code ends holds ``value`` iff lo ≤ qlo and hi ≥ qhi."""
        if typ == "string":
            i = bisect_left(self.strings, value)
            if i < len(self.strings) and self.strings[i] == value:
                return i, i
            return i - 1, i
        if typ == "float":
            c = int(float_codes(np.array([float(value)], np.float64))[0])
            return c, c
        if value >= _MAX:
            return _MAX - 1, _MAX
        if value <= _MIN:
            return _MIN, _MIN + 1
        return value, value

    def value(self, code: int, typ: str) -> Any:
        if typ == "string":
            return self.strings[code]
        if typ == "float":
            return float(float_values(np.array([code], np.int64))[0])
        return code

    def values(self, codes: I64, typ: str) -> list[Any]:
        if typ == "string":
            strings = self.strings
            return [strings[c] for c in codes.tolist()]
        if typ == "float":
            return float_values(codes).tolist()  # type: ignore[no-any-return]
        return codes.tolist()  # type: ignore[no-any-return]


class CodedIntervals:
    """A static part of a sensitivity index on arrays (see the module): the same queries as
    ``deltalog.engine.ivm.interval_index.StaticIntervals`` (positions, ``record``,
    ``kill``, ``live``) and the same way of keeping kills: the arrays never change once
    built; the positions killed are a set, saved as a chain of small deltas
    (``deltalog.engine.segments.save_dead``), and past ``COMPACT_SHARE`` of the part dead
    a save writes the live intervals as a new part."""

    __slots__ = ("_chain", "_dead", "_killed", "bcols", "book", "bspec", "ctx", "hi",
                 "live", "live_mask",
                 "lo", "split", "tree", "types", "xtype")

    def __init__(self, book: CodeBook, types: Sequence[str], xtype: str,
                 bspec: Sequence[tuple[int, Any, str]], ctx: I64, lo: I64, hi: I64,
                 split: bool = False, distinct: bool = False):
        """Rows (ctx, lo, hi) in any order; ``types`` per context column, ``xtype`` the
        ends'. ``bspec`` makes the bucket: per column (0, a context column, its type) or
        (1, a constant's code, its type). The payload is the context as a tuple, or with
        ``split`` (a negation's probe) the pair (all but its last value, its last). With
        ``distinct``, a row equal to an earlier one is dropped (a stab would find both
        and ask for the same region twice)."""
        self.book = book
        self.types = tuple(types)
        self.xtype = xtype
        self._spec(bspec, split)
        if distinct and len(lo) > 1:
            first = first_rows(np.column_stack([ctx.reshape(len(lo), -1), lo, hi]))
            if not first.all():
                ctx, lo, hi = ctx[first], lo[first], hi[first]
        # Sorted by (bucket, lo): BOT made the least code present, so the key packs
        # (``sort_order`` packs the columns into one int64 where they fit).
        low = lo
        if len(lo) and (lo == BOT).any():
            rest = lo[lo != BOT]
            low = np.where(lo == BOT, (int(rest.min()) if len(rest) else 0) - 1, lo)
        bcols = self.bcols.tolist()
        keys = np.empty((len(lo), len(bcols) + 1), np.int64)
        for j, c in enumerate(bcols):
            keys[:, j] = ctx[:, c]
        keys[:, -1] = low
        order = sort_order(keys)
        self.ctx, self.lo, self.hi = _narrowed(
            np.ascontiguousarray(ctx[order], np.int64).reshape(len(lo), len(self.types)),
            np.ascontiguousarray(lo[order], np.int64),
            np.ascontiguousarray(hi[order], np.int64))
        self.tree = _max_tree(self.hi)
        self._opened((), set())

    def _spec(self, bspec: Sequence[Sequence[Any]], split: bool) -> None:
        self.bspec: tuple[tuple[int, Any, str], ...] = tuple(
            (int(k), v, str(t)) for k, v, t in bspec)
        self.split = bool(split)
        self.bcols = np.array([v for k, v, _ in self.bspec if k == 0], np.int64)

    def _opened(self, chain: tuple[str, ...], dead: set[int]) -> None:
        self._chain = chain  # the delta segments listing ``_dead``
        self._dead = dead  # dead when opened
        self._killed: set[int] = set()  # killed since
        self.live_mask: NDArray[np.bool_] | None = None  # per position (``stab_codes``)
        self.live = len(self.lo) - len(dead)

    @property
    def n(self) -> int:
        return len(self.lo)

    def layout(self) -> Layout:
        return (self.types, self.xtype, canonical_bspec(self.bspec, self.book.value),
                self.split)

    def has_strings(self) -> bool:
        """Whether its codes are its own dictionary's (string columns or constants)."""
        return _has_strings(self.types, self.xtype, self.bspec)

    # -- queries ----------------------------------------------------------------------
    def stab(self, bucket: tuple[Any, ...], x: Any) -> list[int]:
        """Positions of the live intervals of ``bucket`` that contain ``x``."""
        if not self.live:
            return []
        book = self.book
        narrow = self.lo.dtype == np.int32
        bvals = np.empty(len(self.bcols), np.int64)
        j = 0
        for v, (kind, ref, typ) in zip(bucket, self.bspec, strict=True):
            code = book.code(v, typ)
            if code is None:
                return []  # no interval was recorded under a value the part never saw
            if kind:
                if code != ref:
                    return []  # every interval's bucket holds this constant there
            else:
                if narrow and not _N_MIN < code < _N_MAX:
                    return []  # beyond every code of the part's (int32) columns
                bvals[j] = code
                j += 1
        qlo, qhi = book.query(x, self.xtype)
        if narrow:  # beyond every code the part holds: as far as the int32 sentinels
            qlo = min(max(qlo, _N_MIN), _N_MAX - 1)
            qhi = min(max(qhi, _N_MIN + 1), _N_MAX)
        found = _stab(self.ctx, self.bcols, self.lo, self.hi, self.tree, bvals, qlo,
                      qhi).tolist()
        dead, killed = self._dead, self._killed
        if dead or killed:
            return [p for p in found if p not in killed and p not in dead]
        return found  # type: ignore[no-any-return]

    def stab_codes(self, bvals: I64, xs: I64) -> tuple[I64, I64, I64]:
        """Stab the live intervals of bucket ``bvals[q]`` (codes of the bucket's columns,
        a part of int and float columns only) at ``xs[q]`` (codes) for every query q at
        once, and kill those found: their contexts, lows and highs as int64 codes (ends
        ``BOT``/``TOP``), each interval once."""
        width = len(self.types)
        none = (np.zeros((0, width), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        if not self.live or not len(xs):
            return none
        qlo = xs
        qhi = xs
        ok = np.ones(len(xs), np.bool_)
        if self.lo.dtype == np.int32:
            for j in range(bvals.shape[1]):
                ok &= (bvals[:, j] > _N_MIN) & (bvals[:, j] < _N_MAX)
            qlo = np.clip(xs, _N_MIN, _N_MAX - 1)
            qhi = np.clip(xs, _N_MIN + 1, _N_MAX)
        alive = self.live_mask
        if alive is None:
            alive = self.live_mask = np.ones(self.n, np.bool_)
            gone = self._dead | self._killed
            if gone:
                alive[np.fromiter(gone, np.int64, len(gone))] = False
        found = _stab_many(self.ctx, self.bcols, self.lo, self.hi, self.tree,
                           np.ascontiguousarray(bvals, np.int64), qlo, qhi, ok, alive)
        if not len(found):
            return none
        self._killed.update(found.tolist())
        self.live -= len(found)
        return (_widened(self.ctx[found], False).reshape(len(found), width),
                _widened(self.lo[found], True), _widened(self.hi[found], True))

    def _end(self, code: int) -> Any:
        narrow = self.lo.dtype == np.int32
        if code == (_N_MIN if narrow else _MIN):
            return BOTTOM
        if code == (_N_MAX if narrow else _MAX):
            return TOP_VALUE
        return self.book.value(code, self.xtype)

    def _shaped(self, values: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
        """(bucket, payload) of a context's values."""
        book = self.book
        bucket = tuple(values[ref] if kind == 0 else book.value(ref, typ)
                       for kind, ref, typ in self.bspec)
        return bucket, ((values[:-1], values[-1]) if self.split else values)

    def record(self, pos: int) -> Record:
        """The interval at ``pos`` as (bucket, lo, hi, payload) in values."""
        row = self.ctx[pos].tolist()
        book = self.book
        bucket, payload = self._shaped(
            tuple(book.value(c, t) for c, t in zip(row, self.types, strict=True)))
        return (bucket, self._end(int(self.lo[pos])), self._end(int(self.hi[pos])), payload)

    def kill(self, pos: int) -> None:
        """Mark the live interval at ``pos`` dead: ``stab`` never returns it again."""
        self._killed.add(pos)
        self.live -= 1
        if self.live_mask is not None:
            self.live_mask[pos] = False

    def _alive(self) -> NDArray[np.intp]:
        gone = self._dead | self._killed
        if not gone:
            return np.arange(self.n)
        mask = np.ones(self.n, np.bool_)
        mask[np.fromiter(gone, np.int64, len(gone))] = False
        return np.flatnonzero(mask)

    def live_records(self) -> list[Record]:
        """Every live interval, in order, as values."""
        alive = self._alive()
        if not len(alive):
            return []
        book = self.book
        cols = [book.values(_widened(self.ctx[alive, j], False), t)
                for j, t in enumerate(self.types)]
        contexts = list(zip(*cols, strict=True)) if cols else [()] * len(alive)
        los = self.lo[alive].tolist()
        his = self.hi[alive].tolist()
        out: list[Record] = []
        for values, lo, hi in zip(contexts, los, his, strict=True):
            bucket, payload = self._shaped(values)
            out.append((bucket, self._end(lo), self._end(hi), payload))
        return out

    def like(self, records: list[Record]) -> "CodedIntervals":
        """A new part of ``records`` (intervals of this index as values, recorded since),
        coded alike with a dictionary of their own strings (and the bucket's constants);
        ``NotColumnar`` for a value with no code (an int beyond 64 bits or at its ends),
        or a negation's probe of another layout (``fits``: negations probed alike)."""
        n = len(records)
        layout = self.layout()
        if self.split and not all(fits(layout, self.book, r) for r in records):
            raise NotColumnar("a probe of another layout")
        contexts = [(*p[0], p[1]) if self.split else p for _, _, _, p in records]
        consts = [(self.book.value(ref, typ), typ) for kind, ref, typ in self.bspec if kind]
        strings: set[str] = {v for v, typ in consts if typ == "string"}
        columns = list(zip(*contexts, strict=True)) if n and self.types else [
            () for _ in self.types]
        for col, typ in zip(columns, self.types, strict=True):
            if typ == "string":
                strings.update(col)
        los = [r[1] for r in records]
        his = [r[2] for r in records]
        if self.xtype == "string":
            strings.update(v for v in los + his if type(v) is str)
        codes = Codes([strings])
        ctx = np.empty((n, len(self.types)), np.int64)
        for j, (col, typ) in enumerate(zip(columns, self.types, strict=True)):
            ctx[:, j] = codes.encode(list(col), typ) if n else 0
        ends = []
        for values in (los, his):
            inner = [i for i, v in enumerate(values) if v is not BOTTOM and v is not TOP_VALUE]
            out = np.array([_MIN if v is BOTTOM else _MAX for v in values], np.int64)
            if inner:
                out[inner] = codes.encode([values[i] for i in inner], self.xtype)
            ends.append(out)
            if ((out[inner] == _MIN) | (out[inner] == _MAX)).any():
                raise NotColumnar("a value at the ends of the 64-bit range")
        if ((ctx == _MIN) | (ctx == _MAX)).any():
            raise NotColumnar("a value at the ends of the 64-bit range")
        book = CodeBook(codes.strings.tolist())
        spec = [(kind, codes.code(self.book.value(ref, typ), typ) if kind else ref, typ)
                for kind, ref, typ in self.bspec]
        return CodedIntervals(book, self.types, self.xtype, spec, ctx, ends[0], ends[1],
                              self.split)

    @staticmethod
    def concat(parts: "Sequence[CodedIntervals]") -> "CodedIntervals":
        """One part of the live intervals of ``parts`` (of one index, coded alike but each
        with its own dictionary): the dictionaries merged, every part's codes mapped."""
        first = parts[0]
        merged = sorted(set().union(*(p.book.strings for p in parts)))
        book = CodeBook(merged) if len(parts) > 1 else first.book
        pool = np.array(merged, dtype=object)
        ctxs, los, his = [], [], []
        for part in parts:
            alive = part._alive()
            remap = (np.searchsorted(pool, np.array(part.book.strings, dtype=object))
                     .astype(np.int64) if part.book.strings else np.zeros(0, np.int64))
            ctx = _widened(part.ctx[alive], False)
            for j, t in enumerate(part.types):
                if t == "string" and len(alive):
                    ctx[:, j] = remap[ctx[:, j]]
            ends = []
            for old in (_widened(part.lo[alive], True), _widened(part.hi[alive], True)):
                if part.xtype == "string":
                    inner = (old != _MIN) & (old != _MAX)
                    old[inner] = remap[old[inner]]
                ends.append(old)
            ctxs.append(ctx)
            los.append(ends[0])
            his.append(ends[1])
        spec = [(kind, book.code(first.book.value(ref, typ), typ) if kind else ref, typ)
                for kind, ref, typ in first.bspec]
        return CodedIntervals(book, first.types, first.xtype, spec, np.concatenate(ctxs),
                              np.concatenate(los), np.concatenate(his), first.split,
                              distinct=True)

    def merged(self, records: list[Record]) -> "CodedIntervals":
        """A new part: the live intervals and ``records`` (recorded since, as values)."""
        return self.concat([self, self.like(records)] if records else [self])

    # -- persistence ----------------------------------------------------------------------
    def writes_base(self) -> bool:
        """Whether a save writes the live intervals as a new part (past the compaction
        threshold) rather than a delta of the positions killed."""
        return bool(self._killed) and (
            len(self._dead) + len(self._killed) > COMPACT_SHARE * self.n)

    def __getstate__(self) -> list[Any]:
        """Inline (no segment store): the arrays and every dead position."""
        return [self.book, list(self.types), self.xtype, [list(b) for b in self.bspec],
                self.split, self.ctx, self.lo, self.hi, self.tree,
                sorted(self._dead | self._killed)]

    def __setstate__(self, state: list[Any]) -> None:
        (self.book, types, self.xtype, bspec, split, self.ctx, self.lo, self.hi, self.tree,
         dead) = state
        self.types = tuple(types)
        self._spec(bspec, split)
        self._check()
        if any(type(p) is not int or not 0 <= p < self.n for p in dead):
            raise CorruptSegment("a coded interval part names a dead position out of range")
        self._opened((), set(dead))

    def _check(self) -> None:
        n = len(self.lo)
        if (
            self.ctx.shape != (n, len(self.types)) or self.hi.shape != (n,)
            or self.lo.shape != (n,) or self.tree.ndim != 1 or self.tree.shape[0] < 2
            or self.tree.shape[0] < 2 * ((n + BLOCK - 1) // BLOCK)
            or any(not 0 <= c < len(self.types) for c in self.bcols.tolist())
            or self.lo.dtype not in (np.int32, np.int64)
            or not self.lo.dtype == self.hi.dtype == self.ctx.dtype
            or self.tree.dtype != np.int64
            or (self.split and not self.types)
        ):
            raise CorruptSegment("a coded interval part whose arrays do not match")

    def __persist__(self, sink: SegmentSink) -> list[Any]:
        """``["coded", ...]``: plain data naming the dictionary's segment (kept as it was
        when the part was opened from this store, which is where a state is saved), the
        array segments (unchanged since the open: kept, nothing written) and the chain
        of dead positions; past the compaction threshold, a new part of the live ones."""
        if self.writes_base():
            return self.merged([]).__persist__(sink)
        name = self.book.opened_from
        if name is None:
            name = sink.write([pack_rows(self.book.strings)])
        else:
            sink.keep([name])
        return ["coded", name, list(self.types), self.xtype, [list(b) for b in self.bspec],
                self.split, sink.array(self.ctx), sink.array(self.lo), sink.array(self.hi),
                sink.array(self.tree), save_dead(sink, self._chain, self._dead, self._killed)]

    @classmethod
    def __restore__(cls, source: SegmentSource, ref: Any) -> "CodedIntervals":
        """Open what ``__persist__`` saved: the arrays mapped, the dead positions read."""
        _, name, types, xtype, bspec, split, ctx, lo, hi, tree, chain = ref
        obj = cls.__new__(cls)
        book = CodeBook(unpack_rows(source.read(name)))
        book.opened_from = name
        obj.book = book
        obj.types = tuple(types)
        obj.xtype = xtype
        obj._spec(bspec, split)
        obj.ctx = source.open_array(ctx)
        obj.lo = source.open_array(lo)
        obj.hi = source.open_array(hi)
        obj.tree = source.open_array(tree)
        obj._check()
        obj._opened(tuple(chain), read_dead(source, chain, obj.n, "coded interval"))
        return obj
