"""Order-preserving int64 codes of strings that stay valid as new strings arrive: the
dictionary a store's coded indexes share (``deltalog.engine.columnar.versions``), so that
a rule's commits join string columns on the compiled join as they join numbers.

The codes of one evaluation (``deltalog.engine.columnar.encoding.Codes``) are ranks: every
string is known before the first rule runs. A store's relations change at every commit,
and a rank would shift with every new string below it. So codes here are spread out with
room between them, and a new string takes a code in the gap between its neighbours: codes
still order as the strings do (code point order), and no code already handed out changes.
A gap between two strings is split evenly among the strings that arrive in it; past the
largest (or below the smallest) string, new ones are placed ``STEP`` apart, so strings
that arrive in increasing order (dates, sequence numbers) use the room at the end one step
at a time instead of halving it. Only when strings keep arriving in one gap until it has
no room left are all strings given evenly spaced codes again (a relabelling, O(strings)):
every coded index that uses this dictionary is remapped in place at once (the map is
monotone, so each stays sorted), and ``epoch`` counts relabellings, for the holders of a
code that is not an index (a compiled rule's constants) to know theirs are stale.

Codes lie in [−2^62, 2^62], far inside the join's sentinels for −inf and +inf.

Kept in a segment store, the dictionary is a base segment (the strings in order and their
codes) and a chain of deltas, one per save that gave codes to new strings (those strings
and their codes): a save writes what was added since the state was opened, not every
string again; a relabelling, or a chain of ``COMPACT_CHAIN`` deltas, writes a new base.
"""

import weakref
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from sortedcontainers import SortedList

from deltalog.engine.columnar.encoding import Codes, Column, Dictionary, NotColumnar
from deltalog.engine.segments import (
    COMPACT_CHAIN,
    CorruptSegment,
    SegmentSink,
    SegmentSource,
    pack_rows,
    unpack_rows,
)
from deltalog.engine.values import Value

I64 = NDArray[np.int64]

LOW, HIGH = -(2**62), 2**62
# The distance between consecutive codes when there is room (at most), and so the step of
# strings placed past either end.
STEP = 2**40


class Remapped(Protocol):
    """A holder of codes of this dictionary that a relabelling remaps (a coded index)."""

    def remap_strings(self, old: I64, new: I64) -> None:
        """Replace each code ``old[i]`` by ``new[i]`` (``old`` sorted; the map monotone)."""
        ...


