"""From satisfying assignments of a rule body to head facts: projection with type
coercion, aggregation over distinct assignments grouped by the head's keys, and the
functional-dependency check (a key with two values is an error naming both facts)."""

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import product
from operator import itemgetter

from deltalog.engine.analysis.program import RelationSchema
from deltalog.engine.errors import FUNCTIONAL_CONFLICT, DataError, Loc
from deltalog.engine.exact_sum import group_out_of_range
from deltalog.engine.semantics import aggregate, coerce
from deltalog.engine.syntax.ast import Rule, Var
from deltalog.engine.values import Row, Value, format_fact


def head_row(rule: Rule, schema: RelationSchema, env: Mapping[str, Value]) -> Row:
    return tuple(
        coerce(env[a.name] if isinstance(a, Var) else a.value, c.type)
        for a, c in zip(rule.head.args, schema.columns, strict=True)
    )


def head_projection(rule: Rule, schema: RelationSchema) -> "Callable[[Mapping[str, Value]], Row]":
    """A fast ``head_row`` for this rule: itemgetter when no constant or coercion is needed."""
    args = rule.head.args
    if all(isinstance(a, Var) for a in args) and all(c.type != "float" for c in schema.columns):
        names = [a.name for a in args]  # type: ignore[union-attr]
        if not names:  # a nullary head: one empty row
            return lambda env: ()
        if len(names) == 1:
            name = names[0]
            return lambda env: (env[name],)
        return itemgetter(*names)  # type: ignore[return-value]
    return lambda env: head_row(rule, schema, env)


def head_product(
    rule: Rule, schema: RelationSchema, out: set[Row]
) -> "Callable[[Mapping[str, Value], tuple[str, ...], Sequence[list[Value]]], None] | None":
    """For the join's ``emit_many``: add to ``out`` the head rows of every binding of
    ``vars`` to the cartesian product of ``columns`` (other variables from ``env``), in one
    ``itertools.product``. None when the head has constants, a repeated variable or a
    float column (those go through ``head_projection`` one binding at a time)."""
    args = rule.head.args
    if not all(isinstance(a, Var) for a in args) or any(c.type == "float" for c in schema.columns):
        return None
    names = tuple(a.name for a in args)  # type: ignore[union-attr]
    if len(set(names)) != len(names):
        return None
    layouts: dict[tuple[str, ...], list[int | None]] = {}
    update = out.update

    def emit_many(
        env: Mapping[str, Value], vars: tuple[str, ...], columns: Sequence[list[Value]]
    ) -> None:
        layout = layouts.get(vars)
        if layout is None:
            layout = layouts[vars] = [vars.index(n) if n in vars else None for n in names]
        update(product(*[
            (env[name],) if j is None else columns[j]
            for name, j in zip(names, layout, strict=True)
        ]))

    return emit_many


def body_vars(rule: Rule) -> tuple[str, ...]:
    """Every variable of the body (the identity of a satisfying assignment), sorted."""
    names: set[str] = set()
    for item in rule.body:
        names |= item.atom.vars if hasattr(item, "atom") else item.vars  # type: ignore[union-attr]
    return tuple(sorted(names))


def aggregate_rows(
    rule: Rule, schema: RelationSchema, assignments: Iterable[Mapping[str, Value]]
) -> set[Row]:
    """Group distinct assignments by the head's key terms and apply the aggregate."""
    agg = rule.aggregate
    assert agg is not None
    ident = body_vars(rule)
    keys = rule.head.args[:-1]
    groups: dict[Row, dict[Row, Value]] = defaultdict(dict)
    for env in assignments:
        key = tuple(env[k.name] if isinstance(k, Var) else k.value for k in keys)
        value: Value = 0 if agg.arg is None else env[agg.arg.name]
        groups[key][tuple(env[v] for v in ident if v in env)] = value
    out: set[Row] = set()
    for key, members in groups.items():
        try:
            result = aggregate(agg.func, members.values())
        except DataError as err:
            raise group_out_of_range(err, rule.head.pred, key) from None
        row = (*key, result)
        out.add(tuple(coerce(v, c.type) for v, c in zip(row, schema.columns, strict=True)))
    return out


def check_functional(schema: RelationSchema, rows: Iterable[Row], what: str = "") -> None:
    """Raise DL302 if two rows share the key but differ in the value."""
    if not schema.functional:
        return
    seen: dict[Row, Row] = {}
    k = schema.key_arity
    for row in rows:
        prev = seen.setdefault(row[:k], row)
        if prev != row:
            raise functional_conflict(schema.name, prev, row, what)


def change_conflict(pred: str, k: int, delta: Mapping[Row, int],
                    old_value: Callable[[Row], Row | None]) -> None:
    """Raise DL302 if a change (an effective delta of functional ``pred``, key arity k)
    leaves a key with two values, naming the first pair met: the inserted rows in order,
    each against the first inserted row of its key, else against the key's old value
    (``old_value(key)``) when the change does not erase it."""
    erased = {r[:k] for r, w in delta.items() if w < 0}
    seen: dict[Row, Row] = {}
    for row in sorted(r for r, w in delta.items() if w > 0):
        other = seen.setdefault(row[:k], row)
        if other == row and row[:k] not in erased:
            other = old_value(row[:k]) or row
        if other != row:
            raise functional_conflict(pred, other, row)


def functional_conflict(pred: str, a: Row, b: Row, where: Loc | str = "") -> DataError:
    """DL302: two rows of functional ``pred`` share a key; the message names both facts."""
    a, b = sorted((a, b))
    err = DataError(
        f"functional predicate '{pred}' has two values for one key: "
        f"{format_fact(pred, a, True)} and {format_fact(pred, b, True)}",
        where or pred,
        FUNCTIONAL_CONFLICT,
    )
    err.rows = (a, b)  # (a caller that knows where a row came from can say it)
    return err
