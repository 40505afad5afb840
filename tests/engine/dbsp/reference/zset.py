"""Z-sets (Budiu et al. 2023, §4): finite maps from values to non-zero integer weights, the abelian
group every DBSP stream carries. Relations are Z-sets with weights 1; deltas carry +1/-1.

Weights are Python ints (they never overflow); a weight that reaches zero is dropped
everywhere, so equal Z-sets are equal dicts.
"""

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from deltalog.engine.storage import add_into

K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Hashable)


class ZSet(Generic[K]):
    """An immutable Z-set. ``+``, ``-`` (binary and unary) and ``*`` by an int are the
    group operations; ``distinct`` projects onto a set (Budiu et al. 2023, Definition 4.3)."""

    __slots__ = ("_w",)

    def __init__(self, weights: Mapping[K, int] | Iterable[tuple[K, int]] = ()):
        items = weights.items() if isinstance(weights, Mapping) else weights
        w: dict[K, int] = {}
        for k, n in items:
            add_into(w, k, n)
        self._w = w

    @classmethod
    def from_set(cls, values: Iterable[K]) -> "ZSet[K]":
        return cls((v, 1) for v in values)

    # -- mapping --------------------------------------------------------------------
    def __getitem__(self, key: K) -> int:
        return self._w.get(key, 0)

    def __contains__(self, key: object) -> bool:
        return key in self._w

    def __iter__(self) -> Iterator[K]:
        return iter(self._w)

    def __len__(self) -> int:
        return len(self._w)

    def items(self) -> Iterable[tuple[K, int]]:
        return self._w.items()

    def as_dict(self) -> dict[K, int]:
        return dict(self._w)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ZSet):
            return self._w == other._w
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._w.items()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: {w}" for k, w in sorted(self._w.items(), key=repr))
        return f"ZSet({{{inner}}})"

    def __bool__(self) -> bool:
        return bool(self._w)

    # -- the group ------------------------------------------------------------------
    def __add__(self, other: "ZSet[K]") -> "ZSet[K]":
        out = dict(self._w)
        for k, w in other._w.items():
            add_into(out, k, w)
        return ZSet(out)

    def __neg__(self) -> "ZSet[K]":
        return ZSet({k: -w for k, w in self._w.items()})

    def __sub__(self, other: "ZSet[K]") -> "ZSet[K]":
        return self + (-other)

    def __mul__(self, n: int) -> "ZSet[K]":
        return ZSet({k: w * n for k, w in self._w.items()})

    __rmul__ = __mul__

    # -- predicates and non-linear operators ----------------------------------------
    def is_set(self) -> bool:
        """Every weight is 1 (Budiu et al. 2023: isset)."""
        return all(w == 1 for w in self._w.values())

    def is_positive(self) -> bool:
        """Every weight is positive (Budiu et al. 2023: ispositive)."""
        return all(w > 0 for w in self._w.values())

    def distinct(self) -> "ZSet[K]":
        """Weight 1 for every element of positive weight, nothing else.

        Intuitively, the set that a Z-set of derivation counts stands for."""
        return ZSet({k: 1 for k, w in self._w.items() if w > 0})

    def count(self) -> int:
        """The sum of weights (Budiu et al. 2023, §7.2 a_COUNT; linear)."""
        return sum(self._w.values())

    # -- linear operators -----------------------------------------------------------
    def filter(self, pred: Callable[[K], bool]) -> "ZSet[K]":
        """σ_P: linear."""
        return ZSet({k: w for k, w in self._w.items() if pred(k)})

    def map(self, f: Callable[[K], V]) -> "ZSet[V]":
        """map(f) (projection when f projects): linear; weights of images add up."""
        out: dict[V, int] = {}
        for k, w in self._w.items():
            add_into(out, f(k), w)
        return ZSet(out)


def zero() -> ZSet[Any]:
    return ZSet()
