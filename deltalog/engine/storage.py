"""Versioned relations: the current version as a sorted collection, the previous version as
a view over it, and the delta between them (Veldhuizen 2014, §3.3, delta iterators).

A commit applies a delta in O(changes × log n) per index; the previous version is never
copied: ``previous()`` presents current − inserted + erased, merged on the fly. Every
version answers ``ceil(t)`` (the least row ≥ t), which is all a trie iterator needs.

``SortedRows`` is the protocol a trie iterator reads through. A relation's rows and indexes
are in memory (a set and ``SortedList`` objects) after a full load; saved, the large ones become
sorted runs on disk, and an engine opened from a saved state reads them a page at a time
(``deltalog.engine.segments.PagedRows``: the run plus the changes since), so a commit touches the
pages its rows fall in and the next save writes the changed rows only. A relation a
columnar kernel computed keeps its rows as the kernel's sorted int64 keys (``CodedRows``,
through the kernel's ``RowCoding``): its readers take them by column, and rows are decoded
only when read one at a time; saved, the keys are one array.
"""

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, Protocol, TypeAlias

import numpy as np
from numpy.typing import NDArray
from sortedcontainers import SortedList

from deltalog.engine import pages
from deltalog.engine.segments import PAGED_MIN, Paged, PagedRows
from deltalog.engine.sentinels import BOTTOM
from deltalog.engine.values import Row

# A delta: rows with weights, +1 inserted and -1 erased (a Z-set over a set relation).
Delta = dict[Row, int]


def add_into(target: dict[Any, int], key: Any, weight: int) -> None:
    """``target[key] += weight`` in place, dropping the key when its weight becomes zero
    (a Z-set never holds a zero weight)."""
    if not weight:
        return
    w = target.get(key, 0) + weight
    if w:
        target[key] = w
    else:
        del target[key]


class RowCoding(Protocol):
    """How a producer of coded rows (a columnar kernel) reads and writes its keys: each row
    of one relation is one int64 key, in an order of the producer's own (not the rows')."""

    def decode(self, keys: "NDArray[np.int64]") -> list[Row]:
        """The rows of ``keys``."""
        ...

    def columns(self, keys: "NDArray[np.int64]") -> list["NDArray[Any]"]:
        """The rows of ``keys`` by column: int64, float64 or object (str) arrays (an int
        column holding an int beyond 64 bits: an object array)."""
        ...

    def find(self, rows: Sequence[Row]) -> "NDArray[np.int64]":
        """The keys of ``rows``; -1 for a row holding a value never coded (nothing is
        coded here)."""
        ...

    def encode(self, rows: Sequence[Row]) -> "NDArray[np.int64]":
        """The keys of ``rows``, values never coded given codes."""
        ...


