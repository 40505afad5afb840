"""Syntax of deltalog programs: the AST (``ast``) and the lark-based parser (``parser``)."""

from deltalog.engine.syntax.ast import (
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
    Value,
    Var,
)
from deltalog.engine.syntax.parser import parse_program

__all__ = [
    "Aggregate",
    "Atom",
    "BinOp",
    "BodyItem",
    "Column",
    "Compare",
    "Const",
    "Decl",
    "Expr",
    "Negation",
    "Program",
    "Rule",
    "Term",
    "Value",
    "Var",
    "parse_program",
]
