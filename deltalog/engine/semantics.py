"""The meaning of primitives, shared by every evaluator: arithmetic, comparisons, value
coercion into column types, and aggregate functions.

Integer ``/`` and ``%`` follow C/SQL/Spark (truncate toward zero; remainder has the sign of
the dividend); division or remainder by zero has no result, so the body is not satisfied.

Floats are finite: ``nan``, ``inf`` and ``-inf`` are not values of the language (inputs
refuse them), and an operation whose result would not be a finite float (``1e308 * 10``,
an integer too large for a float) has no result either, like division by zero. So every
value equals itself and the order of values is total, which the joins rely on. A float
``sum`` or ``total`` beyond the float range is an error (DL308): a group must have a value.
``-0.0`` and ``0.0`` are one value, stored and shown as ``0.0`` by every evaluator (inputs,
literals and arithmetic results alike).
"""

import math
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deltalog.engine.analysis.program import RelationSchema
from deltalog.engine.exact_sum import ExactSum
from deltalog.engine.syntax.ast import BinOp, Const, Expr, Var
from deltalog.engine.values import Row, Value

_CMP: dict[str, Callable[[Value, Value], bool]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def compare(op: str, left: Value, right: Value) -> bool:
    return _CMP[op](left, right)


def arith(op: str, a: Value, b: Value) -> Value | None:
    """``a op b``; None when undefined: division by zero, or a float result that is not
    finite (module docstring)."""
    if isinstance(a, str) or isinstance(b, str):
        raise TypeError(f"arithmetic on a string: {a!r} {op} {b!r}")
    if isinstance(a, int) and isinstance(b, int):
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if b == 0:
            return None
        q = abs(a) // abs(b)
        if (a < 0) != (b < 0):
            q = -q
        return q if op == "/" else a - b * q
    try:
        if op == "+":
            r = a + b
        elif op == "-":
            r = a - b
        elif op == "*":
            r = a * b
        elif b == 0:
            return None
        elif op == "/":
            r = a / b
        else:
            r = math.fmod(a, b)
    except OverflowError:  # an int beyond the float range meets a float
        return None
    return r + 0.0 if math.isfinite(r) else None  # (-0.0 made 0.0: one zero, as stored)


FLOAT_EXACT = 2**53  # ints of at most this magnitude are exact as floats


def float_arith(op: str, a: NDArray[Any], b: NDArray[Any], ok: NDArray[np.bool_]
                ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """``arith`` on whole columns where an operand is a float (an int column converted as
    Python converts it): the values, and where they are defined (a finite result, no
    division or remainder by zero) among ``ok``."""
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        if op == "+":
            r = x + y
        elif op == "-":
            r = x - y
        elif op == "*":
            r = x * y
        else:
            ok = ok & (y != 0)
            d = np.where(y == 0, 1.0, y)
            r = x / d if op == "/" else np.fmod(x, d)
    return r + 0.0, ok & np.isfinite(r)  # (-0.0 made 0.0, as ``arith`` makes it)


def ints_as_floats(ints: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """``bind_as(v, "float")`` on a column of ints: the floats, and where each is exactly
    its int (elsewhere no float equals the int: no binding)."""
    floats = ints.astype(np.float64)
    inside = floats < 2.0**63  # (2**63 - 1 rounds up to 2**63, beyond the int64s)
    back = np.where(inside, floats, 0.0).astype(np.int64)
    return floats, inside & (back == ints)


def floats_as_ints(floats: NDArray[np.float64]
                   ) -> tuple[NDArray[np.int64], NDArray[np.bool_], bool]:
    """``bind_as(v, "int")`` on a column of floats: the ints, where each is exactly its
    float (an integral float inside the int64s; elsewhere no int64 equals it), and
    whether some integral float lies beyond the int64s (the int equal to it is not one)."""
    integral = np.isfinite(floats) & (np.floor(floats) == floats)
    inside = (floats >= -(2.0**63)) & (floats < 2.0**63)
    ok = integral & inside
    return (np.where(ok, floats, 0.0).astype(np.int64), ok,
            bool((integral & ~inside).any()))


def exact_as_floats(ints: NDArray[np.int64]) -> bool:
    """Whether every int compares with a float through float64 as Python compares them
    (exactly): none beyond ``FLOAT_EXACT`` in magnitude."""
    return not bool(((ints > FLOAT_EXACT) | (ints < -FLOAT_EXACT)).any())


def eval_expr(expr: Expr, env: Mapping[str, Value]) -> Value | None:
    if isinstance(expr, Var):
        return env[expr.name]
    if isinstance(expr, Const):
        return expr.value
    left = eval_expr(expr.left, env)
    right = eval_expr(expr.right, env)
    if left is None or right is None:
        return None
    return arith(expr.op, left, right)


def compile_expr(expr: Expr) -> Callable[[Mapping[str, Value]], Value | None]:
    """A closure evaluating ``expr`` in an environment; faster than walking the tree."""
    if isinstance(expr, Var):
        name = expr.name
        return lambda env: env[name]
    if isinstance(expr, Const):
        value = expr.value
        return lambda env: value
    assert isinstance(expr, BinOp)
    left, right, op = compile_expr(expr.left), compile_expr(expr.right), expr.op

    def run(env: Mapping[str, Value]) -> Value | None:
        a = left(env)
        b = right(env)
        if a is None or b is None:
            return None
        return arith(op, a, b)

    return run


def coerce(value: Value, typ: str) -> Value:
    """A value as stored in a column of type ``typ`` (ints widen into float columns, and
    ``-0.0`` is ``0.0``: the two are one value, written one way whatever the engine)."""
    if typ == "float":
        if isinstance(value, int):
            return float(value)
        if value == 0.0:
            return 0.0
    return value


def bind_as(value: Value, typ: str) -> Value | None:
    """The value a variable of type ``typ`` takes when a binding (an atom's column, an
    assignment) offers ``value``, a number of either type (``Rule.casts``): the same
    number in ``typ``, so that ``x / 2`` means the same whatever binds ``x`` first. An int
    becomes the float equal to it, a float the int equal to it; None when there is none
    (an int that no float equals exactly, beyond 2**53 or the float range; a float that
    is not integral): then no value of ``typ`` equals ``value``, and the binding does not
    hold, as a comparison ``=`` would not. ``-0.0`` is ``0.0``."""
    if typ == "float":
        if isinstance(value, int):
            try:
                f = float(value)
            except OverflowError:
                return None
            return f if f == value else None
        return 0.0 if value == 0.0 else value
    if typ == "int" and isinstance(value, float):
        return int(value) if value.is_integer() else None
    return value


def coerce_row(schema: RelationSchema, row: Row) -> Row:
    """A row as stored in the relation of ``schema`` (``coerce`` per column)."""
    return tuple(coerce(v, c.type) for v, c in zip(row, schema.columns, strict=True))


def aggregate(func: str, values: Iterable[Value]) -> Value:
    """Aggregate over the values of the distinct satisfying assignments of one group.

    ``total`` is the correctly rounded exact sum whatever the order, and so is ``sum`` over
    floats: a maintained sum must not depend on the order in which rows arrived
    (Veldhuizen 2014, §2.3.4); the same ``ExactSum`` as the maintained aggregates, so
    evaluation and maintenance agree to the bit. ``sum`` over integers is an exact integer.
    """
    vals = list(values)
    if func == "count":
        return len(vals)
    if func in ("sum", "total"):
        acc = ExactSum()
        for v in vals:
            acc.add(v, 1)
        return acc.value(func == "total")
    if func == "min":
        return min(vals)  # type: ignore[type-var]
    if func == "max":
        return max(vals)  # type: ignore[type-var]
    raise ValueError(f"unknown aggregate {func}")
