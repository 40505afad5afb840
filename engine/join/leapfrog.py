"""Leapfrog triejoin (seed 000 §1.2): for each variable in order, leapfrog-intersect the
trie iterators of the atoms that mention it, bind it, run that level's filters and
negations, and descend. Assignments offer one value, which the atoms must contain.

Existential short-circuit: once every remaining variable is unused by the head, the first
satisfying binding is enough.
"""

from collections.abc import Callable, Sequence

from engine.join.plan import Env, RulePlan
from engine.join.trie import JoinStats, Row, SortedTrieIterator


def leapfrog_triejoin(
    plan: RulePlan,
    relations: Sequence[list[Row]],
    emit: Callable[[Env], None],
    stats: JoinStats,
) -> None:
    """Enumerate the satisfying assignments of ``plan``; ``relations[i]`` is the sorted
    list of atom i's rows with columns permuted by ``plan.perms[i]``."""
    env: Env = {}
    for check in plan.pre_checks:
        if not check(env):
            return
    iters = [SortedTrieIterator(rows, stats) for rows in relations]
    if any(not rows for rows in relations):
        return
    levels = [
        (lvl.var, [iters[a] for a in lvl.atoms], lvl.source, lvl.checks) for lvl in plan.levels
    ]
    n = len(levels)
    exist_level = plan.exist_level

    def descend(i: int) -> bool:
        if i == n:
            emit(env)
            return True
        var, parts, source, checks = levels[i]
        for it in parts:
            it.open()
        found = False
        stop_at_first = i >= exist_level
        if source is not None:
            value = source(env)
            if value is not None:
                ok = True
                for it in parts:
                    it.seek(value)
                    if it.at_end() or it.key() != value:
                        ok = False
                        break
                if ok:
                    env[var] = value
                    if all(check(env) for check in checks):
                        found = descend(i + 1)
        elif len(parts) == 1:
            it = parts[0]
            while not it.at_end():
                env[var] = it.key()
                if all(check(env) for check in checks) and descend(i + 1):
                    found = True
                    if stop_at_first:
                        break
                it.next()
        elif not any(it.at_end() for it in parts):
            found = _leapfrog(parts, var, checks, descend, i, stop_at_first)
        for it in parts:
            it.up()
        return found

    def _leapfrog(
        parts: list[SortedTrieIterator],
        var: str,
        checks: list[Callable[[Env], bool]],
        down: Callable[[int], bool],
        i: int,
        stop_at_first: bool,
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
                env[var] = x
                if all(check(env) for check in checks) and down(i + 1):
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