class CodedRows:
    """A set of rows held as sorted int64 keys of a ``RowCoding`` (a relation a columnar
    kernel computed, taken without decoding it), with the rows inserted and erased since
    kept beside as rows (folded into the keys past a share of them).

    Answers what the store asks of a relation's rows (membership, size, iteration,
    ``update``/``difference_update``); rows are decoded only when read one at a time
    (``__iter__``, a chunk at a time), and ``columns()`` gives them as arrays. A state
    keeps the keys as one array and the coding beside (the producer's dictionaries)."""

    __slots__ = ("coding", "era", "fences", "ins", "keys", "step")
    CHUNK = 1 << 16

    def __init__(self, keys: "NDArray[np.int64]", coding: RowCoding):
        self._set_keys(keys)
        self.coding = coding
        self.ins: set[Row] = set()  # rows not in keys
        self.era: set[Row] = set()  # rows of keys erased

    def _set_keys(self, keys: "NDArray[np.int64]") -> None:
        self.keys = keys  # sorted, distinct
        # every step-th key (FENCE: a page of keys): a few lookups read a page of the keys
        # each, where a binary search of keys mapped from a saved state would fault in
        # a score of pages per lookup
        self.step = FENCE
        self.fences = keys[::FENCE].copy()

    def __getstate__(self) -> dict[str, Any]:
        return {"keys": self.keys, "fences": self.fences, "step": self.step,
                "coding": self.coding, "ins": self.ins, "era": self.era}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.keys, self.fences, self.step = state["keys"], state["fences"], state["step"]
        self.coding, self.ins, self.era = state["coding"], set(state["ins"]), set(state["era"])

    def __len__(self) -> int:
        return len(self.keys) - len(self.era) + len(self.ins)

    def in_keys(self, rows: Sequence[Row]) -> "NDArray[np.bool_]":
        """Which of ``rows`` the keys hold (erased or not): a few, through the fences (one
        page of keys read each); many, by binary searches of the keys."""
        keys, fences = self.keys, self.fences
        found = self.coding.find(rows)
        hit = np.zeros(len(rows), np.bool_)
        if len(found) > len(fences) // 8:
            at = np.searchsorted(keys, found)
            ok = (at < len(keys)) & (found >= 0)
            hit[ok] = keys[at[ok]] == found[ok]
            return hit
        pages.warm()
        pages.page_find(keys, fences, self.step, np.ascontiguousarray(found), hit)
        return hit

    def contains_all(self, rows: Sequence[Row]) -> "NDArray[np.bool_]":
        """Which of ``rows`` are members (one lookup of all)."""
        out = self.in_keys(rows)
        if self.ins or self.era:
            for i, r in enumerate(rows):
                if r in self.ins:
                    out[i] = True
                elif r in self.era:
                    out[i] = False
        return out

    def __contains__(self, row: object) -> bool:
        if row in self.ins:
            return True
        if row in self.era or type(row) is not tuple:
            return False
        return bool(self.in_keys([row])[0])

    def __iter__(self) -> Iterator[Row]:
        keys, era, step = self.keys, self.era, self.CHUNK
        for lo in range(0, len(keys), step):
            rows = self.coding.decode(keys[lo : lo + step])
            if era:
                yield from (r for r in rows if r not in era)
            else:
                yield from rows
        yield from self.ins

    def columns(self) -> list["NDArray[Any]"]:
        """The rows by column (see ``RowCoding.columns``), in no particular order."""
        cols = self.coding.columns(self._kept())
        if not self.ins:
            return cols
        out = []
        for c, e in zip(cols, zip(*self.ins, strict=True), strict=True):
            try:
                more = np.array(e, dtype=c.dtype)
            except OverflowError:  # an int beyond 64 bits among the rows inserted
                c, more = c.astype(object), np.array(e, dtype=object)
            out.append(np.concatenate([c, more]))
        return out

    def all_keys(self) -> "NDArray[np.int64]":
        """The keys of every row, sorted: the keys themselves when no change is kept
        beside them (never changed in place: a reader may keep them)."""
        keys = self._kept()
        if self.ins:  # (rows the keys do not hold: merged in at their places)
            added = np.sort(self.coding.encode(list(self.ins)))
            keys = np.insert(keys, np.searchsorted(keys, added), added)
        return keys

    def _kept(self) -> "NDArray[np.int64]":
        """The keys less those of the rows erased."""
        if not self.era:
            return self.keys
        keys, gone = self.keys, self.coding.find(list(self.era))
        at = np.searchsorted(keys, gone)
        hit = at < len(keys)
        hit[hit] = keys[at[hit]] == gone[hit]
        # (no sort or hash of the keys: numpy's set operations hash a million int64 keys,
        # ten times slower than this)
        return np.delete(keys, at[hit])

    # -- changes (set semantics; the caller inserts absent rows, erases present ones) -------
    def update(self, rows: Iterable[Row]) -> None:
        self._change(rows, self.era, self.ins)

    def difference_update(self, rows: Iterable[Row]) -> None:
        self._change(rows, self.ins, self.era)

    def _change(self, rows: Iterable[Row], undone: set[Row], done: set[Row]) -> None:
        """Each row cancels its opposite change (``undone``), else joins ``done``."""
        for r in rows:
            if r in undone:
                undone.discard(r)
            else:
                done.add(r)
        self._fold()

    def _fold(self) -> None:
        """The changes into the keys, past ``FOLD_MIN`` of them and 1/32 of the keys (a
        saved state writes the changes whole each time, the keys when they change)."""
        if len(self.ins) + len(self.era) <= max(FOLD_MIN, len(self.keys) >> 5):
            return
        self._set_keys(self.all_keys())
        self.ins, self.era = set(), set()


# Changes a ``CodedRows`` keeps as rows before it folds them into its keys (at least).
FOLD_MIN = 4096
# Keys per fence of a ``CodedRows`` (512 int64: one 4 KiB page).
FENCE = 512


class SortedRows(Protocol):
    """One version of a relation (columns possibly permuted), sorted lexicographically."""

    def ceil(self, key: tuple[Any, ...]) -> Row | None:
        """The least row ≥ ``key`` (a prefix with ``TOP`` at the end skips a subtree)."""
        ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Row]: ...

    def __contains__(self, row: object) -> bool: ...


