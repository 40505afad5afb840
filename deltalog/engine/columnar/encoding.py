"""Values as order-preserving int64 codes, per column type.

- ``int``: the integer itself (an int beyond 64 bits cannot be coded: ``NotColumnar``).
- ``float``: the IEEE-754 bits made to sort as the numbers do (negative numbers have every
  bit but the sign flipped; ``-0.0`` is first made ``0.0``, the same value).
- ``string``: the string's rank in the sorted dictionary of every string the evaluation
  can meet. No operation of the language makes a string, so that dictionary is known
  before the first rule runs: the inputs' strings, the program's facts and the rules'
  constants. Ranks order as the strings do (code point order), so ``<`` on strings is
  ``<`` on codes.

Within one type, codes compare as the values do, so the joins, the comparisons between
values of one type, ``min`` and ``max`` run on codes; values are decoded only for
arithmetic, for comparisons across int and float, and for the output.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deltalog.engine.values import Value

I64 = NDArray[np.int64]
_MASK = np.int64(0x7FFF_FFFF_FFFF_FFFF)
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


class NotColumnar(Exception):
    """The evaluation cannot run on codes (the reason is the message); the caller runs
    the tuple evaluator instead and says so."""


@dataclass(frozen=True)
class Dictionary:
    """A dictionary-encoded column (Arrow's layout, without Arrow): ``values[indices]``."""

    values: Sequence[Value] | NDArray[Any]
    indices: NDArray[np.integer[Any]]

    def __len__(self) -> int:
        return len(self.indices)


Column = NDArray[Any] | Sequence[Value] | Dictionary


def int_table(rows: Sequence[Sequence[Any]], arity: int) -> I64:
    """Rows of int values as an (n, arity) int64 table, through one flat pass (faster than
    numpy reading the tuples); ``OverflowError`` for an int beyond 64 bits."""
    flat = np.fromiter(chain.from_iterable(rows), np.int64, len(rows) * arity)
    return flat.reshape(len(rows), arity)


def float_codes(values: NDArray[np.float64]) -> I64:
    bits = (values + 0.0).view(np.int64)  # -0.0 + 0.0 is 0.0
    return bits ^ ((bits >> 63) & _MASK)


def float_values(codes: I64) -> NDArray[np.float64]:
    return (codes ^ ((codes >> 63) & _MASK)).view(np.float64)


def _strings(values: Column) -> set[str]:
    """The distinct strings of a string column."""
    if isinstance(values, Dictionary):
        values = values.values
    return set(values.tolist() if isinstance(values, np.ndarray) else values)


class Codes:
    """The coding of one evaluation: ``strings`` (sorted, distinct) gives string ranks."""

    def __init__(self, strings: Iterable[set[str]]):
        every: set[str] = set()
        for part in strings:
            every |= part
        if any(not isinstance(s, str) for s in every):
            bad = next(s for s in every if not isinstance(s, str))
            raise NotColumnar(f"{bad!r} in a string column")
        ordered = sorted(every)
        self.strings: NDArray[Any] = np.array(ordered, dtype=object)
        self._rank = {s: i for i, s in enumerate(ordered)}

    @staticmethod
    def strings_of(values: Column) -> set[str]:
        return _strings(values)

    def encode(self, values: Column, typ: str) -> I64:
        """The codes of a column of ``typ`` (int values widen into float columns)."""
        if isinstance(values, Dictionary):
            return self.encode(values.values, typ)[np.asarray(values.indices, np.int64)]
        if typ == "string":
            rank: dict[Any, int] = self._rank
            listed = values.tolist() if isinstance(values, np.ndarray) else values
            return np.fromiter(map(rank.__getitem__, listed), np.int64, len(listed))
        if typ == "float":
            try:
                return float_codes(np.asarray(values, dtype=np.float64))
            except OverflowError:
                raise NotColumnar("an integer too large for a float column") from None
        if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
            return values.astype(np.int64, copy=False)
        try:
            return np.asarray(values, dtype=np.int64)
        except OverflowError:
            raise NotColumnar("an integer beyond 64 bits") from None

    def code(self, value: Value, typ: str) -> int:
        """The code of one value of ``typ``; ``NotColumnar`` when it has none."""
        if typ == "string":
            if not isinstance(value, str):
                raise NotColumnar(f"{value!r} in a string column")
            i = self._rank.get(value)
            if i is None:
                raise NotColumnar(f"the string {value!r} is not in the dictionary")
            return i
        if typ == "float":
            f = float(value)
            if f != value:
                raise NotColumnar(f"{value!r} has no exact float")
            return int(float_codes(np.array([f], np.float64))[0])
        if not isinstance(value, int) or not _I64_MIN <= value <= _I64_MAX:
            raise NotColumnar(f"{value!r} is not a 64-bit integer")
        return value

    def decode(self, codes: I64, typ: str) -> NDArray[Any]:
        """Values: int64 or float64 arrays, or an array of str objects."""
        if typ == "string":
            return self.strings[codes]
        if typ == "float":
            return float_values(codes)
        return codes

    def python(self, codes: I64, typ: str) -> list[Value]:
        """Values as Python objects (int, float, str)."""
        return self.decode(codes, typ).tolist()  # type: ignore[no-any-return]
