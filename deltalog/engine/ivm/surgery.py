"""The tree-surgery adaptor (Veldhuizen 2014, §4.2.1): a delta between two versions of a relation,
turned into insertions and removals of branches of its trie, by depth.

A changed row inserts (or removes) the branches below the deepest prefix the other version
also has. Removals come deepest first, insertions shallowest first, rows in order, each
branch once: the paper's ``A(x,y,z)`` example gives its seven operations in its order.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from deltalog.engine.storage import SortedRows
from deltalog.engine.values import Row

INSERT = 1
ERASE = -1


@dataclass(frozen=True)
class Surgery:
    """Insert (``+1``) or erase (``-1``) the branch ``path`` (its depth is len(path) - 1)."""

    op: int
    path: Row

    @property
    def depth(self) -> int:
        return len(self.path) - 1

    def __str__(self) -> str:
        word = "INSERT" if self.op > 0 else "ERASE"
        return f"{word} {'–'.join(str(v) for v in self.path)}"


def has_prefix(rows: SortedRows, prefix: Row) -> bool:
    row = rows.ceil(prefix)
    return row is not None and row[: len(prefix)] == prefix


def tree_surgery(
    changed: Iterable[tuple[Row, int]], old: SortedRows, new: SortedRows
) -> list[Surgery]:
    """Surgery operations for ``changed`` rows (already in the trie's column order, with
    weight +1 inserted / -1 erased), given the two versions of the trie."""
    rows = sorted(changed)
    depths = []
    for row, weight in rows:
        other = old if weight > 0 else new  # the version that may still hold the prefix
        # The shallowest depth whose branch the other version lacks.
        d = 0
        while d < len(row) and has_prefix(other, row[: d + 1]):
            d += 1
        depths.append(d)
    return surgery_at(rows, depths)


def surgery_at(rows: Sequence[tuple[Row, int]], depths: Sequence[int]) -> list[Surgery]:
    """The operations of ``rows`` (sorted, each with its weight) whose branches start at
    ``depths`` (for each row, the shallowest depth whose prefix the other version lacks:
    the version before for an insertion, after for an erasure)."""
    out: list[Surgery] = []
    seen: set[Row] = set()
    for (row, weight), d in zip(rows, depths, strict=True):
        paths = [row[: j + 1] for j in range(d, len(row))]
        if weight < 0:
            paths.reverse()
        for p in paths:
            if p not in seen:
                seen.add(p)
                out.append(Surgery(INSERT if weight > 0 else ERASE, p))
    return out
