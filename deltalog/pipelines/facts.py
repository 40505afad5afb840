"""Loading EDB facts from CSV files: ``DIR/<predicate>.csv`` with a header row naming the
declared columns. Every bad value is reported with file, line and column, never a traceback.
"""

import csv
import io
import math
import re
from pathlib import Path
from typing import Any

from deltalog.engine.analysis.program import AnalyzedProgram, RelationSchema
from deltalog.engine.errors import BAD_HEADER, BAD_VALUE, INPUT_LIMIT, MISSING_INPUT, DataError, Loc
from deltalog.engine.heads import functional_conflict
from deltalog.engine.source import decode_source
from deltalog.engine.values import Row, Value

# The largest CSV field read (Python's csv module stops at 128 KiB by default).
MAX_FIELD = 16 * 1024 * 1024


# Numbers as a CSV writes them: ASCII digits, no digit grouping (Python's int() and float()
# also take ``1_000`` and other scripts' digits, which no other reader of the data would).
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def parse_value(text: str, typ: str) -> Value:
    """A CSV cell as a value of column type ``typ``; raises ValueError when it is not one
    (floats are finite: ``nan``, ``inf`` are not values of the language)."""
    if typ == "int":
        if not _INT.fullmatch(text.strip()):
            raise ValueError("not an integer")
        return int(text.strip())
    if typ == "float":
        if not _FLOAT.fullmatch(text.strip()):
            raise ValueError("not a number")
        value = float(text.strip())
        if not math.isfinite(value):
            raise ValueError("not finite")
        return value
    return text


def read_csv_relation(path: Path, schema: RelationSchema) -> set[Row]:
    text = decode_source(path.read_bytes(), str(path))
    csv.field_size_limit(MAX_FIELD)
    with io.StringIO(text, newline="") as fh:
        # strict: a quote left open swallows no rows (an error at the end of the data)
        reader = csv.reader(fh, strict=True)
        start = [1]  # the line the record being read starts on
        try:
            return _read(reader, path, schema, text, start)
        except csv.Error as err:  # a field past MAX_FIELD, a quote left open at the end
            too_big = "field larger than field limit" in str(err)
            raise DataError(
                f"a field over {MAX_FIELD // (1024 * 1024)} MiB (the limit)" if too_big
                else f"not valid CSV in the record starting here: {err}",
                Loc(str(path), start[0], 1),
                INPUT_LIMIT if too_big else BAD_VALUE,
            ) from None


def _cell_at(text: str, first: int, last: int, index: int) -> tuple[int, int]:
    """(line, column) where cell ``index`` of the record on lines ``first``..``last`` of
    ``text`` starts (quotes and quoted commas and line breaks counted as written)."""
    lines = io.StringIO(text, newline="").readlines()[first - 1 : last]
    record = "".join(lines)
    at, cell, quoted, i = 0, 0, False, 0
    while i < len(record) and cell < index:
        ch = record[i]
        if quoted:
            if ch == '"' and record[i + 1 : i + 2] == '"':
                i += 1
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch == ",":
            cell += 1
            at = i + 1
        i += 1
    before = record[:at]
    breaks = before.count("\n") + before.count("\r") - before.count("\r\n")
    start = max(before.rfind("\n"), before.rfind("\r")) + 1
    return first + breaks, at - start + 1


def _read(reader: Any, path: Path, schema: RelationSchema, text: str,
          start: list[int]) -> set[Row]:
    rows: set[Row] = set()
    header = next(reader, None)
    expected = [c.name for c in schema.columns]
    if header is None:
        raise DataError(f"empty file: expected a header row {','.join(expected)}",
                        Loc(str(path), 1, 1), BAD_HEADER)
    header = [h.strip() for h in header]
    if schema.declared and header != expected:
        raise DataError(
            f"header {','.join(header)} does not match the declaration of "
            f"'{schema.name}': expected {','.join(expected)}",
            Loc(str(path), 1, 1),
            BAD_HEADER,
        )
    if len(header) != schema.arity:
        raise DataError(
            f"'{schema.name}' has {schema.arity} columns, the header has {len(header)}",
            Loc(str(path), 1, 1),
            BAD_HEADER,
        )
    line = start[0] = reader.line_num
    keys: dict[Row, Row] = {}  # a functional relation's key -> its first row
    k = schema.key_arity if schema.functional else 0
    while True:
        start[0] = line + 1
        record = next(reader, None)
        if record is None:
            break
        first, line = start[0], reader.line_num
        if not record:
            continue
        if len(record) != schema.arity:
            raise DataError(
                f"expected {schema.arity} values, found {len(record)}",
                Loc(str(path), line, 1),
                BAD_VALUE,
            )
        values: list[Value] = []
        for j, (cell, column) in enumerate(zip(record, schema.columns, strict=True)):
            try:
                values.append(parse_value(cell, column.type))
            except ValueError:
                shown = cell if len(cell) <= 40 else cell[:40] + "..."
                raise DataError(
                    f"column '{column.name}': {shown!r} is not a valid {column.type}"
                    + (" (floats are finite)" if column.type == "float" else ""),
                    Loc(str(path), *_cell_at(text, first, line, j)),
                    BAD_VALUE,
                ) from None
        row = tuple(values)
        if k and keys.setdefault(row[:k], row) != row:  # a second value for a key
            raise functional_conflict(schema.name, keys[row[:k]], row, Loc(str(path), first, 1))
        rows.add(row)
    return rows


def load_facts_dir(directory: Path, prog: AnalyzedProgram) -> dict[str, set[Row]]:
    """Every ``<predicate>.csv`` in ``directory``; a CSV that names no EDB predicate is an
    error (it is most likely a typo), a missing one means an empty relation."""
    if not directory.is_dir():
        raise DataError(f"facts directory not found: {directory}", str(directory), MISSING_INPUT)
    out: dict[str, set[Row]] = {}
    for path in sorted(directory.glob("*.csv")):
        name = path.stem
        if name not in prog.schemas:
            raise DataError(
                f"'{name}.csv' names no predicate of the program", str(path), MISSING_INPUT
            )
        if name in prog.idb:
            raise DataError(
                f"'{name}' is derived by rules (IDB); facts for it belong in the program",
                str(path),
                MISSING_INPUT,
            )
        out[name] = read_csv_relation(path, prog.schemas[name])
    return out
