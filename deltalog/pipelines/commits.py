"""The one writer of IDB table commits, and the metadata that makes them exactly once.

Every run of a stratum, whatever its mode (incremental, full load, Spark rebuild), writes each
changed IDB table as ONE Delta commit that carries the input versions it consumed and the
application transaction ``deltalog:<pipeline>:<stratum>:<pred>`` at version ``seq`` (the run
number). The transaction versions in the tables are what a later run reads to know how far a
crashed one got; the recorded versions are what the recompute check recomputes from.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.engine.errors import TABLE_SHAPE, VALUE_OUT_OF_RANGE, DataError
from deltalog.engine.storage import Delta
from deltalog.pipelines import delta_io
from deltalog.pipelines.faults import fault
from deltalog.pipelines.spec import PipelineSpec
from deltalog.schemas.relation import arrow_schema, rows_to_arrow

# Commit metadata keys written on every IDB commit.
PIPELINE = "deltalog.pipeline"
STRATUM = "deltalog.stratum"
INPUT_VERSIONS = "deltalog.input_versions"  # direct inputs (EDB and IDB tables) -> version
EDB_VERSIONS = "deltalog.edb_versions"  # every EDB table the relation depends on -> version
SEQ = "deltalog.seq"  # the stratum run (application transaction version) of the commit
MODE = "deltalog.mode"  # "rebuild" on a Spark rebuild's commits (absent otherwise)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# pred -> (our transaction version in its table, or None; table version, or -1: no table)
Txns = dict[str, tuple[int | None, int]]
# pred -> (rows to insert, rows to delete)
TableChanges = Mapping[str, tuple[pa.Table, pa.Table]]


def app_id(spec: PipelineSpec, stratum_index: int, pred: str) -> str:
    """The application transaction id of ``pred``'s table commits."""
    return f"deltalog:{spec.name}:{stratum_index}:{pred}"


def versions_json(value: Mapping[str, int]) -> str:
    return json.dumps(dict(value), sort_keys=True)


def versions_of(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in json.loads(text).items()}


def deltalog_commits(uri: str) -> list[dict[str, Any]]:
    """The commit infos of the table that a deltalog run wrote, newest first."""
    return [info for info in delta_io.history(uri) if EDB_VERSIONS in info]


def recorded_edb_versions(uri: str, version: int) -> dict[str, int]:
    """EDB versions recorded by the newest deltalog commit of an IDB table up to ``version``."""
    for info in deltalog_commits(uri):
        if int(info["version"]) <= version:
            return versions_of(info[EDB_VERSIONS])
    return {}


@dataclass(frozen=True)
class Written:
    """What ``CommitWriter.write`` did: the (txn, table version) of every table after it,
    the (inserted, deleted) rows per table, how many commits it made, and the tables that
    took another change than the one asked for (they were not what the engine thought)."""

    txns: Txns
    counts: dict[str, tuple[int, int]]
    commits: int
    diverged: frozenset[str]


