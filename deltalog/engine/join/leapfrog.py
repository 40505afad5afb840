"""Leapfrog triejoin (Veldhuizen 2014, §1.2): for each variable in order, leapfrog-intersect the
trie iterators of the atoms that mention it, bind it, run that level's filters and
negations, and descend. Assignments offer one value, which the atoms must contain.

Existential short-circuit: once every remaining variable is unused by the head, the first
satisfying binding is enough.

Two shortcuts keep per-tuple Python work out of the innermost loops; both perform (and
count) the iterator operations they stand for. The *last level* reads its keys as one
slice of each atom's range and intersects them with a set (or, when one range is much
smaller than another, seeks its keys in the others), instead of one ``next``/``seek`` call
per key. A *product suffix* (trailing levels that each read the last column of one atom,
with nothing to check) is the cartesian product of those columns: it is handed to
``emit_many`` whole, instead of being enumerated one binding at a time.

A level with a ``cast`` (``Rule.casts``) binds its variable to ``semantics.bind_as`` of the
key the atoms agree on (or of its assignment's value, sought in the atoms as converted):
the atoms match on the number, the variable holds it in its own type.
"""

from collections.abc import Callable, Sequence
from itertools import product

from deltalog.engine.join.plan import Env, RulePlan
from deltalog.engine.join.trie import JoinStats, SortedTrieIterator
from deltalog.engine.semantics import bind_as
from deltalog.engine.values import Row, Value

# emit_many(env, vars, columns): every binding of ``vars`` to one value of each column (the
# columns' cartesian product), each extending ``env``.
EmitMany = Callable[[Env, tuple[str, ...], Sequence[list[Value]]], None]

# At the last level, read every range whole and intersect with a set while the largest
# range is at most this many times the smallest; beyond it, seek the smallest range's keys
# in the others (so a tiny range never pays for reading a huge one: the join stays
# worst-case optimal).
_BALANCED = 32


