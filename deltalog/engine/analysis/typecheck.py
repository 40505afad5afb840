"""Analysis pass 3: types. Column types come from declarations, constants, and flow
through rules; a value or variable of another type is DL204."""

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from deltalog.engine.analysis.common import location
from deltalog.engine.errors import TYPE_MISMATCH, AnalysisError, Loc
from deltalog.engine.syntax.ast import (
    Atom,
    BinOp,
    BodyItem,
    Compare,
    Const,
    Decl,
    Expr,
    Negation,
    Program,
    Rule,
    Term,
    Var,
    expr_vars,
)
from deltalog.engine.values import Value

_NUMERIC = ("int", "float")


class ColumnTypes:
    def __init__(self, decls: dict[str, Decl], file: str):
        self.file = file
        self.cols: dict[tuple[str, int], str] = {}
        self.declared: set[tuple[str, int]] = set()
        for d in decls.values():
            for i, c in enumerate(d.columns):
                self.cols[(d.name, i)] = c.type
                self.declared.add((d.name, i))

    def join(self, a: str | None, b: str | None, where: Loc | str, what: str) -> str | None:
        if a is None or a == b:
            return b
        if b is None:
            return a
        if a in _NUMERIC and b in _NUMERIC:
            return "float"
        raise AnalysisError(f"type mismatch in {what}: {a} vs {b}", where, TYPE_MISMATCH)

    def col(self, pred: str, i: int) -> str | None:
        return self.cols.get((pred, i))

    def flow_into(
        self, pred: str, i: int, t: str | None, where: Loc | str, what: Callable[[], str]
    ) -> bool:
        """Type ``t`` flows into column ``i`` of ``pred``; ``what()`` names the place in an
        error (a function: the text of a long rule is made only when there is one)."""
        if t is None:
            return False
        old = self.cols.get((pred, i))
        if (pred, i) in self.declared:
            assert old is not None
            if old == t or (old == "float" and t == "int"):
                return False
            raise AnalysisError(
                f"type mismatch in {what()}: column {i + 1} of '{pred}' is {old}, value is {t}",
                where,
                TYPE_MISMATCH,
            )
        if old is None or old == t:
            self.cols[(pred, i)] = t
            return old is None
        new = self.join(old, t, where, what())
        if new != old:
            self.cols[(pred, i)] = new  # type: ignore[assignment]
            return True
        return False


def _const_type(v: Value) -> str:
    if isinstance(v, str):
        return "string"
    return "float" if isinstance(v, float) else "int"


def _expr_type(expr: Expr, env: dict[str, str], types: ColumnTypes, where: Loc | str) -> str | None:
    if isinstance(expr, Const):
        return _const_type(expr.value)
    if isinstance(expr, Var):
        return env.get(expr.name)
    lt = _expr_type(expr.left, env, types, where)
    rt = _expr_type(expr.right, env, types, where)
    for t in (lt, rt):
        if t == "string":
            raise AnalysisError(
                f"arithmetic '{expr.op}' on a string in {expr}", where, TYPE_MISMATCH
            )
    if lt is None or rt is None:
        return None
    return "float" if "float" in (lt, rt) else "int"


