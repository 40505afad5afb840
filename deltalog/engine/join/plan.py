"""A rule body prepared for leapfrog triejoin: every positive atom over distinct variables
(constants and repeated variables become assignments), a variable order, and for each
level of that order the atoms that join on it, its assignment, its filters and negations.

The order is chosen by a simple deterministic cost model (``choose_order``) unless given.
"""

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from deltalog.engine.semantics import compare, compile_expr
from deltalog.engine.syntax.ast import Atom, Compare, Const, Expr, Negation, Rule, Var, expr_vars
from deltalog.engine.values import Value

Env = dict[str, Value]


@dataclass(frozen=True)
class PlanAtom:
    """A positive body atom: its relation, which version it reads, and its variables."""

    index: int  # position among the rule's positive atoms
    pred: str
    vars: tuple[str, ...]  # one distinct variable per column


@dataclass(frozen=True)
class PreparedRule:
    rule: Rule
    atoms: tuple[PlanAtom, ...]
    assigns: tuple[tuple[str, Expr], ...]  # v = expr (constants, repeats, and `=` compares)
    filters: tuple[Compare, ...]
    negations: tuple[Atom, ...]
    head_vars: frozenset[str]


def _used_once(rule: Rule) -> set[str]:
    """Variables the parser made (``_``) that occur once in the whole rule: wildcards."""
    counts: Counter[str] = Counter()
    for item in rule.body:
        atom = item.atom if isinstance(item, Negation) else item
        if isinstance(atom, Atom):
            counts.update(a.name for a in atom.args if isinstance(a, Var))
        else:
            counts.update(expr_vars(item.left) | expr_vars(item.right))  # type: ignore[union-attr]
    counts.update(rule.head.vars)
    if rule.aggregate is not None:
        counts.update([rule.aggregate.result.name])
        if rule.aggregate.arg is not None:
            counts.update([rule.aggregate.arg.name])
    return {v for v, c in counts.items() if c == 1 and v.startswith("_")}


def prepare(rule: Rule) -> PreparedRule:
    """The rule's body for the joins. An atom that repeats another up to its wildcards
    (``e(4, _), e(4, _)``) is the same condition under set semantics and is kept once: the
    joins would otherwise combine every witness of each copy (a counting join, DBSP's,
    enumerates them all). Not in an aggregate's body: there each wildcard is a variable of
    the assignments the aggregate counts (``count()`` over ``u(_), u(_)`` counts pairs)."""
    atoms: list[PlanAtom] = []
    assigns: list[tuple[str, Expr]] = []
    filters: list[Compare] = []
    negations: list[Atom] = []
    wild = _used_once(rule)
    seen: set[tuple[object, ...]] = set()
    n = 0
    for item in rule.body:
        if isinstance(item, Atom):
            key = (item.pred, item.functional, *(
                ("const", a.value) if isinstance(a, Const) else
                ("_",) if a.name in wild and rule.aggregate is None else ("var", a.name)
                for a in item.args))
            if key in seen:
                continue
            seen.add(key)
            names: list[str] = []
            for arg in item.args:
                if isinstance(arg, Const):
                    n += 1
                    name = f"#c{n}"
                    assigns.append((name, arg))
                elif arg.name in names:
                    n += 1
                    name = f"#r{n}"
                    assigns.append((name, arg))
                else:
                    name = arg.name
                names.append(name)
            atoms.append(PlanAtom(len(atoms), item.pred, tuple(names)))
        elif isinstance(item, Negation):
            negations.append(item.atom)
        else:
            filters.append(item)
    head = set(rule.head.vars)
    if rule.aggregate is not None:
        head.discard(rule.aggregate.result.name)
        if rule.aggregate.arg is not None:
            head.add(rule.aggregate.arg.name)
    return PreparedRule(
        rule, tuple(atoms), tuple(assigns), tuple(filters), tuple(negations), frozenset(head)
    )


def _atom_vars(prep: PreparedRule) -> set[str]:
    return {v for a in prep.atoms for v in a.vars}


def compare_assignments(prep: PreparedRule) -> list[tuple[str, Expr]]:
    out = []
    for c in prep.filters:
        if c.op != "=":
            continue
        for target, source in ((c.left, c.right), (c.right, c.left)):
            if isinstance(target, Var):
                out.append((target.name, source))
    return out


