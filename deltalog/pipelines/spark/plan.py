"""The order in which a rule body runs on Spark: every step can run when it comes (its
variables bound), with as few cross joins as possible. Pure Python: nothing here needs a
Spark session."""

from collections.abc import Mapping
from dataclasses import dataclass, field

from deltalog.engine.analysis.program import RelationSchema
from deltalog.engine.analysis.safety import bound_vars
from deltalog.engine.errors import NOT_SUPPORTED, NotSupportedError
from deltalog.engine.syntax.ast import Atom, Compare, Const, Expr, Negation, Rule, Var, expr_vars


def unsupported(message: str, rule: Rule | None = None) -> NotSupportedError:
    """DL901 at the rule's line:column, naming the rule (``rule_df`` adds both to errors
    raised where the rule is not known)."""
    where = rule.loc if rule is not None else None
    text = f"Spark backend: {message}" + (f" (rule {rule})" if rule is not None else "")
    return NotSupportedError(text, where, NOT_SUPPORTED)


@dataclass(frozen=True)
class Step:
    kind: str  # "atom" (join/cross join), "filter", "assign", "neg" (anti-join)
    index: int  # position in rule.body
    target: str | None = None  # assign: the variable bound
    source: Expr | None = None  # assign: its expression


@dataclass
class Plan:
    steps: list[Step]
    crosses: int
    types: dict[str, str]  # deltalog type of every bound variable (the analysis': Rule.casts)
    bound: frozenset[str] = field(default_factory=frozenset)


def _expr_type(expr: Expr, types: Mapping[str, str]) -> str:
    if isinstance(expr, Var):
        return types[expr.name]
    if isinstance(expr, Const):
        v = expr.value
        return "string" if isinstance(v, str) else "float" if isinstance(v, float) else "int"
    lt, rt = _expr_type(expr.left, types), _expr_type(expr.right, types)
    return "int" if lt == rt == "int" else "float"


def _all_bound(rule: Rule) -> frozenset[str]:
    """Variables bound by positive atoms and assignments (the rest are existential inside
    negations): the analysis' own definition."""
    return frozenset(bound_vars(rule))


def _simulate(
    rule: Rule, schemas: Mapping[str, RelationSchema], start: int | None, all_bound: frozenset[str]
) -> Plan:
    body = rule.body
    atoms = [i for i, it in enumerate(body) if isinstance(it, Atom)]
    others = [i for i, it in enumerate(body) if not isinstance(it, Atom)]
    bound: set[str] = set()
    types: dict[str, str] = {}
    steps: list[Step] = []
    crosses = 0
    # A variable the analysis types otherwise than its first binder may give it (a float
    # in an int column, or assigned an int; an int assigned a float) has that type: the
    # compiler converts where it binds it.
    casts = dict(rule.casts)

    def join_atom(i: int) -> None:
        atom = body[i]
        assert isinstance(atom, Atom)
        cols = schemas[atom.pred].columns
        for arg, col in zip(atom.args, cols, strict=True):
            if isinstance(arg, Var) and arg.name not in types:
                types[arg.name] = casts.get(arg.name, col.type)
        bound.update(atom.vars)
        atoms.remove(i)
        steps.append(Step("atom", i))

    def drain() -> None:
        progress = True
        while progress:
            progress = False
            for i in list(others):
                item = body[i]
                if not isinstance(item, Compare):
                    continue
                if item.vars <= bound:
                    steps.append(Step("filter", i))
                    others.remove(i)
                    progress = True
                    continue
                if item.op != "=":
                    continue
                for target, source in ((item.left, item.right), (item.right, item.left)):
                    if (
                        isinstance(target, Var)
                        and target.name not in bound
                        and expr_vars(source) <= bound
                    ):
                        types[target.name] = casts.get(target.name) or _expr_type(
                            source, types)
                        bound.add(target.name)
                        steps.append(Step("assign", i, target.name, source))
                        others.remove(i)
                        progress = True
                        break
            for i in list(others):
                item = body[i]
                if isinstance(item, Negation) and (item.atom.vars & all_bound) <= bound:
                    steps.append(Step("neg", i))
                    others.remove(i)

    if start is not None:
        join_atom(start)
    drain()
    while atoms:
        # Prefer atoms joined on shared variables (the most first), then atoms without
        # variables (semi-join filters); otherwise a cross join is unavoidable.
        def rank(i: int) -> tuple[bool, int, int]:
            vs = body[i].vars  # type: ignore[union-attr]
            return (bool(vs & bound) or not vs, len(vs & bound), -i)

        best = max(atoms, key=rank)
        if not rank(best)[0] and steps:
            crosses += 1
        join_atom(best)
        drain()
    if others:
        raise unsupported("cannot order the body (an unsafe rule?)", rule)
    return Plan(steps, crosses, types, frozenset(bound))


def plan_rule(rule: Rule, schemas: Mapping[str, RelationSchema], prefer: int | None = None) -> Plan:
    """The plan with the fewest cross joins; ties go to starting at ``prefer`` (a delta atom),
    then to the earliest atom."""
    all_bound = _all_bound(rule)
    starts = [i for i, it in enumerate(rule.body) if isinstance(it, Atom)]
    if not starts:
        return _simulate(rule, schemas, None, all_bound)
    if prefer is not None:
        starts.remove(prefer)
        starts.insert(0, prefer)
    best: Plan | None = None
    for s in starts:
        plan = _simulate(rule, schemas, s, all_bound)
        if best is None or plan.crosses < best.crosses:
            best = plan
        if best.crosses == 0:
            break
    assert best is not None
    return best
