"""Parse deltalog source text into a normalized ``Program`` (see ``deltalog.engine.syntax.ast``).

lark does the parsing (LALR, grammar in ``grammar.lark``); this module turns its tree into
the AST, splits disjunctions into rules, names wildcards, lifts expressions out of atoms,
and turns lark's exceptions into ``DL1xx`` errors with file, line and column.
"""

import ast as pyast
import contextlib
import itertools
import math
from functools import cache
from importlib import resources
from typing import Any

import lark
from lark import Token, Transformer, v_args

from deltalog.engine.errors import (
    INPUT_LIMIT,
    SYNTAX_BAD_LITERAL,
    SYNTAX_BAD_TOKEN,
    SYNTAX_UNEXPECTED,
    DeltalogSyntaxError,
    Loc,
)
from deltalog.engine.syntax.ast import (
    AGGREGATES,
    TYPES,
    Aggregate,
    Atom,
    BinOp,
    BodyItem,
    Column,
    Compare,
    Const,
    Decl,
    Expr,
    Negation,
    Program,
    Rule,
    Term,
    Var,
)


@cache
def _lark() -> lark.Lark:
    grammar = resources.files("deltalog.engine.syntax").joinpath("grammar.lark").read_text()
    return lark.Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=True)


# Intermediate forms produced by the transformer, before normalization.
class _Wild:
    pass


_WILD = _Wild()


class _Disj:
    def __init__(self, alternatives: list[list[Any]]):
        self.alternatives = alternatives  # list of conjunctions, each a list of literals


_TOKEN_NAMES = {
    "DOT": "'.'",
    "COMMA": "','",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "IMPLIES": "':-'",
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a float",
    "STRING": "a string",
    "CMP": "a comparison",
    "SEMICOLON": "';'",
    "$END": "end of input",
    "MINUS": "'-'",
    "NEG": "'!'",
    "UNDERSCORE": "'_'",
    "ADDOP": "'+'",
    "MULOP": "'*'",
    "AGG": "'agg'",
}


def _short(text: str) -> str:
    return text if len(text) <= 30 else f"{text[:12]}...{text[-12:]} ({len(text)} characters)"


def _describe(expected: set[str]) -> str:
    names = sorted({_TOKEN_NAMES.get(e, e) for e in expected if not e.startswith("__")})
    return ", ".join(names[:8])


