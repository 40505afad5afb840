"""Input checks: an EDB table must match its declaration before the engine sees any of it.

Four kinds of bad input, each reported with the table (predicate, path, version), the column
and an offending row, as ``BadInputError`` (DL306):

- schema drift: a declared column is missing, an undeclared column appeared, or a column's
  type is not the declared one (int: a signed integer type or uint8..uint32; float: float32,
  float64 or an integer type; string: string, large_string or string_view);
- a null in any column (Datalog has no null: every column is a key or a functional value);
- a NaN, ``inf`` or ``-inf`` in a float column (the language's floats are finite:
  ``deltalog.engine.semantics``);
- a second value for one key of a functional relation (``F[k] = v``).

``check_table`` checks a whole table version with vectorized Arrow compute (the first load
and the blocking Dagster check on each EDB asset); ``check_change`` checks only the rows of
a change (an incremental run, O(change)); a functional key of a change is checked against
the current relation by the engine before anything is applied, and ``functional_error``
turns that into the same kind of message. A run stopped by any of these writes no IDB
commit and leaves the saved engine state as it was.
"""

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.engine.analysis.program import RelationSchema
from deltalog.engine.errors import BAD_INPUT, DataError
from deltalog.engine.heads import format_fact
from deltalog.engine.values import Row
from deltalog.schemas.relation import normalize


class BadInputError(DataError):
    """An EDB table does not match its declaration; nothing was applied."""

    code = BAD_INPUT


@dataclass(frozen=True)
class Problem:
    """One offending place: the column (None for the whole table), the row as
    {column: value} (None when the problem is not about a row), and what is wrong."""

    column: str | None
    row: Mapping[str, object] | None
    what: str


def _accepts(declared: str, actual: pa.DataType) -> bool:
    if declared == "string":
        return bool(
            pa.types.is_string(actual)
            or pa.types.is_large_string(actual)
            or pa.types.is_string_view(actual)
        )
    integer = pa.types.is_signed_integer(actual) or (
        pa.types.is_unsigned_integer(actual) and actual.bit_width < 64
    )
    if declared == "int":
        return bool(integer)
    return bool(pa.types.is_floating(actual) and actual.bit_width >= 32) or bool(integer)


def _row(table: pa.Table, index: int) -> dict[str, object]:
    return {name: table.column(name)[index].as_py() for name in table.column_names}


def schema_problems(schema: RelationSchema, actual: pa.Schema, sample: pa.Table) -> list[Problem]:
    """Differences between the declared columns and ``actual``; ``sample`` (rows of the
    table, may be empty) supplies an offending row where one helps. Columns the program
    does not declare are not read (a team's table may hold more than the rules use)."""
    first = _row(sample, 0) if sample.num_rows else None
    declared = {c.name: c.type for c in schema.columns}
    problems = [
        Problem(name, None, f"declared column '{name}' ({typ}) is missing")
        for name, typ in declared.items()
        if name not in actual.names
    ]
    for field in actual:
        if field.name in declared and not _accepts(declared[field.name], field.type):
            problems.append(
                Problem(
                    field.name,
                    first,
                    f"column '{field.name}' has type {field.type}, the program declares "
                    f"{declared[field.name]}",
                )
            )
    return problems


def _first(mask: pa.ChunkedArray | pa.Array) -> int | None:
    index = pc.index(mask, True).as_py()
    return None if index is None or index < 0 else int(index)


def row_problems(schema: RelationSchema, table: pa.Table) -> list[Problem]:
    """Nulls, NaNs and functional conflicts in ``table`` (declared columns, any order; the
    schema is assumed checked). One problem per column at most, the first offending row."""
    table = normalize(table.select([c.name for c in schema.columns]))
    problems = []
    for col in schema.columns:
        values = table.column(col.name)
        if values.null_count:
            index = _first(pc.is_null(values))
            assert index is not None
            problems.append(Problem(col.name, _row(table, index), f"null in column '{col.name}'"))
        elif pa.types.is_floating(values.type):
            index = _first(pc.invert(pc.is_finite(values)))
            if index is not None:
                problems.append(
                    Problem(
                        col.name,
                        _row(table, index),
                        f"{_show(values[index].as_py())} in column '{col.name}' (float)",
                    )
                )
    if schema.functional and not problems and table.num_rows:
        problems.extend(_functional_problems(schema, table))
    return problems


def _functional_problems(schema: RelationSchema, table: pa.Table) -> list[Problem]:
    keys = [c.name for c in schema.columns[: schema.key_arity]]
    value = schema.columns[-1].name
    distinct = table.group_by([*keys, value], use_threads=False).aggregate([])
    per_key = distinct.group_by(keys, use_threads=False).aggregate([(value, "count")])
    clash = per_key.filter(pc.greater(per_key.column(f"{value}_count"), 1))
    if not clash.num_rows:
        return []
    key = clash.slice(0, 1).select(keys)
    rows = distinct.join(key, keys=keys, join_type="inner").sort_by([(value, "ascending")])
    rows = rows.select([c.name for c in schema.columns])
    a, b = _row(rows, 0), _row(rows, 1)
    facts = " and ".join(
        format_fact(schema.name, tuple(r.values()), True)  # type: ignore[arg-type]
        for r in (a, b)
    )
    return [
        Problem(
            value,
            b,
            f"two values in column '{value}' for one key of functional '{schema.name}': {facts}",
        )
    ]


