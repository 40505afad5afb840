"""Relations as integer arrays: a ``Relation`` is distinct rows of codes (declared column
order) with, built on demand, its sorted indexes (the tries the joins read, one per column
order).

A relation a stratum derives grows round by round: each round's new rows are found by
their packed keys (or a hash set, for rows too wide to pack; ``Relation``) and held apart;
the indexes are frozen during a round (a join of the round reads the relation as the
round found it, as semi-naive evaluation requires) and at its end the round's rows,
sorted, are merged into each index built so far. So a relation is sorted once per column
order a join reads it in, then kept sorted by merges.
"""

import numpy as np
from numpy.typing import NDArray

from deltalog.engine.columnar import kernels

I64 = NDArray[np.int64]
Perm = tuple[int, ...]


def sort_order(rows: I64) -> NDArray[np.intp]:
    """The permutation that sorts ``rows`` lexicographically."""
    k = rows.shape[1]
    if k == 0:
        return np.arange(rows.shape[0])
    if k == 1:
        return np.argsort(rows[:, 0], kind="stable")
    pack = _pack_for(rows, None)
    if pack is not None:
        return np.argsort(pack.keys(rows), kind="stable")
    return np.lexsort(rows.T[::-1])


def sorted_rows(rows: I64) -> I64:
    return np.ascontiguousarray(rows[sort_order(rows)])


def sorted_distinct(rows: I64) -> I64:
    """``rows`` sorted lexicographically without repeats."""
    if rows.shape[0] <= 1:
        return np.ascontiguousarray(rows)
    rows = np.ascontiguousarray(rows)
    if rows.shape[1] and kernels.sorted_distinct_already(rows):  # a table written in order
        return rows
    out = sorted_rows(rows)
    if rows.shape[1] == 0:
        return out[:1]
    return np.ascontiguousarray(out[kernels.distinct_sorted(out)])


_EMPTY_TABLE = np.full(1, -1, np.int64)


def _pack_for(rows: I64, old: "_Pack | None") -> "_Pack | None":
    """A packing of rows into int64 keys (order kept) for ``rows`` and what ``old``
    covers, with room to double each column's range; None past 62 bits."""
    if rows.shape[0] and rows.shape[1]:
        low, high = kernels.bounds(rows)
        lo, hi = low.tolist(), high.tolist()
    else:
        lo, hi = [0] * rows.shape[1], [0] * rows.shape[1]
    if old is not None:
        lo = [min(a, b) for a, b in zip(lo, old.lo.tolist(), strict=True)]
        hi = [max(a, b) for a, b in zip(hi, old.top(), strict=True)]
    widths = [(h - m).bit_length() + 1 for h, m in zip(hi, lo, strict=True)]
    if sum(widths) > 62:
        return None
    shifts = []
    acc = 0
    for w in reversed(widths):
        shifts.append(acc)
        acc += w
    shifts.reverse()
    return _Pack(np.array(lo, np.int64), np.array(shifts, np.int64), widths)


class _Pack:
    """Column c of a row is bits ``shifts[c]`` up of its key, offset by ``lo[c]``."""

    __slots__ = ("lo", "shifts", "widths")

    def __init__(self, lo: I64, shifts: I64, widths: list[int]):
        self.lo, self.shifts, self.widths = lo, shifts, widths

    def top(self) -> list[int]:
        return [int(m) + (1 << w) - 1 for m, w in zip(self.lo.tolist(), self.widths, strict=True)]

    def fits(self, rows: I64) -> bool:
        if not rows.shape[0] or not rows.shape[1]:
            return True
        low, high = kernels.bounds(rows)
        return all(a >= b for a, b in zip(low.tolist(), self.lo.tolist(), strict=True)) and all(
            h <= t for h, t in zip(high.tolist(), self.top(), strict=True))

    def keys(self, rows: I64) -> I64:
        return kernels.pack(rows, self.lo, self.shifts)  # type: ignore[no-any-return]

    def rows(self, keys: I64) -> I64:
        out = np.empty((keys.shape[0], len(self.widths)), np.int64)
        for c, w in enumerate(self.widths):
            out[:, c] = ((keys >> self.shifts[c]) & ((1 << w) - 1)) + self.lo[c]
        return out


def _distinct_keys(keys: I64) -> I64:
    keys = np.sort(keys)
    if keys.shape[0] > 1:
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    return keys