def _rule_env(rule: Rule, types: ColumnTypes, file: str) -> dict[str, str]:
    env: dict[str, str] = {}
    where = location(rule.loc, file)
    atoms = [i for i in rule.body if isinstance(i, Atom)]
    atoms += [i.atom for i in rule.body if isinstance(i, Negation)]
    for atom in atoms:
        for i, arg in enumerate(atom.args):
            t = types.col(atom.pred, i)
            if isinstance(arg, Var):
                j = types.join(env.get(arg.name), t, location(atom.loc, file), f"'{arg.name}'")
                if j is not None:
                    env[arg.name] = j
            elif t is not None:
                ct = _const_type(arg.value)
                if not (ct == t or (t == "float" and ct == "int")):
                    raise AnalysisError(
                        f"type mismatch in {atom}: column {i + 1} of '{atom.pred}' is {t}, "
                        f"constant is {ct}",
                        location(atom.loc, file),
                        TYPE_MISMATCH,
                    )
    # Types flow back from the head too: a head column typed elsewhere (another rule, a
    # declaration) types the variable, and through it the undeclared columns the body
    # reads (``p(x) :- e(x).`` with p's column an int makes e's an int).
    from_head: set[str] = set()  # typed by a declared head column only, so far
    widened: set[str] = set()  # typed by an undeclared head column: a float value widens it
    for i, arg in enumerate(rule.head.args):
        if isinstance(arg, Var) and arg.name not in env:
            t = types.col(rule.head.pred, i)
            if t is not None and not (rule.aggregate and arg.name == rule.aggregate.result.name):
                env[arg.name] = t
                (from_head if (rule.head.pred, i) in types.declared else widened).add(arg.name)
    changed = True
    while changed:
        changed = False
        for item in rule.body:
            if not isinstance(item, Compare):
                continue
            loc = location(item.loc, file)
            lt = _expr_type(item.left, env, types, loc)
            rt = _expr_type(item.right, env, types, loc)
            if lt is not None and rt is not None and (lt == "string") != (rt == "string"):
                raise AnalysisError(
                    f"type mismatch in comparison {item}: {lt} vs {rt}", loc, TYPE_MISMATCH
                )
            if item.op == "=":
                for target, t in ((item.left, rt), (item.right, lt)):
                    if (isinstance(target, Var) and target.name in from_head
                            and env[target.name] == "int" and t == "float"):
                        # (``p(t) :- b(x), t = x / 2.`` into a declared int column)
                        raise AnalysisError(
                            f"type mismatch in {item}: '{target.name}' goes to an int column "
                            f"of '{rule.head.pred}', the value is a float", loc, TYPE_MISMATCH)
                    if (isinstance(target, Var) and target.name in widened
                            and env[target.name] == "int" and t == "float"):
                        env[target.name] = "float"  # (the head's column becomes a float)
                        widened.discard(target.name)
                        changed = True
                    if isinstance(target, Var) and t is not None and target.name not in env:
                        env[target.name] = t
                        changed = True
    # A variable of unknown type used in arithmetic is a number.
    for item in rule.body:
        if isinstance(item, Compare):
            for side in (item.left, item.right):
                if isinstance(side, BinOp):
                    for v in expr_vars(side):
                        env.setdefault(v, "int")
    if rule.aggregate is not None:
        agg = rule.aggregate
        arg_t = env.get(agg.arg.name) if agg.arg is not None else None
        if agg.func in ("sum", "total") and arg_t == "string":
            raise AnalysisError(
                f"aggregate {agg.func}() needs a number, '{agg.arg}' is a string", where,
                TYPE_MISMATCH,
            )
        result_t = {"count": "int", "total": "float"}.get(agg.func, arg_t)
        if result_t is not None:
            env[agg.result.name] = result_t
    return env


def typecheck(program: Program, decls: dict[str, Decl]) -> ColumnTypes:
    types = ColumnTypes(decls, program.file)
    for fact in program.facts:
        for i, arg in enumerate(fact.args):
            assert isinstance(arg, Const)
            types.flow_into(
                fact.pred, i, _const_type(arg.value), location(fact.loc, program.file),
                fact.__str__,
            )
    for rule in program.rules:
        for item in rule.body:
            atom = item.atom if isinstance(item, Negation) else item
            if isinstance(atom, Atom):
                for i, arg in enumerate(atom.args):
                    if isinstance(arg, Const):
                        types.flow_into(
                            atom.pred, i, _const_type(arg.value),
                            location(atom.loc, program.file), atom.__str__,
                        )
    changed = True
    while changed:
        changed = False
        for rule in program.rules:
            env = _rule_env(rule, types, program.file)
            # Types also flow into the undeclared columns the body reads.
            for item in rule.body:
                atom = item.atom if isinstance(item, Negation) else item
                if isinstance(atom, Atom):
                    for i, arg in enumerate(atom.args):
                        if isinstance(arg, Var) and types.col(atom.pred, i) is None:
                            changed |= types.flow_into(
                                atom.pred, i, env.get(arg.name),
                                location(atom.loc, program.file), atom.__str__,
                            )
            for i, arg in enumerate(rule.head.args):
                t = env.get(arg.name) if isinstance(arg, Var) else _const_type(arg.value)
                changed |= types.flow_into(
                    rule.head.pred, i, t, location(rule.loc, program.file),
                    partial("the head of {}".format, rule),
                )
    return types


