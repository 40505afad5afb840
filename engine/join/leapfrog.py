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
    for pre in plan.pre_checks:
        if not pre(env):
            return
    iters = [SortedTrieIterator(rows, stats) for rows in relations]
    if any(not rows for rows in relations):
        return
    n = len(plan.levels)
    levels = []
    for i, lvl in enumerate(plan.levels):
        parts = [iters[a] for a in lvl.atoms]
        checks = lvl.checks
        check = None
        if len(checks) == 1:
            check = checks[0]
        elif checks:
            check = lambda env, cs=tuple(checks): all(c(env) for c in cs)  # noqa: E731
        # A last level read from one atom's last column, with nothing to check: its keys
        # are that column of the current row range, one per row (rows are distinct).
        bulk = (
            i == n - 1
            and lvl.source is None
            and check is None
            and len(lvl.atoms) == 1
            and plan.perms[lvl.atoms[0]][-1] == len(plan.perms[lvl.atoms[0]]) - 1
            and _last_depth(plan, lvl.atoms[0], i)
        )
        levels.append((lvl.var, parts, lvl.source, check, bulk))
    exist_level = plan.exist_level

    def descend(i: int) -> bool:
        if i == n:
            emit(env)
            return True
        var, parts, source, check, bulk = levels[i]
        for it in parts:
            it.open()
        found = False
        stop_at_first = i >= exist_level
        if bulk:
            it = parts[0]
            depth = it.depth
            rows = it.rows
            lo, hi = it.pos, it.hi
            if stop_at_first:
                hi = min(hi, lo + 1)
            stats.nexts += hi - lo
            for k in range(lo, hi):
                env[var] = rows[k][depth]
                emit(env)
            found = hi > lo
        elif source is not None:
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
                    if check is None or check(env):
                        found = descend(i + 1)
        elif len(parts) == 1:
            it = parts[0]
            while not it.at_end():
                env[var] = it.key()
                if (check is None or check(env)) and descend(i + 1):
                    found = True
                    if stop_at_first:
                        break
                it.next()
        elif not any(it.at_end() for it in parts):
            found = _leapfrog(parts, var, check, descend, i, stop_at_first)
        for it in parts:
            it.up()
        return found

    def _leapfrog(
        parts: list[SortedTrieIterator],
        var: str,
        check: Callable[[Env], bool] | None,
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


def _last_depth(plan: RulePlan, atom: int, level: int) -> bool:
    """Whether ``level`` binds the last column (in plan order) of ``atom``."""
    return max(i for i, lvl in enumerate(plan.levels) if atom in lvl.atoms) == level