def all_vars(prep: PreparedRule) -> set[str]:
    """Every variable the join binds: atom variables and assignment targets."""
    names = _atom_vars(prep) | {v for v, _ in prep.assigns}
    names |= {v for v, _ in compare_assignments(prep)}
    names -= {v for v in names if v.startswith("_") and not _bound_somewhere(prep, v)}
    return names


def _bound_somewhere(prep: PreparedRule, v: str) -> bool:
    return v in _atom_vars(prep) or any(t == v for t, _ in prep.assigns) or any(
        t == v for t, _ in compare_assignments(prep)
    )


def holders_and_wildcards(
    prep: PreparedRule,
) -> tuple[dict[str, list[PlanAtom]], set[str]]:
    """The atoms that hold each variable, and the wildcards: variables only one atom
    mentions and nothing else reads. A join orders them after every other variable, even
    one not connected to what is bound (bound before it, each of their combinations would
    be joined with its values), where one witness suffices."""
    holders_of: dict[str, list[PlanAtom]] = {}
    for a in prep.atoms:
        for x in set(a.vars):
            holders_of.setdefault(x, []).append(a)
    other_uses = set(prep.head_vars)
    for c in prep.filters:
        other_uses |= c.vars
    for n in prep.negations:
        other_uses |= n.vars
    for v, e in prep.assigns:
        other_uses |= {v, *expr_vars(e)}
    wild = {v for v, hs in holders_of.items() if len(hs) == 1 and v not in other_uses}
    return holders_of, wild


def choose_order(
    prep: PreparedRule, sizes: Mapping[int, int], fresh: AbstractSet[int] = frozenset()
) -> tuple[str, ...]:
    """Greedy, deterministic: assignments as soon as their inputs are bound (they cost one
    value); otherwise a variable connected to what is bound, that keeps large atoms in their
    column order (no permuted copy to sort), joined by most atoms, in the smallest
    relation, then by name. Atoms in ``fresh`` (a semi-naive delta) are sorted for this
    join whatever the order, so reading them out of column order costs nothing extra."""
    assign_sources = [(v, expr_vars(e)) for v, e in (*prep.assigns, *compare_assignments(prep))]
    atom_vars = _atom_vars(prep)
    remaining = all_vars(prep)
    order: list[str] = []
    bound: set[str] = set()
    frontier: set[str] = set()  # unbound variables of atoms that hold a bound one
    holders_of, wild = holders_and_wildcards(prep)
    while remaining:
        ready = sorted(v for v, deps in assign_sources if v in remaining and deps <= bound)
        if ready:
            pick = ready[0]
        else:
            # Variables sharing an atom with a bound one rank first (``connected`` below):
            # when there are any, the pick is among them, so only they are costed.
            live = remaining - wild or remaining
            candidates = sorted((frontier & live) or (live & atom_vars))
            if not candidates:
                raise AssertionError(f"no variable can be bound next among {sorted(remaining)}")

            def cost(v: str) -> tuple[int, int, int, int, int, str]:
                holders = holders_of[v]
                connected = not bound or any(set(a.vars) & bound for a in holders)
                smallest = min(sizes.get(a.index, 0) for a in holders)
                # Reading an atom out of its column order needs a sorted, permuted copy of
                # the relation: prefer variables that keep large atoms in their own order.
                permuted = sum(
                    sizes.get(a.index, 0)
                    for a in holders
                    if a.index not in fresh and next((x for x in a.vars if x not in bound), v) != v
                )
                existential = v in wild
                return (
                    0 if connected else 1,
                    1 if existential else 0,
                    permuted.bit_length(),
                    -len(holders),
                    smallest,
                    v,
                )

            pick = min(candidates, key=cost)
        order.append(pick)
        bound.add(pick)
        remaining.discard(pick)
        for a in holders_of.get(pick, ()):
            frontier.update(x for x in a.vars if x not in bound)
        frontier.discard(pick)
    return tuple(order)


