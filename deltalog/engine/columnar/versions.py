"""One index of a versioned relation (its columns in one order) as sorted code arrays, in
the two versions a commit's maintenance reads (Veldhuizen 2014, §3.3: the current version
and the one before the last commit), without copying the relation at a commit.

A version is ``base − minus ∪ plus``: ``base`` the rows as of the last fold (sorted,
distinct), ``minus`` the rows of base it lacks and ``plus`` the rows it holds beyond base
(both sorted, small). A commit changes the two small arrays (O(change + overlay)); past
a share of base (``FOLD_SHARE``, at least ``FOLD_MIN`` rows) they are folded into a new
base (O(n) once per Ω(n) changed rows). The previous version is the same base with the
overlay it had, or, after a fold, with the commit's rows undone (its inserted rows in
minus, its erased rows in plus). The compiled join of commits
(``deltalog.engine.ivm.kernels``) reads a version as the three arrays.

Codes are those of ``deltalog.engine.columnar.encoding`` for ints and floats (the values
themselves, and the floats' ordered bits): they need no dictionary, so an index is coded
alike by every rule that reads it. Strings take the codes of the store's dictionary
(``deltalog.engine.columnar.strings``), which every coded index of the store shares and
which gives new strings codes as they arrive without changing any other (or remaps every
index at once when it must). A relation that receives an int beyond 64 bits or at the
ends of the code range keeps no coded index (``code`` says None, and the relation drops
it).
"""

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deltalog.engine.columnar import kernels
from deltalog.engine.columnar.encoding import float_codes
from deltalog.engine.columnar.rows import sorted_distinct
from deltalog.engine.columnar.strings import StringCodes, remap
from deltalog.engine.values import Row

I64 = NDArray[np.int64]

# The overlay is folded into base past max(FOLD_MIN, len(base) >> FOLD_SHARE) rows.
FOLD_MIN = 1024
FOLD_SHARE = 5
CODED_TYPES = ("int", "float", "string")
_LO, _HI = int(kernels.BOT), int(kernels.TOP)


def code_columns(rows: Sequence[Sequence[Any]], types: Sequence[str],
                 strings: StringCodes | None = None) -> I64 | None:
    """The codes of ``rows`` (their first ``len(types)`` values, of those types: strings
    by ``strings``), row by row; None when a value has no code strictly inside the code
    range (a string ``strings`` does not hold)."""
    k = len(types)
    out = np.empty((len(rows), k), np.int64)
    if not rows:
        return out
    for j, typ in enumerate(types):
        column = [r[j] for r in rows]
        if typ == "string":
            got = strings.codes_of(column) if strings is not None else None
            if got is None:
                return None
            out[:, j] = got
        elif typ == "float":
            out[:, j] = float_codes(np.array(column, np.float64))
        else:
            try:
                out[:, j] = np.array(column, np.int64)
            except OverflowError:
                return None
    if ((out == _LO) | (out == _HI)).any():
        return None  # (the join's sentinels for −inf and +inf)
    return out


def code_rows(rows: Sequence[Row], types: Sequence[str],
              strings: StringCodes | None = None) -> I64 | None:
    """``code_columns`` of ``rows``, sorted and distinct."""
    out = code_columns(rows, types, strings)
    return None if out is None else sorted_distinct(out)


def minus_rows(a: I64, b: I64) -> I64:
    """The rows of ``a`` not in ``b`` (``b`` sorted; T \\ S of two code tables)."""
    if not len(a) or not len(b):
        return a
    return np.ascontiguousarray(a[~kernels.has_prefix(b, a)])


def _both(a: I64, b: I64) -> I64:
    """The rows of ``a`` also in ``b``."""
    if not len(a) or not len(b):
        return a[:0]
    return np.ascontiguousarray(a[kernels.has_prefix(b, a)])


def _union(a: I64, b: I64) -> I64:
    if not len(b):
        return a
    if not len(a):
        return b
    return kernels.merge_rows(a, b)  # type: ignore[no-any-return]


def add_strings(strings: StringCodes | None, rows: Sequence[Sequence[Any]],
                types: Sequence[str]) -> None:
    """Give codes to the strings of ``rows``' string columns that ``strings`` lacks."""
    if strings is not None:
        for j, typ in enumerate(types):
            if typ == "string":
                strings.add(r[j] for r in rows)


