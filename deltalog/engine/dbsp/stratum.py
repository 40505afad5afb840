"""One stratum maintained the DBSP way (Budiu et al. 2023, §5-§6): the fixed point of the
stratum's rules as a stream over inner time, incrementalized over outer time (commits) with
nested time, exact under inserts and deletes; every join term a delta query (Völkel, "WCOJ
meets DBSP", done per relation) evaluated by leapfrog triejoin seeded by its delta.

State per derived fact x: its births C[x][t], the number of derivations that first hold
at inner iteration t (c[t] = r[t] - r[t-1], where r[t] = R(I, o[t-1]) counts derivations
over the approximation o[t-1]); its depth (the first t with a birth: x ∈ o[t] iff
depth ≤ t); and one sorted layer per depth, so o[t] and δo[t] = o[t] - o[t-1] are views.
A commit computes Δc[t] = c_new[t] - c_old[t] for t = 0, 1, ... as a sum of delta queries
over the semi-naive terms of c[t] (own atoms before the delta atom read o[t-1], the delta
atom δo[t-1], those after it o[t-2]); ↑↑H on the cumulative Δr decides membership.

The inner loop stops after iteration t only when t+1 is past every old birth and the new
δo[t] is empty: an earlier commit may have iterated longer, and its later iterations can
still carry retractions (stopping at the first empty change would miss them).
"""

import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sortedcontainers import SortedList

from deltalog.engine.analysis.program import AnalyzedProgram, RelationSchema, Stratum
from deltalog.engine.dbsp.lftj import delta_join
from deltalog.engine.errors import DataError
from deltalog.engine.exact_sum import ExactSum, group_out_of_range
from deltalog.engine.heads import change_conflict, check_functional, head_projection
from deltalog.engine.join.plan import (
    Env,
    PlanAtom,
    PreparedRule,
    RulePlan,
    all_vars,
    build_plan,
    compare_assignments,
    holders_and_wildcards,
    prepare,
)
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.semantics import coerce
from deltalog.engine.storage import (
    CurrentRows,
    Delta,
    ListRows,
    PreviousRows,
    RelationStore,
    VersionedRelation,
    add_into,
)
from deltalog.engine.storage import SortedRows as SortedRowsT
from deltalog.engine.syntax.ast import Atom, Const, Rule, Var, expr_vars
from deltalog.engine.values import Row

Fact = tuple[str, Row]
SeedKey = tuple[str, int] | None  # ("atom", i), ("neg", j) or None (no seed)
Source = Callable[[tuple[int, ...]], SortedRowsT]

_EMPTY = ListRows(())


class UnionRows:
    """The union of disjoint sorted versions (the layers of o[t]), answering ``ceil``."""

    __slots__ = ("parts",)

    def __init__(self, parts: Sequence[SortedRowsT]):
        self.parts = [p for p in parts if len(p)]

    def ceil(self, key: tuple[Any, ...]) -> Row | None:
        best: Row | None = None
        for p in self.parts:
            r = p.ceil(key)
            if r is not None and (best is None or r < best):
                best = r
        return best

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def __iter__(self) -> Iterator[Row]:
        return iter(heapq.merge(*self.parts))

    def __contains__(self, row: object) -> bool:
        return any(row in p for p in self.parts)


# ---------------------------------------------------------------------------------------
# Rules: negations, aggregates, and one plan per seed.


@dataclass
class NegatedAtom:
    """``!pred(args)``; N' is the set of keys (values of its bound variables) for which a
    matching row exists. The factor of the body is 1 - N', whose delta is -ΔN'."""

    index: int
    atom: Atom
    key_vars: tuple[str, ...]
    perm: tuple[int, ...]  # fixed columns (constants, bound variables) first

    @property
    def token(self) -> str:
        return f"~{self.index}"

    def key_of(self, row: Row) -> tuple[Any, ...] | None:
        """The key ``row`` supports, or None when it does not match the atom."""
        vals: dict[str, Any] = {}
        for arg, v in zip(self.atom.args, row, strict=True):
            if isinstance(arg, Const):
                if arg.value != v:
                    return None
            elif arg.name in self.key_vars and vals.setdefault(arg.name, v) != v:
                return None
        return tuple(vals[v] for v in self.key_vars)

    def prefix(self, key: tuple[Any, ...]) -> tuple[Any, ...]:
        named = dict(zip(self.key_vars, key, strict=True))
        out = []
        for c in self.perm:
            arg = self.atom.args[c]
            if isinstance(arg, Const):
                out.append(arg.value)
            elif arg.name in named:
                out.append(named[arg.name])
            else:
                break
        return tuple(out)


