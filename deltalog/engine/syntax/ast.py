"""The abstract syntax of deltalog programs, as frozen dataclasses.

The parser hands out a *normalized* AST: atom arguments are only ``Var`` or ``Const``
(wildcards become fresh ``_N`` variables, expressions become fresh variables plus a
``Compare('=')``), and disjunctions are split into one rule per disjunct.
"""

from dataclasses import dataclass, field

from deltalog.engine.errors import Loc
from deltalog.engine.values import Value, format_value

TYPES = ("int", "float", "string")


@dataclass(frozen=True)
class Var:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Const:
    value: Value

    def __str__(self) -> str:
        return format_value(self.value)


Term = Var | Const


@dataclass(frozen=True)
class BinOp:
    """Arithmetic ``left op right`` with op in ``+ - * / %``."""

    op: str
    left: "Expr"
    right: "Expr"

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


Expr = Var | Const | BinOp


def expr_vars(expr: Expr) -> frozenset[str]:
    """The variable names that occur in an expression."""
    if isinstance(expr, Var):
        return frozenset((expr.name,))
    if isinstance(expr, BinOp):
        return expr_vars(expr.left) | expr_vars(expr.right)
    return frozenset()


@dataclass(frozen=True)
class Atom:
    """``pred(args)``, or ``pred[keys] = value`` when ``functional`` (value is the last arg)."""

    pred: str
    args: tuple[Term, ...]
    functional: bool = False
    loc: Loc | None = field(default=None, compare=False)

    @property
    def vars(self) -> frozenset[str]:
        return frozenset(a.name for a in self.args if isinstance(a, Var))

    def __str__(self) -> str:
        if self.functional:
            keys = ", ".join(str(a) for a in self.args[:-1])
            return f"{self.pred}[{keys}] = {self.args[-1]}"
        return f"{self.pred}({', '.join(str(a) for a in self.args)})"


@dataclass(frozen=True)
class Negation:
    atom: Atom
    loc: Loc | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"!{self.atom}"


COMPARE_OPS = ("=", "!=", "<", "<=", ">", ">=")


@dataclass(frozen=True)
class Compare:
    """``left op right``. An ``=`` with an unbound variable on one side is an assignment."""

    op: str
    left: Expr
    right: Expr
    loc: Loc | None = field(default=None, compare=False)

    @property
    def vars(self) -> frozenset[str]:
        return expr_vars(self.left) | expr_vars(self.right)

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


BodyItem = Atom | Negation | Compare

AGGREGATES = ("count", "sum", "min", "max", "total")


@dataclass(frozen=True)
class Aggregate:
    """``agg<<result = func(arg)>>``; ``arg`` is None for ``count()``."""

    result: Var
    func: str
    arg: Var | None
    loc: Loc | None = field(default=None, compare=False)

    def __str__(self) -> str:
        inner = "" if self.arg is None else str(self.arg)
        return f"agg<<{self.result} = {self.func}({inner})>>"


@dataclass(frozen=True)
class Rule:
    head: Atom
    body: tuple[BodyItem, ...]
    aggregate: Aggregate | None = None
    loc: Loc | None = field(default=None, compare=False)
    # Set by the analysis (``deltalog.engine.analysis.typecheck.with_casts``): (variable,
    # type) for each variable of the body typed a number that a binding may offer a
    # number of the other type (a float variable in an int column, or equal to an int
    # expression; an int variable equal to a float expression). Every evaluator converts
    # the value where it binds such a variable (``deltalog.engine.semantics.bind_as``).
    casts: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        agg = f"{self.aggregate} " if self.aggregate else ""
        return f"{self.head} :- {agg}{', '.join(str(b) for b in self.body)}."


@dataclass(frozen=True)
class Column:
    name: str
    type: str


@dataclass(frozen=True)
class Decl:
    """``.decl p(a: int, ...)`` or ``.decl f[k: int] = v: float`` (value is the last column)."""

    name: str
    columns: tuple[Column, ...]
    functional: bool = False
    loc: Loc | None = field(default=None, compare=False)

    @property
    def arity(self) -> int:
        return len(self.columns)


@dataclass(frozen=True)
class Program:
    decls: tuple[Decl, ...]
    rules: tuple[Rule, ...]
    facts: tuple[Atom, ...]
    file: str = "<program>"
