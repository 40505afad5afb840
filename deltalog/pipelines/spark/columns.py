"""Rule expressions and comparisons as Spark Columns with the engine's semantics (integer
division and modulo, exact int/float comparison, NaN), and exact float totals; no SQL text.
"""

import math
from collections.abc import Callable, Mapping

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from deltalog.engine.syntax.ast import BinOp, Const, Expr, Value, Var
from deltalog.pipelines.spark.plan import unsupported

DOUBLE = T.DoubleType()
LONG = T.LongType()


def lit_column(value: Value) -> tuple[Column, str]:
    """A constant as a typed Column literal (ints as long, floats as double) and its type."""
    if isinstance(value, bool):
        raise unsupported(f"boolean constant {value!r}")
    if isinstance(value, int):
        return F.lit(value).cast(LONG), "int"
    if isinstance(value, float):
        return F.lit(value).cast(DOUBLE), "float"
    return F.lit(value), "string"


def expr_column(
    expr: Expr, names: Mapping[str, str], types: Mapping[str, str]
) -> tuple[Column, str]:
    """The Column computing ``expr`` (null where the engine has no result) and its type."""
    if isinstance(expr, Var):
        return F.col(names[expr.name]), types[expr.name]
    if isinstance(expr, Const):
        return lit_column(expr.value)
    if not isinstance(expr, BinOp):
        raise unsupported(f"expression {expr!r}")
    a, ta = expr_column(expr.left, names, types)
    b, tb = expr_column(expr.right, names, types)
    if "string" in (ta, tb):
        raise unsupported(f"arithmetic on a string in {expr}")
    if ta == tb == "int":
        if expr.op == "/":
            # Spark's integral `div` truncates toward zero; guarded so that ANSI mode never
            # sees a zero divisor (no result, like the engine).
            return F.when(b != 0, F.call_function("div", a, b)), "int"
        if expr.op == "%":
            return F.try_mod(a, b), "int"  # sign of the dividend; null on zero
    else:
        a, b = a.cast(DOUBLE), b.cast(DOUBLE)
        if expr.op == "/":
            return finite(F.try_divide(a, b)), "float"
        if expr.op == "%":
            return finite(F.try_mod(a, b)), "float"  # fmod
    if ta == tb == "int":
        if expr.op == "+":
            return a + b, "int"
        if expr.op == "-":
            return a - b, "int"
        if expr.op == "*":
            return a * b, "int"
        raise unsupported(f"arithmetic operator {expr.op!r}")
    if expr.op == "+":
        return finite(a + b), "float"
    if expr.op == "-":
        return finite(a - b), "float"
    if expr.op == "*":
        return finite(a * b), "float"
    raise unsupported(f"arithmetic operator {expr.op!r}")


def finite(c: Column) -> Column:
    """``c`` where it is a finite double, else null: a float operation whose result is not
    finite has no result in the engine (``deltalog.engine.semantics``)."""
    return F.when(~F.isnan(c) & (F.abs(c) != F.lit(math.inf)), c)


_COMPARE: dict[str, Callable[[Column, Column], Column]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def equal(a: Column, ta: str, b: Column, tb: str) -> Column:
    """``a == b`` with the engine's (Python's) semantics. An int equals a float only when
    the float is integral and the same integer: Spark would compare ``double(int)``, which
    makes 2**53 + 1 equal 2.0**53. Written as an equality of longs, so that a join on it
    stays a hash join."""
    if {ta, tb} != {"int", "float"}:
        return a == b
    if ta == "float":
        a, b = b, a
    whole = _whole(b)
    return F.coalesce((a == whole) & (whole.cast(DOUBLE) == b), F.lit(False))


def _whole(b: Column) -> Column:
    """A float truncated to a long; null beyond the longs (and for NaN), where Spark's cast
    would saturate."""
    return F.when((b >= F.lit(-(2.0**63))) & (b < F.lit(2.0**63)), b.try_cast(LONG))


def as_type(c: Column, t: str, typ: str) -> Column:
    """The value of ``c`` (of type ``t``) as a ``typ``, as a variable of that type is bound
    in the engine (``deltalog.engine.semantics.bind_as``): an int as the float equal to
    it, a float as the int equal to it; null where there is none (no binding)."""
    if t == typ or {t, typ} != {"int", "float"}:
        return c
    if t == "int":
        d = c.cast(DOUBLE)
        return F.when(_whole(d) == c, d)
    whole = _whole(c)
    return F.when(whole.cast(DOUBLE) == c, whole)


def compare(op: str, a: Column, ta: str, b: Column, tb: str) -> Column:
    """``a op b`` with the engine's semantics: exact between an int and a float (see
    ``equal``), and nothing but ``!=`` holds against a float NaN."""
    if op == "=":
        eq = equal(a, ta, b, tb)
        for c, t in ((a, ta), (b, tb)):
            if t == "float":
                eq = eq & ~F.isnan(c)
        return eq
    if op == "!=":
        return (
            ~equal(a, ta, b, tb)
            | (F.isnan(a) if ta == "float" else F.lit(False))
            | (F.isnan(b) if tb == "float" else F.lit(False))
        )
    nan = F.lit(False)
    for c, t in ((a, ta), (b, tb)):
        if t == "float":
            nan = nan | F.isnan(c)
    if {ta, tb} != {"int", "float"}:
        return ~nan & _COMPARE[op](a, b)
    if ta == "float":
        a, b, op = b, a, _FLIP[op]
    # a: int, b: float. double(a) is a rounded to the nearest double, so whenever it differs
    # from b it is on the same side of b as a; when it equals b, b is integral and a is
    # compared with it as a long (b = 2.0**63 is beyond every long).
    da = a.cast(DOUBLE)
    whole = _whole(b)
    sign = (
        F.when(da < b, -1)
        .when(da > b, 1)
        .when(whole.isNull(), -1)
        .when(a < whole, -1)
        .when(a > whole, 1)
        .otherwise(0)
    )
    return ~nan & _COMPARE[op](sign, F.lit(0))


# ---------------------------------------------------------------------------------------
# Exact float totals: math.fsum over each group, in an Arrow grouped-aggregate UDF.


def _make_fsum_udf() -> Callable[[Column], Column]:
    # Defined inside a function so that cloudpickle ships it by value: Python workers need
    # not import this package.
    def fsum(values: pa.Array) -> float:
        xs = values.to_numpy(zero_copy_only=False)
        try:
            return math.fsum(xs)
        except OverflowError:  # a partial sum beyond the float range: the exact sum in ints
            scale = 1 << 1074
            exact = sum(n * (scale // d) for n, d in (float(x).as_integer_ratio() for x in xs))
            try:
                return exact / scale  # correctly rounded
            except OverflowError:  # beyond the float range: the commit refuses it (DL308)
                return math.inf if exact > 0 else -math.inf

    if not hasattr(F, "arrow_udf"):
        raise unsupported("total() needs pyspark >= 4.1 (Arrow grouped-aggregate UDFs)")
    return F.arrow_udf(fsum, "double")  # type: ignore[call-overload, no-any-return]


_FSUM: list[Callable[[Column], Column]] = []


def exact_total(column: Column) -> Column:
    """The correctly rounded sum of a double column over each group (``math.fsum``)."""
    if not _FSUM:
        _FSUM.append(_make_fsum_udf())
    return _FSUM[0](column)
