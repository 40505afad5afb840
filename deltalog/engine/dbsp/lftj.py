"""Leapfrog triejoin for delta queries (Völkel, "WCOJ meets DBSP", done per relation): one
rule body over any versions of its relations (``SortedRows`` through
``CeilTrieIterator``), enumerating every satisfying assignment with no existential
short-circuit, because a Z-set counts every derivation. The caller puts the seed (the
delta) first in the variable order.

Only the seed carries weights, and the caller reads them once its variables are bound;
the other atoms are sets (weight 1), and intermediate trie levels carry no weight.

A level with a ``cast`` binds its variable as ``deltalog.engine.join.leapfrog`` does.
"""

from collections.abc import Callable, Sequence

from deltalog.engine.join.ceil_trie import CeilTrieIterator
from deltalog.engine.join.plan import Env, RulePlan
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.semantics import bind_as
from deltalog.engine.storage import SortedRows


def delta_join(
    plan: RulePlan,
    sources: Sequence[SortedRows],
    emit: Callable[[Env], None],
    stats: JoinStats,
) -> None:
    """Call ``emit(env)`` once per satisfying assignment of ``plan``; ``sources[i]`` is atom
    i's rows with columns permuted by ``plan.perms[i]``."""
    env: Env = {}
    for pre in plan.pre_checks:
        if not pre(env):
            return
    for atom, rows in zip(plan.prep.atoms, sources, strict=True):
        if not atom.vars:
            if () not in rows:
                return
        elif not len(rows):
            return
    iters = [CeilTrieIterator(rows, stats) for rows in sources]
    levels = []
    for lvl in plan.levels:
        checks = tuple(lvl.checks)
        levels.append((lvl.var, [iters[a] for a in lvl.atoms], lvl.source, checks, lvl.cast))
    n = len(levels)

    def ok(checks: tuple[Callable[[Env], bool], ...]) -> bool:
        return all(c(env) for c in checks)

    def descend(i: int) -> None:
        if i == n:
            emit(env)
            return
        var, parts, source, checks, cast = levels[i]
        if source is not None:
            value = source(env)
            if value is not None and cast is not None:
                value = bind_as(value, cast)
            if value is None:
                return
            for it in parts:
                it.open()
            if all(_seek_exact(it, value) for it in parts):
                env[var] = value
                if ok(checks):
                    descend(i + 1)
            for it in parts:
                it.up()
            return
        if not parts:
            raise AssertionError(f"variable {var} is neither joined nor assigned")
        for it in parts:
            it.open()
        if len(parts) == 1:
            it = parts[0]
            while not it.at_end():
                value = it.key() if cast is None else bind_as(it.key(), cast)
                if value is not None:
                    env[var] = value
                    if ok(checks):
                        descend(i + 1)
                it.next()
        elif not any(it.at_end() for it in parts):
            ring = sorted(parts, key=lambda it: it.key())
            k = len(ring)
            p = 0
            xmax = ring[-1].key()
            while True:
                it = ring[p]
                x = it.key()
                if x == xmax:
                    value = x if cast is None else bind_as(x, cast)
                    if value is not None:
                        env[var] = value
                        if ok(checks):
                            descend(i + 1)
                    it.next()
                else:
                    it.seek(xmax)
                if it.at_end():
                    break
                xmax = it.key()
                p = (p + 1) % k
        for it in parts:
            it.up()

    descend(0)


def _seek_exact(it: CeilTrieIterator, value: object) -> bool:
    if it.at_end():
        return False
    it.seek(value)
    return not it.at_end() and it.key() == value
