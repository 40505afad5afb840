"""Exact sums of ints and floats under insert and erase (Veldhuizen, "Incremental
Maintenance for Leapfrog Triejoin", 2014, §2.3.4: exact float totals).

The paper's segmented representation is an encoding of an exact number; we keep the number
itself, an integer in units of the least subnormal (2**-1074), which Python's integers hold
exactly. So the result is the correctly rounded exact sum whatever the order of inserts and
erases, and a sum never drifts. Used by the sensitivity strategy's aggregates and by DBSP's.
"""

import math
from typing import Any

SCALE = 1 << 1074


class ExactSum:
    """An exact sum of ints and floats under insert (weight > 0) and erase (weight < 0)."""

    __slots__ = ("floats", "nan", "neg_inf", "pos_inf", "scaled")

    def __init__(self) -> None:
        self.floats = 0  # how many summands are floats (the result is then a float)
        self.scaled = 0  # the finite summands' sum, in units of 2**-1074
        self.pos_inf = 0
        self.neg_inf = 0
        self.nan = 0

    def add(self, v: Any, weight: int) -> None:
        if isinstance(v, float):
            self.floats += weight
            if not math.isfinite(v):
                if v != v:
                    self.nan += weight
                elif v > 0:
                    self.pos_inf += weight
                else:
                    self.neg_inf += weight
                return
            n, d = v.as_integer_ratio()
        else:
            n, d = v, 1
        self.scaled += weight * n * (SCALE // d)

    def value(self, as_float: bool = True) -> Any:
        """The sum: an int when no summand is a float and ``as_float`` is off, else the
        correctly rounded float (nan when nan or both infinities are summands)."""
        if self.nan or (self.pos_inf and self.neg_inf):
            return math.nan
        if self.pos_inf:
            return math.inf
        if self.neg_inf:
            return -math.inf
        if not as_float and not self.floats:
            return self.scaled // SCALE
        try:
            return self.scaled / SCALE  # int / int is correctly rounded
        except OverflowError:
            return math.inf if self.scaled > 0 else -math.inf