class CommitWriter:
    """Writes the IDB tables of one stratum; the only code that commits to them."""

    def __init__(self, root: str | Path, spec: PipelineSpec, index: int, notes: list[str]):
        self.root, self.spec, self.index = root, spec, index
        self.preds = spec.program.strata[index].preds
        self.notes = notes  # the run's notes, appended to

    def uri(self, pred: str) -> str:
        return self.spec.table_uri(self.root, pred)

    def ensure_table(self, pred: str) -> str:
        """The table of ``pred``, created empty (change data feed on) when missing."""
        uri = self.uri(pred)
        if not delta_io.exists(uri):
            delta_io.create_table(uri, arrow_schema(self.spec.program.schemas[pred]))
        return uri

    def txns(self) -> Txns:
        """pred -> (our transaction version in its table, table version); (None, -1) when
        the table does not exist yet."""
        out: Txns = {}
        for pred in self.preds:
            uri = self.uri(pred)
            if delta_io.exists(uri):
                self._check_shape(pred, uri)
                txn = delta_io.transaction_version(uri, app_id(self.spec, self.index, pred))
                out[pred] = (txn, delta_io.table_version(uri))
            else:
                out[pred] = (None, -1)
        return out

    def _check_shape(self, pred: str, uri: str) -> None:
        """DL313 unless the table's columns are the program's (names and types, in order):
        a program whose derived relation changed shape (a declaration, a rule's head
        variables naming an undeclared one) must not write into the old table."""
        def columns(schema: pa.Schema) -> list[str]:  # string, large_string, string_view
            return [f"{f.name} {'string' if 'string' in str(f.type) else f.type}"
                    for f in schema]

        have = columns(delta_io.arrow_schema_of(uri))
        want = columns(arrow_schema(self.spec.program.schemas[pred]))
        if have != want:
            raise DataError(
                f"the table of '{pred}' has columns ({', '.join(have)}); the program defines "
                f"({', '.join(want)}): declare '{pred}' with "
                "the table's columns, or remove the table (the next run derives it again); "
                "nothing was written",
                uri,
                TABLE_SHAPE,
            )

    def arrow_changes(self, deltas: Mapping[str, Delta]) -> dict[str, tuple[pa.Table, pa.Table]]:
        """Engine deltas ({row: ±1} per predicate) as the tables' (inserted, deleted) rows,
        all converted before anything is committed. Raises ``DataError`` naming the
        predicate, its rules and the row when a derived integer does not fit the table's
        64-bit column (the engine computes with unbounded integers)."""
        out = {}
        for pred in self.preds:
            schema = self.spec.program.schemas[pred]
            delta = deltas.get(pred, {})
            try:
                out[pred] = (
                    rows_to_arrow(schema, [r for r, w in delta.items() if w > 0]),
                    rows_to_arrow(schema, [r for r, w in delta.items() if w < 0]),
                )
            except (OverflowError, pa.ArrowException):
                raise self._unstorable(pred, delta) from None
        return out

    def _unstorable(self, pred: str, delta: Delta) -> DataError:
        schema = self.spec.program.schemas[pred]
        rules = [r for r in self.spec.program.program.rules if r.head.pred == pred]
        where = ", ".join(str(r.loc) for r in rules if r.loc is not None) or "-"
        for row in delta:
            for col, value in zip(schema.columns, row, strict=True):
                if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
                    return DataError(
                        f"'{pred}' derived a row whose column '{col.name}' holds {value}, "
                        f"outside the 64-bit integers its table stores (rules at {where}); "
                        "nothing was committed",
                        self.uri(pred),
                        VALUE_OUT_OF_RANGE,
                    )
        return DataError(
            f"'{pred}' derived rows its table cannot store (rules at {where}); nothing was "
            "committed",
            self.uri(pred),
            VALUE_OUT_OF_RANGE,
        )

    def _check_finite(self, pred: str, inserted: pa.Table) -> None:
        """DL308 before anything is committed when a float column of ``inserted`` holds a
        value that is not finite (a Spark float sum beyond the float range: the language's
        floats are finite, ``deltalog.engine.semantics``)."""
        for name in inserted.column_names:
            col = inserted.column(name)
            if not pa.types.is_floating(col.type):
                continue
            bad = pc.invert(pc.is_finite(col))
            if pc.any(bad).as_py():
                row = inserted.filter(bad).slice(0, 1).to_pylist()[0]
                raise DataError(
                    f"'{pred}' derived a row whose column '{name}' is not a finite float "
                    f"({row}); nothing was committed",
                    self.uri(pred),
                    VALUE_OUT_OF_RANGE,
                )

    def write(
        self,
        changes: TableChanges,
        seq: int,
        inputs: Mapping[str, int],
        edbs: Mapping[str, int],
        txns: Mapping[str, tuple[int | None, int]],
        *,
        stamp_new: bool = False,
        skip: frozenset[str] = frozenset(),
        mode: str | None = None,
        whole: Mapping[str, pa.Table] | None = None,
    ) -> Written:
        """Commit each predicate's change with transaction version ``seq``: one commit per
        table, none for an empty change except a first, stamped commit (``stamp_new``) to a
        table no deltalog run wrote yet; tables in ``skip`` are counted, not written.
        A table in ``whole`` (one that holds copies of a row: another writer's) is
        rewritten as that relation in one overwrite commit; its counts stay the change's.

        Raises ``DataError`` when the table already holds run ``seq`` (another run applied
        this change) or when a deleted row is not in the table (nothing committed)."""
        metadata = {
            PIPELINE: self.spec.name,
            STRATUM: str(self.index),
            INPUT_VERSIONS: versions_json(inputs),
            EDB_VERSIONS: versions_json(edbs),
            SEQ: str(seq),
            **({MODE: mode} if mode else {}),
        }
        after = dict(txns)
        counts: dict[str, tuple[int, int]] = {}
        commits = 0
        diverged = set()
        for pred in self.preds:
            self._check_finite(pred, changes[pred][0])
        for pred in self.preds:
            uri = self.ensure_table(pred)
            inserted, deleted = changes[pred]
            counts[pred] = (inserted.num_rows, deleted.num_rows)
            if pred in skip:
                continue
            txn = (app_id(self.spec, self.index, pred), seq)
            if whole and pred in whole:
                _, removed, version = delta_io.overwrite(uri, whole[pred], metadata, txn)
                copies = removed - whole[pred].num_rows + inserted.num_rows - deleted.num_rows
                self.notes.append(
                    f"{pred}: the table held {copies} extra copies of rows (another "
                    "writer's): rewritten whole as the relation, in one commit"
                )
            elif inserted.num_rows or deleted.num_rows:
                last = txns.get(pred, (None, -1))
                ins, dels, version = delta_io.commit_delta(
                    uri, inserted, deleted, metadata, txn,
                    at_version=last[1] if last[0] is not None else None,
                )
                if (ins, dels) != counts[pred]:
                    diverged.add(pred)
                    self.notes.append(
                        f"{pred}: the table took +{ins}/-{dels} rows of a +{counts[pred][0]}"
                        f"/-{counts[pred][1]} change (it was not in the state's image)"
                    )
                counts[pred] = (ins, dels)
            elif stamp_new and not deltalog_commits(uri):
                version = delta_io.stamp(uri, metadata, txn)
            else:
                continue
            after[pred] = (seq, version)
            commits += 1
            if commits == 1:
                fault("mid_commit", self.index)
        fault("after_commit", self.index)
        return Written(after, counts, commits, frozenset(diverged))

    def commit_of_run(self, pred: str, seq: int) -> dict[str, Any] | None:
        """The commit info of run ``seq`` in ``pred``'s table, when there is one."""
        return next((i for i in deltalog_commits(self.uri(pred)) if i.get(SEQ) == str(seq)), None)
