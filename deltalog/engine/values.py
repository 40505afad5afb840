"""Values and the one output format for facts, used everywhere (CLI, goldens, reports).

``name(v1, v2).`` for relations, ``name[k1, k2] = v.`` for functional predicates; integers in
decimal, floats as Python's ``repr``, strings double-quoted with backslash escapes.
"""

from collections.abc import Iterable, Mapping

Value = int | float | str  # a deltalog value: the three column types int, float, string
Row = tuple[Value, ...]  # one fact of a relation, in its declared column order

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def format_value(value: Value) -> str:
    if isinstance(value, bool):  # bool is an int subclass; never a deltalog value
        raise TypeError("booleans are not deltalog values")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return '"' + "".join(_ESCAPES.get(c, c) for c in value) + '"'


def format_fact(name: str, row: tuple[Value, ...], functional: bool = False) -> str:
    if functional:
        keys = ", ".join(format_value(v) for v in row[:-1])
        return f"{name}[{keys}] = {format_value(row[-1])}."
    return f"{name}({', '.join(format_value(v) for v in row)})."


def format_relations(
    relations: Mapping[str, Iterable[tuple[Value, ...]]],
    functional: Iterable[str] = (),
) -> list[str]:
    """Every relation in name order, rows sorted by value, one fact per line."""
    fun = set(functional)
    lines: list[str] = []
    for name in sorted(relations):
        for row in sorted(relations[name]):
            lines.append(format_fact(name, row, name in fun))
    return lines
