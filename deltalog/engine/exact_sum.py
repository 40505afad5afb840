"""Exact sums of ints and floats under insert and erase (Veldhuizen, "Incremental
Maintenance for Leapfrog Triejoin", 2014, §2.3.4: exact float totals).

The paper's segmented representation is an encoding of an exact number; we keep the number
itself, an integer in units of the least subnormal (2**-1074), which Python's integers hold
exactly. So the result is the correctly rounded exact sum whatever the order of inserts and
erases, and a sum never drifts. Used by the sensitivity strategy's aggregates and by DBSP's.
"""

import sys
from typing import Any

from deltalog.engine.errors import VALUE_OUT_OF_RANGE, DataError

SCALE = 1 << 1074
FLOAT_MAX = sys.float_info.max


class ExactSum:
    """An exact sum of ints and finite floats under insert (weight > 0) and erase
    (weight < 0). Floats are finite in the language (``deltalog.engine.semantics``)."""

    __slots__ = ("floats", "scaled")

    def __init__(self) -> None:
        self.floats = 0  # how many summands are floats (the result is then a float)
        self.scaled = 0  # the summands' sum, in units of 2**-1074

    def add(self, v: Any, weight: int) -> None:
        if isinstance(v, float):
            self.floats += weight
            n, d = v.as_integer_ratio()  # ValueError/OverflowError on nan/inf: not values
        else:
            n, d = v, 1
        self.scaled += weight * n * (SCALE // d)

    def value(self, as_float: bool = True) -> Any:
        """The sum: an int when no summand is a float and ``as_float`` is off, else the
        correctly rounded float; DL308 when that float is beyond the float range."""
        if not as_float and not self.floats:
            return self.scaled // SCALE
        try:
            return self.scaled / SCALE  # int / int is correctly rounded
        except OverflowError:
            raise DataError(
                f"a float sum is beyond the float range (its exact value is "
                f"{'above' if self.scaled > 0 else 'below'} {'' if self.scaled > 0 else '-'}"
                f"{FLOAT_MAX!r})",
                None,
                VALUE_OUT_OF_RANGE,
            ) from None


def group_out_of_range(err: DataError, pred: str, group: tuple[Any, ...]) -> DataError:
    """``err`` (a sum beyond the float range) naming the predicate and group it is for."""
    key = ", ".join(repr(v) for v in group)
    return DataError(f"'{pred}' group ({key}): {err.message}", pred, err.code)
