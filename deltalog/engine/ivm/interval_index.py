"""Sensitivity indices (Veldhuizen 2014, §4.1, §3.2): the intervals recorded for one atom at one
trie depth, with stabbing queries that also remove what they find.

Two parts, because intervals arrive in two ways. The initial evaluation records millions
at once: they are sorted by (bucket, start) into one sequence (``StaticIntervals``), with
a scan tree of interval ends laid out in arrays (segment trees), which costs a few machine
words per interval and no per-node objects; a found interval is marked dead there.
Maintenance records few at a time: they go into a dynamic scan tree (``IntervalTree``, a
treap). Both answer a stab in O((m+1) log n).

When the compiled join recorded the initial evaluation, the static part is on arrays
(``deltalog.engine.ivm.coded_intervals.CodedIntervals``) and so is what maintenance
records: each batch a part of its own (``levels``), the last two merged while the newer
is at least half the older (so O(log n) of them, each interval merged O(log n) times),
all folded into the static part when a save finds them past ``COMPACT_SHARE`` of it. A
part made or merged keeps a repeated interval once (a commit re-records every operation
inside its oracle, most of them intervals the index holds already), and so does a fold.
A batch with a value that has no 64-bit code goes to the treap instead (its repeats stay
until the treap passes ``COMPACT_SHARE`` of the static part and is folded).

Negations of one relation probed alike share one index (one key, as the tuple join files
their probes), and their probes may be coded in more than one layout (context, bucket
columns: ``coded_intervals.Layout``). The parts of each layout past the first are an
index of their own among the index's ``others``: a stab asks them all, a commit's batch
goes to the one of its layout (``of_layout``), an interval recorded as values to the one
it fits, or to one on tuples when none does (a probe before the join).

The static part is cut into pages of ``PAGE`` intervals, and its scan tree into two
levels: a segment tree over the pages' maxima of interval ends, and one over the ends of
each page, built when a stab or a kill first reaches the page. A stab walks the first to
the pages whose maximum reaches the point, then the second inside them: the pages it
reads are those holding a found interval, plus at most the two at the ends of the
bucket's range. (One tree over all the intervals would answer alike, but its upper levels
span pages: it must be built whole, O(n) steps of Python on every open.) That is what
lets the part live on disk (``__persist__`` and ``__restore__``, the segment-store hooks
of ``deltalog.engine.state_codec``):

- a *base* segment holds the intervals in pages, each a MessagePack array with a CRC-32,
  then an index of each page's offset, first start (bucket, lo), maximum end and
  checksum, then a trailer with the index's place and CRC-32 (the layout of
  ``deltalog.engine.segments.write_run``, with the maxima added). Opening reads the index only,
  O(n / ``PAGE``), and builds the top tree from it; a page is decoded (and checked) when
  a stab reaches it and kept for the rest of the run, so memory follows the pages
  touched, not n;
- the positions of the intervals killed since the part was opened are saved as one
  *delta* segment chained behind the base (the ``PagedRows`` scheme of
  ``deltalog.engine.segments``): a run that kills k intervals writes O(k) bytes, one that kills
  none writes nothing and keeps the segments it was opened from. Opening reads the
  chain's positions; a page's tree is built without their ends. Until then the page's
  maximum in the top tree, written before they died, is an upper bound: it may cost one
  read of the page, never a wrong answer;
- at ``COMPACT_CHAIN`` deltas, the chain becomes one delta of every position dead
  (O(dead), which stays under a share of the base); past ``COMPACT_SHARE`` of the base
  dead, the live intervals are written as a new base (compaction: O(n) once per Ω(n)
  kills).

A static part built in memory (the initial evaluation, or a rebuild by ``add_many``) is
written as a base when it has ``PAGED_MIN`` live intervals or more, inline in the root
otherwise; any part saved without a segment store (an in-memory copy) is written inline,
as its live intervals (the trees are built again when read).

A whole index (``IntervalIndex``) of ``PAGED_MIN`` intervals or more keeps itself in
segments too, its reference naming the static part's segments and the dynamic part's, so
that what maintenance records costs a save what it changed, not what it accumulated:

- the dynamic part is a *chain* of segments: the first holds its intervals, each with the
  uid its treap gave it (``IntervalTree``); each later one, written by one save, the
  intervals added since the open and the uids of those a stab took. A save after a run
  that added and removed k dynamic intervals writes O(k) bytes, one after none nothing.
  Opening replays the chain and builds the treap (it lives in memory, as it did);
- when the changes in the chain would outnumber the intervals of its first segment, or
  it holds ``COMPACT_CHAIN`` segments, the live dynamic intervals are written as a new
  first segment instead: O(d) for d live, fewer than twice the changes it replaces, each
  of which was written once before (or once per ``COMPACT_CHAIN`` saves). So an open
  reads at most ``COMPACT_CHAIN`` segments, and at most twice the intervals of the first;
- when the dynamic part passes ``COMPACT_SHARE`` of the static part's live intervals, or
  when the static part writes a new base anyway (built in memory, or compacting), both
  are *folded* into one new static part: O(n) once per Ω(n) intervals added, or riding
  on a write of the static part that was due. So the treap an open builds never passes
  ``COMPACT_SHARE`` of the static part. (There is no cap on its own size: a cap c would
  fold an index of n intervals every c additions, O(n / c) bytes per interval added,
  growing with the state.) A commit that takes the treap past that share (and past
  ``PAGED_MIN``) folds it at once, in memory: an engine that is never saved keeps each
  interval once too, instead of every probe its commits recorded again.

A smaller index, or one saved without a segment store, is written inline: its static
part, and the dynamic intervals as plain rows with their uids (one MessagePack call; the
treap is built again when read).
"""