@dataclass
class Level:
    var: str
    atoms: list[int] = field(default_factory=list)  # indexes into prep.atoms
    source: Callable[[Env], Value | None] | None = None
    checks: list[Callable[[Env], bool]] = field(default_factory=list)
    # Lower bounds implied by this level's comparison checks (`v > e`, `e <= v`, ...): the
    # join may seek straight to them. The checks stay, so a bound is only a shortcut.
    lower: list[Callable[[Env], Value | None]] = field(default_factory=list)
    # The type the variable is converted to where it is bound (``Rule.casts``,
    # ``semantics.bind_as``: None from it means no binding), or None: bound as it comes.
    cast: str | None = None


@dataclass
class RulePlan:
    prep: PreparedRule
    order: tuple[str, ...]
    perms: list[tuple[int, ...]]  # per atom: its columns in the order of `order`
    levels: list[Level]
    pre_checks: list[Callable[[Env], bool]]  # checks with no variables at all
    exist_level: int  # from this level on no variable is needed by the head: stop at one
    # Complement atoms: atom index -> index of the negation it absorbs. The atom reads
    # T \ S (``deltalog.engine.join.complement``) and the negation is not checked.
    complements: dict[int, int] = field(default_factory=dict)

    def probed_once(self) -> list[Atom]:
        """The negations with no variable bound: probed once, before the join (one of
        ``pre_checks``), not per binding."""
        absorbed = set(self.complements.values())
        return [neg for k, neg in enumerate(self.prep.negations)
                if k not in absorbed and not any(v in self.order for v in neg.vars)]


def _filter_check(c: Compare) -> Callable[[Env], bool]:
    left, right, op = compile_expr(c.left), compile_expr(c.right), c.op

    def check(env: Env) -> bool:
        a = left(env)
        b = right(env)
        return a is not None and b is not None and compare(op, a, b)

    return check


def _assign_check(var: str, expr: Expr) -> Callable[[Env], bool]:
    fn = compile_expr(expr)

    def check(env: Env) -> bool:
        v = fn(env)
        return v is not None and v == env[var]

    return check


def _lower_bound(c: Compare, var: str, pos: Mapping[str, int]) -> Expr | None:
    """``e`` when ``c`` says ``var > e`` or ``var >= e`` (either way round) and ``e`` only
    reads variables bound before ``var``."""
    if c.op in (">", ">=") and isinstance(c.left, Var) and c.left.name == var:
        other = c.right
    elif c.op in ("<", "<=") and isinstance(c.right, Var) and c.right.name == var:
        other = c.left
    else:
        return None
    if all(pos[d] < pos[var] for d in expr_vars(other)):
        return other
    return None


NegationProbe = Callable[[str, tuple[int, ...], tuple[Value, ...]], bool]


def negation_perm(atom: Atom, bound_vars: AbstractSet[str]) -> tuple[int, ...]:
    """The column order a negated atom is probed in: its constants and bound variables
    first, then its free columns (``_``, or variables bound nowhere)."""
    fixed = [i for i, a in enumerate(atom.args)
             if isinstance(a, Const) or a.name in bound_vars]
    return tuple(fixed + [i for i in range(len(atom.args)) if i not in fixed])


def _negation_check(
    atom: Atom, bound_vars: set[str], probe: NegationProbe
) -> Callable[[Env], bool]:
    """``!atom``: no row of the relation agrees on the bound columns (free ones are ``_``)."""
    perm = negation_perm(atom, bound_vars)
    nfixed = sum(1 for a in atom.args if isinstance(a, Const) or a.name in bound_vars)
    fixed = [(i, atom.args[i]) for i in perm[:nfixed]]
    getters: list[tuple[Value, str | None]] = [
        (a.value, None) if isinstance(a, Const) else (0, a.name) for _, a in fixed
    ]
    pred = atom.pred

    def check(env: Env) -> bool:
        prefix = tuple(c if name is None else env[name] for c, name in getters)
        return not probe(pred, perm, prefix)

    return check


