"""Aggregation maintenance (Veldhuizen 2014, §2.3): per group, state that absorbs inserted and
erased satisfying assignments in O(log n) each.

- ``count``: the support count itself (§2.3.1).
- ``sum``: an Abelian group, adding the inverse on erase (§2.3.2); integers exactly, floats
  through the exact accumulator (``deltalog.engine.exact_sum``), so the result never drifts.
- ``total``: an exact float sum (§2.3.4): the correctly rounded value of the exact sum,
  whatever the order of inserts and erases. The paper's segmented representation is an
  encoding of an exact number; we keep the number itself, an integer in units of the
  least subnormal (2**-1074), which Python's integers hold exactly.
- ``min``/``max``: a semigroup, through a scan tree over the intermediate predicate of the
  group's assignments (§2.3.3): O(log n) per change and per group read.
"""

from typing import Any

from deltalog.engine.exact_sum import ExactSum
from deltalog.engine.ivm.scan_tree import ScanTree
from deltalog.engine.sentinels import TOP


class GroupAggregates:
    """The aggregate of every group of one rule, maintained by assignment deltas."""

    def __init__(self, func: str, float_result: bool):
        self.func = func
        self.float_result = float_result
        self.count: dict[tuple[Any, ...], int] = {}
        self.sums: dict[tuple[Any, ...], Any] = {}
        self.scan: ScanTree | None = None
        if func in ("min", "max"):
            self.scan = ScanTree(min if func == "min" else max)

    def update(self, group: tuple[Any, ...], unit: tuple[Any, ...], value: Any,
               weight: int) -> None:
        n = self.count.get(group, 0) + weight
        if n:
            self.count[group] = n
        else:
            self.count.pop(group, None)
        func = self.func
        if func in ("sum", "total"):
            acc = self.sums.get(group)
            if acc is None:
                acc = self.sums[group] = ExactSum()
            acc.add(value, weight)
            if not n:
                del self.sums[group]
        elif self.scan is not None:
            key = (group, unit)
            if weight > 0:
                self.scan.insert(key, value)
            else:
                self.scan.remove(key)

    def result(self, group: tuple[Any, ...]) -> Any:
        """The group's aggregate, or None when the group is empty (no row)."""
        n = self.count.get(group, 0)
        if n <= 0:
            return None
        func = self.func
        if func == "count":
            return n
        if func in ("sum", "total"):
            acc: ExactSum = self.sums[group]
            return acc.value(func == "total" or self.float_result)
        assert self.scan is not None
        return self.scan.scan((group,), (group, TOP))