class CodedIndex:
    """See the module. ``types``: the index's column types, in its order; ``strings``: the
    dictionary of its string columns' codes (None when it has none)."""

    __slots__ = ("__weakref__", "base", "minus", "old_minus", "old_plus", "plus", "strings",
                 "types")

    def __init__(self, types: Sequence[str], base: I64, strings: StringCodes | None = None):
        """``base``: the relation's rows coded, sorted and distinct."""
        if any(t not in CODED_TYPES for t in types) or (
                "string" in types and strings is None):
            raise ValueError(f"a coded index of {list(types)} columns")
        self.types = tuple(types)
        self.base = np.ascontiguousarray(base, np.int64).reshape(len(base), len(types))
        empty = self.base[:0]
        self.minus = self.plus = self.old_minus = self.old_plus = empty
        self.strings = strings if "string" in self.types else None
        if self.strings is not None:
            self.strings.register(self)

    def remap_strings(self, old: I64, new: I64) -> None:
        """The string columns' codes relabelled (``StringCodes``; monotone: still sorted)."""
        for name in ("base", "minus", "plus", "old_minus", "old_plus"):
            table = getattr(self, name)
            if not len(table):
                continue
            table = table.copy()  # (an array opened from a store is read-only)
            for j, typ in enumerate(self.types):
                if typ == "string":
                    table[:, j] = remap(table[:, j], old, new)
            setattr(self, name, table)

    def __len__(self) -> int:
        return len(self.base) - len(self.minus) + len(self.plus)

    def version(self, old: bool) -> tuple[I64, I64, I64]:
        """(base, minus, plus) of the current version, or of the previous one."""
        if old:
            return self.base, self.old_minus, self.old_plus
        return self.base, self.minus, self.plus

    def rows(self, old: bool = False) -> I64:
        """A version's rows as one sorted array (a copy: for tests and rebuilds)."""
        base, minus, plus = self.version(old)
        return _union(minus_rows(base, minus), plus)

    def commit(self, inserted: Sequence[Row], erased: Sequence[Row]) -> bool:
        """Apply a commit's effective change (rows in this index's column order: inserted
        ones absent before, erased ones present); False when a row has no code (the
        index is then stale: the caller drops it)."""
        add_strings(self.strings, inserted, self.types)  # (may remap this index)
        ins = code_rows(inserted, self.types, self.strings)
        era = code_rows(erased, self.types, self.strings)
        if ins is None or era is None:
            return False
        base, minus, plus = self.base, self.minus, self.plus
        new_minus = minus_rows(_union(minus, _both(era, base)), ins)
        new_plus = _union(minus_rows(plus, era), minus_rows(ins, base))
        if len(new_minus) + len(new_plus) > max(FOLD_MIN, len(base) >> FOLD_SHARE):
            self.base = _union(minus_rows(base, new_minus), new_plus)
            self.minus = self.plus = self.base[:0]
            self.old_minus, self.old_plus = ins, era  # the commit undone
        else:
            self.old_minus, self.old_plus = minus, plus
            self.minus, self.plus = new_minus, new_plus
        return True

    def settle(self) -> None:
        """Forget the previous version."""
        self.old_minus, self.old_plus = self.minus, self.plus

    # -- persistence (a state is saved settled) ---------------------------------------------
    def __getstate__(self) -> list[Any]:
        return [list(self.types), self.base, self.minus, self.plus, self.strings]

    def __setstate__(self, state: list[Any]) -> None:
        types, base, minus, plus, strings = state
        k = len(types)
        if ("string" in types) != (type(strings) is StringCodes):
            raise ValueError("a coded index of string columns without its dictionary")
        if any(t not in CODED_TYPES for t in types) or any(
            a.dtype != np.int64 or a.ndim != 2 or a.shape[1] != k for a in (base, minus, plus)
        ):
            raise ValueError("a coded index whose arrays do not match its columns")
        self.types = tuple(types)
        self.base = np.ascontiguousarray(base)
        self.minus = np.ascontiguousarray(minus)
        self.plus = np.ascontiguousarray(plus)
        self.old_minus, self.old_plus = self.minus, self.plus
        self.strings = strings
        if strings is not None:
            strings.register(self)


def difference_index(t: CodedIndex, s: CodedIndex) -> CodedIndex:
    """The rows of ``t``'s current version that ``s``'s lacks (both in one column order):
    T \\ S as an index of its own, settled."""
    return CodedIndex(t.types, minus_rows(t.rows(), s.rows()), t.strings)


def coded_index(types: Sequence[str], rows: Iterable[Row], inserted: Sequence[Row],
                erased: Sequence[Row], strings: StringCodes | None = None
                ) -> CodedIndex | None:
    """An index of current ``rows`` (in its column order) whose previous version lacked
    ``inserted`` and held ``erased`` (the last commit's change, in the same order), its
    strings coded by ``strings`` (given codes when new); None when a value has no code."""
    listed = list(rows)
    if "string" in types:
        if strings is None:
            return None
        add_strings(strings, [*listed, *inserted, *erased], types)
    base = code_rows(listed, types, strings)
    ins = code_rows(inserted, types, strings)
    era = code_rows(erased, types, strings)
    if base is None or ins is None or era is None:
        return None
    index = CodedIndex(types, base, strings)
    index.old_minus, index.old_plus = ins, era
    return index
