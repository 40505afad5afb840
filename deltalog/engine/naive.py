"""The naive evaluator: nested loops and fixpoint iteration, written to be obviously right.

It is the test oracle for the leapfrog triejoin evaluator and the incremental engines,
and is never on the product path. Same signature as ``deltalog.engine.evaluate.evaluate``.
"""

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.heads import aggregate_rows, check_functional, head_row
from deltalog.engine.semantics import bind_as, coerce, compare, eval_expr
from deltalog.engine.syntax.ast import Atom, BodyItem, Compare, Negation, Rule, Var, expr_vars
from deltalog.engine.values import Row, Value

_NO_CASTS: Mapping[str, str] = MappingProxyType({})


def _match(
    atom: Atom, row: Row, env: dict[str, Value], casts: Mapping[str, str] = _NO_CASTS
) -> dict[str, Value] | None:
    new = dict(env)
    for arg, v in zip(atom.args, row, strict=True):
        if isinstance(arg, Var):
            if arg.name in new:
                if new[arg.name] != v:
                    return None
            else:
                value = _bind(arg.name, v, casts)
                if value is None:
                    return None
                new[arg.name] = value
        elif arg.value != v:
            return None
    return new


def _bind(name: str, value: Value, casts: Mapping[str, str]) -> Value | None:
    """The value variable ``name`` takes when a binding offers ``value`` (``Rule.casts``)."""
    typ = casts.get(name)
    return value if typ is None else bind_as(value, typ)


def _ready(item: BodyItem, env: Mapping[str, Value], assigned: frozenset[str]) -> bool:
    if isinstance(item, Atom):
        return True
    if isinstance(item, Negation):
        # a fresh variable is existential inside the negation unless an assignment binds it
        return all(
            v in env or (v.startswith("_") and v not in assigned) for v in item.atom.vars
        )
    if all(v in env for v in item.vars):
        return True
    if item.op == "=":
        for target, source in ((item.left, item.right), (item.right, item.left)):
            if (
                isinstance(target, Var)
                and target.name not in env
                and expr_vars(source) <= env.keys()
            ):
                return True
    return False


def _assigned(items: list[BodyItem]) -> frozenset[str]:
    """Variables that occur alone on one side of an ``=`` compare (possible assignments)."""
    out: set[str] = set()
    for it in items:
        if isinstance(it, Compare) and it.op == "=":
            out |= {side.name for side in (it.left, it.right) if isinstance(side, Var)}
    return frozenset(out)


def _solve(
    items: list[BodyItem], env: dict[str, Value], rels: Mapping[str, set[Row]],
    casts: Mapping[str, str] = _NO_CASTS,
) -> Iterator[dict[str, Value]]:
    """Every extension of ``env`` satisfying ``items``; a variable in ``casts`` (the rule's
    ``Rule.casts``) is bound to the number in its type (``semantics.bind_as``)."""
    if not items:
        yield env
        return
    assigned = _assigned(items)
    # Filters, assignments and negations first when they can run; then the first atom.
    idx = next(
        (i for i, it in enumerate(items) if not isinstance(it, Atom) and _ready(it, env, assigned)),
        None,
    )
    if idx is None:
        idx = next((i for i, it in enumerate(items) if isinstance(it, Atom)), None)
        if idx is None:
            raise AssertionError("unsafe rule reached the evaluator")
    item = items[idx]
    rest = items[:idx] + items[idx + 1 :]
    if isinstance(item, Atom):
        for row in rels.get(item.pred, ()):
            new = _match(item, row, env, casts)
            if new is not None:
                yield from _solve(rest, new, rels, casts)
    elif isinstance(item, Negation):
        if not any(_match(item.atom, row, env) is not None
                   for row in rels.get(item.atom.pred, ())):
            yield from _solve(rest, env, rels, casts)
    else:
        assert isinstance(item, Compare)
        if all(v in env for v in item.vars):
            left = eval_expr(item.left, env)
            right = eval_expr(item.right, env)
            if left is not None and right is not None and compare(item.op, left, right):
                yield from _solve(rest, env, rels, casts)
            return
        for target, source in ((item.left, item.right), (item.right, item.left)):
            if isinstance(target, Var) and target.name not in env:
                try:
                    value = eval_expr(source, env)
                except KeyError:
                    continue
                if value is not None:
                    value = _bind(target.name, value, casts)
                if value is not None:
                    yield from _solve(rest, {**env, target.name: value}, rels, casts)
                return


def _rule_rows(rule: Rule, prog: AnalyzedProgram, rels: Mapping[str, set[Row]]) -> set[Row]:
    schema = prog.schemas[rule.head.pred]
    envs = _solve(list(rule.body), {}, rels, dict(rule.casts))
    if rule.aggregate is not None:
        return aggregate_rows(rule, schema, envs)
    return {head_row(rule, schema, env) for env in envs}


def evaluate_naive(
    prog: AnalyzedProgram,
    edb: Mapping[str, Iterable[Row]],
    preds: Iterable[str] | None = None,
) -> dict[str, frozenset[Row]]:
    """IDB relations of ``prog`` over the input relations ``edb`` (missing ones are empty).

    ``edb`` may also hold IDB relations computed earlier: a stratum all of whose predicates
    are given is not evaluated again. ``preds`` selects what to return (default: every IDB).
    """
    rels: dict[str, set[Row]] = {name: set() for name in prog.schemas}
    for name, facts in prog.facts.items():
        rels[name] |= set(facts)
    for name, rows in edb.items():
        if name in rels:
            schema = prog.schemas[name]
            rels[name] |= {
                tuple(coerce(v, c.type) for v, c in zip(r, schema.columns, strict=True))
                for r in rows
            }
    for name in prog.edb:
        check_functional(prog.schemas[name], rels[name])
    wanted = tuple(prog.idb if preds is None else preds)
    for stratum in prog.strata:
        if all(p in edb for p in stratum.preds):
            continue
        while True:
            changed = False
            for rule in stratum.rules:
                new = _rule_rows(rule, prog, rels) - rels[rule.head.pred]
                if new:
                    rels[rule.head.pred] |= new
                    changed = True
            if not stratum.recursive or not changed:
                break
        for name in stratum.preds:
            check_functional(prog.schemas[name], rels[name])
    return {name: frozenset(rels[name]) for name in wanted}
