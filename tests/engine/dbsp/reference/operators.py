"""Incremental relational operators on Z-sets (Budiu et al. 2023, §3-4, §7): linear operators are
their own incremental version; join is bilinear (Δ(a⋈b) = Δa⋈Δb + a⋈Δb + Δa⋈b with a, b the
previous integrals); distinct is incremental through H; grouped aggregation only revisits
changed groups; anti-join is join with the complement, so its delta is a join with -Δ.

These are the single-step forms that ``deltalog.engine.dbsp.stratum`` generalizes to multi-way
joins evaluated by leapfrog triejoin.
"""

from collections.abc import Callable, Hashable, Mapping
from fractions import Fraction
from typing import Any

from deltalog.engine.storage import add_into
from tests.engine.dbsp.reference.zset import ZSet

Key = Callable[[Any], Hashable]


def join(a: ZSet[Any], b: ZSet[Any], key_a: Key, key_b: Key,
         combine: Callable[[Any, Any], Any]) -> ZSet[Any]:
    """Equi-join: weight of ``combine(x, y)`` is ``a[x] * b[y]`` summed (bilinear)."""
    index: dict[Hashable, list[tuple[Any, int]]] = {}
    for y, w in b.items():
        index.setdefault(key_b(y), []).append((y, w))
    out: dict[Any, int] = {}
    for x, wx in a.items():
        for y, wy in index.get(key_a(x), ()):
            add_into(out, combine(x, y), wx * wy)
    return ZSet(out)


def join_delta(a_prev: ZSet[Any], b_prev: ZSet[Any], da: ZSet[Any], db: ZSet[Any],
               key_a: Key, key_b: Key, combine: Callable[[Any, Any], Any]) -> ZSet[Any]:
    """(↑⋈)^Δ at one time (Theorem 3.4): ``da⋈db + a_prev⋈db + da⋈b_prev``, where
    ``a_prev``, ``b_prev`` are the integrals of the inputs before this change."""
    return (join(da, db, key_a, key_b, combine) + join(a_prev, db, key_a, key_b, combine)
            + join(da, b_prev, key_a, key_b, combine))


def distinct_delta(i: Mapping[Any, int], d: Mapping[Any, int]) -> ZSet[Any]:
    """H(i, d) (Proposition 4.7): the change of ``distinct`` when its integrated input ``i``
    changes by ``d``. Only the elements of ``d`` are looked at."""
    out: dict[Any, int] = {}
    for x, dw in d.items():
        before = i.get(x, 0)
        after = before + dw
        if before > 0 >= after:
            out[x] = -1
        elif before <= 0 < after:
            out[x] = 1
    return ZSet(out)


def antijoin(a: ZSet[Any], b: ZSet[Any], key_a: Key, key_b: Key) -> ZSet[Any]:
    """Rows of set ``a`` whose key is not a key of set ``b``: a⋈(1 - distinct(π_key b))."""
    keys = {key_b(y) for y, w in b.items() if w > 0}
    return ZSet((x, w) for x, w in a.items() if key_a(x) not in keys)


def antijoin_delta(a_prev: ZSet[Any], b_prev: ZSet[Any], da: ZSet[Any], db: ZSet[Any],
                   key_a: Key, key_b: Key) -> ZSet[Any]:
    """The change of ``antijoin(a, b)``: the key set K = distinct(π_key b) changes by
    ΔK = H, and antijoin = a - a⋈K, so its delta is ``da - (a⋈K)^Δ`` (bilinear)."""
    k_prev: dict[Hashable, int] = {}
    for y, w in b_prev.items():
        if w > 0:
            k_prev[key_b(y)] = 1
    k_all: dict[Hashable, int] = {}
    for y, w in (b_prev + db).items():
        if w > 0:
            k_all[key_b(y)] = 1
    dk = ZSet(k_all) - ZSet(k_prev)
    kp = ZSet(k_prev)
    ident: Key = lambda k: k  # noqa: E731
    semi = join_delta(a_prev, kp, da, dk, key_a, ident, lambda x, _k: x)
    return da - semi


def exact_total(values: Mapping[float, int]) -> float:
    """The correctly rounded sum of ``sum(v * w)``, computed exactly (Veldhuizen 2014, §2.3.4)."""
    acc = Fraction(0)
    for v, w in values.items():
        acc += Fraction(v) * w
    return float(acc)


def aggregate_delta(
    groups: dict[Hashable, dict[Any, int]],
    d: Mapping[Any, int],
    group_of: Key,
    value_of: Callable[[Any], Any],
    func: Callable[[Mapping[Any, int]], Any],
) -> ZSet[Any]:
    """Grouped aggregation, incrementally (§7.2-7.3): apply ``d`` to the per-group
    multisets of values in ``groups`` (mutated) and return the change of the set of
    ``(group, aggregate)`` rows. Only groups that ``d`` touches are re-aggregated."""
    touched: dict[Hashable, Any] = {}
    for x, w in d.items():
        g = group_of(x)
        if g not in touched:
            vals = groups.get(g)
            touched[g] = func(vals) if vals else None
        add_into(groups.setdefault(g, {}), value_of(x), w)
        if not groups[g]:
            del groups[g]
    out: dict[Any, int] = {}
    for g, before in touched.items():
        vals = groups.get(g)
        after = func(vals) if vals else None
        if before == after:
            continue
        if before is not None:
            add_into(out, (g, before), -1)
        if after is not None:
            add_into(out, (g, after), 1)
    return ZSet(out)