def _spread(n: int) -> list[int]:
    """``n`` codes evenly spaced around 0, at most ``STEP`` apart."""
    step = min((HIGH - LOW) // (n + 1), STEP)
    start = -(step * (n - 1)) // 2
    return [start + i * step for i in range(n)]


class StringCodes:
    """See the module. ``code`` (one string), ``codes_of`` (many), ``decode`` (codes to
    strings); ``add`` gives codes to new strings."""

    def __init__(self, strings: Iterable[str] = ()):
        ordered = sorted(set(strings))
        self._sorted = SortedList(ordered)
        self._code: dict[str, int] = dict(zip(ordered, _spread(len(ordered)), strict=True))
        self._string: dict[int, str] = {c: s for s, c in self._code.items()}
        self.epoch = 0
        self._holders: weakref.WeakSet[Any] = weakref.WeakSet()
        self._opened(None, ())

    def __len__(self) -> int:
        return len(self._code)

    def __contains__(self, value: object) -> bool:
        return value in self._code

    # -- persistence: the strings in order and their codes ------------------------------------
    def __getstate__(self) -> list[Any]:
        ordered = list(self._sorted)
        return [ordered, np.array([self._code[s] for s in ordered], np.int64), self.epoch]

    def __setstate__(self, state: list[Any]) -> None:
        ordered, codes, epoch = state
        self._set(ordered, np.asarray(codes), epoch)
        self._opened(None, ())

    def _set(self, ordered: list[Any], codes: Any, epoch: Any) -> None:
        if (
            any(type(s) is not str for s in ordered) or codes.dtype != np.int64
            or codes.shape != (len(ordered),) or type(epoch) is not int
            or any(a >= b for a, b in pairwise(ordered))
            or (len(codes) and (bool((np.diff(codes) <= 0).any())
                                or int(codes[0]) < LOW or int(codes[-1]) > HIGH))
        ):
            raise ValueError("a string dictionary whose strings or codes are out of order")
        self._sorted = SortedList(ordered)
        self._code = dict(zip(ordered, codes.tolist(), strict=True))
        self._string = {c: s for s, c in self._code.items()}
        self.epoch = epoch
        self._holders = weakref.WeakSet()

    def _opened(self, base: str | None, chain: tuple[str, ...]) -> None:
        """Additions count from now, against ``base`` and ``chain`` (its segments)."""
        self._base = base
        self._chain = chain
        self._base_epoch = self.epoch
        self._added: list[str] = []

    def __persist__(self, sink: SegmentSink) -> list[Any]:
        """``["strings", base, chain, epoch]``: the segments opened from, kept, and one
        more delta of the strings added since; a new base after a relabelling, past
        ``COMPACT_CHAIN`` deltas, or when not opened from this store."""
        if (self._base is not None and self.epoch == self._base_epoch
                and len(self._chain) < COMPACT_CHAIN):
            sink.keep([self._base, *self._chain])
            chain = list(self._chain)
            if self._added:
                added = sorted(self._added)
                chain.append(sink.write([pack_rows([added, [self._code[a] for a in added]])]))
            return ["strings", self._base, chain, self.epoch]
        ordered = list(self._sorted)
        base = sink.write([pack_rows([ordered, [self._code[a] for a in ordered]])])
        return ["strings", base, [], self.epoch]

    @classmethod
    def __restore__(cls, source: SegmentSource, ref: Any) -> "StringCodes":
        """Open what ``__persist__`` saved (checked as ``__setstate__`` checks)."""
        _, base, chain, epoch = ref
        pairs: dict[Any, Any] = {}
        for name in [base, *chain]:
            got = unpack_rows(source.read(name))
            if type(got) not in (list, tuple) or len(got) != 2 or len(got[0]) != len(got[1]):
                raise CorruptSegment(f"string dictionary segment {name} is not pairs")
            for s, c in zip(got[0], got[1], strict=True):
                if s in pairs or type(c) is not int:
                    raise CorruptSegment(f"string dictionary segment {name} repeats {s!r}")
                pairs[s] = c
        obj = cls.__new__(cls)
        ordered = sorted(pairs, key=lambda s: (type(s) is not str, str(s)))
        try:
            obj._set(ordered, np.array([pairs[s] for s in ordered], np.int64), epoch)
        except ValueError as why:
            raise CorruptSegment(f"string dictionary {base}: {why}") from None
        obj._opened(base, tuple(chain))
        return obj

    # -- holders ------------------------------------------------------------------------------
    def register(self, holder: Remapped) -> None:
        """``holder`` keeps codes of this dictionary: a relabelling remaps them."""
        self._holders.add(holder)

    # -- lookups ------------------------------------------------------------------------------
    def code(self, value: str) -> int | None:
        return self._code.get(value)

    def codes_of(self, values: Sequence[Any]) -> I64 | None:
        """The codes of ``values``; None when one is not a string this dictionary holds."""
        get = self._code.get
        out = np.fromiter((get(v, LOW - 1) if type(v) is str else LOW - 1 for v in values),
                          np.int64, len(values))
        return None if len(out) and bool((out < LOW).any()) else out

    def decode(self, codes: I64) -> NDArray[Any]:
        """The strings of ``codes`` (codes this dictionary handed out), as an object array."""
        string = self._string
        out = np.empty(len(codes), dtype=object)
        out[:] = [string[c] for c in np.asarray(codes).tolist()]
        return out

    def value(self, code: int) -> str:
        return self._string[code]

    # -- new strings --------------------------------------------------------------------------
    def add(self, values: Iterable[Any]) -> None:
        """Give a code to each string of ``values`` not held yet (relabelling every code
        when a gap has no room for the strings that arrive in it)."""
        new = sorted({v for v in values if v not in self._code})
        if not new:
            return
        if any(type(v) is not str for v in new):
            raise TypeError(f"{next(v for v in new if type(v) is not str)!r} is not a string")
        ordered = self._sorted
        placed: dict[str, int] = {}
        i = 0
        while i < len(new):
            # the strings of new that fall in one gap of the held ones
            at = ordered.bisect_left(new[i])
            upper = ordered[at] if at < len(ordered) else None
            j = i + 1 if upper is None else bisect_left(new, upper, i + 1)
            if upper is None:
                j = len(new)
            group = new[i:j]
            got = self._gap(at, len(group))
            if got is None:
                self._relabel(new)
                return
            placed.update(zip(group, got, strict=True))
            i = j
        for s, c in placed.items():
            self._code[s] = c
            self._string[c] = s
        ordered.update(placed)
        self._added += placed

    def _gap(self, at: int, k: int) -> list[int] | None:
        """Codes for ``k`` new strings between the held strings at ``at - 1`` and ``at``;
        None when the gap has no room."""
        ordered = self._sorted
        lo = self._code[ordered[at - 1]] if at else None
        hi = self._code[ordered[at]] if at < len(ordered) else None
        if lo is None and hi is None:
            return _spread(k)
        if hi is None:  # past the largest: STEP apart, while there is room
            assert lo is not None
            step = min((HIGH - lo) // (k + 1), STEP)
            return None if step < 1 else [lo + step * (m + 1) for m in range(k)]
        if lo is None:
            step = min((hi - LOW) // (k + 1), STEP)
            return None if step < 1 else [hi - step * (k - m) for m in range(k)]
        step = (hi - lo) // (k + 1)
        return None if step < 1 else [lo + step * (m + 1) for m in range(k)]

    def _relabel(self, new: Sequence[str]) -> None:
        """Every string (held and ``new``) evenly spaced again; each holder remapped."""
        old_sorted = np.array([self._code[s] for s in self._sorted], np.int64)
        ordered = SortedList(self._sorted)
        ordered.update(new)
        codes = _spread(len(ordered))
        code = dict(zip(ordered, codes, strict=True))
        new_sorted = np.array([code[s] for s in self._sorted], np.int64)
        for holder in list(self._holders):
            holder.remap_strings(old_sorted, new_sorted)
        self._sorted = ordered
        self._code = code
        self._string = {c: s for s, c in code.items()}
        self.epoch += 1
        self._added = []  # (a relabelling writes a new base)


def remap(codes: I64, old: I64, new: I64) -> I64:
    """``codes`` (each one of ``old``, sorted) mapped to ``new`` (aligned with ``old``)."""
    if not len(codes):
        return codes
    return new[np.searchsorted(old, codes)]


class StoreCodes(Codes):
    """The codes of a compiled join over a store's coded indexes
    (``deltalog.engine.columnar.versions``): numbers as ``Codes`` codes them, strings by
    the store's dictionary (``StringCodes``), which a rule's string constants are added
    to when it is built."""

    def __init__(self, strings: StringCodes):
        super().__init__([])
        self.dictionary = strings

    def encode(self, values: Column, typ: str) -> I64:
        if typ != "string":
            return super().encode(values, typ)
        if isinstance(values, Dictionary):
            return self.encode(values.values, typ)[np.asarray(values.indices, np.int64)]
        listed = values.tolist() if isinstance(values, np.ndarray) else list(values)
        got = self.dictionary.codes_of(listed)
        if got is None:
            raise NotColumnar("a string the store's dictionary does not hold")
        return got

    def code(self, value: Value, typ: str) -> int:
        if typ != "string":
            return super().code(value, typ)
        got = self.dictionary.code(value) if type(value) is str else None
        if got is None:
            raise NotColumnar(f"the string {value!r} is not in the store's dictionary")
        return got

    def decode(self, codes: I64, typ: str) -> NDArray[Any]:
        if typ == "string":
            return self.dictionary.decode(codes)
        return super().decode(codes, typ)
