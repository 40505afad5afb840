"""The DBSP stratum over columns: the nested-time algorithm of ``engine.dbsp.stratum``
(births per fact and inner iteration, depths, Δc[t] as a sum of delta queries, ↑↑H on
the cumulative Δr, the inner loop that runs past every old birth) on numpy arrays, for
the shape recursion usually has: graph-shaped strata.

A stratum qualifies (``columnar_reason`` is None) when it is recursive, every relation it
defines or reads has one or two columns of type int or string and no functional value,
and every rule is a conjunction of positive atoms over distinct variables (no constant,
repeated variable, comparison, assignment, negation or aggregate in the body); the head
may hold constants. Anything else stays with the tuple-at-a-time ``DbspStratum``.

Values are dictionary-encoded per column type (ids below 2^31); a row of one or two
columns packs into one int64 (first column in the high 32 bits), so a relation sorted by
a column order is one sorted int64 array and a prefix lookup is two binary searches. A
delta query is a vectorized generic join (variable at a time, worst-case optimal): the
seed's rows bind its variables; each next variable is extended, row by row, from the
ready atom with the fewest candidates and checked against the other ready atoms.

State per defined relation: its members sorted by each column order with their depths,
and births as arrays (fact, t, count) grouped by fact. A commit keeps its touched facts
(Δc ≠ 0 somewhere) in sorted arrays beside the state, with their new depths as a patch
over the old version; the arrays change at the end of the commit.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from engine.analysis.check import AnalyzedProgram, Stratum
from engine.dbsp.stratum import _seeded_order
from engine.join.plan import PlanAtom, PreparedRule, prepare
from engine.semantics import coerce
from engine.storage import Delta, RelationStore, Row
from engine.syntax.ast import Const, Var

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
Bool = NDArray[np.bool_]

LOW = np.int64((1 << 32) - 1)
NONE = np.int32(2**31 - 1)  # the depth of a non-member (and of an undecided fact)
TYPES = ("int", "string")
# Housekeeping thresholds (module-level so that tests can make them tiny): tombstones are
# purged past max(PURGE_MIN, a quarter of the facts); the births pool is compacted when
# it would grow and holds more than twice its live entries plus POOL_SLACK.
PURGE_MIN = 1024
POOL_SLACK = 1 << 16
_E64: I64 = np.zeros(0, np.int64)
_E32: I32 = np.zeros(0, np.int32)


def columnar_reason(prog: AnalyzedProgram, stratum: Stratum) -> str | None:
    """Why ``stratum`` cannot be maintained by the columnar kernel (None: it can)."""
    if not stratum.recursive:
        return "not recursive"
    for rule in stratum.rules:
        prep = prepare(rule)
        if rule.aggregate is not None or prep.negations or prep.assigns or prep.filters:
            return f"rule at {rule.loc}: only positive atoms over distinct variables"
        preds = [rule.head.pred, *(a.pred for a in prep.atoms)]
        for pred in preds:
            schema = prog.schemas[pred]
            if schema.functional or schema.arity not in (1, 2):
                return f"'{pred}' is functional or not of one or two columns"
            if any(c.type not in TYPES for c in schema.columns):
                return f"'{pred}' has a column that is neither int nor string"
        if not prep.atoms:
            return f"rule at {rule.loc} has no positive atom"
    return None


# ---------------------------------------------------------------------------------------
# Encoding and packing.


class _Codes:
    """Values of one column type and their ids."""

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}
        self.values: list[Any] = []

    def encode(self, values: Sequence[Any]) -> I64:
        ids, vals = self.ids, self.values
        out = np.empty(len(values), np.int64)
        for i, v in enumerate(values):
            k = ids.get(v)
            if k is None:
                k = ids[v] = len(vals)
                if k >= 2**31 - 1:
                    raise OverflowError("more than 2^31 distinct values in one column type")
                vals.append(v)
            out[i] = k
        return out

    def decode(self, ids: I64) -> list[Any]:
        vals = self.values
        return [vals[i] for i in ids.tolist()]


def _swap(keys: I64) -> I64:
    return ((keys & LOW) << 32) | (keys >> 32)


def _ranges(lo: I64, hi: I64) -> tuple[I64, I64]:
    """(owner, index): every index of [lo[i], hi[i]) with its i."""
    lens = hi - lo
    total = int(lens.sum())
    if not total:
        return _E64, _E64
    owner = np.repeat(np.arange(len(lo), dtype=np.int64), lens)
    start = np.repeat(lo - (np.cumsum(lens) - lens), lens)
    return owner, np.arange(total, dtype=np.int64) + start


def _find(sorted_keys: I64, keys: I64) -> tuple[I64, Bool]:
    """Positions of ``keys`` in ``sorted_keys`` and whether each is there."""
    pos = np.searchsorted(sorted_keys, keys).astype(np.int64)
    if not len(sorted_keys):
        return pos, np.zeros(len(keys), np.bool_)
    hit = sorted_keys[np.minimum(pos, len(sorted_keys) - 1)] == keys
    hit &= pos < len(sorted_keys)
    return pos, hit


def _sum_by_key(keys: I64, w: I64) -> tuple[I64, I64]:
    """A Z-set from (key, weight) pairs: distinct sorted keys, summed weights, no zeros."""
    if not len(keys):
        return _E64, _E64
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    sums = np.add.reduceat(w[order], starts)
    k = k[starts]
    nz = sums != 0
    return k[nz], sums[nz]


def _merge_sorted(a: I64, b: I64) -> tuple[I64, I64, I64]:
    """a ∪ b (disjoint sorted arrays) and where a's and b's elements went."""
    out = np.empty(len(a) + len(b), np.int64)
    pos_b = np.searchsorted(a, b) + np.arange(len(b), dtype=np.int64)
    mask = np.ones(len(out), np.bool_)
    mask[pos_b] = False
    pos_a = np.flatnonzero(mask)
    out[pos_a] = a
    out[pos_b] = b
    return out, pos_a, pos_b


# ---------------------------------------------------------------------------------------
# Versions of one relation in one column order.


@dataclass
class _View:
    """Rows of a relation in one column order (packed keys): the base rows whose depth is
    in [lo, hi] (every base row when ``depth`` is None), except keys the patch holds,
    which are there when their patch depth is in [lo, hi]."""

    keys: I64
    depth: I32 | None
    pkeys: I64 = field(default_factory=lambda: _E64)
    pdepth: I32 = field(default_factory=lambda: _E32)
    lo: int = 0
    hi: int = 0
    dmap: I64 | None = None  # depth of keys[i] is depth[dmap[i]] (else depth[i])

    def _ok(self, d: I32) -> Bool:
        return (d >= self.lo) & (d <= self.hi)

    def _dep(self, idx: I64) -> I32:
        assert self.depth is not None
        return self.depth[self.dmap[idx] if self.dmap is not None else idx]

    def counts(self, first: I64) -> I64:
        """Upper bounds of how many rows start with each value of ``first``."""
        a, b = first << 32, (first + 1) << 32
        n = np.searchsorted(self.keys, b) - np.searchsorted(self.keys, a)
        if len(self.pkeys):
            n = n + np.searchsorted(self.pkeys, b) - np.searchsorted(self.pkeys, a)
        return n.astype(np.int64)

    def expand(self, first: I64) -> tuple[I64, I64, int]:
        """(owner, second, candidates): every row (first[i], second) of the view."""
        a, b = first << 32, (first + 1) << 32
        owner, idx = _ranges(np.searchsorted(self.keys, a).astype(np.int64),
                             np.searchsorted(self.keys, b).astype(np.int64))
        k = self.keys[idx]
        seen = len(k)
        keep = self._ok(self._dep(idx)) if self.depth is not None else None
        if len(self.pkeys):
            _, shadowed = _find(self.pkeys, k)
            keep = ~shadowed if keep is None else keep & ~shadowed
            pown, pidx = _ranges(np.searchsorted(self.pkeys, a).astype(np.int64),
                                 np.searchsorted(self.pkeys, b).astype(np.int64))
            seen += len(pidx)
            pk = self.pkeys[pidx]
            pkeep = self._ok(self.pdepth[pidx])
            owner = np.concatenate([owner[keep], pown[pkeep]])
            k = np.concatenate([k[keep], pk[pkeep]])
        elif keep is not None:
            owner, k = owner[keep], k[keep]
        return owner, k & LOW, seen

    def contains(self, keys: I64) -> Bool:
        pos, hit = _find(self.keys, keys)
        if self.depth is not None:
            hit[hit] = self._ok(self._dep(pos[hit]))
        if len(self.pkeys):
            ppos, phit = _find(self.pkeys, keys)
            hit[phit] = self._ok(self.pdepth[ppos[phit]])
        return hit

    def firsts(self) -> I64:
        """The distinct first values of the view's rows."""
        k = self.keys
        if self.depth is not None:
            d = self.depth[self.dmap] if self.dmap is not None else self.depth
            k = k[self._ok(d)]
        if len(self.pkeys):
            _, shadowed = _find(self.pkeys, k)
            k = np.concatenate([k[~shadowed], self.pkeys[self._ok(self.pdepth)]])
        return np.unique(k >> 32)