def build_plan(
    prep: PreparedRule,
    sizes: Mapping[int, int],
    probe: NegationProbe,
    order: Sequence[str] | None = None,
    fresh: AbstractSet[int] = frozenset(),
    complements: Mapping[int, int] | None = None,
) -> RulePlan:
    """The plan of ``prep``; ``complements`` (from ``complement_pairs``) names atoms that
    read T \\ S and the negations they absorb."""
    complements = dict(complements or {})
    absorbed = set(complements.values())
    if order is None:
        order = choose_order(prep, sizes, fresh)
    order = tuple(order)
    pos = {v: i for i, v in enumerate(order)}
    if set(order) != all_vars(prep):
        raise ValueError(f"variable order {order} does not cover {sorted(all_vars(prep))}")
    casts = dict(prep.rule.casts)
    levels = [Level(v, cast=casts.get(v)) for v in order]
    perms: list[tuple[int, ...]] = []
    for atom in prep.atoms:
        cols = sorted(range(len(atom.vars)), key=lambda c: pos[atom.vars[c]])
        perms.append(tuple(cols))
        for c in cols:
            levels[pos[atom.vars[c]]].atoms.append(atom.index)
    # Assignment candidates: constants, repeats, and both sides of every `=` compare. The
    # first whose inputs are all bound before its target becomes that level's source; every
    # other one is checked where its last variable is bound.
    candidates: list[tuple[str, Expr, object]] = [(v, e, ("assign", i))
                                                  for i, (v, e) in enumerate(prep.assigns)]
    for j, cmp in enumerate(prep.filters):
        if cmp.op == "=":
            for target, source in ((cmp.left, cmp.right), (cmp.right, cmp.left)):
                if isinstance(target, Var):
                    candidates.append((target.name, source, ("cmp", j)))
    chosen: set[object] = set()
    for var, expr, origin in candidates:
        level = levels[pos[var]] if var in pos else None
        if level is None or level.source is not None or origin in chosen:
            continue
        if all(pos[d] < pos[var] for d in expr_vars(expr)):
            level.source = compile_expr(expr)
            chosen.add(origin)
    pre_checks: list[Callable[[Env], bool]] = []
    for i, (var, expr) in enumerate(prep.assigns):
        if ("assign", i) not in chosen:
            deps = expr_vars(expr) | {var}
            levels[max(pos[d] for d in deps)].checks.append(_assign_check(var, expr))
    for j, cmp in enumerate(prep.filters):
        if ("cmp", j) in chosen:
            continue
        check = _filter_check(cmp)
        if cmp.vars:
            level = levels[max(pos[d] for d in cmp.vars)]
            level.checks.append(check)
            bound_expr = _lower_bound(cmp, level.var, pos)
            if bound_expr is not None and level.source is None:
                level.lower.append(compile_expr(bound_expr))
        else:
            pre_checks.append(check)
    for k, neg in enumerate(prep.negations):
        if k in absorbed:
            continue
        bound = {v for v in neg.vars if v in pos}
        check = _negation_check(neg, bound, probe)
        if bound:
            levels[max(pos[v] for v in bound)].checks.append(check)
        else:
            pre_checks.append(check)
    exist_level = len(order)
    if prep.rule.aggregate is None:
        while exist_level > 0 and order[exist_level - 1] not in prep.head_vars:
            exist_level -= 1
    return RulePlan(prep, order, perms, levels, pre_checks, exist_level, complements)


def complement_pairs(
    prep: PreparedRule, supersets: Mapping[str, AbstractSet[str]]
) -> dict[int, int]:
    """Atoms that can read T \\ S (Veldhuizen 2014, §3.1.2): atom index -> negation index, for
    each body ``t(x1, ..., xn), !s(x1, ..., xn)`` with the same distinct variables in the
    same positions (no constants, repeats or wildcards) and ``t`` in ``supersets[s]`` (S ⊆ T
    guaranteed by the program, ``deltalog.engine.analysis.containment``). The negation then
    removes exactly T's rows that S holds, so the join may read T \\ S instead of T and
    drop the negation. Each atom and each negation pairs at most once."""
    pairs: dict[int, int] = {}
    for k, neg in enumerate(prep.negations):
        if not neg.args or not all(isinstance(a, Var) for a in neg.args):
            continue  # (of no columns, ``t(), !s()``: nothing to iterate)
        names = tuple(a.name for a in neg.args)  # type: ignore[union-attr]
        if len(set(names)) != len(names) or any(n.startswith("_") for n in names):
            continue
        for atom in prep.atoms:
            if (atom.index not in pairs and atom.vars == names
                    and atom.pred in supersets.get(neg.pred, ())):
                pairs[atom.index] = k
                break
    return pairs
