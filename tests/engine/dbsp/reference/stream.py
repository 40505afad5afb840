"""Streams (Budiu et al. 2023, §2, §5, §6): finite prefixes of infinite streams over an
abelian group
(ints, Z-sets, or streams again: nested time), with lifting, z^-1, integration I,
differentiation D, delta0, the definite integral and the incrementalization Q^Δ = D∘Q∘I.

It is the executable statement of the theory that ``deltalog.engine.dbsp.stratum`` implements
with indexes; tests check the stratum's algebra against these definitions. A prefix of
length n stands for the values at times 0..n-1; causal operators need nothing more.
"""

from collections.abc import Callable, Iterator, Sequence
from typing import Any


class Stream:
    """A prefix ``s[0], ..., s[n-1]`` of a stream over a group whose zero is ``zero``.

    Streams add, subtract and negate pointwise, so a stream of streams (nested time) is a
    stream over the group of streams."""

    __slots__ = ("values", "zero")

    def __init__(self, values: Sequence[Any], zero: Any = 0):
        self.values: tuple[Any, ...] = tuple(values)
        self.zero = zero

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, t: int) -> Any:
        return self.values[t] if 0 <= t < len(self.values) else self.zero

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Stream):
            return NotImplemented
        n = max(len(self), len(other))
        return all(self[t] == other[t] for t in range(n))

    def __hash__(self) -> int:
        return hash(self.values)

    def __repr__(self) -> str:
        return f"Stream({list(self.values)!r})"

    def __add__(self, other: "Stream") -> "Stream":
        n = max(len(self), len(other))
        return Stream([self[t] + other[t] for t in range(n)], self.zero)

    def __neg__(self) -> "Stream":
        return Stream([-v for v in self.values], self.zero)

    def __sub__(self, other: "Stream") -> "Stream":
        return self + (-other)


def lift(f: Callable[..., Any], zero: Any = None) -> Callable[..., Stream]:
    """↑f: apply ``f`` pointwise to one or more streams of equal length."""

    def lifted(*streams: Stream) -> Stream:
        n = max(len(s) for s in streams)
        z = streams[0].zero if zero is None else zero
        return Stream([f(*(s[t] for s in streams)) for t in range(n)], z)

    return lifted


def delay(s: Stream) -> Stream:
    """z^-1: ``delay(s)[0] = 0`` and ``delay(s)[t] = s[t-1]``."""
    return Stream([s.zero, *s.values[:-1]], s.zero) if len(s) else s


def integrate(s: Stream) -> Stream:
    """I: ``I(s)[t] = s[0] + ... + s[t]`` (the feedback loop around z^-1 and +)."""
    out = []
    acc = s.zero
    for v in s.values:
        acc = acc + v
        out.append(acc)
    return Stream(out, s.zero)


def differentiate(s: Stream) -> Stream:
    """D: ``D(s)[t] = s[t] - s[t-1]``; the inverse of I."""
    return Stream([v - p for v, p in zip(s.values, delay(s).values, strict=True)], s.zero)


def delta0(value: Any, zero: Any, length: int) -> Stream:
    """δ0: ``value`` at time 0, then zero (§5: enters a nested time domain)."""
    return Stream([value] + [zero] * (length - 1), zero)


def integral(s: Stream) -> Any:
    """∫: the sum of a stream that is zero almost everywhere (§5: leaves a nested time
    domain). On a prefix this is the sum of the prefix, so the prefix must reach past the
    last non-zero value."""
    acc = s.zero
    for v in s.values:
        acc = acc + v
    return acc


def incremental(q: Callable[[Stream], Stream]) -> Callable[[Stream], Stream]:
    """Q^Δ = D ∘ Q ∘ I: from a stream of changes to the stream of changes of Q's output."""
    return lambda s: differentiate(q(integrate(s)))


def fixpoint(step: Callable[[Any], Any], zero: Any, max_iterations: int = 10_000) -> Stream:
    """The stream ``o[0] = step(0)``, ``o[t] = step(o[t-1])`` until it repeats (§5.1's
    circuit around z^-1), returned as the stream of its changes ``D(o)`` whose integral is
    the fixed point. ``step`` must be monotone on a finite domain (it then converges)."""
    changes = []
    prev = zero
    for _ in range(max_iterations):
        cur = step(prev)
        d = cur - prev
        changes.append(d)
        if cur == prev:
            return Stream(changes, zero)
        prev = cur
    raise RuntimeError(f"no fixed point within {max_iterations} iterations")


def nested(rows: Sequence[Stream], zero: Any) -> Stream:
    """A stream of streams: row ``t0`` is the inner stream at outer time ``t0``."""
    return Stream(rows, Stream([], zero))


def lift_stream_op(op: Callable[[Stream], Stream]) -> Callable[[Stream], Stream]:
    """↑S for a stream operator S: apply S to every inner stream (each row of the matrix);
    ``↑I`` integrates along inner time, ``I`` (unlifted) along outer time."""

    def lifted(s: Stream) -> Stream:
        return Stream([op(row) for row in s.values], s.zero)

    return lifted