class Relation:
    """Distinct rows of codes; ``index(perm)`` gives them with columns in ``perm`` order,
    sorted (as of the last ``freeze``).

    A relation that grows keeps its rows one of two ways: packed, as one sorted int64 key
    per row (the columns' ranges fit in 62 bits, with room to double; a value outside
    repacks), where a batch's new rows are found by sorting its keys and walking the
    held ones; or, for wider rows, in a buffer with a hash set over it."""

    __slots__ = ("_buf", "_canon", "_frozen", "_hashed", "_indexes", "_keys", "_n", "_pack",
                 "_pending", "_sorted", "_table", "arity")

    def __init__(self, rows: I64, is_sorted: bool = False):
        self.arity = int(rows.shape[1])
        self._buf = np.ascontiguousarray(rows, dtype=np.int64)
        self._n = int(rows.shape[0])
        self._frozen = self._n
        self._sorted = is_sorted
        self._indexes: dict[Perm, I64] = {}
        self._table: I64 | None = None
        self._pack: _Pack | None = None
        self._keys: I64 | None = None
        self._pending: list[I64] = []
        self._canon: I64 | None = None  # the rows sorted (packed mode)
        self._hashed = False  # grows in the buffer with the hash set

    @classmethod
    def of(cls, rows: I64) -> "Relation":
        """The set of ``rows`` (any order, repeats allowed)."""
        return cls(sorted_distinct(np.asarray(rows, np.int64).reshape(rows.shape)), True)

    @classmethod
    def empty(cls, arity: int) -> "Relation":
        return cls(np.zeros((0, arity), np.int64), True)

    def __len__(self) -> int:
        """The rows (in packed mode during a round, an upper bound)."""
        if self._keys is not None:
            return int(self._keys.shape[0]) + sum(int(k.shape[0]) for k in self._pending)
        return self._n

    @property
    def rows(self) -> I64:
        """The rows as of the last ``freeze``."""
        if self._keys is not None:
            return self._canonical()
        return self._buf[: self._frozen]

    def _canonical(self) -> I64:
        assert self._keys is not None and self._pack is not None
        if self._canon is None:
            self._canon = self._pack.rows(self._keys)
        return self._canon

    def index(self, perm: Perm) -> I64:
        """The rows (as of the last ``freeze``) with columns in ``perm`` order, sorted."""
        identity = perm == tuple(range(self.arity))
        if identity and self._keys is not None:
            return self._canonical()
        if identity and self._sorted and self._frozen == self._n:
            return self.rows
        got = self._indexes.get(perm)
        if got is None:
            rows = self.rows
            got = sorted_rows(np.ascontiguousarray(rows[:, list(perm)]))
            if rows.shape[0]:  # an empty relation's index is not kept (nor merged into)
                self._indexes[perm] = got
        return got

    # -- growing ----------------------------------------------------------------------

    def add(self, rows: I64) -> None:
        """Add ``rows`` (repeats and rows held already are dropped); they show in
        ``index`` after the next ``freeze``."""
        if not rows.shape[0]:
            return
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        if self._keys is None and self._table is None and not self._hashed:
            held = self._buf[: self._n]
            pack = _pack_for(np.concatenate([held, rows]) if self._n else rows, None)
            if pack is not None:
                self._pack = pack
                self._keys = _distinct_keys(pack.keys(held))
            else:
                self._hashed = True
        if self._keys is not None:
            assert self._pack is not None
            if not self._pack.fits(rows):
                self._repack(rows)
        if self._keys is not None:
            assert self._pack is not None
            keys = _distinct_keys(self._pack.keys(rows))
            keys = keys[kernels.absent_keys(keys, self._keys)]
            if keys.shape[0]:
                self._pending.append(keys)
            return
        if self._table is None:
            self._table = kernels.hash_build(self._buf, self._n) if self._n else _EMPTY_TABLE
        need = self._n + rows.shape[0]
        if need > self._buf.shape[0]:
            grown = np.empty((max(need, 2 * self._buf.shape[0], 64), self.arity), np.int64)
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown
        self._n, self._table = kernels.hash_add(self._table, self._buf, self._n, rows)
        self._sorted = False

    def _repack(self, rows: I64) -> None:
        """A packing that covers ``rows`` too, or the hash set when none fits."""
        old = self._pack
        assert old is not None and self._keys is not None
        pack = _pack_for(rows, old)
        if pack is not None:
            self._keys = pack.keys(old.rows(self._keys))
            self._pending = [pack.keys(old.rows(k)) for k in self._pending]
            self._pack = pack
            self._canon = None
            return
        held = old.rows(self._keys)
        self._buf, self._n, self._frozen = held, held.shape[0], held.shape[0]
        self._sorted = True
        self._hashed = True
        pending = [old.rows(k) for k in self._pending]
        self._keys, self._pack, self._pending, self._canon = None, None, [], None
        for p in pending:
            self.add(p)

    def freeze(self) -> "Relation":
        """End a round: the rows added since the last freeze, merged into every index
        built so far; returns them as a relation of their own (the round's delta)."""
        if self._keys is not None:
            assert self._pack is not None
            if not self._pending:
                return Relation.empty(self.arity)
            new = self._pending[0] if len(self._pending) == 1 else _distinct_keys(
                np.concatenate(self._pending))
            self._pending = []
            self._keys = kernels.merge_rows(self._keys.reshape(-1, 1), new.reshape(-1, 1))[:, 0]
            self._canon = None
            delta = Relation(self._pack.rows(new), True)
        else:
            start, self._frozen = self._frozen, self._n
            delta = Relation(np.ascontiguousarray(self._buf[start: self._n]))
            if start == self._n:
                return delta
        for perm, index in self._indexes.items():
            self._indexes[perm] = kernels.merge_rows(index, delta.index(perm))
        return delta