def show_row(row: Mapping[str, object]) -> str:
    """A row as {column: value, ...}."""
    return "{" + ", ".join(f"{k}: {v!r}" for k, v in row.items()) + "}"


def _value_problem(typ: str, value: object) -> str | None:
    if value is None:
        return "null"
    if typ == "string":
        return None if isinstance(value, str) else f"{type(value).__name__} value"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{type(value).__name__} value"
    if typ == "int" and not isinstance(value, int):
        return f"{type(value).__name__} value"
    if isinstance(value, float) and not math.isfinite(value):
        return _show(value)
    return None


def _show(value: object) -> str:
    """A non-finite float as users write it: NaN, inf, -inf."""
    return "NaN" if isinstance(value, float) and math.isnan(value) else repr(value)


def change_problems(schema: RelationSchema, rows: Iterable[Row]) -> list[Problem]:
    """Nulls, NaNs and values of the wrong type in the rows of a change (python tuples in
    declared column order). The first offending row only."""
    names = [c.name for c in schema.columns]
    for row in rows:
        for col, value in zip(schema.columns, row, strict=True):
            what = _value_problem(col.type, value)
            if what is not None:
                shown = dict(zip(names, row, strict=True))
                return [Problem(col.name, shown, f"{what} in column '{col.name}' ({col.type})")]
    return []


def describe(pred: str, uri: str | None, version: int | None, problem: Problem) -> str:
    """One line naming the table, the column and the offending row."""
    at = ", ".join(x for x in (uri, f"version {version}" if version is not None else None) if x)
    row = f"; offending row {show_row(problem.row)}" if problem.row is not None else ""
    return f"EDB table '{pred}' ({at}): {problem.what}{row}"


def error(pred: str, uri: str, version: int | None, problems: list[Problem]) -> BadInputError:
    """The error of ``problems`` (its location is the table's path, said once)."""
    lines = [describe(pred, None, version, p) for p in problems]
    return BadInputError("; ".join(lines), uri)


def table_problems(schema: RelationSchema, table: pa.Table) -> list[Problem]:
    """Everything wrong with ``table`` (one version of a table of ``schema``): schema
    drift, else nulls, NaNs and functional conflicts."""
    problems = schema_problems(schema, table.schema, table)
    return problems or row_problems(schema, table)


def check_table(
    schema: RelationSchema, pred: str, uri: str, version: int | None, table: pa.Table
) -> None:
    """Raise ``BadInputError`` when ``table`` (one version of ``pred``'s table) is bad."""
    problems = table_problems(schema, table)
    if problems:
        raise error(pred, uri, version, problems)


def check_schema(
    schema: RelationSchema,
    pred: str,
    uri: str,
    version: int,
    actual: pa.Schema,
    sample: Callable[[], pa.Table],
) -> None:
    """Raise ``BadInputError`` on schema drift; ``sample()`` (a few rows of the table) is
    read only then, for an offending row."""
    if schema_problems(schema, actual, actual.empty_table()):
        raise error(pred, uri, version, schema_problems(schema, actual, sample()))


def _nan_free(row: Row) -> tuple[object, ...]:
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)


def check_change(
    schema: RelationSchema, pred: str, uri: str, version: int, delta: Mapping[Row, int]
) -> dict[Row, int]:
    """Raise ``BadInputError`` when a row of a change to ``pred`` is bad (O(change));
    return the change. A NaN row inserted and deleted again inside the change cancels
    (NaN != NaN, so the change feed could not cancel it)."""
    delta = net_change(delta)
    problems = change_problems(schema, delta)
    if problems:
        raise error(pred, uri, version, problems)
    return delta


def net_change(delta: Mapping[Row, int]) -> dict[Row, int]:
    """``delta`` with rows that hold NaN summed as equal rows (NaN != NaN, so the change
    feed cannot cancel a NaN row inserted and deleted again)."""
    if not any(isinstance(v, float) and math.isnan(v) for row in delta for v in row):
        return dict(delta)
    net: dict[tuple[object, ...], tuple[Row, int]] = {}
    for row, weight in delta.items():
        key = _nan_free(row)
        net[key] = (row, net.get(key, (row, 0))[1] + weight)
    return {row: w for row, w in net.values() if w}


def functional_error(
    schema: RelationSchema, pred: str, uri: str, version: int, conflict: DataError
) -> BadInputError:
    """The engine's DL302 on an EDB change, as bad input of ``pred``'s table."""
    value = schema.columns[-1].name if schema.columns else None
    problem = Problem(value, None, conflict.message)
    return error(pred, uri, version, [problem])