def _empty_view() -> _View:
    return _View(_E64, None)


# ---------------------------------------------------------------------------------------
# Rules.


class _CRule:
    def __init__(self, prog: AnalyzedProgram, prep: PreparedRule, own: frozenset[str],
                 codes: dict[str, _Codes]):
        rule = prep.rule
        self.prep = prep
        self.pred = rule.head.pred
        self.atoms: tuple[PlanAtom, ...] = prep.atoms
        self.own_atoms = [a.index for a in prep.atoms if a.pred in own]
        cols = prog.schemas[self.pred].columns
        self.head: list[str | int] = []  # a variable, or the id of a constant
        for arg, col in zip(rule.head.args, cols, strict=True):
            if isinstance(arg, Var):
                self.head.append(arg.name)
            else:
                assert isinstance(arg, Const)
                self.head.append(int(codes[col.type].encode([coerce(arg.value, col.type)])[0]))
        self.orders = {a.index: _seeded_order(prep, a.vars) for a in prep.atoms}

    def project(self, cols: Mapping[str, I64], n: int) -> I64:
        parts = [cols[h] if isinstance(h, str) else np.full(n, h, np.int64) for h in self.head]
        out = parts[0] << 32
        if len(parts) == 2:
            out = out | parts[1]
        return out


# A source: for an atom, its view in a column order ((0, 1), (1, 0) or (0,)).
Source = Any  # Callable[[tuple[int, ...]], _View]


