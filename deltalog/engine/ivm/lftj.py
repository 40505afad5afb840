"""Leapfrog triejoin for maintenance (Veldhuizen 2014, §4): one rule body over any versions of its
relations (``SortedRows``), optionally restricted to a change oracle, optionally recording
the sensitivity interval of every iterator operation.

Recorded intervals (§4.1): open → (−inf, v]; next from v → [v, v']; seek(s) → [s, v'];
reaching the end → up to +inf. Each is filed under its index (atom, depth), its bucket
(the atom's own earlier columns) and, as payload, the rule's earlier variable values
(which include the paper's context variables).

Tie-break after a match: the iterator of the first atom of the level advances (the
paper's choice in its ``A(x), B(x)`` example); otherwise the one at the least key seeks.

One refinement of the paper's trace: of the opens at a level only the one that lands on
the greatest first key records (−inf, v]; the values below it cannot match, whatever the
other atoms hold. Without it a unary filter atom deep in the order (``c(z)`` under
``a(x, y), b(y, z)``) is sensitive below its first key in every context, and inserting
a small value re-evaluates them all. ``paper_trace=True`` records every open.

A level with a ``cast`` binds its variable as ``deltalog.engine.join.leapfrog`` does (the
iterators and the recorded intervals keep the atoms' keys).
"""

from collections.abc import Callable, Sequence
from typing import Any

from deltalog.engine.ivm.oracle import OracleNode
from deltalog.engine.join.ceil_trie import CeilTrieIterator
from deltalog.engine.join.plan import Env, RulePlan
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.semantics import bind_as
from deltalog.engine.sentinels import BOTTOM, TOP
from deltalog.engine.storage import SortedRows

# Index keys: ("atom", atom index, depth) or ("neg", pred, perm, depth) or ("whole", pred).
IndexKey = tuple[Any, ...]
Pending = dict[IndexKey, list[tuple[tuple[Any, ...], Any, Any, Any]]]
# emit(unit, env): unit is the tuple of values of the variables before the plan's
# existential level (the whole assignment when there is no short-circuit).
Emit = Callable[[tuple[Any, ...], Env], None]

_FULL_SEGMENTS: list[tuple[Any, Any, OracleNode | None]] = [(BOTTOM, TOP, None)]


class Recorder:
    """Sensitivity intervals collected during one evaluation, filed by index key."""

    def __init__(self, indexed: Sequence[bool]):
        self.indexed = indexed  # per atom: whether it has sensitivity indices
        self.pending: Pending = {}

    def bucket(self, key: IndexKey) -> list[tuple[tuple[Any, ...], Any, Any, Any]]:
        lst = self.pending.get(key)
        if lst is None:
            lst = self.pending[key] = []
        return lst


