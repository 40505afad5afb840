"""The ``TrieIterator`` protocol (Veldhuizen 2014, §1.2) and its implementation over a sorted list
of tuples: the trie is implicit, each depth is one column, and every operation is a
bisection inside the range of rows that share the current prefix."""

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol

from deltalog.engine.values import Row


@dataclass
class JoinStats:
    """Work counters: iterator operations, so tests can assert cost without clocks."""

    opens: int = 0
    ups: int = 0
    nexts: int = 0
    seeks: int = 0
    # Count queries of complement iteration (ranks and selects on sorted indexes; Veldhuizen 2014
    # §3.1.2), beside the iterator operations they serve.
    counts: int = 0
    # Which evaluator ran (``deltalog.engine.evaluate.evaluate``): "columnar", or "tuples: why".
    core: str = ""

    @property
    def operations(self) -> int:
        return self.opens + self.ups + self.nexts + self.seeks

    def as_dict(self) -> dict[str, int]:
        return {
            "open": self.opens,
            "up": self.ups,
            "next": self.nexts,
            "seek": self.seeks,
            "iterator_ops": self.operations,
            "count_queries": self.counts,
        }


class TrieIterator(Protocol):
    def open(self) -> None: ...
    def up(self) -> None: ...
    def next(self) -> None: ...
    def seek(self, key: Any) -> None: ...
    def key(self) -> Any: ...
    def at_end(self) -> bool: ...


_GETTERS = [itemgetter(i) for i in range(64)]


class SortedTrieIterator:
    """A ``TrieIterator`` over ``rows``, a lexicographically sorted list of distinct tuples.

    Before the first ``open`` the iterator is at the root (depth -1). At depth d it ranges
    over the distinct values of column d among the rows sharing the current prefix.
    """

    __slots__ = ("_get", "_stack", "depth", "hi", "lo", "pos", "rows", "stats")

    def __init__(self, rows: list[Row], stats: JoinStats):
        self.rows = rows
        self.stats = stats
        self.depth = -1
        self.lo = 0
        self.hi = len(rows)
        self.pos = 0
        self._stack: list[tuple[int, int, int]] = []
        self._get = _GETTERS[0]

    def open(self) -> None:
        self.stats.opens += 1
        if self.depth >= 0:
            # The child range: the rows whose column `depth` equals the current key.
            lo = self.pos
            hi = bisect_right(self.rows, self.rows[lo][self.depth], lo, self.hi, key=self._get)
        else:
            lo, hi = 0, len(self.rows)
        self._stack.append((self.lo, self.hi, self.pos))
        self.depth += 1
        self._get = _GETTERS[self.depth]
        self.lo, self.hi, self.pos = lo, hi, lo

    def up(self) -> None:
        self.stats.ups += 1
        self.lo, self.hi, self.pos = self._stack.pop()
        self.depth -= 1
        self._get = _GETTERS[max(self.depth, 0)]

    def key(self) -> Any:
        return self.rows[self.pos][self.depth]

    def at_end(self) -> bool:
        return self.pos >= self.hi

    def next(self) -> None:
        self.stats.nexts += 1
        self.pos = bisect_right(
            self.rows, self.rows[self.pos][self.depth], self.pos, self.hi, key=self._get
        )

    def seek(self, key: Any) -> None:
        """Move to the least key >= ``key`` (or to the end)."""
        self.stats.seeks += 1
        self.pos = bisect_left(self.rows, key, self.pos, self.hi, key=self._get)

    def leaf_keys(self, limit: int | None = None) -> list[Any]:
        """At the last depth (one row per key): the keys from the current one to the end of
        the range, at most ``limit`` of them, read in one slice. Counts one ``next`` per key
        read, as the loop of ``key``/``next`` it replaces would; does not move."""
        hi = self.hi if limit is None else min(self.hi, self.pos + limit)
        self.stats.nexts += max(hi - self.pos, 0)
        return list(map(self._get, self.rows[self.pos:hi]))


def has_prefix(rows: list[Row], prefix: Row) -> bool:
    """Whether some row of the sorted list ``rows`` starts with ``prefix``."""
    i = bisect_left(rows, prefix)
    return i < len(rows) and rows[i][: len(prefix)] == prefix