def leapfrog_triejoin(
    plan: RulePlan,
    relations: Sequence[list[Row]],
    emit: Callable[[Env], None],
    stats: JoinStats,
    emit_many: EmitMany | None = None,
) -> None:
    """Enumerate the satisfying assignments of ``plan``; ``relations[i]`` is the sorted
    list of atom i's rows with columns permuted by ``plan.perms[i]``. Each assignment goes
    to ``emit``, or, when given, several at once to ``emit_many``."""
    env: Env = {}
    for pre in plan.pre_checks:
        if not pre(env):
            return
    iters = [SortedTrieIterator(rows, stats) for rows in relations]
    if any(not rows for rows in relations):
        return
    n = len(plan.levels)
    exist_level = plan.exist_level
    levels = []
    for lvl in plan.levels:
        parts = [iters[a] for a in lvl.atoms]
        checks = lvl.checks
        check = None
        if len(checks) == 1:
            check = checks[0]
        elif checks:
            check = lambda env, cs=tuple(checks): all(c(env) for c in cs)  # noqa: E731
        lower = tuple(lvl.lower) if lvl.source is None else ()
        levels.append((lvl.var, parts, lvl.source, check, lower, lvl.cast))
    free = n
    while free > 0 and _independent_leaf(plan, free - 1):
        free -= 1
    suffix_vars = tuple(plan.levels[i].var for i in range(free, n))
    suffix = [(iters[plan.levels[i].atoms[0]], 1 if i >= exist_level else None)
              for i in range(free, n)]

    def descend(i: int) -> bool:
        if i == n:
            emit(env)
            return True
        if i == free:
            return product_suffix()
        var, parts, source, check, lower, cast = levels[i]
        for it in parts:
            it.open()
        found = False
        stop_at_first = i >= exist_level
        if lower and not _seek_lower(parts, lower):
            pass
        elif source is not None:
            value = source(env)
            if value is not None and cast is not None:
                value = bind_as(value, cast)
            if value is not None:
                ok = True
                for it in parts:
                    it.seek(value)
                    if it.at_end() or it.key() != value:
                        ok = False
                        break
                if ok:
                    env[var] = value
                    if check is None or check(env):
                        found = descend(i + 1)
        elif i == n - 1:
            found = last_level(parts, var, check, stop_at_first, cast)
        elif len(parts) == 1:
            it = parts[0]
            while not it.at_end():
                value = it.key() if cast is None else bind_as(it.key(), cast)
                if value is not None:
                    env[var] = value
                    if (check is None or check(env)) and descend(i + 1):
                        found = True
                        if stop_at_first:
                            break
                it.next()
        elif not any(it.at_end() for it in parts):
            found = _leapfrog(parts, var, check, descend, i, stop_at_first, cast)
        for it in parts:
            it.up()
        return found

    def _seek_lower(
        parts: list[SortedTrieIterator], lower: tuple[Callable[[Env], Value | None], ...]
    ) -> bool:
        """Seek every iterator to the greatest lower bound; False when a bound is undefined
        (then the comparison it came from fails for every key)."""
        bounds = [b(env) for b in lower]
        if any(b is None for b in bounds):
            return False
        bound = max(bounds)  # type: ignore[type-var]
        for it in parts:
            it.seek(bound)
        return True

    def product_suffix() -> bool:
        # Every range of the suffix is non-empty: its atom matched the bindings so far.
        columns = []
        for it, limit in suffix:
            it.open()
            columns.append(it.leaf_keys(limit))
        for it, _ in suffix:
            it.up()
        if emit_many is not None:
            emit_many(env, suffix_vars, columns)
        else:
            for values in product(*columns):
                env.update(zip(suffix_vars, values, strict=True))
                emit(env)
        return True

    def last_level(
        parts: list[SortedTrieIterator],
        var: str,
        check: Callable[[Env], bool] | None,
        stop_at_first: bool,
        cast: str | None,
    ) -> bool:
        if any(it.at_end() for it in parts):
            return False
        if len(parts) == 1:
            keys = parts[0].leaf_keys(
                1 if stop_at_first and check is None and cast is None else None)
        else:
            ranked = sorted(parts, key=lambda it: it.hi - it.pos)
            smallest, others = ranked[0], ranked[1:]
            keys = smallest.leaf_keys()
            if ranked[-1].hi - ranked[-1].pos <= _BALANCED * len(keys):
                for it in others:
                    present = set(it.leaf_keys())
                    keys = [k for k in keys if k in present]
            else:
                keys = _probe(keys, others)
        if cast is not None:
            keys = [v for v in (bind_as(k, cast) for k in keys) if v is not None]
        if check is not None:
            kept = []
            for k in keys:
                env[var] = k
                if check(env):
                    kept.append(k)
                    if stop_at_first:
                        break
            keys = kept
        if not keys:
            return False
        if stop_at_first:
            keys = keys[:1]
        if emit_many is not None:
            emit_many(env, (var,), (keys,))
        else:
            for k in keys:
                env[var] = k
                emit(env)
        return True

    def _leapfrog(
        parts: list[SortedTrieIterator],
        var: str,
        check: Callable[[Env], bool] | None,
        down: Callable[[int], bool],
        i: int,
        stop_at_first: bool,
        cast: str | None,
    ) -> bool:
        ring = sorted(parts, key=lambda it: it.key())
        k = len(ring)
        p = 0
        xmax = ring[-1].key()
        found = False
        while True:
            it = ring[p]
            x = it.key()
            if x == xmax:
                value = x if cast is None else bind_as(x, cast)
                if value is not None:
                    env[var] = value
                    if (check is None or check(env)) and down(i + 1):
                        found = True
                        if stop_at_first:
                            return True
                it.next()
            else:
                it.seek(xmax)
            if it.at_end():
                return found
            xmax = it.key()
            p = (p + 1) % k

    descend(0)


def _probe(keys: list[Value], iterators: list[SortedTrieIterator]) -> list[Value]:
    """The ``keys`` (ascending) that every iterator holds, found by seeking each key in
    turn: seeks only move forward, and an iterator at its end ends the search."""
    out: list[Value] = []
    for key in keys:
        for it in iterators:
            it.seek(key)
            if it.at_end():
                return out
            if it.key() != key:
                break
        else:
            out.append(key)
    return out


def _independent_leaf(plan: RulePlan, level: int) -> bool:
    """Whether ``level`` reads the last column (in plan order) of a single atom, with no
    assignment and nothing to check: its values do not depend on other levels after it."""
    lvl = plan.levels[level]
    if (lvl.source is not None or lvl.checks or lvl.lower or len(lvl.atoms) != 1
            or lvl.cast is not None):
        return False
    atom = lvl.atoms[0]
    return max(i for i, other in enumerate(plan.levels) if atom in other.atoms) == level