def _exists(rows: SortedRowsT, prefix: tuple[Any, ...]) -> bool:
    row = rows.ceil(prefix)
    return row is not None and row[: len(prefix)] == prefix


def negated_atoms(prep: PreparedRule) -> list[NegatedAtom]:
    """The negations of ``prep``, each keyed by its variables the body binds (sorted)."""
    variables = all_vars(prep)
    out = []
    for j, atom in enumerate(prep.negations):
        key_vars = tuple(sorted(v for v in atom.vars if v in variables))
        fixed = [c for c, a in enumerate(atom.args)
                 if isinstance(a, Const) or a.name in key_vars]
        free = [c for c in range(len(atom.args)) if c not in fixed]
        out.append(NegatedAtom(j, atom, key_vars, tuple(fixed + free)))
    return out


def negation_change(neg: NegatedAtom, rel: VersionedRelation, delta: Delta) -> dict[Row, int]:
    """ΔN' of ``neg`` for the effective change ``delta`` of its relation ``rel`` (old and
    new versions): the keys whose existence changed, +1 where a matching row exists now.
    A negation that fixes every column (constants and bound variables, no wildcard) has
    one row per key: its change is the delta's, and no sorted index of ``rel`` is read."""
    if all(isinstance(a, Const) or a.name in neg.key_vars for a in neg.atom.args):
        return {k: 1 if w > 0 else -1 for row, w in delta.items()
                if (k := neg.key_of(row)) is not None}
    keys = {k for row in delta if (k := neg.key_of(row)) is not None}
    out: dict[Row, int] = {}
    for key in keys:
        prefix = neg.prefix(key)
        before = _exists(rel.previous(neg.perm), prefix)
        after = _exists(rel.current(neg.perm), prefix)
        if before != after:
            out[key] = 1 if after else -1
    return out


class _Group:
    """One group of an aggregate: the multiset of its assignments' values."""

    __slots__ = ("n", "sorted", "sum", "values")

    def __init__(self, func: str) -> None:
        self.n = 0
        self.values: dict[Any, int] = {}
        self.sorted: SortedList | None = SortedList() if func in ("min", "max") else None
        # (a sum of the values of sum and total only: min and max take strings)
        self.sum: ExactSum | None = ExactSum() if func in ("sum", "total") else None

    def add(self, v: Any, w: int) -> None:
        self.n += w
        before = self.values.get(v, 0)
        add_into(self.values, v, w)
        after = before + w
        if self.sorted is not None:
            if before <= 0 < after:
                self.sorted.add(v)
            elif after <= 0 < before:
                self.sorted.remove(v)
        if self.sum is not None:
            self.sum.add(v, w)

    def result(self, func: str, float_col: bool) -> Any:
        if self.n <= 0:
            return None
        if func == "count":
            return self.n
        if func in ("sum", "total"):
            assert self.sum is not None
            return self.sum.value(func == "total" or float_col)
        assert self.sorted is not None
        return self.sorted[0] if func == "min" else self.sorted[-1]