class _ToAst(Transformer[Token, Any]):
    def __init__(self, file: str):
        super().__init__()
        self.file = file

    def _loc(self, meta: Any) -> Loc:
        return Loc(self.file, getattr(meta, "line", 0), getattr(meta, "column", 0))

    def _tok_loc(self, tok: Token) -> Loc:
        return Loc(self.file, tok.line or 0, tok.column or 0)

    # --- declarations
    @v_args(meta=True)
    def param(self, meta: Any, children: list[Token]) -> Column:
        name, typ = children
        if str(typ) not in TYPES:
            raise DeltalogSyntaxError(
                f"unknown type '{typ}' (expected one of {', '.join(TYPES)})",
                self._tok_loc(typ),
                SYNTAX_UNEXPECTED,
            )
        return Column(str(name), str(typ))

    def params(self, children: list[Column]) -> list[Column]:
        return children

    @v_args(meta=True)
    def rel_decl(self, meta: Any, children: list[Any]) -> Decl:
        name, params = children
        return Decl(str(name), tuple(params or ()), False, self._loc(meta))

    @v_args(meta=True)
    def fun_decl(self, meta: Any, children: list[Any]) -> Decl:
        name, params, value = children
        return Decl(str(name), (*(params or ()), value), True, self._loc(meta))

    # --- terms and expressions
    def var(self, children: list[Token]) -> Var:
        return Var(str(children[0]))

    def wildcard(self, children: list[Token]) -> _Wild:
        return _WILD

    def int_const(self, children: list[Token]) -> Const:
        tok = children[0]
        digits = str(tok).lstrip("0") or "0"
        if len(digits) > 19 or int(digits) > 2**63 - 1:
            raise DeltalogSyntaxError(
                f"integer literal {_short(str(tok))} is beyond the 64-bit integers",
                self._tok_loc(tok),
                SYNTAX_BAD_LITERAL,
            )
        return Const(int(digits))

    def float_const(self, children: list[Token]) -> Const:
        tok = children[0]
        value = float(tok) + 0.0  # (-0.0 is 0.0: engine.semantics.coerce)
        if not math.isfinite(value):  # 1e400: floats are finite (engine.semantics)
            raise DeltalogSyntaxError(
                f"float literal {_short(str(tok))} is beyond the float range (±1.8e308)",
                self._tok_loc(tok),
                SYNTAX_BAD_LITERAL,
            )
        return Const(value)

    def string_const(self, children: list[Token]) -> Const:
        tok = children[0]
        try:
            value = pyast.literal_eval(str(tok))  # a literal, never code: literal_eval only
        except (ValueError, SyntaxError) as exc:
            raise DeltalogSyntaxError(
                f"bad string literal {tok}", self._tok_loc(tok), SYNTAX_BAD_LITERAL
            ) from exc
        if not isinstance(value, str):
            raise DeltalogSyntaxError(
                f"bad string literal {tok}", self._tok_loc(tok), SYNTAX_BAD_LITERAL
            )
        return Const(value)

    def neg(self, children: list[Any]) -> Expr:
        inner = children[0]
        if isinstance(inner, Const) and not isinstance(inner.value, str):
            return Const(-inner.value)
        return BinOp("-", Const(0), inner)

    def binop(self, children: list[Any]) -> BinOp:
        left, op, right = children
        return BinOp(str(op), left, right)

    def args(self, children: list[Any]) -> list[Any]:
        return children

    # --- atoms and literals
    @v_args(meta=True)
    def rel_atom(self, meta: Any, children: list[Any]) -> tuple[str, list[Any], bool, Loc]:
        name, args = children
        return (str(name), list(args or []), False, self._loc(meta))

    @v_args(meta=True)
    def fun_atom(self, meta: Any, children: list[Any]) -> tuple[str, list[Any], bool, Loc]:
        name, args, value = children
        return (str(name), [*(args or []), value], True, self._loc(meta))

    @v_args(meta=True)
    def negation(self, meta: Any, children: list[Any]) -> tuple[str, Any, Loc]:
        return ("neg", children[1], self._loc(meta))

    @v_args(meta=True)
    def comparison(self, meta: Any, children: list[Any]) -> tuple[str, Any, Loc]:
        left, op, right = children
        return ("cmp", (str(op), left, right), self._loc(meta))

    def conjunction(self, children: list[Any]) -> list[Any]:
        return children

    def disjunction(self, children: list[Any]) -> _Disj:
        return _Disj(children)

    def head(self, children: list[Any]) -> Any:
        return children[0]

    @v_args(meta=True)
    def aggregate(self, meta: Any, children: list[Any]) -> Aggregate:
        result, func, arg = children
        if str(func) not in AGGREGATES:
            raise DeltalogSyntaxError(
                f"unknown aggregate '{func}' (expected one of {', '.join(AGGREGATES)})",
                self._tok_loc(func),
                SYNTAX_UNEXPECTED,
            )
        return Aggregate(
            Var(str(result)), str(func), None if arg is None else Var(str(arg)), self._loc(meta)
        )

    @v_args(meta=True)
    def fact(self, meta: Any, children: list[Any]) -> tuple[str, Any, Loc]:
        return ("fact", children[0], self._loc(meta))

    @v_args(meta=True)
    def rule(self, meta: Any, children: list[Any]) -> tuple[str, Any, Loc]:
        head, _, body = children
        return ("rule", (head, None, body), self._loc(meta))

    @v_args(meta=True)
    def agg_rule(self, meta: Any, children: list[Any]) -> tuple[str, Any, Loc]:
        head, _, agg, body = children
        return ("rule", (head, agg, body), self._loc(meta))

    def start(self, children: list[Any]) -> list[Any]:
        return children