def _casts(rule: Rule, types: ColumnTypes, file: str) -> tuple[tuple[str, str], ...]:
    """``Rule.casts`` of ``rule`` under the program's final column types: each variable the
    analysis types float that an int column or an int expression may bind, and each it
    types int that a float expression may bind (``x = a`` with ``a`` a float)."""
    env = _rule_env(rule, types, file)
    casts: dict[str, str] = {}
    for item in rule.body:
        if isinstance(item, Atom):
            for i, arg in enumerate(item.args):
                if (isinstance(arg, Var) and env.get(arg.name) == "float"
                        and types.col(item.pred, i) == "int"):
                    casts[arg.name] = "float"
        elif isinstance(item, Compare) and item.op == "=":
            where = location(item.loc, file)
            for target, source in ((item.left, item.right), (item.right, item.left)):
                if isinstance(target, Var):
                    t = env.get(target.name)
                    if {t, _expr_type(source, env, types, where)} == {"int", "float"}:
                        casts[target.name] = t  # type: ignore[assignment]
    return tuple(sorted(casts.items()))


CAST_INT = "~int"  # (``uncast``) the suffix of a variable's int copy: no name has a "~"


def uncast(rule: Rule, column_type: Callable[[str, int], str]) -> Rule:
    """``rule`` with every variable x that ``Rule.casts`` types float and an int column of
    a positive atom binds read there as one int variable ``x~int``, and ``x = x~int``
    added to the body: the same bindings (an atom's int offers x the float equal to it,
    none where there is none; and x, bound first, offers ``x~int`` the int equal to it,
    which the int columns are looked up by, ``semantics.bind_as``), with every variable
    read from columns of one type, so that an evaluator over per-type codes joins it.
    ``column_type(pred, i)`` is the type of column i of ``pred``. The cast ``(x~int,
    "int")`` is added; a rule with no such variable is returned as it is. A negated atom
    is left alone (no binding of ``x~int`` exists for a float with no int equal to it,
    where the negation holds)."""
    floats = {v for v, t in rule.casts if t == "float"}
    if not floats:
        return rule
    renamed: set[str] = set()
    body: list[BodyItem] = []
    for item in rule.body:
        if isinstance(item, Atom):
            args: list[Term] = []
            for i, arg in enumerate(item.args):
                if (isinstance(arg, Var) and arg.name in floats
                        and column_type(item.pred, i) == "int"):
                    renamed.add(arg.name)
                    arg = Var(arg.name + CAST_INT)
                args.append(arg)
            item = replace(item, args=tuple(args))
        body.append(item)
    if not renamed:
        return rule
    body += [Compare("=", Var(x), Var(x + CAST_INT), loc=rule.loc) for x in sorted(renamed)]
    casts = {*rule.casts, *((x + CAST_INT, "int") for x in renamed)}
    return replace(rule, body=tuple(body), casts=tuple(sorted(casts)))


def with_casts(program: Program, types: ColumnTypes) -> Program:
    """``program`` with ``Rule.casts`` set on every rule that has some (a variable joining
    an int and a float column is a float whatever binds it first; an int variable stays an
    int). The other rules are the same objects."""
    rules = []
    for rule in program.rules:
        casts = _casts(rule, types, program.file)
        rules.append(replace(rule, casts=casts) if casts != rule.casts else rule)
    return replace(program, rules=tuple(rules))