class _RuleInfo:
    def __init__(self, prog: AnalyzedProgram, rule: Rule, own: frozenset[str]):
        self.rule = rule
        base = prepare(rule)
        self.schema: RelationSchema = prog.schemas[rule.head.pred]
        self.pred = rule.head.pred
        # heads.head_projection has no form for a head without arguments.
        self.project: Callable[[Env], Row] = (
            head_projection(rule, self.schema) if rule.head.args else (lambda env: ())
        )
        variables = all_vars(base)
        self.negs = negated_atoms(base)
        tokenized = tuple(Atom(n.token, n.atom.args, n.atom.functional) for n in self.negs)
        self.prep = PreparedRule(rule, base.atoms, base.assigns, base.filters, tokenized,
                                 base.head_vars)
        self.atoms = base.atoms
        self.own_atoms = [a.index for a in base.atoms if a.pred in own]
        self.inputs = {a.pred for a in base.atoms if a.pred not in own}
        self.inputs |= {n.atom.pred for n in self.negs}
        self.plans: dict[SeedKey, RulePlan] = {}
        self.agg = rule.aggregate
        if self.agg is not None:
            self.keys = rule.head.args[:-1]
            self.arg = self.agg.arg.name if self.agg.arg is not None else None
            self.ident = tuple(sorted(v for v in variables if not v.startswith("#")))
            self.float_col = self.schema.columns[-1].type == "float"
            self.groups: dict[tuple[Any, ...], _Group] = {}

    # Saving (``deltalog.engine.state_codec`` takes the state pickle would): closures are rebuilt,
    # plans from their variable orders (``DbspStratum.__setstate__``), so layers keep their
    # permutations.
    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in ("project", "plans")}
        state["orders"] = {seed: plan.order for seed, plan in self.plans.items()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        rule = self.rule
        self.project = (
            head_projection(rule, self.schema) if rule.head.args else (lambda env: ())
        )
        self.plans = {}

    def seed_prep(self, seed: SeedKey) -> PreparedRule:
        if seed is None or seed[0] == "atom":
            return self.prep
        j = seed[1]
        neg = self.negs[j]
        atoms = self.prep.atoms
        if neg.key_vars:
            atoms = (*atoms, PlanAtom(len(atoms), neg.token, neg.key_vars))
        negations = tuple(a for k, a in enumerate(self.prep.negations) if k != j)
        p = self.prep
        return PreparedRule(p.rule, atoms, p.assigns, p.filters, negations, p.head_vars)

    def group_row(self, env: Env, value: Any) -> Row:
        keys = tuple(env[k.name] if isinstance(k, Var) else k.value for k in self.keys)
        cols = self.schema.columns
        return tuple(coerce(v, c.type) for v, c in zip((*keys, value), cols, strict=True))


def seeded_order(prep: PreparedRule, first: Sequence[str]) -> tuple[str, ...]:
    """The seed's variables first (so the join starts from the delta), then assignments
    as soon as their inputs are bound, then variables connected to what is bound, held by
    the most atoms, by name; a variable only one atom mentions and nothing else reads (a
    wildcard) goes last, where one witness suffices. Only the frontier (variables sharing
    an atom with a bound one) is costed, so a long body is planned in near-linear time."""
    remaining = set(all_vars(prep))
    sources = [(v, expr_vars(e)) for v, e in (*prep.assigns, *compare_assignments(prep))]
    holders_of, wild = holders_and_wildcards(prep)
    order: list[str] = []
    bound: set[str] = set()
    frontier: set[str] = set()

    def bind(v: str) -> None:
        order.append(v)
        bound.add(v)
        remaining.discard(v)
        for a in holders_of.get(v, ()):
            frontier.update(a.vars)

    for v in first:
        if v in remaining:
            bind(v)
    while remaining:
        ready = sorted(v for v, deps in sources if v in remaining and deps <= bound)
        if ready:
            bind(ready[0])
            continue

        def cost(v: str) -> tuple[int, int, int, str]:
            return (0 if v in frontier else 1, 1 if v in wild else 0, -len(holders_of[v]), v)

        live = remaining - wild or remaining  # wildcards after every other variable
        candidates = (frontier & live) or (live & holders_of.keys())
        if not candidates:
            raise AssertionError(f"no variable can be bound next among {remaining}")
        bind(min(candidates, key=cost))
    return tuple(order)


# ---------------------------------------------------------------------------------------


@dataclass
class _Commit:
    """Bookkeeping of one ``apply`` (or ``initialize``): what changes where."""

    dc: dict[Fact, dict[int, int]] = field(default_factory=dict)  # Δc per fact and t
    dr: dict[Fact, int] = field(default_factory=dict)  # Δr[t], cumulative over t
    new_depth: dict[Fact, int | None] = field(default_factory=dict)  # touched facts
    open: set[Fact] = field(default_factory=set)  # touched, not (yet) in o_new[t]
    left: set[Fact] = field(default_factory=set)  # left their old layer
    removed: dict[tuple[str, tuple[int, ...], int], set[Row]] = field(default_factory=dict)
    added: dict[tuple[str, tuple[int, ...], int], SortedList] = field(default_factory=dict)
    removed_n: dict[tuple[str, int], int] = field(default_factory=dict)
    added_n: dict[tuple[str, int], int] = field(default_factory=dict)


class DbspStratum:
    """Maintains the predicates of one stratum (recursive or not) with DBSP's nested-time
    incremental recursion; see the module docstring."""

    strategy = "dbsp"

    def __init__(self, prog: AnalyzedProgram, stratum: Stratum):
        self.prog = prog
        self.stratum = stratum
        self.own = frozenset(stratum.preds)
        self.rules = [_RuleInfo(prog, r, self.own) for r in stratum.rules]
        self.base_rules = [r for r in self.rules if not r.own_atoms]
        self.recursive_rules = [r for r in self.rules if r.own_atoms]
        self.work: dict[str, int] = {}
        # State: births, depth, layers per permutation, counts.
        self.births: dict[Fact, dict[int, int]] = {}
        self.depth: dict[Fact, int] = {}
        self.perms: dict[str, set[tuple[int, ...]]] = {p: set() for p in self.own}
        self.layers: dict[tuple[str, tuple[int, ...]], dict[int, SortedList]] = {}
        self.depth_count: dict[tuple[str, int], int] = {}
        self.birth_count: dict[int, int] = {}
        self.by_key: dict[str, dict[Row, Row]] = {
            p: {} for p in self.own if prog.schemas[p].functional
        }
        self._store: RelationStore | None = None
        self._neg_sources: dict[str, Source] = {}
        self._commit = _Commit()
        self._stats = JoinStats()
        self._queries = 0

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()
                if k not in ("_store", "_neg_sources")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._store = None
        self._neg_sources = {}
        for info in self.rules:
            orders: dict[SeedKey, tuple[str, ...]] = info.__dict__.pop("orders", {})
            for seed, order in orders.items():
                info.plans[seed] = build_plan(info.seed_prep(seed), {}, self._probe, order)

    # -- plans ----------------------------------------------------------------------------
    def _probe(self, token: str, perm: tuple[int, ...], prefix: tuple[Any, ...]) -> bool:
        self._stats.seeks += 1
        return _exists(self._neg_sources[token](perm), prefix)

    def _build_plans(self, store: RelationStore) -> None:
        for info in self.rules:
            sizes = {a.index: len(store[a.pred]) for a in info.atoms}
            info.plans[None] = build_plan(info.prep, sizes, self._probe)
            for a in info.atoms:
                info.plans[("atom", a.index)] = build_plan(
                    info.prep, sizes, self._probe, seeded_order(info.prep, a.vars))
            for neg in info.negs:
                prep = info.seed_prep(("neg", neg.index))
                info.plans[("neg", neg.index)] = build_plan(
                    prep, sizes, self._probe, seeded_order(prep, neg.key_vars))
            for plan in info.plans.values():
                for a, perm in zip(plan.prep.atoms, plan.perms, strict=True):
                    if a.pred in self.own:
                        self.perms[a.pred].add(perm)
                    elif a.pred in store:
                        store[a.pred].index(perm)  # built once here, maintained by commits
            for neg in info.negs:
                store[neg.atom.pred].index(neg.perm)
        for pred, perms in self.perms.items():
            for perm in perms:
                self.layers[(pred, perm)] = {}

    # -- running one delta query ----------------------------------------------------------
    def _run(
        self,
        info: _RuleInfo,
        seed: SeedKey,
        atom_src: Sequence[Source],
        neg_src: Sequence[Source],
        seed_delta: Mapping[Row, int] | None,
        sink: Callable[[Env, int], None],
        sign: int = 1,
    ) -> None:
        """Evaluate ``info``'s body: atom i reads ``atom_src[i]``, negation j probes
        ``neg_src[j]``; the seed (when given) reads ``seed_delta`` and weighs each
        assignment by its row's weight times ``sign``."""
        plan = info.plans[seed]
        self._queries += 1
        self._neg_sources = {n.token: neg_src[n.index] for n in info.negs}
        sources: list[SortedRowsT] = []
        seed_vars: tuple[str, ...] = ()
        for a, perm in zip(plan.prep.atoms, plan.perms, strict=True):
            if seed is not None and seed_delta is not None and (
                (seed[0] == "atom" and a.index == seed[1])
                or (seed[0] == "neg" and a.index == len(info.atoms))
            ):
                sources.append(ListRows(tuple(r[c] for c in perm) for r in seed_delta))
                seed_vars = a.vars
            else:
                sources.append(atom_src[a.index](perm))
        if seed is not None and seed[0] == "neg" and not seed_vars:
            assert seed_delta is not None
            scalar = seed_delta.get((), 0) * sign  # a negation with no bound variable
            if scalar:
                delta_join(plan, sources, lambda env: sink(env, scalar), self._stats)
            return
        if seed_delta is None:
            delta_join(plan, sources, lambda env: sink(env, sign), self._stats)
            return
        weights = seed_delta

        def emit(env: Env) -> None:
            w = weights.get(tuple(env[v] for v in seed_vars), 0)
            if w:
                sink(env, w * sign)

        delta_join(plan, sources, emit, self._stats)

    def _head_sink(self, info: _RuleInfo, out: dict[Fact, int]) -> Callable[[Env, int], None]:
        pred, project = info.pred, info.project

        def sink(env: Env, w: int) -> None:
            add_into(out, (pred, project(env)), w)

        return sink

    def _agg_sink(self, info: _RuleInfo, out: dict[tuple[Any, ...], int]
                  ) -> Callable[[Env, int], None]:
        ident = info.ident

        def sink(env: Env, w: int) -> None:
            add_into(out, tuple(env[v] for v in ident if v in env), w)

        return sink

    def _aggregate(self, info: _RuleInfo, assignments: Mapping[tuple[Any, ...], int],
                   envs: Mapping[tuple[Any, ...], Env], out: dict[Fact, int]) -> None:
        """Apply assignment changes to the groups; the rows of changed results go to out."""
        assert info.agg is not None
        func = info.agg.func
        touched: dict[Row, Any] = {}
        for ident, w in assignments.items():
            env = envs[ident]
            key = info.group_row(env, None)[:-1]
            g = info.groups.get(key)
            if g is None:
                g = info.groups[key] = _Group(func)
            if key not in touched:
                touched[key] = g.result(func, info.float_col)
            g.add(env[info.arg] if info.arg is not None else 0, w)
        for key, before in touched.items():
            g = info.groups[key]
            try:
                after = g.result(func, info.float_col)
            except DataError as err:
                raise group_out_of_range(err, info.pred, key) from None
            if g.n == 0:
                del info.groups[key]
            if before == after and type(before) is type(after):
                continue
            if before is not None:
                add_into(out, (info.pred, self._agg_row(info, key, before)), -1)
            if after is not None:
                add_into(out, (info.pred, self._agg_row(info, key, after)), 1)

    @staticmethod
    def _agg_row(info: _RuleInfo, key: Row, value: Any) -> Row:
        col = info.schema.columns[-1]
        return (*key, coerce(value, col.type))

    # -- views of the stratum's own relations ---------------------------------------------
    def _eq(self, pred: str, perm: tuple[int, ...], d: int, new: bool) -> SortedRowsT:
        """δo[d] (the facts of depth d), old or new version."""
        base = self.layers[(pred, perm)].get(d)
        if new:
            c = self._commit
            removed = c.removed.get((pred, perm, d))
            added = c.added.get((pred, perm, d))
            if removed or added:
                return PreviousRows(base if base is not None else SortedList(),
                                    removed or set(), added or SortedList())
        return CurrentRows(base) if base is not None else _EMPTY

    def _le(self, pred: str, perm: tuple[int, ...], t: int, new: bool) -> SortedRowsT:
        """o[t] (the facts of depth ≤ t), old or new version."""
        if t < 0:
            return _EMPTY
        return UnionRows([self._eq(pred, perm, d, new) for d in range(t + 1)])

    def _layer_size(self, pred: str, d: int, new: bool) -> int:
        n = self.depth_count.get((pred, d), 0)
        if new:
            c = self._commit
            n += c.added_n.get((pred, d), 0) - c.removed_n.get((pred, d), 0)
        return n

    def _input(self, pred: str, new: bool) -> Source:
        store = self._store
        assert store is not None
        rel = store[pred]
        return rel.current if new else rel.previous

    # -- initialize -----------------------------------------------------------------------
    def initialize(self, store: RelationStore) -> dict[str, set[Row]]:
        """Evaluate the stratum from the current versions of its inputs, keeping births,
        depths and layers; return the contents of every own predicate."""
        self._store = store
        self._stats = JoinStats()
        self._queries = 0
        self._build_plans(store)
        c0: dict[Fact, int] = {}
        for pred in self.stratum.preds:
            for row in self.prog.facts.get(pred, ()):
                add_into(c0, (pred, row), 1)
        for info in self.base_rules:
            base_src = [self._input(a.pred, True) for a in info.atoms]
            neg_src = [self._input(n.atom.pred, True) for n in info.negs]
            if info.agg is None:
                self._run(info, None, base_src, neg_src, None, self._head_sink(info, c0))
            else:
                assignments: dict[tuple[Any, ...], int] = {}
                envs = self._collect_envs(info, None, base_src, neg_src, None, assignments)
                self._aggregate(info, assignments, envs, c0)
        t = 0
        ct = c0
        while True:
            born = self._record_births(ct, t)
            if not born or not self.recursive_rules:
                break
            t += 1
            ct = {}
            for info in self.recursive_rules:
                for j in info.own_atoms:
                    atom_src: list[Source] = []
                    for a in info.atoms:
                        if a.pred not in self.own:
                            atom_src.append(self._input(a.pred, True))
                        else:
                            atom_src.append(self._own_source(a.pred, a.index, j, t, True))
                    neg_src = [self._input(n.atom.pred, True) for n in info.negs]
                    self._run(info, ("atom", j), atom_src, neg_src, None,
                              self._head_sink(info, ct))
        out: dict[str, set[Row]] = {p: set() for p in self.stratum.preds}
        for pred, row in self.depth:
            out[pred].add(row)
        for pred in self.by_key:
            check_functional(self.prog.schemas[pred], sorted(out[pred]))
            k = self.prog.schemas[pred].key_arity
            self.by_key[pred] = {row[:k]: row for row in out[pred]}
        self.work = self._work(t + 1, len(self.depth))
        return out

    def _collect_envs(self, info: _RuleInfo, seed: SeedKey, atom_src: Sequence[Source],
                      neg_src: Sequence[Source], seed_delta: Mapping[Row, int] | None,
                      assignments: dict[tuple[Any, ...], int], sign: int = 1,
                      envs: dict[tuple[Any, ...], Env] | None = None
                      ) -> dict[tuple[Any, ...], Env]:
        envs = {} if envs is None else envs
        ident = info.ident

        def sink(env: Env, w: int) -> None:
            key = tuple(env[v] for v in ident if v in env)
            add_into(assignments, key, w)
            if key not in envs:
                envs[key] = dict(env)

        self._run(info, seed, atom_src, neg_src, seed_delta, sink, sign)
        return envs

    def _own_source(self, pred: str, i: int, j: int, t: int, new: bool) -> Source:
        """The version own atom i reads in the semi-naive term of c[t] whose delta atom is
        j: o[t-1] before j, δo[t-1] at j, o[t-2] after j."""
        if i < j:
            return lambda perm: self._le(pred, perm, t - 1, new)
        if i == j:
            return lambda perm: self._eq(pred, perm, t - 1, new)
        return lambda perm: self._le(pred, perm, t - 2, new)

    def _record_births(self, ct: Mapping[Fact, int], t: int) -> int:
        """(initialize) Births at t; facts first derived now get depth t. Returns how
        many facts are new."""
        born = 0
        for fact, w in ct.items():
            if w <= 0:
                raise AssertionError(f"negative derivation count for {fact}")
            self.births.setdefault(fact, {})[t] = w
            self.birth_count[t] = self.birth_count.get(t, 0) + 1
            if fact not in self.depth:
                self.depth[fact] = t
                self._layer_add(fact, t)
                born += 1
        return born

    def _layer_add(self, fact: Fact, d: int) -> None:
        pred, row = fact
        for perm in self.perms[pred]:
            layer = self.layers[(pred, perm)]
            sl = layer.get(d)
            if sl is None:
                sl = layer[d] = SortedList()
            sl.add(tuple(row[c] for c in perm))
        self.depth_count[(pred, d)] = self.depth_count.get((pred, d), 0) + 1

    def _layer_remove(self, fact: Fact, d: int) -> None:
        pred, row = fact
        for perm in self.perms[pred]:
            layer = self.layers[(pred, perm)]
            sl = layer[d]
            sl.remove(tuple(row[c] for c in perm))
            if not sl:
                del layer[d]
        n = self.depth_count[(pred, d)] - 1
        if n:
            self.depth_count[(pred, d)] = n
        else:
            del self.depth_count[(pred, d)]

    # -- apply ----------------------------------------------------------------------------
    def apply(self, store: RelationStore, deltas: Mapping[str, Delta]) -> dict[str, Delta]:
        """Effective deltas of the own predicates for the input deltas of one commit
        (``store`` presents the old and new versions of every input)."""
        self._store = store
        self._stats = JoinStats()
        self._queries = 0
        inputs = {p: d for p, d in deltas.items() if d and p not in self.own}
        c = self._commit = _Commit()
        neg_delta = self._negation_deltas(store, inputs)
        max_birth_old = max(self.birth_count) if self.birth_count else -1
        prev: dict[str, dict[Row, int]] = {}  # Δo[t-1] by predicate
        prev2: dict[str, dict[Row, int]] = {}  # Δo[t-2]
        t = 0
        while True:
            dct = self._delta_c(t, inputs, neg_delta, prev, prev2)
            for fact, w in dct.items():
                add_into(c.dr, fact, w)
                add_into(c.dc.setdefault(fact, {}), t, w)
                if fact not in c.new_depth:
                    d_old = self.depth.get(fact)
                    if d_old is not None and d_old <= t - 1:
                        c.new_depth[fact] = d_old  # a member already: stays one
                    else:
                        c.new_depth[fact] = None
                        c.open.add(fact)
                elif c.new_depth[fact] is None:
                    c.open.add(fact)
            self._decide(t)
            cur = self._delta_o(t)
            if not self.recursive_rules:
                break
            if t + 1 > max_birth_old and not any(
                self._layer_size(p, t, True) for p in self.own
            ):
                break
            prev2, prev = prev, cur
            t += 1
        out = self._finish()
        self.work = self._work(t + 1, len(c.new_depth))
        return out

    def _negation_deltas(self, store: RelationStore, inputs: Mapping[str, Delta]
                         ) -> dict[tuple[int, int], dict[Row, int]]:
        """ΔN' per (rule, negation): keys whose existence changed (+1 now exists)."""
        out: dict[tuple[int, int], dict[Row, int]] = {}
        for r, info in enumerate(self.rules):
            for neg in info.negs:
                delta = inputs.get(neg.atom.pred)
                if not delta:
                    continue
                d = negation_change(neg, store[neg.atom.pred], delta)
                if d:
                    out[(r, neg.index)] = d
        return out

    def _delta_c(self, t: int, inputs: Mapping[str, Delta],
                 neg_delta: Mapping[tuple[int, int], dict[Row, int]],
                 prev: Mapping[str, dict[Row, int]], prev2: Mapping[str, dict[Row, int]]
                 ) -> dict[Fact, int]:
        """Δc[t] = c_new[t] - c_old[t]: for every product term of c[t], the sum over its
        factors p of (new versions before p) · Δ_p · (old versions after p)."""
        out: dict[Fact, int] = {}
        rules = self.base_rules if t == 0 else self.recursive_rules
        for info in rules:
            r = self.rules.index(info)
            semi: list[int | None] = [None] if t == 0 else list(info.own_atoms)
            assignments: dict[tuple[Any, ...], int] = {}
            envs: dict[tuple[Any, ...], Env] = {}
            for j in semi:
                n_atoms = len(info.atoms)
                for p in range(n_atoms + len(info.negs)):
                    seed: SeedKey
                    sign = 1
                    if p < n_atoms:
                        a = info.atoms[p]
                        if a.pred not in self.own:
                            delta = inputs.get(a.pred)
                        else:
                            assert j is not None
                            delta = self._own_delta(a.pred, p, j, prev, prev2)
                        seed = ("atom", p)
                    else:
                        k = p - n_atoms
                        delta = neg_delta.get((r, k))
                        seed, sign = ("neg", k), -1
                    if not delta:
                        continue
                    atom_src: list[Source] = []
                    for q, a in enumerate(info.atoms):
                        new = q < p
                        if a.pred not in self.own:
                            atom_src.append(self._input(a.pred, new))
                        else:
                            assert j is not None
                            atom_src.append(self._own_source(a.pred, q, j, t, new))
                    neg_src = [self._input(n.atom.pred, n_atoms + n.index < p)
                               for n in info.negs]
                    if info.agg is None:
                        self._run(info, seed, atom_src, neg_src, delta,
                                  self._head_sink(info, out), sign)
                    else:
                        self._collect_envs(info, seed, atom_src, neg_src, delta,
                                           assignments, sign, envs)
            if info.agg is not None and assignments:
                self._aggregate(info, assignments, envs, out)
        return out

    def _own_delta(self, pred: str, i: int, j: int, prev: Mapping[str, dict[Row, int]],
                   prev2: Mapping[str, dict[Row, int]]) -> dict[Row, int]:
        """Δ of own atom i's factor in the term with delta atom j: Δo[t-1] before j,
        Δδo[t-1] = Δo[t-1] - Δo[t-2] at j, Δo[t-2] after j."""
        if i < j:
            return prev.get(pred, {})
        if i > j:
            return prev2.get(pred, {})
        out = dict(prev.get(pred, {}))
        for row, w in prev2.get(pred, {}).items():
            add_into(out, row, -w)
        return out

    def _r_old(self, fact: Fact, t: int) -> int:
        births = self.births.get(fact)
        if not births:
            return 0
        return sum(w for s, w in births.items() if s <= t)

    def _decide(self, t: int) -> None:
        """↑↑H at iteration t: which open facts are in o_new[t]; layers follow."""
        c = self._commit
        for fact in list(c.open):
            d_old = self.depth.get(fact)
            dr = c.dr.get(fact, 0)
            if self._r_old(fact, t) + dr > 0:
                c.new_depth[fact] = t
                c.open.discard(fact)
                if d_old != t:
                    self._pending_join(fact, t)
                    if d_old is not None:
                        self._pending_leave(fact, d_old)
            elif d_old == t:
                self._pending_leave(fact, d_old)
            elif d_old is None and not dr:
                c.open.discard(fact)  # nothing derives it (yet): not a member

    def _pending_join(self, fact: Fact, d: int) -> None:
        c = self._commit
        pred, row = fact
        for perm in self.perms[pred]:
            sl = c.added.get((pred, perm, d))
            if sl is None:
                sl = c.added[(pred, perm, d)] = SortedList()
            sl.add(tuple(row[k] for k in perm))
        c.added_n[(pred, d)] = c.added_n.get((pred, d), 0) + 1

    def _pending_leave(self, fact: Fact, d: int) -> None:
        c = self._commit
        if fact in c.left:
            return
        c.left.add(fact)
        pred, row = fact
        for perm in self.perms[pred]:
            c.removed.setdefault((pred, perm, d), set()).add(tuple(row[k] for k in perm))
        c.removed_n[(pred, d)] = c.removed_n.get((pred, d), 0) + 1

    def _delta_o(self, t: int) -> dict[str, dict[Row, int]]:
        """Δo[t] = o_new[t] - o_old[t], by predicate."""
        out: dict[str, dict[Row, int]] = {}
        for fact, d_new in self._commit.new_depth.items():
            d_old = self.depth.get(fact)
            w = int(d_new is not None and d_new <= t) - int(d_old is not None and d_old <= t)
            if w:
                out.setdefault(fact[0], {})[fact[1]] = w
        return out

    def _finish(self) -> dict[str, Delta]:
        """The effective deltas; then births, depths and layers become the new state."""
        c = self._commit
        out: dict[str, Delta] = {}
        for fact, d_new in c.new_depth.items():
            d_old = self.depth.get(fact)
            if (d_old is None) != (d_new is None):
                out.setdefault(fact[0], {})[fact[1]] = 1 if d_old is None else -1
        self._check_functional(out)
        for fact, per_t in c.dc.items():
            births = self.births.setdefault(fact, {})
            for s, w in per_t.items():
                before = births.get(s, 0)
                after = before + w
                if after < 0:
                    raise AssertionError(f"negative derivation count for {fact} at {s}")
                if after:
                    births[s] = after
                else:
                    del births[s]
                if before == 0 and after > 0:
                    self.birth_count[s] = self.birth_count.get(s, 0) + 1
                elif before > 0 and after == 0:
                    n = self.birth_count[s] - 1
                    if n:
                        self.birth_count[s] = n
                    else:
                        del self.birth_count[s]
            if not births:
                del self.births[fact]
        for fact, d_new in c.new_depth.items():
            d_old = self.depth.get(fact)
            if d_old == d_new:
                continue
            if d_old is not None:
                self._layer_remove(fact, d_old)
                del self.depth[fact]
            if d_new is not None:
                self._layer_add(fact, d_new)
                self.depth[fact] = d_new
        self._commit = _Commit()
        return out

    def _check_functional(self, out: Mapping[str, Delta]) -> None:
        """A second value for one key of a functional head is DL302, as in
        ``deltalog.engine.heads.check_functional``; checked before the state changes."""
        for pred, by_key in self.by_key.items():
            delta = out.get(pred)
            if not delta:
                continue
            k = self.prog.schemas[pred].key_arity
            change_conflict(pred, k, delta, by_key.get)
            for row, w in delta.items():
                if w < 0 and by_key.get(row[:k]) == row:
                    del by_key[row[:k]]
            for row, w in delta.items():
                if w > 0:
                    by_key[row[:k]] = row

    def _work(self, iterations: int, facts: int) -> dict[str, int]:
        return {
            **self._stats.as_dict(),
            "delta_queries": self._queries,
            "inner_iterations": iterations,
            "facts_touched": facts,
        }