import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from operator import itemgetter
from typing import Any

from deltalog.engine.columnar.encoding import NotColumnar
from deltalog.engine.columnar.strings import StringCodes
from deltalog.engine.ivm.coded_intervals import (
    Batch,
    CodeBook,
    CodedIntervals,
    Layout,
    Young,
    fits,
)
from deltalog.engine.ivm.scan_tree import Interval, IntervalTree
from deltalog.engine.segments import (
    COMPACT_CHAIN,
    COMPACT_SHARE,
    PAGED_MIN,
    CorruptSegment,
    SegmentSink,
    SegmentSource,
    pack_rows,
    read_dead,
    save_dead,
    unpack_rows,
)
from deltalog.engine.sentinels import BOTTOM

Record = tuple[tuple[Any, ...], Any, Any, Any]  # (bucket, lo, hi, payload)
Page = tuple[Record, ...]

# Intervals an index keeps young (``Young``) before they become a part on arrays.
YOUNG_MAX = 2048

# Intervals per page of a static part (a power of two: a page's scan tree is a full tree).
PAGE = 256


def _start(r: Record) -> tuple[Any, Any]:
    return (r[0], r[1])


_end = itemgetter(2)


def _width(n: int) -> int:
    """The least power of two >= ``n`` (and >= 1): the leaves of a segment tree."""
    width = 1
    while width < n:
        width *= 2
    return width


def _max_tree(leaves: list[Any], width: int) -> list[Any]:
    """A segment tree of maxima over ``leaves``, padded with ``BOTTOM`` to ``width`` (a
    power of two): node i has children 2i and 2i + 1, leaf j is node ``width + j``."""
    tree: list[Any] = [BOTTOM] * (2 * width)
    tree[width : width + len(leaves)] = leaves
    for i in range(width - 1, 0, -1):
        a = tree[2 * i]
        b = tree[2 * i + 1]
        tree[i] = a if b < a else b
    return tree


def _set_leaf(tree: list[Any], j: int, value: Any) -> None:
    j += len(tree) // 2
    tree[j] = value
    j //= 2
    while j:
        a = tree[2 * j]
        b = tree[2 * j + 1]
        tree[j] = a if b < a else b
        j //= 2


def _reaching(tree: list[Any], first: int, last: int, x: Any) -> list[int]:
    """The leaves in [first, last) of a max tree whose value is not below ``x``, in
    order: O((m+1) log n) for m of them."""
    width = len(tree) // 2
    out: list[int] = []
    stack = [(1, 0, width)]
    while stack:
        node, a, b = stack.pop()
        if b <= first or a >= last or tree[node] < x:
            continue
        if node >= width:
            out.append(node - width)
            continue
        mid = (a + b) // 2
        stack.append((2 * node + 1, mid, b))
        stack.append((2 * node, a, mid))
    return out


