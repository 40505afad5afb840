"""Complement iteration with counting (Veldhuizen 2014, §3.1.2): for S ⊆ T, the rows of T \\ S in
O(|T \\ S| · log n) count queries instead of one probe of S per row of T.

Intuitively, if a key interval holds as many rows of S as of T, the complement is empty
there and can be skipped whole. The counting scan trees are the ``SortedList``\\s the
relations are already stored in: a rank (``bisect``) or a select (``sl[i]``) is the count
of a key interval, O(log n). ``ComplementRows.ceil`` answers the least row of T \\ S at or
after a key by galloping over T's positions: O(log gap) count queries to skip a gap of
rows that S also holds. Everything here assumes S ⊆ T in every version it reads; without
it equal counts prove nothing (the planner only builds a complement when the program
guarantees it, ``deltalog.engine.analysis.containment``).

The previous version of T \\ S is presented like ``storage.PreviousRows``: the current
complement minus the rows it gained in the last commit plus the rows it lost, both found
among the rows the last commit changed in T or S, O(δ log n) once per view.
"""

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from sortedcontainers import SortedList

from deltalog.engine.join.trie import JoinStats
from deltalog.engine.sentinels import BOTTOM
from deltalog.engine.storage import VersionedRelation, permute
from deltalog.engine.values import Row


class ComplementRows:
    """T \\ S over the current versions, as ``SortedRows`` (a ``CeilTrieIterator`` over it
    is the complement trie iterator). ``t`` and ``s`` are the two relations' sorted
    indexes in the same column order; ``stats.counts`` counts the count queries."""

    __slots__ = ("s", "stats", "t")

    def __init__(self, t: SortedList, s: SortedList, stats: JoinStats):
        self.t = t
        self.s = s
        self.stats = stats

    def ceil(self, key: tuple[Any, ...]) -> Row | None:
        """The least row of T \\ S that is ≥ ``key``."""
        t, s, stats = self.t, self.s, self.stats
        i = t.bisect_left(key)  # rows of T before key
        j = s.bisect_left(key)  # rows of S before key
        stats.counts += 2
        rest = len(t) - i
        if rest == len(s) - j:  # [key, +inf) holds as many rows of S as of T
            return None
        # same(k): [key, T[i + k]] holds k + 1 rows of S, as many as of T, so no row of the
        # complement. It holds for k < m and fails from m on, where T[i + m] is the answer.

        def same(k: int) -> bool:
            stats.counts += 2
            return s.bisect_right(t[i + k]) - j == k + 1

        if not same(0):
            return t[i]  # type: ignore[no-any-return]
        lo, step = 0, 1  # same(lo); gallop for a k where it fails
        while True:
            k = lo + step
            if k >= rest:
                hi = rest  # past the end: the complement has a row before it (counts differ)
                break
            if not same(k):
                hi = k
                break
            lo, step = k, step * 2
        while hi - lo > 1:  # same(lo) and not same(hi): bisect
            mid = (lo + hi) // 2
            if same(mid):
                lo = mid
            else:
                hi = mid
        return t[i + hi]  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self.t) - len(self.s)

    def __iter__(self) -> Iterator[Row]:
        row = self.ceil(())
        while row is not None:
            yield row
            row = self.ceil((*row, BOTTOM))

    def __contains__(self, row: object) -> bool:
        return row in self.t and row not in self.s


class PreviousComplement:
    """T \\ S over the previous versions: the current complement minus ``inserted`` (rows
    it gained in the last commit) plus ``erased`` (rows it lost), merged on the fly."""

    __slots__ = ("_current", "_erased", "_inserted")

    def __init__(self, current: ComplementRows, inserted: set[Row], erased: list[Row]):
        self._current = current
        self._inserted = inserted
        self._erased = erased  # sorted

    def ceil(self, key: tuple[Any, ...]) -> Row | None:
        current = self._current
        cur = current.ceil(key)
        while cur is not None and cur in self._inserted:
            cur = current.ceil((*cur, BOTTOM))
        erased = self._erased
        k = bisect_left(erased, key)
        old = erased[k] if k < len(erased) else None
        if cur is None:
            return old
        if old is None:
            return cur
        return old if old < cur else cur

    def __len__(self) -> int:
        return len(self._current) - len(self._inserted) + len(self._erased)

    def __iter__(self) -> Iterator[Row]:
        row = self.ceil(())
        while row is not None:
            yield row
            row = self.ceil((*row, BOTTOM))

    def __contains__(self, row: object) -> bool:
        if row in self._inserted:
            return False
        erased = self._erased
        k = bisect_left(erased, row)  # type: ignore[call-overload]
        return row in self._current or (k < len(erased) and erased[k] == row)


class Complement:
    """T \\ S for relations with S ⊆ T, in the column order ``perm``: its current and
    previous versions and the delta of the last commit (for tree surgery), the delta
    computed once, on first use."""

    def __init__(self, t: VersionedRelation, s: VersionedRelation, perm: tuple[int, ...],
                 stats: JoinStats):
        self.t_rel = t
        self.s_rel = s
        self.perm = perm
        self.stats = stats
        self._change: tuple[set[Row], list[Row]] | None = None

    def current(self) -> ComplementRows:
        return ComplementRows(self.t_rel.index(self.perm), self.s_rel.index(self.perm),
                              self.stats)

    def _last_change(self) -> tuple[set[Row], list[Row]]:
        """Rows (permuted) that joined and that left T \\ S in the last commit: only rows
        the commit changed in T or S can have."""
        if self._change is None:
            t, s = self.t_rel, self.s_rel
            dt, ds = t.delta(), s.delta()
            joined: set[Row] = set()
            left: list[Row] = []
            for row in dt.keys() | ds.keys():
                now = row in t.rows and row not in s.rows
                # The previous versions: current minus inserted plus erased.
                t_before = dt.get(row, 0) < 0 or (row in t.rows and dt.get(row, 0) == 0)
                s_before = ds.get(row, 0) < 0 or (row in s.rows and ds.get(row, 0) == 0)
                before = t_before and not s_before
                if now and not before:
                    joined.add(permute(row, self.perm))
                elif before and not now:
                    left.append(permute(row, self.perm))
            left.sort()
            self._change = (joined, left)
        return self._change

    def previous(self) -> PreviousComplement:
        joined, left = self._last_change()
        return PreviousComplement(self.current(), joined, left)

    def delta(self) -> list[tuple[Row, int]]:
        """The last commit's change of T \\ S (permuted rows, +1 joined, −1 left)."""
        joined, left = self._last_change()
        return [*((r, 1) for r in joined), *((r, -1) for r in left)]