@dataclass
class _Rel:
    """One defined relation: facts sorted by key with their depths (NONE: a tombstone
    left by a deleted fact, reused when it comes back) and births (a slice of the pool
    of (t, count) entries per fact); the same facts sorted by swapped key (binary
    relations), with their positions in the first order."""

    arity: int
    keys: I64 = field(default_factory=lambda: _E64)
    depth: I32 = field(default_factory=lambda: _E32)
    bstart: I64 = field(default_factory=lambda: _E64)
    blen: I64 = field(default_factory=lambda: _E64)
    skeys: I64 = field(default_factory=lambda: _E64)
    sperm: I64 = field(default_factory=lambda: _E64)
    pool_t: I32 = field(default_factory=lambda: _E32)
    pool_w: I64 = field(default_factory=lambda: _E64)
    pool_n: int = 0  # used prefix of the pool
    live: int = 0  # entries of the pool that belong to a fact
    hist: I64 = field(default_factory=lambda: _E64)  # members per depth
    bhist: I64 = field(default_factory=lambda: _E64)  # birth entries per t

    def view(self, perm: tuple[int, ...], lo: int, hi: int) -> _View:
        if hi < lo or hi < 0:
            return _empty_view()
        if perm == (1, 0):
            return _View(self.skeys, self.depth, lo=lo, hi=hi, dmap=self.sperm)
        return _View(self.keys, self.depth, lo=lo, hi=hi)

    def hist_at(self, t: int) -> int:
        return int(self.hist[t]) if t < len(self.hist) else 0

    def set_swapped(self) -> None:
        if self.arity == 2:
            sk = _swap(self.keys)
            order = np.argsort(sk)
            self.skeys, self.sperm = sk[order], order.astype(np.int64)

    def pool_write(self, n: int) -> int:
        """Room for n more pool entries; returns where they start."""
        at = self.pool_n
        if at + n > len(self.pool_t):
            if self.pool_n > 2 * self.live + POOL_SLACK:
                self.compact()
                at = self.pool_n
            if at + n > len(self.pool_t):
                cap = max(at + n, int(len(self.pool_t) * 1.5) + 1024)
                t, w = np.zeros(cap, np.int32), np.zeros(cap, np.int64)
                t[:at], w[:at] = self.pool_t[:at], self.pool_w[:at]
                self.pool_t, self.pool_w = t, w
        self.pool_n = at + n
        return at

    def compact(self) -> None:
        """Drop the pool entries no fact owns (left by births that moved or ended)."""
        _, idx = _ranges(self.bstart, self.bstart + self.blen)
        self.pool_t, self.pool_w = self.pool_t[idx], self.pool_w[idx]
        self.bstart = np.cumsum(self.blen) - self.blen
        self.pool_n = self.live = len(idx)


def _hist(values: I32, weights: I64 | None = None) -> I64:
    if not len(values):
        return _E64
    return np.bincount(values, weights=weights).astype(np.int64)


def _trim(h: I64) -> I64:
    nz = np.flatnonzero(h)
    return h[: nz[-1] + 1] if len(nz) else _E64


def _hist_add(h: I64, values: I32, sign: int) -> I64:
    if not len(values):
        return h
    add = np.bincount(values).astype(np.int64) * sign
    if len(add) > len(h):
        h = np.concatenate([h, np.zeros(len(add) - len(h), np.int64)])
    h = h.copy()
    h[: len(add)] += add
    return h


@dataclass
class _Touched:
    """The touched facts of one relation in a commit, sorted, with what is known of
    them: position in the relation's arrays (-1: none), old depth, new depth (NONE:
    undecided or not a member), whether decided, the cumulative Δr, their old births
    (owner index, t, count), and their order by swapped key."""

    keys: I64 = field(default_factory=lambda: _E64)
    pos: I64 = field(default_factory=lambda: _E64)
    old: I32 = field(default_factory=lambda: _E32)
    new: I32 = field(default_factory=lambda: _E32)
    decided: Bool = field(default_factory=lambda: np.zeros(0, np.bool_))
    dr: I64 = field(default_factory=lambda: _E64)
    gown: I64 = field(default_factory=lambda: _E64)
    gt: I32 = field(default_factory=lambda: _E32)
    gw: I64 = field(default_factory=lambda: _E64)
    skeys: I64 = field(default_factory=lambda: _E64)
    sorder: I64 = field(default_factory=lambda: _E64)
    log_k: list[I64] = field(default_factory=list)
    log_t: list[I32] = field(default_factory=list)
    log_w: list[I64] = field(default_factory=list)


