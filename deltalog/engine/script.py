"""Transaction scripts: ``insert FACT.``, ``delete FACT.``, ``commit.``, ``dump NAME.``,
``dump.``, and ``#`` comments, one per line. Facts are parsed by the program parser, so
errors point at the script's own line and column.
"""

import re
from dataclasses import dataclass

from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.errors import (
    BAD_VALUE,
    SYNTAX_UNEXPECTED,
    UNDECLARED,
    AnalysisError,
    DataError,
    DeltalogSyntaxError,
    Loc,
)
from deltalog.engine.syntax.ast import Const
from deltalog.engine.syntax.parser import parse_program
from deltalog.engine.values import Row


@dataclass(frozen=True)
class Op:
    kind: str  # insert | delete | commit | dump
    pred: str | None = None
    row: Row | None = None
    loc: Loc | None = None


_LINE = re.compile(r"^\s*(insert|delete|commit|dump)\b(.*)$")


def _check_row(prog: AnalyzedProgram, pred: str, row: Row, loc: Loc) -> Row:
    if pred not in prog.schemas:
        raise AnalysisError(f"no predicate named '{pred}' in the program", loc, UNDECLARED)
    if pred in prog.idb:
        raise AnalysisError(
            f"'{pred}' is derived by rules (IDB); only EDB facts can be inserted or deleted",
            loc,
            UNDECLARED,
        )
    schema = prog.schemas[pred]
    if len(row) != schema.arity:
        raise DataError(
            f"'{pred}' has {schema.arity} columns, the fact has {len(row)}", loc, BAD_VALUE
        )
    out = []
    for value, col in zip(row, schema.columns, strict=True):
        if col.type == "string" and not isinstance(value, str):
            raise DataError(f"column '{col.name}' of '{pred}' is a string", loc, BAD_VALUE)
        if (col.type != "string" and isinstance(value, str)) or (
            col.type == "int" and isinstance(value, float)
        ):
            article = "an" if col.type == "int" else "a"
            raise DataError(
                f"column '{col.name}' of '{pred}' is {article} {col.type}, got {value!r}",
                loc,
                BAD_VALUE,
            )
        out.append(float(value) if col.type == "float" else value)
    return tuple(out)


def parse_script(text: str, file: str, prog: AnalyzedProgram) -> list[Op]:
    ops: list[Op] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw)
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None:
            col = len(line) - len(line.lstrip()) + 1
            raise DeltalogSyntaxError(
                "expected 'insert FACT.', 'delete FACT.', 'commit.', 'dump NAME.' or 'dump.'",
                Loc(file, lineno, col),
                SYNTAX_UNEXPECTED,
            )
        kind, rest = m.group(1), m.group(2)
        rest_col = m.start(2) + 1
        loc = Loc(file, lineno, m.start(1) + 1)
        if kind == "commit" or (kind == "dump" and rest.strip() == "."):
            if rest.strip() != ".":
                raise DeltalogSyntaxError(
                    f"expected '.' after '{kind}'", Loc(file, lineno, rest_col), SYNTAX_UNEXPECTED
                )
            ops.append(Op(kind, loc=loc))
            continue
        if kind == "dump":
            name = rest.strip()
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*\s*\.", name):
                raise DeltalogSyntaxError(
                    "expected 'dump NAME.'", Loc(file, lineno, rest_col), SYNTAX_UNEXPECTED
                )
            pred = name[:-1].strip()
            if pred not in prog.schemas:
                raise AnalysisError(f"no predicate named '{pred}' in the program", loc, UNDECLARED)
            ops.append(Op("dump", pred, loc=loc))
            continue
        # Pad so that the parser's positions are the script's positions.
        padded = "\n" * (lineno - 1) + " " * (rest_col - 1) + rest
        parsed = parse_program(padded, file)
        if len(parsed.facts) != 1 or parsed.rules or parsed.decls:
            raise DeltalogSyntaxError(
                f"expected exactly one ground fact after '{kind}'",
                Loc(file, lineno, rest_col),
                SYNTAX_UNEXPECTED,
            )
        fact = parsed.facts[0]
        values = tuple(a.value for a in fact.args if isinstance(a, Const))
        fact_loc = fact.loc or loc
        if fact.pred in prog.schemas and fact.functional != prog.schemas[fact.pred].functional:
            raise DataError(
                f"'{fact.pred}' is written in the wrong form (relation vs F[keys] = value)",
                fact_loc,
                BAD_VALUE,
            )
        ops.append(Op(kind, fact.pred, _check_row(prog, fact.pred, values, fact_loc), fact_loc))
    return ops


def _strip_comment(line: str) -> str:
    """Drop a ``#`` comment that is not inside a double-quoted string."""
    in_str = False
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            in_str = not in_str
        elif ch == "#" and not in_str:
            return line[:i]
    return line
