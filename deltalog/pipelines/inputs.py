"""The change reader: what a stratum run reads of its input tables, checked on the way in.

The current version of every input (EDB tables and upstream IDB tables), the change of each
between two versions (change data feed), or a whole table for a full load. EDB rows are
checked here (schema, values, functional keys) before the engine sees them, so bad input
stops the run with an error that names the table, version, column and row.
"""

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pyarrow as pa

from deltalog.engine.columnar.evaluate import Columns
from deltalog.engine.errors import FUNCTIONAL_CONFLICT, MISSING_INPUT, DataError
from deltalog.engine.runtime import IncrementalEngine
from deltalog.engine.storage import Delta
from deltalog.engine.values import Row
from deltalog.pipelines import delta_io, expectations, quality
from deltalog.pipelines.spec import PipelineSpec
from deltalog.schemas.relation import arrow_to_columns, arrow_to_rows, rows_to_arrow

# Per input table: the rows a version holds more than once and how many copies (None: not
# known, or more than COPIES_MAX such rows: the change reader then looks rows up).
Copies = dict[str, dict[Row, int] | None]
COPIES_MAX = 10_000


def require_table(uri: str, pred: str, spec: PipelineSpec, what: str) -> None:
    """Raise ``DataError`` DL304 when the ``what`` ("EDB" or "IDB") table is missing."""
    if not delta_io.exists(uri):
        raise DataError(
            f"{what} table of '{pred}' does not exist at {uri}: "
            + ("write it (its pipeline.toml binds it there) or point the warehouse elsewhere"
               if what == "EDB" else f"materialize '{pred}' first"),
            spec.name,
            MISSING_INPUT,
        )


@dataclass(frozen=True)
class InputCheck:
    """An EDB table's current version checked against its declaration: ``problems`` (empty
    when it passed), its ``rows`` (from the Delta log), how many rows the check read, and
    ``since``, the version whose check this one builds on (None: the whole table read)."""

    version: int
    problems: list[quality.Problem]
    rows: int
    rows_read: int
    since: int | None


def check_input(root: str | Path, spec: PipelineSpec, pred: str, since: int | None) -> InputCheck:
    """Check the current version of ``pred``'s EDB table against its declaration.

    ``since`` is a version of the table that passed this check before. When it is at most
    the current version, only what changed since is read (O(change)): the schema from the
    log, the rows inserted since (change data feed) for nulls, NaNs and wrong types, and for
    a functional relation the table's rows that share a key with an inserted row (a
    filtered scan). Otherwise (no earlier pass, or a table that went back) the whole table
    is read. A table with a Great Expectations suite (``deltalog.pipelines.expectations``) has the
    suite's row-wise expectations validated on the rows inserted since (the whole table
    when there is no ``since``). Raises ``DataError`` DL304 when the table does not exist."""
    uri = spec.table_uri(root, pred)
    require_table(uri, pred, spec, "EDB")
    schema = spec.program.schemas[pred]
    version = delta_io.table_version(uri)
    suite = spec.expectations.get(pred)
    if since is None or since > version:
        table = delta_io.read_arrow(uri, version)
        problems = quality.table_problems(schema, table)
        if not problems and suite is not None:  # the whole table is the change
            problems = expectations.validate(suite, pred, table, change_only=True)
        return InputCheck(version, problems, table.num_rows, table.num_rows, None)
    rows = delta_io.row_count(uri, version)
    actual = delta_io.arrow_schema_of(uri, version)
    if quality.schema_problems(schema, actual, actual.empty_table()):
        problems = quality.schema_problems(schema, actual, delta_io.head(uri, version))
        return InputCheck(version, problems, rows, 1, since)
    names = [c.name for c in schema.columns]
    delta = quality.net_change(delta_io.feed_weights(uri, since, version, names))
    inserted = [row for row, weight in delta.items() if weight > 0]
    problems = quality.change_problems(schema, inserted)
    read = len(delta)
    if not problems and schema.functional and inserted:
        keys = rows_to_arrow(schema, inserted).select(names[: schema.key_arity])
        around = delta_io.rows_with_keys(uri, version, keys).select(names)
        read += around.num_rows
        problems = quality.row_problems(schema, around)
    if not problems and suite is not None and inserted:
        problems = expectations.validate(suite, pred, rows_to_arrow(schema, inserted),
                                         change_only=True)
    return InputCheck(version, problems, rows, read, since)