class ColumnarStratum:
    """A graph-shaped stratum maintained the DBSP way over numpy arrays."""

    strategy = "dbsp"

    def __init__(self, prog: AnalyzedProgram, stratum: Stratum):
        reason = columnar_reason(prog, stratum)
        if reason is not None:
            raise ValueError(f"stratum {stratum.preds} is not columnar: {reason}")
        self.prog = prog
        self.stratum = stratum
        self.own = frozenset(stratum.preds)
        self.codes: dict[str, _Codes] = {t: _Codes() for t in TYPES}
        self.rules = [_CRule(prog, prepare(r), self.own, self.codes) for r in stratum.rules]
        self.base_rules = [r for r in self.rules if not r.own_atoms]
        self.recursive_rules = [r for r in self.rules if r.own_atoms]
        self.inputs = sorted({a.pred for r in self.rules for a in r.atoms} - self.own)
        self.rels = {p: _Rel(prog.schemas[p].arity) for p in stratum.preds}
        self.input_keys: dict[str, dict[tuple[int, ...], I64]] = {}
        self.work: dict[str, int] = {}
        self._touched: dict[str, _Touched] = {}
        self._input_delta: dict[str, tuple[I64, I64]] = {}
        self._counters: dict[str, int] = {}

    # -- encoding -------------------------------------------------------------------------
    def _encode(self, pred: str, rows: Sequence[Row]) -> I64:
        cols = self.prog.schemas[pred].columns
        c0 = self.codes[cols[0].type].encode([r[0] for r in rows])
        if len(cols) == 1:
            return c0 << 32
        return (c0 << 32) | self.codes[cols[1].type].encode([r[1] for r in rows])

    def _decode(self, pred: str, keys: I64) -> list[Row]:
        cols = self.prog.schemas[pred].columns
        c0 = self.codes[cols[0].type].decode(keys >> 32)
        if len(cols) == 1:
            return [(v,) for v in c0]
        c1 = self.codes[cols[1].type].decode(keys & LOW)
        return list(zip(c0, c1, strict=True))

    def _perms(self, pred: str) -> tuple[tuple[int, ...], ...]:
        return ((0,),) if self.prog.schemas[pred].arity == 1 else ((0, 1), (1, 0))

    # -- inputs ---------------------------------------------------------------------------
    def _set_input(self, pred: str, keys: I64) -> None:
        keys = np.unique(keys)
        by: dict[tuple[int, ...], I64] = {self._perms(pred)[0]: keys}
        if self.prog.schemas[pred].arity == 2:
            by[(1, 0)] = np.sort(_swap(keys))
        self.input_keys[pred] = by

    def _input_view(self, pred: str, perm: tuple[int, ...], new: bool) -> _View:
        keys = self.input_keys[pred][perm]
        if not new or pred not in self._input_delta:
            return _View(keys, None)
        dk, dw = self._input_delta[pred]
        if perm == (1, 0):
            dk = _swap(dk)
            order = np.argsort(dk)
            dk, dw = dk[order], dw[order]
        return _View(keys, None, dk, np.where(dw > 0, 0, NONE).astype(np.int32))

    # -- one delta query ------------------------------------------------------------------
    def _join(self, rule: _CRule, p: int, seed: I64, w: I64,
              sources: Sequence[Source]) -> tuple[I64, I64]:
        """Head keys and weights of every assignment of ``rule``'s body with atom p read
        from ``seed`` (natural packed keys, weights) and atom q from ``sources[q]``."""
        self._counters["delta_queries"] += 1
        seed_atom = rule.atoms[p]
        cols: dict[str, I64] = {seed_atom.vars[0]: seed >> 32}
        if len(seed_atom.vars) == 2:
            cols[seed_atom.vars[1]] = seed & LOW
        pending = [a for a in rule.atoms if a.index != p]
        n = len(seed)
        for v in rule.orders[p]:
            if not n:
                break
            if v in cols:
                continue
            ready = [a for a in pending if v in a.vars and all(u in cols for u in a.vars
                                                               if u != v)]
            if not ready:
                holder = next(a for a in pending if v in a.vars)
                perm: tuple[int, ...] = (0, 1) if holder.vars[0] == v else (1, 0)
                if len(holder.vars) == 1:
                    perm = (0,)
                values = sources[holder.index](perm).firsts()
                owner = np.repeat(np.arange(n, dtype=np.int64), len(values))
                vals = np.tile(values, n)
                self._counters["rows_gathered"] += len(vals)
            else:
                owner, vals = self._extend(v, ready, cols, n, sources)
                pending = [a for a in pending if a not in ready]
            cols = {k: c[owner] for k, c in cols.items()}
            cols[v] = vals
            w = w[owner]
            n = len(w)
            # atoms whose variables are all bound now: checks
            done = [a for a in pending if all(u in cols for u in a.vars)]
            if done:
                keep = np.ones(n, np.bool_)
                for a in done:
                    keep &= self._check(a, cols, sources)
                cols = {k: c[keep] for k, c in cols.items()}
                w = w[keep]
                n = len(w)
                pending = [a for a in pending if a not in done]
        if n and pending:  # atoms over the seed's variables only
            keep = np.ones(n, np.bool_)
            for a in pending:
                keep &= self._check(a, cols, sources)
            cols = {k: c[keep] for k, c in cols.items()}
            w = w[keep]
            n = len(w)
        if not n:
            return _E64, _E64
        return rule.project(cols, n), w

    def _check(self, a: PlanAtom, cols: Mapping[str, I64], sources: Sequence[Source]) -> Bool:
        keys = cols[a.vars[0]] << 32
        if len(a.vars) == 2:
            keys = keys | cols[a.vars[1]]
            view = sources[a.index]((0, 1))
        else:
            view = sources[a.index]((0,))
        self._counters["rows_gathered"] += len(keys)
        return view.contains(keys)

    def _extend(self, v: str, ready: list[PlanAtom], cols: Mapping[str, I64], n: int,
                sources: Sequence[Source]) -> tuple[I64, I64]:
        """Bind v row by row from the ready atom with the fewest candidates, checked
        against the other ready atoms."""
        binary = [a for a in ready if len(a.vars) == 2]
        if not binary:  # only unary atoms hold v: all their values
            firsts = sources[ready[0].index]((0,)).firsts()
            owner = np.repeat(np.arange(n, dtype=np.int64), len(firsts))
            vals = np.tile(firsts, n)
            self._counters["rows_gathered"] += len(vals)
            keep = np.ones(len(vals), np.bool_)
            for a in ready[1:]:
                keep &= sources[a.index]((0,)).contains(vals << 32)
            return owner[keep], vals[keep]

        def lookup(a: PlanAtom) -> tuple[_View, I64]:
            other = a.vars[1] if a.vars[0] == v else a.vars[0]
            perm = (1, 0) if a.vars[0] == v else (0, 1)
            return sources[a.index](perm), cols[other]

        looked = [lookup(a) for a in binary]
        if len(looked) == 1:
            choice = np.zeros(n, np.int64)
        else:
            choice = np.argmin(np.stack([view.counts(first) for view, first in looked]), axis=0)
        owners: list[I64] = []
        values: list[I64] = []
        for i, (view, first) in enumerate(looked):
            rows = np.flatnonzero(choice == i) if len(looked) > 1 else None
            f = first if rows is None else first[rows]
            own, val, seen = view.expand(f)
            self._counters["rows_gathered"] += seen
            if rows is not None:
                own = rows[own]
            keep = np.ones(len(own), np.bool_)
            for j, (other, ofirst) in enumerate(looked):
                if j != i:
                    keep &= other.contains((ofirst[own] << 32) | val)
            for a in ready:
                if len(a.vars) == 1:
                    keep &= sources[a.index]((0,)).contains(val << 32)
            owners.append(own[keep])
            values.append(val[keep])
        return np.concatenate(owners), np.concatenate(values)

    def _collect(self, out: dict[str, list[tuple[I64, I64]]], rule: _CRule,
                 res: tuple[I64, I64]) -> None:
        if len(res[0]):
            out.setdefault(rule.pred, []).append(res)

    @staticmethod
    def _zsets(out: Mapping[str, list[tuple[I64, I64]]]) -> dict[str, tuple[I64, I64]]:
        zs = {}
        for pred, parts in out.items():
            k, w = _sum_by_key(np.concatenate([p[0] for p in parts]),
                               np.concatenate([p[1] for p in parts]))
            if len(k):
                zs[pred] = (k, w)
        return zs

    # -- initialize -----------------------------------------------------------------------
    def initialize(self, store: RelationStore) -> dict[str, set[Row]]:
        self._counters = {"delta_queries": 0, "rows_gathered": 0}
        for pred in self.inputs:
            rows = list(store[pred].rows)
            self._set_input(pred, self._encode(pred, rows))
        c0: dict[str, list[tuple[I64, I64]]] = {}
        for pred in self.stratum.preds:
            facts = list(self.prog.facts.get(pred, ()))
            if facts:
                k = self._encode(pred, facts)
                c0.setdefault(pred, []).append((k, np.ones(len(k), np.int64)))
        for rule in self.base_rules:
            a0 = rule.atoms[0]
            seed = self.input_keys[a0.pred][self._perms(a0.pred)[0]]
            srcs = [self._src_input(a.pred, True) for a in rule.atoms]
            self._collect(c0, rule, self._join(rule, 0, seed, np.ones(len(seed), np.int64),
                                               srcs))
        ct = self._zsets(c0)
        births: dict[str, list[tuple[I64, I32, I64]]] = {p: [] for p in self.rels}
        layers: dict[str, list[I64]] = {p: [] for p in self.rels}
        members: dict[str, I64] = {p: _E64 for p in self.rels}  # sorted, all depths
        t = 0
        while True:
            born = 0
            for pred, (k, w) in ct.items():
                if (w <= 0).any():
                    raise AssertionError(f"negative derivation count in {pred}")
                births[pred].append((k, np.full(len(k), t, np.int32), w))
                _, hit = _find(members[pred], k)
                new = k[~hit]
                layers[pred].append(new)
                if len(new):
                    members[pred] = _merge_sorted(members[pred], new)[0]
                    born += len(new)
            for pred in self.rels:
                if len(layers[pred]) <= t:
                    layers[pred].append(_E64)
            self._build_rels(members, layers)
            if not born or not self.recursive_rules:
                break
            t += 1
            out: dict[str, list[tuple[I64, I64]]] = {}
            for rule in self.recursive_rules:
                for j in rule.own_atoms:
                    seed = layers[rule.atoms[j].pred][t - 1]
                    if not len(seed):
                        continue
                    srcs = [self._src_input(a.pred, True) if a.pred not in self.own
                            else self._src_own(a.pred, a.index, j, t, False)
                            for a in rule.atoms]
                    self._collect(out, rule, self._join(
                        rule, j, seed, np.ones(len(seed), np.int64), srcs))
            ct = self._zsets(out)
        for pred, rel in self.rels.items():
            parts = births[pred]
            rel.blen = np.zeros(len(rel.keys), np.int64)
            rel.bstart = np.zeros(len(rel.keys), np.int64)
            if parts:
                bk = np.concatenate([p[0] for p in parts])
                bt = np.concatenate([p[1] for p in parts])
                bw = np.concatenate([p[2] for p in parts])
                order = np.argsort(bk, kind="stable")  # by fact, then t (appended in order)
                bk = bk[order]
                room = len(bk) + len(bk) // 4 + 1024  # slack for births that move
                rel.pool_t, rel.pool_w = np.zeros(room, np.int32), np.zeros(room, np.int64)
                rel.pool_t[: len(bk)], rel.pool_w[: len(bk)] = bt[order], bw[order]
                fkeys, counts = np.unique(bk, return_counts=True)
                assert np.array_equal(fkeys, rel.keys), "a fact without births"
                rel.blen = counts.astype(np.int64)
                rel.bstart = np.cumsum(rel.blen) - rel.blen
                rel.pool_n = rel.live = len(bk)
                rel.bhist = _hist(bt)
            rel.hist = _hist(rel.depth)
        self.work = self._work(t + 1, sum(len(r.keys) for r in self.rels.values()))
        return {p: set(self._decode(p, rel.keys)) for p, rel in self.rels.items()}

    def _build_rels(self, members: Mapping[str, I64], layers: Mapping[str, list[I64]]) -> None:
        """(initialize) The member arrays with depths, from the layers so far."""
        for pred, rel in self.rels.items():
            keys = members[pred]
            depth = np.empty(len(keys), np.int32)
            for d, layer in enumerate(layers[pred]):
                if len(layer):
                    depth[np.searchsorted(keys, layer)] = d
            rel.keys, rel.depth = keys, depth
            rel.set_swapped()

    # -- sources ---------------------------------------------------------------------------
    def _src_input(self, pred: str, new: bool) -> Source:
        return lambda perm: self._input_view(pred, perm, new)

    def _src_own(self, pred: str, i: int, j: int, t: int, new: bool) -> Source:
        """Own atom i in the semi-naive term of c[t] whose delta atom is j: o[t-1] before
        j, δo[t-1] at j, o[t-2] after j."""
        lo, hi = (0, t - 1) if i < j else (t - 1, t - 1) if i == j else (0, t - 2)
        return lambda perm: self._own_view(pred, perm, lo, hi, new)

    def _own_view(self, pred: str, perm: tuple[int, ...], lo: int, hi: int,
                  new: bool) -> _View:
        view = self.rels[pred].view(perm, lo, hi)
        tc = self._touched.get(pred)
        if not new or tc is None or not len(tc.keys) or hi < lo or hi < 0:
            return view
        if perm == (1, 0):
            view.pkeys, view.pdepth = tc.skeys, tc.new[tc.sorder]
        else:
            view.pkeys, view.pdepth = tc.keys, tc.new
        return view

    # -- apply ----------------------------------------------------------------------------
    def apply(self, store: RelationStore, deltas: Mapping[str, Delta]) -> dict[str, Delta]:
        self._counters = {"delta_queries": 0, "rows_gathered": 0}
        self._input_delta = {}
        for pred, d in deltas.items():
            if pred in self.own or pred not in self.input_keys or not d:
                continue
            rows = list(d)
            k = self._encode(pred, rows)
            w = np.fromiter((d[r] for r in rows), np.int64, len(rows))
            order = np.argsort(k)
            self._input_delta[pred] = (k[order], w[order])
        self._touched = {p: _Touched() for p in self.rels}
        max_birth_old = max((len(r.bhist) - 1 for r in self.rels.values()), default=-1)
        prev: dict[str, tuple[I64, I64]] = {}
        prev2: dict[str, tuple[I64, I64]] = {}
        t = 0
        while True:
            dct = self._delta_c(t, prev, prev2)
            for pred, (k, w) in dct.items():
                self._touch(pred, k, w, t)
            cur: dict[str, tuple[I64, I64]] = {}
            size_t = 0
            for pred, tc in self._touched.items():
                self._decide(tc, t)
                w = ((tc.new <= t).astype(np.int64) - (tc.old <= t).astype(np.int64))
                nz = np.flatnonzero(w)
                if len(nz):
                    cur[pred] = (tc.keys[nz], w[nz])
                size_t += (self.rels[pred].hist_at(t) + int((tc.new == t).sum())
                           - int(((tc.old == t) & (tc.new != t)).sum()))
            if not self.recursive_rules:
                break
            if t + 1 > max_birth_old and not size_t:
                break
            prev2, prev = prev, cur
            t += 1
        out = self._finish()
        touched = sum(len(tc.keys) for tc in self._touched.values())
        self.work = self._work(t + 1, touched)
        self._touched = {}
        self._commit_inputs()
        return out

    def _delta_c(self, t: int, prev: Mapping[str, tuple[I64, I64]],
                 prev2: Mapping[str, tuple[I64, I64]]) -> dict[str, tuple[I64, I64]]:
        """Δc[t]: for every product term of c[t], the sum over its factors p of (new
        versions before p) · Δ_p · (old versions after p)."""
        out: dict[str, list[tuple[I64, I64]]] = {}
        rules = self.base_rules if t == 0 else self.recursive_rules
        for rule in rules:
            semi: list[int | None] = [None] if t == 0 else list(rule.own_atoms)
            for j in semi:
                for p, a in enumerate(rule.atoms):
                    if a.pred not in self.own:
                        delta = self._input_delta.get(a.pred)
                    else:
                        assert j is not None
                        delta = self._own_delta(a.pred, p, j, prev, prev2)
                    if delta is None or not len(delta[0]):
                        continue
                    srcs: list[Source] = []
                    for q, b in enumerate(rule.atoms):
                        if b.pred not in self.own:
                            srcs.append(self._src_input(b.pred, q < p))
                        else:
                            assert j is not None
                            srcs.append(self._src_own(b.pred, q, j, t, q < p))
                    self._collect(out, rule, self._join(rule, p, delta[0], delta[1], srcs))
        return self._zsets(out)

    @staticmethod
    def _own_delta(pred: str, i: int, j: int, prev: Mapping[str, tuple[I64, I64]],
                   prev2: Mapping[str, tuple[I64, I64]]) -> tuple[I64, I64] | None:
        """Δo[t-1] before j, Δδo[t-1] = Δo[t-1] - Δo[t-2] at j, Δo[t-2] after j."""
        if i < j:
            return prev.get(pred)
        if i > j:
            return prev2.get(pred)
        a, b = prev.get(pred), prev2.get(pred)
        if b is None:
            return a
        if a is None:
            return b[0], -b[1]
        return _sum_by_key(np.concatenate([a[0], b[0]]), np.concatenate([a[1], -b[1]]))

    def _touch(self, pred: str, k: I64, w: I64, t: int) -> None:
        """Add Δc[t] of ``pred`` (sorted keys) to the touched facts."""
        tc = self._touched[pred]
        rel = self.rels[pred]
        tc.log_k.append(k)
        tc.log_t.append(np.full(len(k), t, np.int32))
        tc.log_w.append(w)
        pos, hit = _find(tc.keys, k)
        fresh = k[~hit]
        if len(fresh):
            merged, pa, pb = _merge_sorted(tc.keys, fresh)
            n = len(merged)

            def spread(old: NDArray[Any], new: NDArray[Any]) -> NDArray[Any]:
                out = np.empty(n, old.dtype)
                out[pa] = old
                out[pb] = new
                return out

            rpos, rhit = _find(rel.keys, fresh)
            rpos[~rhit] = -1
            d_old = np.full(len(fresh), NONE, np.int32)
            d_old[rhit] = rel.depth[rpos[rhit]]
            member = d_old <= t - 1  # a member already: stays one at the same depth
            tc.pos = spread(tc.pos, rpos)
            tc.old = spread(tc.old, d_old)
            tc.new = spread(tc.new, np.where(member, d_old, NONE).astype(np.int32))
            tc.decided = spread(tc.decided, member)
            tc.dr = spread(tc.dr, np.zeros(len(fresh), np.int64))
            # old births of the fresh facts
            at = rpos[rhit]
            own, idx = _ranges(rel.bstart[at], rel.bstart[at] + rel.blen[at])
            tc.gown = np.concatenate([pa[tc.gown], pb[np.flatnonzero(rhit)][own]])
            tc.gt = np.concatenate([tc.gt, rel.pool_t[idx]])
            tc.gw = np.concatenate([tc.gw, rel.pool_w[idx]])
            tc.keys = merged
            if rel.arity == 2:
                sf = _swap(fresh)
                so = np.argsort(sf)
                tc.skeys, spa, spb = _merge_sorted(tc.skeys, sf[so])
                sorder = np.empty(n, np.int64)
                sorder[spa] = pa[tc.sorder]
                sorder[spb] = pb[so]
                tc.sorder = sorder
            pos, hit = _find(tc.keys, k)
        tc.dr[pos] += w

    @staticmethod
    def _decide(tc: _Touched, t: int) -> None:
        """↑↑H at iteration t: the undecided facts with r_old[t] + Δr[t] > 0 are in
        o_new[t] (depth t)."""
        if not len(tc.keys):
            return
        open_ = ~tc.decided
        if not open_.any():
            return
        sel = tc.gt <= t
        r_old = np.bincount(tc.gown[sel], weights=tc.gw[sel], minlength=len(tc.keys))
        member = open_ & (r_old + tc.dr > 0)
        tc.new[member] = t
        tc.decided |= member

    def _finish(self) -> dict[str, Delta]:
        """The effective deltas; then births, depths and member arrays change."""
        out: dict[str, Delta] = {}
        for pred, tc in self._touched.items():
            if not len(tc.keys):
                continue
            ins = (tc.old == NONE) & (tc.new != NONE)
            era = (tc.old != NONE) & (tc.new == NONE)
            d: Delta = {}
            for row in self._decode(pred, tc.keys[ins]):
                d[row] = 1
            for row in self._decode(pred, tc.keys[era]):
                d[row] = -1
            if d:
                out[pred] = d
            self._update(self.rels[pred], tc)
        return out

    @staticmethod
    def _new_births(tc: _Touched) -> tuple[I64, I32, I64]:
        """The births of the touched facts after the commit, sorted by (fact, t)."""
        k = np.concatenate([tc.keys[tc.gown], *tc.log_k])
        bt = np.concatenate([tc.gt, *tc.log_t])
        w = np.concatenate([tc.gw, *tc.log_w])
        order = np.lexsort((bt, k))
        k, bt, w = k[order], bt[order], w[order]
        starts = np.flatnonzero(np.r_[True, (k[1:] != k[:-1]) | (bt[1:] != bt[:-1])])
        w = np.add.reduceat(w, starts)
        k, bt = k[starts], bt[starts]
        if (w < 0).any():
            raise AssertionError("negative derivation count")
        nz = w != 0
        return k[nz], bt[nz], w[nz]

    def _update(self, rel: _Rel, tc: _Touched) -> None:
        """Depths, births and histograms of the touched facts become the new state. A
        fact that leaves stays as a tombstone (depth NONE, no births); only facts never
        seen before are inserted into the arrays."""
        k, bt, w = self._new_births(tc)
        # histograms
        rel.bhist = _trim(_hist_add(_hist_add(rel.bhist, tc.gt, -1), bt, 1))
        changed = tc.old != tc.new
        rel.hist = _trim(_hist_add(_hist_add(rel.hist, tc.old[changed & (tc.old != NONE)],
                                             -1), tc.new[changed & (tc.new != NONE)], 1))
        # facts never seen: into the arrays (tombstones and all)
        fresh = (tc.pos < 0) & (tc.new != NONE)
        if fresh.any():
            self._rebuild(rel, tc.keys[fresh], False)
            tc.pos, _ = _find(rel.keys, tc.keys)
        at = tc.pos >= 0
        rel.depth[tc.pos[at]] = tc.new[at]
        # births: every touched fact gets its new slice (in place when it fits)
        old_len = np.zeros(len(tc.keys), np.int64)
        old_len[at] = rel.blen[tc.pos[at]]
        owner = np.searchsorted(tc.keys, k)
        new_len = np.bincount(owner, minlength=len(tc.keys)).astype(np.int64)
        if (new_len[tc.new == NONE] != 0).any() or (new_len[tc.new != NONE] == 0).any():
            raise AssertionError("births and membership disagree")
        member = tc.new != NONE
        fits = member & (new_len <= old_len)
        moves = member & ~fits
        base = rel.pool_write(int(new_len[moves].sum())) if moves.any() else 0
        start = np.zeros(len(tc.keys), np.int64)  # (after pool_write: it may compact)
        start[fits] = rel.bstart[tc.pos[fits]]
        start[moves] = base + np.cumsum(new_len[moves]) - new_len[moves]
        within = np.arange(len(k), dtype=np.int64) - (np.cumsum(new_len) - new_len)[owner]
        dest = start[owner] + within
        rel.pool_t[dest] = bt
        rel.pool_w[dest] = w
        p = tc.pos[member]
        rel.bstart[p] = start[member]
        rel.blen[p] = new_len[member]
        gone = at & ~member
        rel.blen[tc.pos[gone]] = 0
        rel.live += len(k) - int(old_len.sum())
        dead = len(rel.keys) - int(rel.hist.sum())
        if dead > max(PURGE_MIN, len(rel.keys) // 4):
            self._rebuild(rel, _E64, True)

    @staticmethod
    def _rebuild(rel: _Rel, new: I64, purge: bool) -> None:
        """Add facts never seen (sorted keys) to the arrays as tombstones; with
        ``purge``, drop the tombstones."""
        keep = rel.depth != NONE if purge else np.ones(len(rel.keys), np.bool_)
        keys = rel.keys[keep]
        merged, pa, pb = _merge_sorted(keys, new)
        n = len(merged)
        depth = np.full(n, NONE, np.int32)
        depth[pa] = rel.depth[keep]
        bstart = np.zeros(n, np.int64)
        bstart[pa] = rel.bstart[keep]
        blen = np.zeros(n, np.int64)
        blen[pa] = rel.blen[keep]
        rel.keys, rel.depth, rel.bstart, rel.blen = merged, depth, bstart, blen
        if rel.arity == 2:
            # old swapped order: drop tombstones, renumber, merge the new keys in
            newpos = np.full(len(keep), -1, np.int64)
            newpos[keep] = pa
            sp = newpos[rel.sperm]
            alive = sp >= 0
            sk = _swap(new)
            so = np.argsort(sk)
            rel.skeys, spa, spb = _merge_sorted(rel.skeys[alive], sk[so])
            sperm = np.empty(n, np.int64)
            sperm[spa] = sp[alive]
            sperm[spb] = pb[so]
            rel.sperm = sperm

    def _commit_inputs(self) -> None:
        """The new versions of the inputs become the old ones of the next commit."""
        for pred, (k, w) in self._input_delta.items():
            keys = self.input_keys[pred][self._perms(pred)[0]]
            keys = np.setdiff1d(keys, k[w < 0], assume_unique=True)
            self._set_input(pred, np.concatenate([keys, k[w > 0]]))
        self._input_delta = {}

    def _work(self, iterations: int, facts: int) -> dict[str, int]:
        return {
            "delta_queries": self._counters.get("delta_queries", 0),
            "rows_gathered": self._counters.get("rows_gathered", 0),
            "inner_iterations": iterations,
            "facts_touched": facts,
            "columnar_strata": 1,
        }