class JoinRun:
    """Evaluate ``plan`` once. ``sources[i]`` is atom i's rows in ``plan.perms[i]`` order;
    ``negation_rows(pred, perm)`` gives the rows a negated atom is probed in."""

    def __init__(
        self,
        plan: RulePlan,
        sources: Sequence[SortedRows],
        negation_rows: Callable[[str, tuple[int, ...]], SortedRows],
        stats: JoinStats,
        recorder: Recorder | None = None,
        paper_trace: bool = False,
    ):
        self.paper_trace = paper_trace
        self.plan = plan
        self.sources = sources
        self.negation_rows = negation_rows
        self.stats = stats
        self.recorder = recorder
        self.env: Env = {}
        self.level = -1
        self.prefixes: list[tuple[Any, ...]] = [()] * (len(plan.order) + 1)

    # Negated atoms are probed through this (the plan was built with ``probe`` below).
    def probe(self, pred: str, perm: tuple[int, ...], prefix: tuple[Any, ...]) -> bool:
        self.stats.seeks += 1
        rows = self.negation_rows(pred, perm)
        row = rows.ceil(prefix)
        exists = row is not None and row[: len(prefix)] == prefix
        rec = self.recorder
        if rec is not None:
            if not prefix:
                rec.bucket(("whole", pred)).append(((), BOTTOM, TOP, None))
            else:
                j = self.level
                if j < 0:
                    payload: Any = None
                else:
                    payload = (self.prefixes[j], self.env[self.plan.order[j]])
                v = prefix[-1]
                rec.bucket(("neg", pred, perm, len(prefix) - 1)).append(
                    (prefix[:-1], v, v, payload)
                )
        return exists

    def run(self, emit: Emit, oracle: OracleNode | None = None) -> None:
        plan = self.plan
        self.level = -1
        for pre in plan.pre_checks:
            if not pre(self.env):
                return
        for atom in plan.prep.atoms:  # an atom of no columns holds when its relation has
            if not atom.vars and not len(self.sources[atom.index]):  # () (a change to it
                return  # re-evaluates the whole rule: ``RuleMaintainer``; nothing recorded)
        iters = [CeilTrieIterator(rows, self.stats) for rows in self.sources]
        rec = self.recorder
        n = len(plan.levels)
        exist_level = plan.exist_level
        env = self.env
        prefixes = self.prefixes
        levels = []
        for lvl in plan.levels:
            parts = [iters[a] for a in lvl.atoms]
            logs: list[Any] = []
            for a in lvl.atoms:
                if rec is not None and rec.indexed[a]:
                    depth = plan.perms[a].index(plan.prep.atoms[a].vars.index(lvl.var))
                    logs.append(rec.bucket(("atom", a, depth)).append)
                else:
                    logs.append(None)
            checks = lvl.checks
            check: Callable[[Env], bool] | None = None
            if len(checks) == 1:
                check = checks[0]
            elif checks:
                check = lambda e, cs=tuple(checks): all(c(e) for c in cs)  # noqa: E731
            levels.append((lvl.var, parts, logs, lvl.source, check, lvl.cast))

        def descend(i: int, node: OracleNode | None) -> bool:
            if i == n:
                emit(prefixes[exist_level], env)
                return True
            var, parts, logs, source, check, cast = levels[i]
            rule_prefix = prefixes[i]
            stop_at_first = i >= exist_level
            # The open's interval (−inf, v] matters where the oracle reaches −inf; inside a
            # narrower region the first seek records what the trace depends on, and the
            # intervals outside the region stay in the index from earlier evaluations.
            for it in parts:
                it.open()
            if source is None and (node is None or (
                bool(node.segments) and node.segments[0][0] is BOTTOM
            )):
                self._record_opens(parts, logs, rule_prefix)
            found = False
            if source is not None:
                value = source(env)
                if value is not None and cast is not None:
                    value = bind_as(value, cast)
                child: OracleNode | None = None
                ok = value is not None
                if ok and node is not None:
                    seg = node.find(value)
                    ok = seg is not None
                    if seg is not None:
                        child = seg[2]
                if ok:
                    for it, log in zip(parts, logs, strict=True):
                        it.seek(value)
                        if log is not None:
                            log((it.prefix, value, TOP if it.row is None else it.key(),
                                 rule_prefix))
                        if it.row is None or it.key() != value:
                            ok = False
                            break
                if ok and value is not None:
                    env[var] = value
                    prefixes[i + 1] = (*rule_prefix, value)
                    self.level = i
                    if check is None or check(env):
                        found = descend(i + 1, child)
            else:
                segments = _FULL_SEGMENTS if node is None else node.segments
                found = self._leapfrog(i, var, parts, logs, check, segments, stop_at_first,
                                       rule_prefix, descend, cast)
            for it in parts:
                it.up()
            return found

        descend(0, oracle)

    def _record_opens(self, parts: list[CeilTrieIterator], logs: list[Any],
                      rule_prefix: tuple[Any, ...]) -> None:
        """Intervals of the opens at a level: (−inf, v] for the iterator whose first key
        is the greatest (it alone excludes every value below the first possible match),
        [v, v] for the others already on v; the rest are sought to v next and record from
        there. With ``paper_trace`` every open is recorded, as in Veldhuizen 2014's example."""
        best = 0
        for q in range(len(parts)):
            it = parts[q]
            if it.row is None:
                best = q
                break
            if parts[best].key() < it.key():
                best = q
        top = parts[best]
        x0 = TOP if top.row is None else top.key()
        for q, it in enumerate(parts):
            log = logs[q]
            if log is None:
                continue
            if q == best or self.paper_trace:
                log((it.prefix, BOTTOM, TOP if it.row is None else it.key(), rule_prefix))
            elif it.row is not None and it.key() == x0:
                # Already on the first candidate: no seek will record that it holds it.
                log((it.prefix, x0, x0, rule_prefix))

    def _leapfrog(
        self,
        i: int,
        var: str,
        parts: list[CeilTrieIterator],
        logs: list[Any],
        check: Callable[[Env], bool] | None,
        segments: list[tuple[Any, Any, OracleNode | None]],
        stop_at_first: bool,
        rule_prefix: tuple[Any, ...],
        descend: Callable[[int, OracleNode | None], bool],
        cast: str | None,
    ) -> bool:
        env = self.env
        prefixes = self.prefixes
        found = False
        k = len(parts)
        for lo, hi, child in segments:
            if lo is not BOTTOM:
                # seek(lo) on every iterator, recorded even when it is (or lands) at the
                # end: inside the region, the intervals must cover [lo, hi] again.
                for it, log in zip(parts, logs, strict=True):
                    it.seek(lo)
                    if log is not None:
                        log((it.prefix, lo, TOP if it.row is None else it.key(), rule_prefix))
                    if it.row is None:
                        return found
            while True:
                for it in parts:
                    if it.row is None:
                        return found
                # The least key (first such atom on ties) and the greatest.
                p = 0
                xmin = xmax = parts[0].key()
                for q in range(1, k):
                    x = parts[q].key()
                    if x < xmin:
                        xmin, p = x, q
                    elif xmax < x:
                        xmax = x
                if hi < xmax:
                    break
                if xmin == xmax:
                    value = xmin if cast is None else bind_as(xmin, cast)
                    if value is not None:
                        env[var] = value
                        prefixes[i + 1] = (*rule_prefix, xmin)
                        self.level = i
                        if (check is None or check(env)) and descend(i + 1, child):
                            found = True
                            if stop_at_first:
                                return True
                    it = parts[0]
                    it.next()
                    log = logs[0]
                    if log is not None:
                        log((it.prefix, xmin, TOP if it.row is None else it.key(), rule_prefix))
                else:
                    it = parts[p]
                    it.seek(xmax)
                    log = logs[p]
                    if log is not None:
                        log((it.prefix, xmax, TOP if it.row is None else it.key(), rule_prefix))
        return found