class _Base:
    """A base segment of a static part: its pages, read one at a time, and its index."""

    __slots__ = ("buf", "chain", "crcs", "firsts", "maxima", "n", "name", "offsets", "page")

    def __init__(self, name: str, chain: tuple[str, ...], buf: memoryview):
        if len(buf) < 20:
            raise CorruptSegment("an interval base shorter than its trailer")
        at = int.from_bytes(buf[-20:-12], "big")
        size = int.from_bytes(buf[-12:-4], "big")
        if at + size + 20 != len(buf):
            raise CorruptSegment("an interval base whose trailer does not match its length")
        index = buf[at : at + size]
        if zlib.crc32(index) != int.from_bytes(buf[-4:], "big"):
            raise CorruptSegment("the index of an interval base fails its checksum")
        n, page, offsets, firsts, maxima, crcs = unpack_rows(index)
        pages = len(firsts)
        if (
            type(page) is not int or page < 1 or page & (page - 1)
            or pages != -(-n // page) or len(offsets) != pages + 1 or len(maxima) != pages
            or len(crcs) != pages or offsets[-1] != at
        ):
            raise CorruptSegment("an interval base whose index does not match its pages")
        self.name = name
        self.chain = chain
        self.buf = buf
        self.n: int = n
        self.page: int = page
        self.offsets: tuple[int, ...] = offsets
        self.firsts: list[tuple[Any, Any]] = list(firsts)
        self.maxima: list[Any] = list(maxima)
        self.crcs: tuple[int, ...] = crcs

    def read(self, i: int) -> Page:
        data = self.buf[self.offsets[i] : self.offsets[i + 1]]
        if zlib.crc32(data) != self.crcs[i]:
            raise CorruptSegment(f"page {i} of an interval base fails its checksum")
        got = unpack_rows(data)
        if len(got) != min(self.page, self.n - i * self.page):
            raise CorruptSegment(f"page {i} of an interval base has {len(got)} intervals")
        return got  # type: ignore[no-any-return]


def _write_base(sink: SegmentSink, records: list[Record]) -> str:
    """``records`` (sorted by start) as a base segment; returns its name. The pages, the
    index, and a trailer: the index's offset and length (8 bytes each) and CRC-32 (4), so
    the segment checks itself (``paged``) and a store need not read it whole."""
    parts: list[bytes] = []
    offsets: list[int] = []
    firsts: list[tuple[Any, Any]] = []
    maxima: list[Any] = []
    crcs: list[int] = []
    pos = 0
    for i in range(0, len(records), PAGE):
        page = records[i : i + PAGE]
        blob = pack_rows(page)
        offsets.append(pos)
        firsts.append(_start(page[0]))
        maxima.append(max(map(_end, page)))
        crcs.append(zlib.crc32(blob))
        parts.append(blob)
        pos += len(blob)
    offsets.append(pos)
    index = pack_rows([len(records), PAGE, offsets, firsts, maxima, crcs])
    parts.append(index)
    parts.append(pos.to_bytes(8, "big") + len(index).to_bytes(8, "big")
                 + zlib.crc32(index).to_bytes(4, "big"))
    return sink.write(parts, paged=True)


class StaticIntervals:
    """Intervals loaded at once, sorted by (bucket, lo), in pages with a two-level
    max-of-ends segment tree; in memory, or opened from a segment store (see the module).

    A position (what ``stab`` returns, ``kill`` and ``record`` take) is an interval's
    rank in the sorted order when the part was built or its base written: ``n``
    positions, ``live`` of them not killed. ``pages_read`` counts the pages decoded from
    the store (a work counter: a small change reads few)."""

    __slots__ = ("_base", "_dead", "_firsts", "_killed", "_page", "_pages", "_top",
                 "_trees", "live", "n", "pages_read")

    def __init__(self, records: list[Record]):
        records.sort(key=_start)
        self._paginate(records)

    def _paginate(self, records: list[Record]) -> None:
        """In memory, from ``records`` sorted by start."""
        pages = [tuple(records[i : i + PAGE]) for i in range(0, len(records), PAGE)]
        in_memory: list[Page | None] = list(pages)
        self._open(len(records), PAGE, in_memory, [_start(p[0]) for p in pages],
                   [max(map(_end, p)) for p in pages], None, set())

    def _open(self, n: int, page: int, pages: list[Page | None], firsts: list[Any],
              maxima: list[Any], base: _Base | None, dead: set[int]) -> None:
        self.n = n
        self.live = n - len(dead)
        self._page = page
        self._pages = pages
        self._firsts = firsts
        self._top = _max_tree(maxima, _width(len(maxima)))
        self._trees: dict[int, list[Any]] = {}
        self._base = base
        self._dead = dead  # dead in the base when opened (the delta chain's positions)
        self._killed: set[int] = set()  # killed since built or opened
        self.pages_read = 0

    # -- pages ------------------------------------------------------------------------
    def _records(self, i: int, keep: bool = True) -> Page:
        """Page ``i``'s intervals, decoded from the base when not yet in memory (and kept
        there when ``keep``)."""
        got = self._pages[i]
        if got is None:
            assert self._base is not None
            got = self._base.read(i)
            self.pages_read += 1
            if keep:
                self._pages[i] = got
        return got

    def _tree(self, i: int) -> list[Any]:
        """The scan tree of page ``i`` (built on first use, without the ends of the
        chain's dead intervals; kills on the page come after, through it). Tightens the
        page's maximum in the top tree, which was an upper bound until then."""
        tree = self._trees.get(i)
        if tree is None:
            ends = list(map(_end, self._records(i)))
            dead = self._dead
            if dead:
                start = i * self._page
                ends = [BOTTOM if start + j in dead else e for j, e in enumerate(ends)]
            tree = self._trees[i] = _max_tree(ends, self._page)
            self._tighten(i, tree)
        return tree

    def _tighten(self, i: int, tree: list[Any]) -> None:
        top = self._top
        if tree[1] < top[len(top) // 2 + i]:
            _set_leaf(top, i, tree[1])

    # -- queries --------------------------------------------------------------------------
    def stab(self, bucket: tuple[Any, ...], x: Any) -> list[int]:
        """Positions of the live intervals of ``bucket`` that contain ``x``."""
        key = (bucket, BOTTOM)
        end = (bucket, x)
        firsts = self._firsts
        # Pages from the one the bucket may start in to the last starting at or before x.
        first = max(bisect_left(firsts, key) - 1, 0)
        last = bisect_right(firsts, end)
        size = self._page
        dead = self._dead
        killed = self._killed
        out: list[int] = []
        for i in _reaching(self._top, first, last, x):
            page = self._records(i)
            start = i * size
            lo = bisect_left(page, key, key=_start)
            hi = bisect_right(page, end, key=_start)
            for j in _reaching(self._tree(i), lo, hi, x):
                pos = start + j
                # A dead end is BOTTOM in the tree: only a stab at BOTTOM itself reaches it.
                if pos not in killed and pos not in dead:
                    out.append(pos)
        return out

    def record(self, pos: int) -> Record:
        """The interval at ``pos`` as (bucket, lo, hi, payload)."""
        i, j = divmod(pos, self._page)
        return self._records(i)[j]

    def kill(self, pos: int) -> None:
        """Mark the live interval at ``pos`` dead: ``stab`` never returns it again."""
        i, j = divmod(pos, self._page)
        tree = self._tree(i)
        _set_leaf(tree, j, BOTTOM)
        self._tighten(i, tree)
        self._killed.add(pos)
        self.live -= 1

    def live_records(self) -> list[Record]:
        """Every live interval, in order. Reads the pages not in memory without keeping
        them (a rebuild or a copy reads them all once)."""
        dead = self._dead
        killed = self._killed
        out: list[Record] = []
        for i in range(len(self._pages)):
            page = self._records(i, keep=False)
            if not (dead or killed):
                out.extend(page)
                continue
            start = i * self._page
            out.extend(r for j, r in enumerate(page)
                       if start + j not in dead and start + j not in killed)
        return out

    # -- persistence ----------------------------------------------------------------------
    def writes_base(self) -> bool:
        """Whether a save (``__persist__``) writes the live intervals anew rather than
        keep the base it was opened from: built in memory, or killed past the compaction
        thresholds."""
        base = self._base
        killed = self._killed
        return base is None or (
            bool(killed) and len(self._dead) + len(killed) > COMPACT_SHARE * base.n
        )

    def __getstate__(self) -> list[Record]:
        """Inline (no segment store, or a small part): the live intervals."""
        return self.live_records()

    def __setstate__(self, state: list[Record]) -> None:
        self._paginate(state)  # in order, as ``live_records`` gives them

    def __persist__(self, sink: SegmentSink) -> list[Any] | None:
        """Save to a segment store: ``[base, chain]`` naming the segments, or None to be
        written inline. Relative to the state it was opened from: nothing written when
        nothing was killed since, one delta of the positions killed when few were, a new
        base of the live intervals past the compaction thresholds (or when built in
        memory)."""
        base = self._base
        killed = self._killed
        if not self.writes_base():
            assert base is not None
            sink.keep([base.name])
            return [base.name, save_dead(sink, base.chain, self._dead, killed)]
        if self.live < PAGED_MIN:
            return None
        records = self.live_records()
        try:
            name = _write_base(sink, records)
        except (TypeError, ValueError, OverflowError):
            # a value plain MessagePack cannot hold (an int beyond 64 bits): inline, where
            # the state codec writes it as a typed extension
            return None
        return [name, []]

    @classmethod
    def __restore__(cls, source: SegmentSource, ref: Any) -> "StaticIntervals":
        """Open what ``__persist__`` saved: reads the base's index and the delta chain's
        positions, no page."""
        name, chain = ref
        base = _Base(name, tuple(chain), source.read(name))
        dead = read_dead(source, chain, base.n, "interval")
        obj = cls.__new__(cls)
        obj._open(base.n, base.page, [None] * len(base.firsts), base.firsts, base.maxima,
                  base, dead)
        return obj


class IntervalIndex:
    """One sensitivity index: a static part from bulk loads, a dynamic part for the rest;
    kept in a segment store as the module says.

    Against the segments it was opened from (``_chain``: the dynamic part's, ``_whole``
    intervals in the first, ``_behind`` intervals and uids in the rest), the index knows
    what changed in its dynamic part: the intervals with a uid past ``_mark`` (the last
    one when opened) were added since, and ``_removed`` lists the uids up to it that a
    stab took. Without a chain (built in memory, rebuilt by ``add_many``, read inline)
    there is nothing to compare with: ``_mark`` is 0, and a save writes the part whole.
    Like the static part, a save is relative to the open: the next one must come from
    the state it wrote, opened again."""

    def __init__(self) -> None:
        # The static part: from the tuple join's recording, or the compiled join's (on
        # arrays, ``deltalog.engine.ivm.coded_intervals``); the same queries.
        self.static: StaticIntervals | CodedIntervals | None = None
        self.dynamic = IntervalTree()
        # Beside a static part on arrays, what commits record goes into parts on arrays
        # too, one per batch, merged while a part is at least half the one before it (the
        # treap takes what they cannot code: an int beyond 64 bits).
        self.levels: list[CodedIntervals] = []
        # What commits on the compiled join record, as it came, until it is a part.
        self.young: Young | None = None
        # The index of negations of one relation probed alike (one key) keeps the probes
        # of each other layout (context, bucket) in an index of its own, and any interval
        # no part on arrays fits in one on tuples (``add_many``); a stab asks them all.
        self.others: list[IntervalIndex] = []
        self._opened(())

    def _opened(self, chain: tuple[str, ...], whole: int = 0, behind: int = 0) -> None:
        """Changes count from now, against ``chain`` (the dynamic part's segments)."""
        self._chain = chain
        self._whole = whole
        self._behind = behind
        self._mark = self.dynamic.uid if chain else 0
        self._removed: list[int] = []

    def __len__(self) -> int:
        return self._size() + sum(len(other) for other in self.others)

    def _size(self) -> int:
        """Intervals of this index less its others'."""
        return ((self.static.live if self.static else 0) + len(self.dynamic)
                + sum(level.live for level in self.levels)
                + (self.young.live if self.young is not None else 0))

    def _coded(self) -> CodedIntervals | Young | None:
        """A part on arrays of this index (they are coded alike), if any."""
        static = self.static
        if type(static) is CodedIntervals:
            return static
        return self.levels[0] if self.levels else self.young

    def layout(self) -> Layout | None:
        """How this index's parts on arrays code their intervals (None: it has none)."""
        part = self._coded()
        return None if part is None else part.layout()

    def of_layout(self, layout: Layout, make: bool = True) -> "IntervalIndex | None":
        """The index among this one and its others whose parts on arrays are coded as
        ``layout``: an empty one takes it; with ``make`` a new one of the others when
        none has it."""
        for index in (self, *self.others):
            if index.layout() == layout:
                return index
        if self.static is None and not self._size() and not self.others:
            return self
        if not make:
            return None
        self.others.append(IntervalIndex())
        return self.others[-1]

    def each(self) -> "list[IntervalIndex]":
        """This index and its others."""
        return [self, *self.others]

    def add_static(self, part: CodedIntervals) -> None:
        """A load's static part on arrays: this index's, or the one of its layout among
        its others (a negation probed alike as another)."""
        index = self.of_layout(part.layout())
        assert index is not None and index.static is None
        index.static = part

    def add_batch(self, batch: Batch, strings: StringCodes | None = None) -> None:
        """What a commit's compiled join recorded into this index (codes; strings by the
        store's dictionary ``strings``): kept young (``Young``) until ``YOUNG_MAX``
        intervals, then a part on arrays (a negation's probes in the index of their
        layout, ``of_layout``). A batch of string columns is a part at once, with a
        dictionary of its own strings (a part's codes never change; the store's might)."""
        index = self.of_layout(batch.layout()) if batch.split else self
        if index is not self:
            assert index is not None
            index.add_batch(batch, strings)
            return
        if batch.has_strings():
            if strings is None:
                raise ValueError("a batch of string codes without their dictionary")
            self._grow_up()
            self.add_coded(batch.part(strings))
            return
        young = self.young
        if young is not None and not young.fits(batch):
            self._grow_up()
            young = None
        if young is None:
            young = self.young = Young(batch)
        young.add(batch)
        if young.n > YOUNG_MAX:
            self._grow_up()

    def _grow_up(self) -> None:
        """The young intervals into a part on arrays (``add_coded``)."""
        young, self.young = self.young, None
        part = young.part() if young is not None else None
        if part is not None:
            self.add_coded(part)

    def add_many(self, intervals: Iterable[Record]) -> None:
        """Intervals as values (the tuple join's, a load's probes before the join)."""
        batch = intervals if isinstance(intervals, list) else list(intervals)
        part = self._coded()
        if self.others or (part is not None and part.split):
            # A negation's probes (an index negations probed alike may share): each to the
            # index of its layout, those no part on arrays fits to one on tuples.
            for index, records in self._routed(batch):
                if records:
                    index._add_many(records)
            return
        self._add_many(batch)

    def _routed(self, batch: list[Record]) -> "list[tuple[IntervalIndex, list[Record]]]":
        """``batch`` split by the index it goes to (``add_many``)."""
        coded: list[tuple[IntervalIndex, Layout, CodeBook, list[Record]]] = []
        for index in self.each():
            part = index._coded()
            if part is not None:
                book = part.book if type(part) is CodedIntervals else CodeBook([])
                coded.append((index, part.layout(), book, []))
        rest: list[Record] = []
        for record in batch:
            for _, layout, book, records in coded:
                if fits(layout, book, record):
                    records.append(record)
                    break
            else:
                rest.append(record)
        out = [(index, records) for index, _, _, records in coded]
        if rest:
            plain = next((i for i in self.each() if i._coded() is None), None)
            if plain is None:
                plain = IntervalIndex()
                self.others.append(plain)
            out.append((plain, rest))
        return out

    def _add_many(self, batch: list[Record]) -> None:
        self._grow_up()
        # A rebuild of the static part costs O(n log n); single inserts O(log n) each:
        # rebuild only when the batch is large against what is there.
        if len(batch) * 4 > self._size():
            self.static = self._folded(batch)
            self.dynamic = IntervalTree()
            self.levels = []
            self._opened(())
            return
        if type(self.static) is CodedIntervals and batch:
            try:
                self.levels.append(self.static.like(batch))
            except NotColumnar:
                pass
            else:
                levels = self.levels
                while len(levels) > 1 and 2 * levels[-1].live >= levels[-2].live:
                    levels[-2:] = [CodedIntervals.concat(levels[-2:])]
                return
        for bucket, lo, hi, payload in batch:
            self.dynamic.add(bucket, lo, hi, payload)
        # A commit re-records what its oracle covers, most of it held already (a negation's
        # probes, for one): past the share a save would fold at, fold now, each interval
        # kept once, so an engine that is never saved does not grow by every commit.
        if len(self.dynamic) > max(PAGED_MIN, COMPACT_SHARE * (
                self.static.live if self.static is not None else 0)):
            self.static = self._folded([])
            self.dynamic = IntervalTree()
            self.levels = []
            self._opened(())

    def add_coded(self, part: CodedIntervals) -> None:
        """A batch a commit's compiled join recorded, already a part on arrays (coded as
        this index's static part, when that is on arrays too): as ``add_many`` keeps a
        batch, without making its records."""
        static = self.static
        if type(static) is not CodedIntervals and static is not None:
            self._add_many(part.live_records())
            return
        if static is None or part.n * 4 > self._size():
            rest = [(b, lo, hi, p) for b, lo, hi, p, _ in self.dynamic.records()]
            parts = [*([static] if static is not None else []), *self.levels, part]
            if rest:
                parts.append(part.like(rest))
            self.static = CodedIntervals.concat(parts) if len(parts) > 1 else part
            self.dynamic = IntervalTree()
            self.levels = []
            self._opened(())
            return
        levels = self.levels
        levels.append(part)
        while len(levels) > 1 and 2 * levels[-1].live >= levels[-2].live:
            levels[-2:] = [CodedIntervals.concat(levels[-2:])]

    def _folded(self, batch: list[Record]) -> "StaticIntervals | CodedIntervals":
        """One static part of every live interval and ``batch``: on arrays when the
        static part is."""
        static = self.static
        if type(static) is CodedIntervals:
            rest = batch + [(b, lo, hi, p) for b, lo, hi, p, _ in self.dynamic.records()]
            try:
                return CodedIntervals.concat(
                    [static, *self.levels, *([static.like(rest)] if rest else [])])
            except NotColumnar:
                pass
        # (An interval recorded again by a later evaluation is kept once.)
        return StaticIntervals(list(dict.fromkeys(batch + self._intervals())))

    def stab(self, bucket: tuple[Any, ...], x: Any) -> list[tuple[Any, Any, Any]]:
        """Every interval of ``bucket`` containing ``x`` as (lo, hi, payload), removed."""
        out = self._stab(bucket, x)
        for other in self.others:
            out += other.stab(bucket, x)
        return out

    def _stab(self, bucket: tuple[Any, ...], x: Any) -> list[tuple[Any, Any, Any]]:
        """``stab`` in this index less its others."""
        out = []
        static = self.static
        if static is not None:
            for pos in static.stab(bucket, x):
                _, lo, hi, payload = static.record(pos)
                out.append((lo, hi, payload))
                static.kill(pos)
        for level in self.levels:
            for pos in level.stab(bucket, x):
                _, lo, hi, payload = level.record(pos)
                out.append((lo, hi, payload))
                level.kill(pos)
        if self.young is not None:
            out += self.young.stab(bucket, x)
        if len(self.dynamic):
            mark = self._mark
            for lo, hi, payload, uid in self.dynamic.stab_uids(bucket, x):
                out.append((lo, hi, payload))
                if uid <= mark:
                    self._removed.append(uid)
        return out

    def stab_codes(self, bvals: Any, xs: Any, buckets: list[tuple[Any, ...]],
                   points: list[Any]) -> tuple[list[tuple[Any, Any, Any]], list[Any]]:
        """``stab`` for many points at once on an index whose parts are on arrays: query q
        is bucket ``buckets[q]`` and point ``points[q]``, coded ``bvals[q]`` and ``xs[q]``
        (strings by the store's dictionary). Returns the found intervals of the parts of
        numbers as coded (contexts, lows, highs) triples, one per part, and those of the
        parts over strings (coded by dictionaries of their own: stabbed by value) and of
        the treap as (lo, hi, payload) values; every one removed. (Of this index alone:
        its others code theirs in other layouts, ``of_layout``.)"""
        coded = []
        plain: list[Any] = []
        for part in [self.static, *self.levels, self.young]:
            if part is not None and part.live:
                assert isinstance(part, CodedIntervals | Young)
                if part.has_strings():
                    # (its own dictionary's codes, not the store's: stabbed by value, and
                    # what it finds given as values)
                    assert type(part) is CodedIntervals
                    for bucket, x in zip(buckets, points, strict=True):
                        for pos in part.stab(bucket, x):
                            _, lo, hi, payload = part.record(pos)
                            plain.append((lo, hi, payload))
                            part.kill(pos)
                    continue
                got = part.stab_codes(bvals, xs)
                if len(got[1]):
                    coded.append(got)
        if len(self.dynamic):
            for bucket, x in zip(buckets, points, strict=True):
                plain += self._stab(bucket, x)  # (the parts found nothing more)
        return coded, plain

    def intervals(self) -> list[Record]:
        """Every live interval (for tests and inspection)."""
        out = self._intervals()
        for other in self.others:
            out += other.intervals()
        return out

    def _intervals(self) -> list[Record]:
        out = self.static.live_records() if self.static is not None else []
        for level in self.levels:
            out += level.live_records()
        if self.young is not None:
            out += self.young.records()
        out += [(b, lo, hi, p) for b, lo, hi, p, _ in self.dynamic.records()]
        return out

    # -- persistence ----------------------------------------------------------------------
    def __getstate__(self) -> list[Any]:
        """Inline (no segment store, a small index, or one with others): the static part,
        the dynamic intervals as rows with their uids, the last uid (the young intervals
        a part first), the parts on arrays merged since, and the others."""
        self._grow_up()
        return [self.static, list(self.dynamic.records()), self.dynamic.uid, self.levels,
                self.others]

    def __setstate__(self, state: list[Any]) -> None:
        self.static, records, uid = state[:3]
        self.levels = list(state[3]) if len(state) > 3 else []
        self.others = list(state[4]) if len(state) > 4 else []
        self.young = None
        self.dynamic = IntervalTree.load(records, uid)
        self._opened(())

    def __persist__(self, sink: SegmentSink) -> list[Any] | None:
        """Save to a segment store: ``[static, chain, uid]`` (the static part's reference,
        the dynamic part's segments, the last uid), or None to be written inline (a small
        index, or values plain MessagePack cannot hold). Writes, as the module says,
        nothing when nothing changed since the open, a delta of the dynamic changes, the
        dynamic part whole, or the two parts folded into one static part (the young
        intervals are a part first). An index with others is written inline (their
        parts and its own still go to segments of their own)."""
        self._grow_up()
        static = self.static
        if len(self) < PAGED_MIN or self.others:
            return None
        dynamic = self.dynamic
        levels = sum(level.live for level in self.levels)
        if (static is None or static.writes_base()
                or len(dynamic) + levels > COMPACT_SHARE * static.live):
            part = static if static is not None and not len(dynamic) and not self.levels \
                else self._folded([])
            folded = part.__persist__(sink)
            return None if folded is None else [folded, [], 0, []]
        chain = list(self._chain)
        added = [r for r in dynamic.records() if r[4] > self._mark] if chain else []
        changes = len(added) + len(self._removed)
        rows: list[Any] | None = None
        if not chain or (changes and (
            self._behind + changes > self._whole or len(chain) >= COMPACT_CHAIN
        )):
            chain = []
            if len(dynamic):
                rows = [list(dynamic.records()), []]
        elif changes:
            rows = [added, sorted(self._removed)]
        try:
            blob = None if rows is None else pack_rows(rows)
        except (TypeError, ValueError, OverflowError):
            return None  # an int beyond 64 bits: inline, as the state codec writes it
        ref = static.__persist__(sink)
        sink.keep(chain)
        if blob is not None:
            chain.append(sink.write([blob]))
        return [ref, chain, dynamic.uid, [level.__persist__(sink) for level in self.levels]]

    @classmethod
    def __restore__(cls, source: SegmentSource, ref: Any) -> "IntervalIndex":
        """Open what ``__persist__`` saved: the static part's index (no page), and the
        dynamic part's chain, replayed into a treap."""
        static, chain, last = ref[:3]
        live: dict[int, Interval] = {}
        whole = behind = 0
        for k, name in enumerate(chain):
            added, removed = unpack_rows(source.read(name))
            for uid in removed:
                if type(uid) is not int or live.pop(uid, None) is None:
                    raise CorruptSegment(f"interval delta {name} removes uid {uid!r}")
            for r in added:
                if len(r) != 5 or type(r[0]) is not tuple or type(r[4]) is not int or not (
                    0 < r[4] <= last
                ) or r[4] in live:
                    raise CorruptSegment(f"interval delta {name} adds {r!r}")
                live[r[4]] = r
            if k:
                behind += len(added) + len(removed)
            else:
                whole = len(added)
        obj = cls.__new__(cls)
        obj.static = (CodedIntervals.__restore__(source, static) if static[0] == "coded"
                      else StaticIntervals.__restore__(source, static))
        obj.dynamic = IntervalTree.load(live.values(), last)
        obj.levels = [CodedIntervals.__restore__(source, r) for r in (ref[3] if len(ref) > 3
                                                                       else [])]
        obj.young = None
        obj.others = []
        obj._opened(tuple(chain), whole, behind)
        return obj