class ListRows:
    """An immutable sorted list of distinct rows (a snapshot, a delta, a test fixture)."""

    __slots__ = ("rows",)

    def __init__(self, rows: Iterable[Row]):
        self.rows: list[Row] = sorted(set(rows))

    def ceil(self, key: tuple[Any, ...]) -> Row | None:
        i = bisect_left(self.rows, key)
        return self.rows[i] if i < len(self.rows) else None

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    def __contains__(self, row: object) -> bool:
        r = self.ceil(row)  # type: ignore[arg-type]
        return r is not None and r == row


def sorted_ceil(rows: SortedList, key: tuple[Any, ...]) -> Row | None:
    """The least element of ``rows`` that is ≥ ``key``, or None.

    Reads the SortedList's sublists directly (``_maxes``/``_lists``, stable since
    sortedcontainers 2.0): two bisections and no positional index, which is what a trie
    iterator needs on every operation.
    """
    maxes = rows._maxes
    i = bisect_left(maxes, key)
    if i == len(maxes):
        return None
    sub = rows._lists[i]
    return sub[bisect_left(sub, key)]  # type: ignore[no-any-return]


# The rows of an index: in memory, or a sorted run on disk with the changes since.
Index: TypeAlias = SortedList | PagedRows


def ceil_of(rows: Index) -> Any:
    """The ``ceil`` function of an index."""
    if type(rows) is PagedRows:
        return rows.ceil
    return partial(sorted_ceil, rows)


class CurrentRows:
    """The current version of an index: a view of its ``SortedList`` (or ``PagedRows``)."""

    __slots__ = ("_rows", "ceil")

    def __init__(self, rows: Index):
        self._rows = rows
        self.ceil = ceil_of(rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows)

    def __contains__(self, row: object) -> bool:
        return row in self._rows


class PreviousRows:
    """The version before the last commit: current − inserted + erased, never copied.

    ``ceil`` skips rows of the current version that the last commit inserted (at most
    |inserted| skips in all) and merges in the rows it erased.
    """

    __slots__ = ("_ceil", "_erased", "_inserted", "_rows")

    def __init__(self, rows: Index, inserted: set[Row], erased: SortedList):
        self._rows = rows
        self._ceil = ceil_of(rows)
        self._inserted = inserted
        self._erased = erased

    def ceil(self, key: tuple[Any, ...]) -> Row | None:
        ceil = self._ceil
        cur = ceil(key)
        inserted = self._inserted
        while cur is not None and cur in inserted:
            cur = ceil((*cur, BOTTOM))  # the next row after cur
        erased = self._erased
        old = sorted_ceil(erased, key) if erased else None
        if cur is None:
            return old
        if old is None:
            return cur
        return old if old < cur else cur

    def __len__(self) -> int:
        return len(self._rows) - len(self._inserted) + len(self._erased)

    def __iter__(self) -> Iterator[Row]:
        inserted = self._inserted
        merged = SortedList(r for r in self._rows if r not in inserted)
        merged.update(self._erased)
        return iter(merged)

    def __contains__(self, row: object) -> bool:
        if row in self._erased:
            return True
        return row in self._rows and row not in self._inserted


def permute(row: Row, perm: tuple[int, ...]) -> Row:
    return tuple(row[i] for i in perm)


class CodedVersions(Protocol):
    """An index kept as codes beside the sorted one, in both versions (a compiled join's
    reading: ``deltalog.engine.columnar.versions.CodedIndex``)."""

    def commit(self, inserted: Sequence[Row], erased: Sequence[Row]) -> bool:
        """Apply an effective change (rows in the index's column order); False when a row
        cannot be coded (the relation then drops the index)."""
        ...

    types: tuple[str, ...]  # the columns' types, in the index's order

    def settle(self) -> None: ...

    def rows(self, old: bool = False) -> Any:
        """A version's rows as one sorted array of codes."""
        ...

    def version(self, old: bool) -> tuple[Any, Any, Any]:
        """The current version (or with ``old`` the one before the last commit) as its
        three sorted code arrays: base, minus, plus."""
        ...

    def __len__(self) -> int: ...