def _dnf(body: Any) -> list[list[Any]]:
    """Expand nested disjunctions into a list of conjunctions of plain literals."""
    if isinstance(body, _Disj):
        out: list[list[Any]] = []
        for conj in body.alternatives:
            out.extend(_dnf(conj))
        return out
    if isinstance(body, list):
        expansions: list[list[list[Any]]] = [_dnf(item) for item in body]
        return [
            [lit for part in combo for lit in part] for combo in itertools.product(*expansions)
        ]
    return [[body]]


class _Normalizer:
    """Names wildcards and lifts expressions out of atom arguments, per rule."""

    def __init__(self) -> None:
        self.counter = 0

    def fresh(self) -> Var:
        self.counter += 1
        return Var(f"_{self.counter}")

    def term(self, arg: Any, lifted: list[Compare], loc: Loc, head: bool) -> Term:
        if isinstance(arg, _Wild):
            if head:
                raise DeltalogSyntaxError(
                    "'_' cannot appear in a rule head", loc, SYNTAX_UNEXPECTED
                )
            return self.fresh()
        if isinstance(arg, Var | Const):
            return arg
        v = self.fresh()
        lifted.append(Compare("=", v, arg, loc))
        return v

    def atom(
        self, raw: tuple[str, list[Any], bool, Loc], lifted: list[Compare], head: bool
    ) -> Atom:
        name, args, functional, loc = raw
        terms = tuple(self.term(a, lifted, loc, head) for a in args)
        return Atom(name, terms, functional, loc)

    def expr(self, e: Any, loc: Loc) -> Expr:
        if isinstance(e, _Wild):
            raise DeltalogSyntaxError(
                "'_' cannot appear in a comparison", loc, SYNTAX_UNEXPECTED
            )
        if isinstance(e, BinOp):
            return BinOp(e.op, self.expr(e.left, loc), self.expr(e.right, loc))
        assert isinstance(e, Var | Const)
        return e


# Primitive functions in the paper's form (Veldhuizen 2014, §1.3): ``add[x, y] = z`` is
# ``z = x + y``.
PRIMITIVES = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%"}


def _primitive(raw: tuple[str, list[Any], bool, Loc], norm: "_Normalizer") -> Compare | None:
    name, args, functional, loc = raw
    if name not in PRIMITIVES:
        return None
    if not functional or len(args) != 3:
        raise DeltalogSyntaxError(
            f"'{name}' is a primitive: write {name}[x, y] = z", loc, SYNTAX_UNEXPECTED
        )
    x, y, z = (norm.expr(a, loc) for a in args)
    return Compare("=", z, BinOp(PRIMITIVES[name], x, y), loc)


def _reserved(name: str, loc: Loc | None) -> None:
    if name in PRIMITIVES:
        raise DeltalogSyntaxError(
            f"'{name}' is a primitive ({name}[x, y] = z) and cannot be defined or declared",
            loc,
            SYNTAX_UNEXPECTED,
        )