class InputReader:
    """Reads the inputs of stratum ``index`` of a pipeline."""

    def __init__(self, root: str | Path, spec: PipelineSpec, index: int):
        self.root, self.spec, self.index = root, spec, index
        self.stratum = spec.program.strata[index]
        # inputs whose change was read by comparing two versions whole: no change feed
        self.compared: set[str] = set()

    def uri(self, pred: str) -> str:
        return self.spec.table_uri(self.root, pred)

    def snapshot(self) -> tuple[dict[str, int], dict[str, int]]:
        """(input table -> current version, EDB closure -> current version). EDB versions
        are read first: upstream IDB tables are assumed up to date with them."""
        spec = self.spec
        edb_versions: dict[str, int] = {}
        for pred in sorted({e for p in self.stratum.preds for e in spec.edb_closure(p)}):
            uri = self.uri(pred)
            require_table(uri, pred, spec, "EDB")
            edb_versions[pred] = delta_io.table_version(uri)
        inputs: dict[str, int] = {}
        for pred in spec.upstream(self.stratum):
            if pred in edb_versions:
                inputs[pred] = edb_versions[pred]
                continue
            uri = self.uri(pred)
            require_table(uri, pred, spec, "IDB")
            inputs[pred] = delta_io.table_version(uri)
        return inputs, edb_versions

    def changes(
        self,
        old: Mapping[str, int],
        new: Mapping[str, int],
        copies: Copies | None = None,
        present: Callable[[str, Row], bool] | None = None,
    ) -> dict[str, Delta]:
        """The change of every input from version ``old[pred]`` to ``new[pred]`` (each
        ``old`` version at most the ``new`` one), EDB changes checked; empty ones left out.

        A Delta table is a bag: a row the change feed deletes is gone only with its last
        copy. With ``copies`` (per input, the rows version ``old`` held more than once, or
        None when not known) and ``present`` (was a row in the input at ``old``: the
        engine's relation), the change is told from the feed alone, and ``copies`` is
        brought to ``new`` in place; otherwise the rows the feed deletes are looked up in
        the table (a filtered scan)."""
        def change(pred: str, uri: str, start: int, end: int, names: list[str]) -> Delta:
            known = copies.get(pred) if copies is not None else None
            if known is None or present is None or copies is None:
                return delta_io.changes(uri, start, end, names)
            return self._bag_change(uri, pred, start, end, names, copies, known, present)

        return self._checked(old, new, change)

    def bag_changes(
        self, old: Mapping[str, int], new: Mapping[str, int], wanted: Collection[str]
    ) -> tuple[dict[str, Delta], frozenset[str]]:
        """As ``changes``, except that an input of ``wanted`` whose table has a change
        feed gives its feed's weights (copies added less copies removed: a bag change,
        O(change), for a reader that keeps the copies itself). Returns the changes and the
        inputs whose change is such a bag change."""
        bags: set[str] = set()

        def change(pred: str, uri: str, start: int, end: int, names: list[str]) -> Delta:
            weights = delta_io.bag_weights(uri, start, end, names) if pred in wanted else None
            if weights is None:
                return delta_io.changes(uri, start, end, names)
            bags.add(pred)
            return weights

        return self._checked(old, new, change), frozenset(bags)

    def _checked(
        self, old: Mapping[str, int], new: Mapping[str, int],
        change: Callable[[str, str, int, int, list[str]], Delta],
    ) -> dict[str, Delta]:
        """``change(pred, uri, start, end, columns)`` of every input that moved, the EDB
        tables' schemas and changes checked; empty ones left out."""
        out = {}
        for pred, version in new.items():
            if version == old[pred]:
                continue
            uri = self.uri(pred)
            edb = pred in self.spec.edb_tables
            schema = self.spec.program.schemas[pred]
            if edb:
                self.check_schema(pred, version)
            delta = change(pred, uri, old[pred], version, [c.name for c in schema.columns])
            if not delta_io.cdf_enabled(uri):
                self.compared.add(pred)
            if edb:
                delta = quality.check_change(schema, pred, uri, version, delta)
            if delta:
                out[pred] = delta
        return out

    def feed_note(self) -> str | None:
        """What the run's notes say about inputs read without a change feed, if any."""
        if not self.compared:
            return None
        names = ", ".join(f"'{p}'" for p in sorted(self.compared))
        return (f"input {names}: no change data feed, so the change was found by comparing "
                "two versions whole (it costs the table, not the change); set the table "
                "property delta.enableChangeDataFeed = true to read only the change")

    def check_schema(self, pred: str, version: int) -> None:
        """EDB table ``pred`` at ``version`` has the declared columns (from its log)."""
        uri = self.uri(pred)
        schema = self.spec.program.schemas[pred]
        actual = delta_io.arrow_schema_of(uri, version)
        quality.check_schema(schema, pred, uri, version, actual,
                             partial(delta_io.head, uri, version))

    def check_functional(
        self, engine: IncrementalEngine, deltas: Mapping[str, Delta], inputs: Mapping[str, int]
    ) -> None:
        """A second value for a functional key, as bad input of the table that brought it
        (the engine checks before it applies anything)."""
        try:
            engine.check_edb(deltas)
        except DataError as err:
            pred = next((p for p in deltas if err.where == p), None)
            if err.code != FUNCTIONAL_CONFLICT or pred is None:
                raise
            schema = self.spec.program.schemas[pred]
            uri = self.uri(pred)
            raise quality.functional_error(schema, pred, uri, inputs[pred], err) from None

    def _bag_change(
        self, uri: str, pred: str, start: int, end: int, names: list[str], copies: Copies,
        known: dict[Row, int], present: Callable[[str, Row], bool],
    ) -> Delta:
        def before(row: Row) -> int:
            return known.get(row) or (1 if present(pred, row) else 0)

        delta, after = delta_io.bag_changes(uri, start, end, names, before)
        for row, n in after.items():
            if n >= 2:
                known[row] = n
            else:
                known.pop(row, None)
        if len(known) > COPIES_MAX:
            copies[pred] = None  # too many to keep: looked up in the table from now on
        return delta

    def read(self, pred: str, version: int, copies: Copies | None = None) -> set[Row]:
        """All rows of an input table at ``version``; an EDB table is checked first. With
        ``copies``, the rows it holds more than once are recorded there (None: more than
        ``COPIES_MAX``)."""
        return arrow_to_rows(self._table(pred, version, copies))

    def read_columns(self, pred: str, version: int, copies: Copies | None = None
                     ) -> Columns:
        """``read``, by column (what a load gives the engine: no Python row made)."""
        return arrow_to_columns(self._table(pred, version, copies))

    def _table(self, pred: str, version: int, copies: Copies | None) -> pa.Table:
        uri = self.uri(pred)
        table = delta_io.read_arrow(uri, version)
        if pred in self.spec.edb_tables:
            schema = self.spec.program.schemas[pred]
            quality.check_table(schema, pred, uri, version, table)
            table = table.select([c.name for c in schema.columns])
        if copies is not None:
            copies[pred] = delta_io.copies_of(table, COPIES_MAX)
        return table