class VersionedRelation:
    """A set relation with sorted indexes (one per column permutation) that keeps its
    previous version and the delta of the last commit; and, for a compiled join, some
    indexes as codes too (``coded``), committed alike."""

    def __init__(self, name: str, arity: int, rows: Iterable[Row] = ()):
        self.name = name
        self.arity = arity
        self._rows: set[Row] | PagedRows | CodedRows = set(rows)
        # sorted indexes are built when first asked for (a relation nobody reads in order,
        # such as a closure only the columnar kernel joins, keeps none), then maintained
        self._indexes: dict[tuple[int, ...], Index] = {}
        self._inserted: set[Row] = set()
        self._erased: set[Row] = set()
        self._prev_views: dict[tuple[int, ...], tuple[set[Row], SortedList]] = {}
        # (None: the index met a value with no code)
        self._coded: dict[tuple[int, ...], CodedVersions | None] = {}

    # -- versions -------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """What a saved state keeps: the rows and indexes, the large ones as sorted runs
        (``Paged``: on disk when the state is saved to a segment store), and no previous
        version (a state is saved settled)."""
        state = dict(self.__dict__)
        state["_inserted"], state["_erased"], state["_prev_views"] = set(), set(), {}

        def paged(rows: Any) -> Any:
            return Paged(rows) if type(rows) is PagedRows or len(rows) >= PAGED_MIN else rows

        # (coded rows keep themselves: their keys an array, their coding the producer's)
        rows = self._rows
        state["_rows"] = rows if type(rows) is CodedRows else (
            Paged(rows, self._ordered()) if type(rows) is set and len(rows) >= PAGED_MIN
            else paged(rows))
        state["_indexes"] = {perm: paged(sl) for perm, sl in self._indexes.items()}
        return state

    def _ordered(self) -> Callable[[], list[Row]] | None:
        """The rows in order from the coded index of the columns' own order when its codes
        are the values (ints): a save writes them as a sorted run without sorting a set
        of Python tuples (1.3 s for 10^6 rows of two ints, against 0.2 s)."""
        # (a relation restored from a state saved before coded indexes has none)
        index = self.__dict__.get("_coded", {}).get(tuple(range(self.arity)))
        if index is None or any(t != "int" for t in index.types):
            return None
        return lambda: list(map(tuple, index.rows().tolist()))

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("_coded", {})  # saved before coded indexes existed
        self.__dict__.update(state)
        if type(self._rows) not in (PagedRows, CodedRows, set):
            self._rows = set(self._rows)  # read back in memory: a sorted copy of the set

    def index(self, perm: tuple[int, ...]) -> Index:
        """The current version sorted by the columns ``perm`` (built once, then kept)."""
        sl = self._indexes.get(perm)
        if sl is None:
            identity = perm == tuple(range(self.arity))
            sl = SortedList(self._rows if identity else (permute(r, perm) for r in self._rows))
            self._indexes[perm] = sl
        return sl

    def index_from(self, perm: tuple[int, ...], rows: Callable[[], list[Row]]) -> None:
        """Build the index in ``perm`` order, unless kept, from ``rows()``: the current rows
        with columns in ``perm`` order, best sorted (a load that sorted them: the sort is
        then one pass)."""
        if perm not in self._indexes:
            listed = rows()
            if len(listed) != len(self._rows):
                raise ValueError(f"an index of {len(listed)} rows for {len(self._rows)}")
            self._indexes[perm] = SortedList(listed)

    def kept_index(self, perm: tuple[int, ...]) -> SortedList | None:
        """The index in ``perm`` order when this relation keeps it in memory (a sorted
        sequence, read-only to the caller); None when it keeps none or keeps it on disk."""
        got = self._indexes.get(perm)
        return got if type(got) is SortedList else None

    def coded(self, perm: tuple[int, ...]) -> CodedVersions | None:
        """The index in ``perm`` order as codes, when kept."""
        return self._coded.get(perm)

    def coded_refused(self, perm: tuple[int, ...]) -> bool:
        """Whether the index in ``perm`` order met a value with no code (it is then never
        kept as codes again)."""
        return perm in self._coded and self._coded[perm] is None

    def keep_coded(self, perm: tuple[int, ...], index: CodedVersions | None) -> None:
        """Keep ``index`` (this relation's rows in ``perm`` order, coded, in both versions)
        and commit every change to it from now on; None: the rows have no codes."""
        if index is not None and len(index) != len(self._rows):
            raise ValueError(f"a coded index of {len(index)} rows for {len(self._rows)}")
        self._coded[perm] = index

    def current(self, perm: tuple[int, ...] | None = None) -> CurrentRows:
        return CurrentRows(self.index(perm or tuple(range(self.arity))))

    def previous(self, perm: tuple[int, ...] | None = None) -> PreviousRows:
        perm = perm or tuple(range(self.arity))
        cached = self._prev_views.get(perm)
        if cached is None:
            ins = {permute(r, perm) for r in self._inserted}
            era = SortedList(permute(r, perm) for r in self._erased)
            cached = (ins, era)
            self._prev_views[perm] = cached
        return PreviousRows(self.index(perm), cached[0], cached[1])

    def delta(self) -> Delta:
        """The last commit's change: +1 per inserted row, −1 per erased row."""
        out: Delta = dict.fromkeys(self._inserted, 1)
        out.update(dict.fromkeys(self._erased, -1))
        return out

    @property
    def rows(self) -> set[Row] | PagedRows | CodedRows:
        """The current version as a set (do not mutate)."""
        return self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, row: object) -> bool:
        return row in self._rows

    # -- commits --------------------------------------------------------------------
    def commit(self, delta: Mapping[Row, int]) -> Delta:
        """Apply ``delta`` with set semantics (inserting a present row or erasing an absent
        one changes nothing) and return the effective change, which becomes ``delta()``."""
        current = self._rows
        if type(current) is CodedRows:  # one lookup of every row, not one per row
            listed = list(delta)
            held = current.contains_all(listed).tolist()
            inserted = {r for r, h in zip(listed, held, strict=True) if delta[r] > 0 and not h}
            erased = {r for r, h in zip(listed, held, strict=True) if delta[r] < 0 and h}
        else:
            inserted = {r for r, w in delta.items() if w > 0 and r not in current}
            erased = {r for r, w in delta.items() if w < 0 and r in current}
        self._rows.update(inserted)
        self._rows.difference_update(erased)
        for perm, sl in self._indexes.items():
            for r in erased:
                sl.remove(permute(r, perm))
            for r in inserted:
                sl.add(permute(r, perm))
        for perm, coded in self._coded.items():
            if coded is not None and not coded.commit(
                    [permute(r, perm) for r in inserted], [permute(r, perm) for r in erased]):
                self._coded[perm] = None  # a value with no code: the tuple join reads it
        self._inserted, self._erased = inserted, erased
        self._prev_views = {}
        return self.delta()

    def load(self, rows: set[Row] | CodedRows) -> None:
        """The first version of an empty, settled relation: ``rows`` (a set, or coded rows
        a columnar kernel computed, that the relation takes over), settled at once. A
        load's bulk path: no delta is kept (a load has no previous version to present)."""
        if self._rows or self._inserted or self._erased:
            raise ValueError(f"relation {self.name} is not empty and settled")
        self._rows = rows
        self._indexes = {}
        self._prev_views = {}
        self._coded = {}

    def settle(self) -> None:
        """Forget the previous version: the current one is now the only one."""
        self._inserted, self._erased = set(), set()
        self._prev_views = {}
        for coded in self._coded.values():
            if coded is not None:
                coded.settle()