def _build(items: list[Any], file: str) -> Program:
    decls: list[Decl] = []
    rules: list[Rule] = []
    facts: list[Atom] = []
    for item in items:
        if isinstance(item, Decl):
            _reserved(item.name, item.loc)
            decls.append(item)
            continue
        kind, payload, loc = item
        norm = _Normalizer()
        _reserved(payload[0] if kind == "fact" else payload[0][0], loc)
        if kind == "fact":
            lifted: list[Compare] = []
            atom = norm.atom(payload, lifted, head=True)
            if lifted or any(isinstance(a, Var) for a in atom.args):
                # A fact with variables or expressions is a rule with an empty body: unsafe
                # unless every argument is a constant. Let analysis report it precisely.
                rules.append(Rule(atom, tuple(lifted), None, loc))
            else:
                facts.append(atom)
            continue
        raw_head, agg, body = payload
        for conj in _dnf(body):
            norm = _Normalizer()
            lifted = []
            head = norm.atom(raw_head, lifted, head=True)
            out: list[BodyItem] = []
            for lit in conj:
                prim = _primitive(lit, norm) if len(lit) == 4 else None
                if prim is not None:
                    out.append(prim)
                elif isinstance(lit, tuple) and lit[0] == "neg":
                    if _primitive(lit[1], norm) is not None:
                        raise DeltalogSyntaxError(
                            "a negated primitive is not supported: use a comparison",
                            lit[2], SYNTAX_UNEXPECTED,
                        )
                    neg_lifted: list[Compare] = []
                    atom = norm.atom(lit[1], neg_lifted, head=False)
                    out.extend(neg_lifted)
                    out.append(Negation(atom, lit[2]))
                elif isinstance(lit, tuple) and lit[0] == "cmp":
                    op, left, right = lit[1]
                    at = lit[2]  # (the comparison's place; ``loc`` is the rule's)
                    out.append(Compare(op, norm.expr(left, at), norm.expr(right, at), at))
                else:
                    atom_lifted: list[Compare] = []
                    out.append(norm.atom(lit, atom_lifted, head=False))
                    out.extend(atom_lifted)
            out.extend(lifted)
            rules.append(Rule(head, tuple(out), agg, loc))
    return Program(tuple(decls), tuple(rules), tuple(facts), file)


# The deepest parse tree read: a rule's nesting (a chain of 150 `+` terms, parentheses in
# parentheses) stays below it; deeper input is DL105 instead of exhausting Python's stack
# in the passes that walk expressions recursively.
MAX_DEPTH = 200


def _check_depth(tree: lark.Tree, file: str) -> None:
    """Raise DL105 at the first node deeper than ``MAX_DEPTH`` (an iterative walk)."""
    stack: list[tuple[Any, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, lark.Tree):
            continue
        if depth > MAX_DEPTH:
            meta = node.meta
            line = getattr(meta, "line", 1) if not meta.empty else 1
            column = getattr(meta, "column", 1) if not meta.empty else 1
            raise DeltalogSyntaxError(
                f"expression nested deeper than {MAX_DEPTH} levels (the limit): split it "
                "with intermediate variables",
                Loc(file, line, column),
                INPUT_LIMIT,
            )
        stack.extend((child, depth + 1) for child in node.children)


def parse_program(text: str, file: str = "<program>") -> Program:
    """Parse ``text`` (named ``file`` in errors) into a normalized ``Program``."""
    try:
        tree = _lark().parse(text)
        _check_depth(tree, file)
        items = _ToAst(file).transform(tree)
    except lark.exceptions.VisitError as exc:
        if isinstance(exc.orig_exc, DeltalogSyntaxError):
            raise exc.orig_exc from None
        raise
    except lark.exceptions.UnexpectedCharacters as exc:
        at = exc.pos_in_stream or 0
        char = text[at] if at < len(text) else "?"
        raise DeltalogSyntaxError(
            f"unexpected character {char!r}",
            Loc(file, exc.line, exc.column),
            SYNTAX_BAD_TOKEN,
        ) from None
    except lark.exceptions.UnexpectedEOF as exc:
        lines = text.splitlines() or [""]
        raise DeltalogSyntaxError(
            f"unexpected end of input, expected {_describe(set(exc.expected))}",
            Loc(file, len(lines), len(lines[-1]) + 1),
            SYNTAX_UNEXPECTED,
        ) from None
    except lark.exceptions.UnexpectedToken as exc:
        tok = exc.token
        if tok.type == "$END":
            lines = text.splitlines() or [""]
            where = Loc(file, len(lines), len(lines[-1]) + 1)
            shown = "end of input"
        else:
            where = Loc(file, tok.line or 0, tok.column or 0)
            shown = repr(str(tok))
        expected = set(exc.expected)
        if exc.interactive_parser is not None:
            with contextlib.suppress(Exception):  # accepts() is advisory; else lark's set
                expected = set(exc.interactive_parser.accepts()) or expected
        raise DeltalogSyntaxError(
            f"unexpected {shown}, expected {_describe(expected)}",
            where,
            SYNTAX_UNEXPECTED,
        ) from None
    return _build(items, file)
