"""Analysis pass 2: safety (range restriction) and aggregates."""

from deltalog.engine.analysis.common import is_fresh, location
from deltalog.engine.errors import BAD_AGGREGATE, INPUT_LIMIT, UNSAFE_VARIABLE, AnalysisError
from deltalog.engine.syntax.ast import Atom, Compare, Negation, Program, Rule, Var, expr_vars

# The most variables a rule has (an input limit, DL105), counting those the parser makes for
# wildcards and for expressions in atoms: the joins bind one variable per level of
# recursion (``deltalog.engine.join.leapfrog``, ``deltalog.engine.ivm.lftj``), and this many
# levels, with an
# expression nested to the parser's limit, stay well inside Python's stack.
MAX_VARIABLES = 256


def safety(program: Program) -> None:
    """Raise DL201 for a variable no positive atom binds, DL208 for a malformed aggregate,
    DL105 for a rule with more than ``MAX_VARIABLES`` variables."""
    for rule in program.rules:
        _check_size(rule, program.file)
        _check_safety(rule, program.file)


def _check_size(rule: Rule, file: str) -> None:
    names: set[str] = set(rule.head.vars)
    for item in rule.body:
        names |= item.atom.vars if isinstance(item, Negation) else item.vars
    if len(names) > MAX_VARIABLES:
        raise AnalysisError(
            f"a rule with {len(names)} variables, more than {MAX_VARIABLES} (the limit; "
            "wildcards and expressions in atoms count): split it into rules over "
            "intermediate relations",
            location(rule.loc, file),
            INPUT_LIMIT,
        )


def bound_vars(rule: Rule) -> set[str]:
    """Variables bound by positive atoms, then by assignments ``v = expr`` to a fixpoint."""
    bound: set[str] = set()
    for item in rule.body:
        if isinstance(item, Atom):
            bound |= item.vars
    changed = True
    while changed:
        changed = False
        for item in rule.body:
            if isinstance(item, Compare) and item.op == "=":
                for target, source in ((item.left, item.right), (item.right, item.left)):
                    if (
                        isinstance(target, Var)
                        and target.name not in bound
                        and expr_vars(source) <= bound
                    ):
                        bound.add(target.name)
                        changed = True
    return bound


def _unsafe(name: str, where: str, rule: Rule, file: str) -> AnalysisError:
    shown = "'_'" if is_fresh(name) else f"'{name}'"
    return AnalysisError(
        f"variable {shown} in {where} is not bound by a positive atom of the rule body",
        location(rule.loc, file),
        UNSAFE_VARIABLE,
    )


def _check_safety(rule: Rule, file: str) -> None:
    bound = bound_vars(rule)
    for item in rule.body:
        if isinstance(item, Negation):
            for v in sorted(item.atom.vars):
                if v not in bound and not is_fresh(v):
                    raise _unsafe(v, f"negated atom {item.atom}", rule, file)
            # A fresh (wildcard) variable may occur only once, inside this negation.
        elif isinstance(item, Compare):
            for v in sorted(item.vars):
                if v not in bound:
                    raise _unsafe(v, f"comparison {item}", rule, file)
    head_vars = rule.head.vars
    if rule.aggregate is not None:
        agg = rule.aggregate
        if not rule.head.functional or rule.head.args[-1] != agg.result:
            raise AnalysisError(
                f"an aggregate rule's head must be F[keys] = {agg.result}",
                location(rule.loc, file),
                BAD_AGGREGATE,
            )
        if agg.result.name in bound:
            raise AnalysisError(
                f"aggregate result '{agg.result}' must not occur in the rule body",
                location(agg.loc or rule.loc, file),
                BAD_AGGREGATE,
            )
        if (agg.func == "count") != (agg.arg is None):
            need = "takes no argument" if agg.func == "count" else "needs one argument"
            raise AnalysisError(
                f"aggregate {agg.func}() {need}", location(agg.loc or rule.loc, file),
                BAD_AGGREGATE,
            )
        if agg.arg is not None and agg.arg.name not in bound:
            raise _unsafe(agg.arg.name, "the aggregate", rule, file)
        head_vars = frozenset(v for v in head_vars if v != agg.result.name)
    for v in sorted(head_vars):
        if v not in bound:
            raise _unsafe(v, f"the head {rule.head}", rule, file)