class RelationStore:
    """Every relation of a program, by name."""

    def __init__(self, arities: Mapping[str, int]):
        self.relations = {name: VersionedRelation(name, a) for name, a in arities.items()}
        # The dictionary of string codes the relations' coded indexes share
        # (``deltalog.engine.columnar.strings.StringCodes``), made by the first compiled
        # join that codes a string column; None until then.
        self.strings: Any = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("strings", None)
        self.__dict__.update(state)

    def __getitem__(self, name: str) -> VersionedRelation:
        return self.relations[name]

    def __contains__(self, name: object) -> bool:
        return name in self.relations

    def settle(self) -> None:
        for rel in self.relations.values():
            rel.settle()


class StratumMaintainer(Protocol):
    """Maintains the predicates of one stratum (the contract every strategy keeps).

    ``initialize`` computes the stratum from the current versions of its inputs in the
    store and returns the full contents of its predicates (sets of rows, or coded rows the
    store keeps as they are); ``apply`` gets the non-empty
    effective input deltas of a commit (the store presents ``previous()`` and
    ``current()`` of every input) and returns its predicates' effective deltas. Neither
    commits into the store: the engine does.
    """

    strategy: str
    work: dict[str, int]

    def initialize(self, store: RelationStore) -> Mapping[str, set[Row] | CodedRows]: ...

    def apply(self, store: RelationStore, deltas: Mapping[str, Delta]) -> dict[str, Delta]: ...
