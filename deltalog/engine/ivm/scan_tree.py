"""Scan trees (Veldhuizen 2014, §3.1): an ordered collection whose every subtree also carries the
⊕-aggregate of its values, so the scan of any key range costs O(log n), and an update
costs O(log n).

One structure, two uses, as in the paper: semigroup aggregations (min, max) keep the
satisfying assignments of a group in a scan tree, and the interval trees behind the
sensitivity indices (§3.2) are scan trees of max-of-interval-ends ordered by start.

A treap: keys are unique tuples, priorities are random (heap-ordered), bulk loads build a
balanced tree in O(n) from sorted items.
"""

import random
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise
from typing import Any

Op = Callable[[Any, Any], Any]
Interval = tuple[tuple[Any, ...], Any, Any, Any, int]  # (bucket, lo, hi, payload, uid)


class _Node:
    __slots__ = ("agg", "key", "left", "payload", "prio", "right", "value")

    def __init__(self, key: Any, value: Any, payload: Any, prio: float):
        self.key = key
        self.value = value
        self.payload = payload
        self.prio = prio
        self.left: _Node | None = None
        self.right: _Node | None = None
        self.agg = value


class ScanTree:
    """Unique ``key`` → (``value``, ``payload``), ordered by key, with ``op``-aggregates."""

    def __init__(self, op: Op, items: Iterable[tuple[Any, Any, Any]] = (), seed: int = 0):
        self.op = op
        self._rng = random.Random(seed)
        self._size = 0
        self.root: _Node | None = None
        batch = list(items)
        if batch:
            self.bulk_load(batch)

    def __len__(self) -> int:
        return self._size

    # -- maintenance of aggregates --------------------------------------------------
    def _fix(self, n: _Node) -> None:
        agg = n.value
        op = self.op
        if n.left is not None:
            agg = op(n.left.agg, agg)
        if n.right is not None:
            agg = op(agg, n.right.agg)
        n.agg = agg

    def _rot_right(self, n: _Node) -> _Node:
        left = n.left
        assert left is not None
        n.left = left.right
        left.right = n
        self._fix(n)
        self._fix(left)
        return left

    def _rot_left(self, n: _Node) -> _Node:
        right = n.right
        assert right is not None
        n.right = right.left
        right.left = n
        self._fix(n)
        self._fix(right)
        return right

    # -- updates ----------------------------------------------------------------------
    def bulk_load(self, items: list[tuple[Any, Any, Any]]) -> None:
        """Add many ``(key, value, payload)`` items: a balanced rebuild, O(n log n)."""
        merged = sorted([*self.items(), *items], key=lambda t: t[0])
        for a, b in pairwise(merged):
            if a[0] == b[0]:
                raise KeyError(f"duplicate key {a[0]!r}")
        prios = sorted((self._rng.random() for _ in merged), reverse=True)
        nodes: list[_Node | None] = [None] * len(merged)

        # Balanced tree over merged[lo:hi]; priorities handed out level by level so that
        # every parent outranks its children (the heap property of a treap).
        levels: list[list[tuple[int, int, int]]] = []

        def shape(lo: int, hi: int, depth: int) -> int | None:
            if lo >= hi:
                return None
            mid = (lo + hi) // 2
            while len(levels) <= depth:
                levels.append([])
            levels[depth].append((mid, lo, hi))
            shape(lo, mid, depth + 1)
            shape(mid + 1, hi, depth + 1)
            return mid

        root = shape(0, len(merged), 0)
        k = 0
        for level in levels:
            for mid, _, _ in level:
                key, value, payload = merged[mid]
                nodes[mid] = _Node(key, value, payload, prios[k])
                k += 1
        for level in reversed(levels):
            for mid, lo, hi in level:
                n = nodes[mid]
                assert n is not None
                n.left = nodes[(lo + mid) // 2] if lo < mid else None
                n.right = nodes[(mid + 1 + hi) // 2] if mid + 1 < hi else None
                self._fix(n)
        self.root = nodes[root] if root is not None else None
        self._size = len(merged)

    def insert(self, key: Any, value: Any, payload: Any = None) -> None:
        node = _Node(key, value, payload, self._rng.random())
        self.root = self._insert(self.root, node)
        self._size += 1

    def _insert(self, n: _Node | None, new: _Node) -> _Node:
        if n is None:
            return new
        if new.key < n.key:
            n.left = self._insert(n.left, new)
            if n.left.prio > n.prio:
                return self._rot_right(n)
        elif n.key < new.key:
            n.right = self._insert(n.right, new)
            if n.right.prio > n.prio:
                return self._rot_left(n)
        else:
            raise KeyError(f"duplicate key {new.key!r}")
        self._fix(n)
        return n

    def remove(self, key: Any) -> None:
        self.root = self._remove(self.root, key)
        self._size -= 1

    def _remove(self, n: _Node | None, key: Any) -> _Node | None:
        if n is None:
            raise KeyError(key)
        if key < n.key:
            n.left = self._remove(n.left, key)
        elif n.key < key:
            n.right = self._remove(n.right, key)
        else:
            if n.left is None:
                return n.right
            if n.right is None:
                return n.left
            if n.left.prio > n.right.prio:
                n = self._rot_right(n)
                n.right = self._remove(n.right, key)
            else:
                n = self._rot_left(n)
                n.left = self._remove(n.left, key)
        self._fix(n)
        return n

    # -- queries ----------------------------------------------------------------------
    def items(self) -> Iterator[tuple[Any, Any, Any]]:
        """Every ``(key, value, payload)`` in key order."""
        stack: list[_Node] = []
        n = self.root
        while stack or n is not None:
            while n is not None:
                stack.append(n)
                n = n.left
            n = stack.pop()
            yield n.key, n.value, n.payload
            n = n.right

    def scan(self, lo: Any, hi: Any) -> Any:
        """The ⊕-aggregate of the values whose keys lie in [lo, hi]; None if there are none.
        O(log n): whole subtrees inside the range contribute their stored aggregate."""
        return self._scan(self.root, lo, hi, False, False)

    def _scan(self, n: _Node | None, lo: Any, hi: Any, lo_ok: bool, hi_ok: bool) -> Any:
        if n is None:
            return None
        if lo_ok and hi_ok:
            return n.agg
        if not lo_ok and n.key < lo:
            return self._scan(n.right, lo, hi, lo_ok, hi_ok)
        if not hi_ok and hi < n.key:
            return self._scan(n.left, lo, hi, lo_ok, hi_ok)
        op = self.op
        out = n.value
        left = self._scan(n.left, lo, hi, lo_ok, True)
        right = self._scan(n.right, lo, hi, True, hi_ok)
        if left is not None:
            out = op(left, out)
        if right is not None:
            out = op(out, right)
        return out


def _max(a: Any, b: Any) -> Any:
    return a if b < a else b


class IntervalTree:
    """Closed intervals ``[lo, hi]`` of ``(bucket, value)`` coordinates with stabbing
    queries in O((m+1) log n) (Veldhuizen 2014, §3.2): a scan tree ordered by start whose nodes
    carry the max end of their subtree.

    ``bucket`` is a tuple (the values of the atom's earlier columns, α in the paper's
    SensIndex(α…, a, b, γ…)); intervals only match points of their own bucket.

    Each interval gets a *uid* when added, from a counter (``uid``, the last one handed
    out): its key is ``(bucket, lo, uid)``, so equal intervals stay apart. ``records``,
    ``load`` and ``stab_uids`` name intervals by it, so that a copy saved elsewhere can be
    told which of its intervals a stab took (``deltalog.engine.ivm.interval_index``).
    """

    def __init__(self) -> None:
        self.tree = ScanTree(_max)
        self._uid = 0

    def __len__(self) -> int:
        return len(self.tree)

    @property
    def uid(self) -> int:
        """The last uid handed out (0: none yet)."""
        return self._uid

    def add_many(self, intervals: Iterable[tuple[tuple[Any, ...], Any, Any, Any]]) -> None:
        batch = []
        for bucket, lo, hi, payload in intervals:
            self._uid += 1
            batch.append(((bucket, lo, self._uid), (bucket, hi), payload))
        # A rebuild costs O(n + k log k); k single inserts O(k log n): rebuild only when
        # the batch is large against the tree (the initial evaluation).
        if len(batch) * 4 > len(self.tree):
            self.tree.bulk_load(batch)
        else:
            for key, end, payload in batch:
                self.tree.insert(key, end, payload)

    def add(self, bucket: tuple[Any, ...], lo: Any, hi: Any, payload: Any = None) -> int:
        """Add ``[lo, hi]`` to ``bucket``; returns its uid."""
        self._uid += 1
        self.tree.insert((bucket, lo, self._uid), (bucket, hi), payload)
        return self._uid

    def records(self) -> Iterator[Interval]:
        """Every interval as ``(bucket, lo, hi, payload, uid)``, in order of start."""
        for (bucket, lo, uid), (_, hi), payload in self.tree.items():
            yield bucket, lo, hi, payload, uid

    @classmethod
    def load(cls, records: Iterable[Interval], uid: int) -> "IntervalTree":
        """A tree of ``records`` (as ``records`` gives them, in any order) keeping their
        uids, which must be distinct and at most ``uid``, the last handed out: new
        intervals get uids after it. A balanced build, O(n log n)."""
        tree = cls()
        tree.tree.bulk_load([((b, lo, u), (b, hi), p) for b, lo, hi, p, u in records])
        tree._uid = uid
        return tree

    def stab(
        self, bucket: tuple[Any, ...], x: Any, remove: bool = True
    ) -> list[tuple[Any, Any, Any]]:
        """Every interval of ``bucket`` that contains ``x``, as ``(lo, hi, payload)``;
        with ``remove`` they are also taken out of the tree (Veldhuizen 2014, §4.1)."""
        return [(lo, hi, payload) for lo, hi, payload, _ in self.stab_uids(bucket, x, remove)]

    def stab_uids(
        self, bucket: tuple[Any, ...], x: Any, remove: bool = True
    ) -> list[tuple[Any, Any, Any, int]]:
        """``stab``, each interval with its uid: ``(lo, hi, payload, uid)``."""
        found: list[_Node] = []
        point = (bucket, x)
        self._stab(self.tree.root, bucket, point, found)
        out = [(n.key[1], n.value[1], n.payload, n.key[2]) for n in found]
        if remove:
            for n in found:
                self.tree.remove(n.key)
        return out

    def _stab(self, n: _Node | None, bucket: tuple[Any, ...], point: tuple[Any, Any],
              found: list[_Node]) -> None:
        while n is not None:
            if n.agg < point:  # every end in this subtree is before the point
                return
            key = n.key
            kb = key[0]
            if kb < bucket:
                n = n.right
                continue
            if kb == bucket and key[1] <= point[1]:
                if not (n.value < point):
                    found.append(n)
                self._stab(n.left, bucket, point, found)
                n = n.right
                continue
            n = n.left
