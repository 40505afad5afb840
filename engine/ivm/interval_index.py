"""Sensitivity indices (Veldhuizen 2014, §4.1, §3.2): the intervals recorded for one atom at one
trie depth, with stabbing queries that also remove what they find.

Two parts, because intervals arrive in two ways. The initial evaluation records millions
at once: they are sorted by (bucket, start) into one list, with a scan tree of interval
ends laid out in an array (a segment tree), which costs a few machine words per interval
and no per-node objects; a found interval is marked dead there. Maintenance records few
at a time: they go into a dynamic scan tree (``IntervalTree``, a treap). Both answer a
stab in O((m+1) log n).
"""

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import Any

from engine.ivm.scan_tree import IntervalTree
from engine.storage import BOTTOM

Record = tuple[tuple[Any, ...], Any, Any, Any]  # (bucket, lo, hi, payload)


def _start(r: Record) -> tuple[Any, Any]:
    return (r[0], r[1])


class StaticIntervals:
    """Intervals loaded at once, sorted by (bucket, lo), with a max-of-ends segment tree."""

    __slots__ = ("live", "records", "size", "tree")

    def __init__(self, records: list[Record]):
        records.sort(key=_start)
        self.records = records
        n = len(records)
        size = 1
        while size < n:
            size *= 2
        tree: list[Any] = [BOTTOM] * (2 * size)
        tree[size : size + n] = [r[2] for r in records]
        for i in range(size - 1, 0, -1):
            a = tree[2 * i]
            b = tree[2 * i + 1]
            tree[i] = a if b < a else b
        self.tree = tree
        self.size = size
        self.live = n

    def stab(self, bucket: tuple[Any, ...], x: Any) -> list[int]:
        """Positions of the live intervals of ``bucket`` that contain ``x``."""
        records = self.records
        lo_pos = bisect_left(records, (bucket, BOTTOM), key=_start)
        hi_pos = bisect_right(records, (bucket, x), key=_start)
        if lo_pos >= hi_pos:
            return []
        tree = self.tree
        size = self.size
        out: list[int] = []
        stack = [(1, 0, size)]
        while stack:
            node, a, b = stack.pop()
            if b <= lo_pos or a >= hi_pos or tree[node] < x:
                continue
            if node >= size:
                out.append(node - size)
                continue
            mid = (a + b) // 2
            stack.append((2 * node + 1, mid, b))
            stack.append((2 * node, a, mid))
        return out

    def kill(self, pos: int) -> None:
        tree = self.tree
        j = self.size + pos
        tree[j] = BOTTOM
        j //= 2
        while j:
            a = tree[2 * j]
            b = tree[2 * j + 1]
            tree[j] = a if b < a else b
            j //= 2
        self.live -= 1

    def live_records(self) -> list[Record]:
        size = self.size
        tree = self.tree
        return [r for i, r in enumerate(self.records) if tree[size + i] is not BOTTOM]


class IntervalIndex:
    """One sensitivity index: a static part from bulk loads, a dynamic part for the rest."""

    def __init__(self) -> None:
        self.static: StaticIntervals | None = None
        self.dynamic = IntervalTree()

    def __len__(self) -> int:
        return (self.static.live if self.static else 0) + len(self.dynamic)

    def add_many(self, intervals: Iterable[Record]) -> None:
        batch = intervals if isinstance(intervals, list) else list(intervals)
        # A rebuild of the static part costs O(n log n); single inserts O(log n) each:
        # rebuild only when the batch is large against what is there.
        if len(batch) * 4 > len(self):
            records = batch
            if self.static is not None:
                records = records + self.static.live_records()
            if len(self.dynamic):
                records = records + [
                    (b, lo, hi, p) for (b, lo, _), (_, hi), p in self.dynamic.tree.items()
                ]
                self.dynamic = IntervalTree()
            self.static = StaticIntervals(records)
        else:
            for bucket, lo, hi, payload in batch:
                self.dynamic.add(bucket, lo, hi, payload)

    def stab(self, bucket: tuple[Any, ...], x: Any) -> list[tuple[Any, Any, Any]]:
        """Every interval of ``bucket`` containing ``x`` as (lo, hi, payload), removed."""
        out = []
        static = self.static
        if static is not None:
            for pos in static.stab(bucket, x):
                _, lo, hi, payload = static.records[pos]
                out.append((lo, hi, payload))
                static.kill(pos)
        if len(self.dynamic):
            out.extend(self.dynamic.stab(bucket, x))
        return out

    def intervals(self) -> list[Record]:
        """Every live interval (for tests and inspection)."""
        out = self.static.live_records() if self.static is not None else []
        out += [(b, lo, hi, p) for (b, lo, _), (_, hi), p in self.dynamic.tree.items()]
        return out
