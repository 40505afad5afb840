"""Aggregation maintenance (seed 000 §2.3): per group, state that absorbs inserted and
erased satisfying assignments in O(log n) each.

- ``count``: the support count itself (§2.3.1).
- ``sum``: an Abelian group, adding the inverse on erase (§2.3.2); integers exactly, floats
  through the exact accumulator below, so the result never drifts.
- ``total``: an exact float sum (§2.3.4): the correctly rounded value of the exact sum,
  whatever the order of inserts and erases. The paper's segmented representation is an
  encoding of an exact number; we keep the number itself, an integer in units of the
  least subnormal (2**-1074), which Python's integers hold exactly.
- ``min``/``max``: a semigroup, through a scan tree over the intermediate predicate of the
  group's assignments (§2.3.3): O(log n) per change and per group read.
"""

import math
from typing import Any

from engine.ivm.scan_tree import ScanTree
from engine.storage import TOP

_SCALE = 1 << 1074


class ExactSum:
    """An exact sum of floats (and ints) under insert and erase."""

    __slots__ = ("floats", "nan", "neg_inf", "pos_inf", "scaled")

    def __init__(self) -> None:
        self.floats = 0  # how many of the summands are floats (the result is then a float)
        self.scaled = 0
        self.pos_inf = 0
        self.neg_inf = 0
        self.nan = 0

    def add(self, v: Any, weight: int) -> None:
        if isinstance(v, float):
            self.floats += weight
        if isinstance(v, float) and not math.isfinite(v):
            if v != v:
                self.nan += weight
            elif v > 0:
                self.pos_inf += weight
            else:
                self.neg_inf += weight
            return
        n, d = v.as_integer_ratio() if isinstance(v, float) else (v, 1)
        self.scaled += weight * n * (_SCALE // d)

    def value(self) -> float:
        if self.nan or (self.pos_inf and self.neg_inf):
            return math.nan
        if self.pos_inf:
            return math.inf
        if self.neg_inf:
            return -math.inf
        try:
            return self.scaled / _SCALE  # int / int is correctly rounded
        except OverflowError:
            return math.inf if self.scaled > 0 else -math.inf


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
            if func == "sum" and not self.float_result and not acc.floats:
                return acc.scaled // _SCALE
            return acc.value()
        assert self.scan is not None
        return self.scan.scan((group,), (group, TOP))
