"""The change oracle (Veldhuizen 2014, §4): the regions of a rule's variable space where the
evaluation may change, as a non-materialized predicate that maintenance seeks through.

A region fixes the first ``j`` variables of the rule's order and gives a closed interval
on variable ``j``. Regions live in a trie by their fixed values; at each node the
intervals are merged, and the node presents *segments* in order: an interval (everything
below it is in the oracle) or a single value with a child node (only deeper regions
below it). A tuple covered by several regions lies in exactly one segment, so it is
evaluated once.
"""

from typing import Any

from deltalog.engine.sentinels import BOTTOM, TOP

# A segment: (lo, hi, child). child None: the whole subtree below [lo, hi] is in the
# oracle; otherwise lo == hi and the child node restricts the next level.
Segment = tuple[Any, Any, "OracleNode | None"]


class OracleNode:
    __slots__ = ("children", "intervals", "segments")

    def __init__(self) -> None:
        self.intervals: list[tuple[Any, Any]] = []
        self.children: dict[Any, OracleNode] = {}
        self.segments: list[Segment] = []

    def finish(self) -> None:
        """Merge intervals and order them with the child values not inside any of them."""
        merged: list[list[Any]] = []
        for lo, hi in sorted(self.intervals, key=lambda t: t[0]):
            if merged and not (merged[-1][1] < lo):
                if merged[-1][1] < hi:
                    merged[-1][1] = hi
            else:
                merged.append([lo, hi])
        segs: list[Segment] = [(lo, hi, None) for lo, hi in merged]
        for value in sorted(self.children):
            if _holding(merged, value) is None:
                child = self.children[value]
                child.finish()
                segs.append((value, value, child))
        segs.sort(key=lambda s: s[0])
        self.segments = segs

    def find(self, value: Any) -> Segment | None:
        """The segment holding ``value``, if any."""
        i = _holding(self.segments, value)
        return self.segments[i] if i is not None else None


def _holding(spans: "list[Any]", value: Any) -> int | None:
    """Index of the span (sorted, disjoint, ``span[0]`` ≤ ``span[1]``) that holds
    ``value``, by bisection on the ends; None if no span does."""
    lo, hi = 0, len(spans)
    while lo < hi:
        mid = (lo + hi) // 2
        if spans[mid][1] < value:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(spans) and not (value < spans[lo][0]):
        return lo
    return None


class ChangeOracle:
    """Regions added one by one, then ``finish`` before evaluation."""

    def __init__(self) -> None:
        self.root = OracleNode()
        self.regions = 0

    def add(self, prefix: tuple[Any, ...], lo: Any, hi: Any) -> None:
        """The region: variables before ``len(prefix)`` fixed to ``prefix``, the next one in
        [lo, hi]."""
        self.regions += 1
        node = self.root
        for value in prefix:
            child = node.children.get(value)
            if child is None:
                child = node.children[value] = OracleNode()
            node = child
        node.intervals.append((lo, hi))

    def add_subtree(self, prefix: tuple[Any, ...]) -> None:
        """Everything below ``prefix`` (used to widen regions on existential variables)."""
        self.add(prefix, BOTTOM, TOP)

    def finish(self) -> OracleNode:
        self.root.finish()
        return self.root

    def __bool__(self) -> bool:
        return self.regions > 0
