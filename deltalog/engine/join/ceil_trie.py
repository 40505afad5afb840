"""A ``TrieIterator`` over any sorted collection that answers ``ceil(t)`` (the least row ≥
t): the current version of a relation (a ``SortedList``), the previous version (a merged
view), or a small delta. Each operation is one ``ceil`` call, O(log n).

The iterator holds the current row rather than a position: at depth d it ranges over the
distinct values of column d among the rows that share the current prefix, and the current
row is always the least row with the current prefix and key.
"""

from typing import Any

from deltalog.engine.join.trie import JoinStats
from deltalog.engine.sentinels import TOP
from deltalog.engine.storage import SortedRows
from deltalog.engine.values import Row


class CeilTrieIterator:
    __slots__ = ("_stack", "depth", "prefix", "row", "rows", "stats")

    def __init__(self, rows: SortedRows, stats: JoinStats):
        self.rows = rows
        self.stats = stats
        self.depth = -1
        self.prefix: tuple[Any, ...] = ()
        self.row: Row | None = None
        self._stack: list[tuple[tuple[Any, ...], Row | None]] = []

    def open(self) -> None:
        self.stats.opens += 1
        self._stack.append((self.prefix, self.row))
        if self.depth >= 0:
            assert self.row is not None
            self.prefix = self.row[: self.depth + 1]
        else:
            self.row = self.rows.ceil(())
        self.depth += 1

    def up(self) -> None:
        self.stats.ups += 1
        self.prefix, self.row = self._stack.pop()
        self.depth -= 1

    def key(self) -> Any:
        assert self.row is not None
        return self.row[self.depth]

    def at_end(self) -> bool:
        return self.row is None

    def _land(self, row: Row | None) -> None:
        d = self.depth
        if row is not None and d and row[:d] != self.prefix:
            row = None
        self.row = row

    def next(self) -> None:
        self.stats.nexts += 1
        assert self.row is not None
        self._land(self.rows.ceil((*self.prefix, self.row[self.depth], TOP)))

    def seek(self, key: Any) -> None:
        """Move to the least key ≥ ``key`` at this depth (never backwards)."""
        self.stats.seeks += 1
        row = self.row
        if row is None or row[self.depth] >= key:
            return
        self._land(self.rows.ceil((*self.prefix, key)))
