"""Incremental maintenance of one stratum between Delta versions, exactly once, crash safe.

A run reads the version of every input table, the change since the versions its saved
engine consumed (change data feed), ``apply``s it, writes each IDB change as one MERGE commit
with the consumed versions in its metadata and the application transaction
``deltalog:<pipeline>:<stratum>:<pred>`` at version ``seq`` (the run number), then saves the
engine. The transaction versions in the IDB tables say how far a crashed run got: a table
one run ahead of the state is finished from the state (never applied twice); any other
disagreement is rebuilt from the tables and said so in the result's notes.
"""

import json
import os
import signal
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from engine.errors import FUNCTIONAL_CONFLICT, DataError
from engine.heads import Row
from engine.runtime import IncrementalEngine, diff
from engine.storage import Delta
from pipelines import delta_io, quality
from pipelines.materialize import (
    EDB_VERSIONS,
    INPUT_VERSIONS,
    SEQ,
    StratumResult,
    _deltalog_commits,
    _ensure_table,
    _require,
)
from pipelines.spec import PipelineSpec
from pipelines.state_store import (
    StratumState,
    drop_state,
    load_state,
    save_state,
    state_path,
    stratum_lock,
)
from pipelines.stratum_program import stratum_digest, stratum_program
from schemas.relation import arrow_to_rows, rows_to_arrow

# Fault injection for the crash tests: ``DELTALOG_FAULT=point`` or ``point@stratum`` makes
# the process SIGKILL itself at that point (of that stratum's run only).
FAULT_ENV = "DELTALOG_FAULT"
FAULT_POINTS = ("after_read", "mid_commit", "after_commit", "after_state")


# A change this large (at least RELOAD_MIN_ROWS input rows and more than RELOAD_SHARE of the
# inputs' rows) reloads the stratum from the tables, like a first load, instead of maintaining
# it: per changed row, maintenance costs far more than evaluation does, and the saved state
# would be rewritten whole anyway. The run says so in its notes and reports mode "full".
RELOAD_SHARE = 0.25
RELOAD_MIN_ROWS = 1000


def app_id(spec: PipelineSpec, stratum_index: int, pred: str) -> str:
    """The application transaction id of ``pred``'s table commits."""
    return f"deltalog:{spec.name}:{stratum_index}:{pred}"


class _Rebuild(Exception):
    """The state cannot be reconciled with the tables; the message says why."""


class _Maintenance:
    """One run of one stratum (under the stratum's lock)."""

    def __init__(self, root: str | Path, spec: PipelineSpec, index: int):
        self.root, self.spec, self.index = root, spec, index
        self.stratum = spec.program.strata[index]
        self.preds = self.stratum.preds
        self.digest = stratum_digest(spec.program, index)
        self.path = state_path(root, spec.name, index)
        self.notes: list[str] = []
        self.start = time.perf_counter()
        self.state_bytes = 0

    def fault(self, point: str) -> None:
        if os.environ.get(FAULT_ENV) in (point, f"{point}@{self.index}"):
            os.kill(os.getpid(), signal.SIGKILL)

    # -- inputs ------------------------------------------------------------------------
    def snapshot(self) -> tuple[dict[str, int], dict[str, int]]:
        """(input table -> current version, EDB closure -> current version). EDB versions
        are read first: upstream IDB tables are assumed up to date with them."""
        spec = self.spec
        edb_versions: dict[str, int] = {}
        for pred in sorted({e for p in self.preds for e in spec.edb_closure(p)}):
            uri = spec.table_uri(self.root, pred)
            _require(uri, pred, spec, "EDB")
            edb_versions[pred] = delta_io.table_version(uri)
        inputs: dict[str, int] = {}
        for pred in spec.upstream(self.stratum):
            if pred in edb_versions:
                inputs[pred] = edb_versions[pred]
                continue
            uri = spec.table_uri(self.root, pred)
            _require(uri, pred, spec, "IDB")
            inputs[pred] = delta_io.table_version(uri)
        return inputs, edb_versions

    def input_deltas(self, old: Mapping[str, int], new: Mapping[str, int]) -> dict[str, Delta]:
        out = {}
        for pred, version in new.items():
            if pred not in old:
                raise _Rebuild(f"input '{pred}' is not in the saved state")
            if version < old[pred]:
                raise _Rebuild(f"input '{pred}' went back from version {old[pred]} to {version}")
            if version != old[pred]:
                uri = self.spec.table_uri(self.root, pred)
                edb = pred in self.spec.edb_tables
                schema = self.spec.program.schemas[pred]
                if edb:
                    actual = delta_io.arrow_schema_of(uri, version)
                    quality.check_schema(
                        schema, pred, uri, version, actual, partial(delta_io.head, uri, version)
                    )
                names = [c.name for c in schema.columns]
                delta = delta_io.changes(uri, old[pred], version, names)
                if edb:
                    delta = quality.check_change(schema, pred, uri, version, delta)
                if delta:
                    out[pred] = delta
        return out

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
            uri = self.spec.table_uri(self.root, pred)
            schema = self.spec.program.schemas[pred]
            raise quality.functional_error(schema, pred, uri, inputs[pred], err) from None

    def read_input(self, pred: str, version: int) -> set[Row]:
        """All rows of an input table at ``version``; an EDB table is checked first."""
        uri = self.spec.table_uri(self.root, pred)
        table = delta_io.read_arrow(uri, version)
        if pred in self.spec.edb_tables:
            schema = self.spec.program.schemas[pred]
            quality.check_table(schema, pred, uri, version, table)
            table = table.select([c.name for c in schema.columns])
        return arrow_to_rows(table)

    # -- tables ------------------------------------------------------------------------
    def table_txns(self) -> dict[str, tuple[int | None, int]]:
        """pred -> (our transaction version in its table, table version); (None, -1) when
        the table does not exist yet."""
        out: dict[str, tuple[int | None, int]] = {}
        for pred in self.preds:
            uri = self.spec.table_uri(self.root, pred)
            if delta_io.exists(uri):
                txn = delta_io.transaction_version(uri, app_id(self.spec, self.index, pred))
                out[pred] = (txn, delta_io.table_version(uri))
            else:
                out[pred] = (None, -1)
        return out

    def write(
        self,
        out: Mapping[str, Delta],
        seq: int,
        inputs: Mapping[str, int],
        edbs: Mapping[str, int],
        txns: Mapping[str, tuple[int | None, int]],
        stamp_new: bool = False,
        skip: frozenset[str] = frozenset(),
    ) -> tuple[dict[str, tuple[int | None, int]], dict[str, tuple[int, int]]]:
        """Commit each predicate's change with transaction version ``seq`` (one commit per
        table; none for an empty change, except a first, stamped commit with ``stamp_new``).
        Returns the new (txn, table version) per predicate and the (inserted, deleted)."""
        metadata = {
            "deltalog.pipeline": self.spec.name,
            "deltalog.stratum": str(self.index),
            INPUT_VERSIONS: json_dumps(inputs),
            EDB_VERSIONS: json_dumps(edbs),
            SEQ: str(seq),
        }
        after = dict(txns)
        counts: dict[str, tuple[int, int]] = {}
        committed = 0
        for pred in self.preds:
            uri = _ensure_table(self.root, self.spec, pred)
            delta = out.get(pred, {})
            counts[pred] = (
                sum(1 for w in delta.values() if w > 0),
                sum(1 for w in delta.values() if w < 0),
            )
            if pred in skip:
                continue
            txn = (app_id(self.spec, self.index, pred), seq)
            if delta:
                schema = self.spec.program.schemas[pred]
                ins, dels, version = delta_io.commit_delta(
                    uri,
                    rows_to_arrow(schema, [r for r, w in delta.items() if w > 0]),
                    rows_to_arrow(schema, [r for r, w in delta.items() if w < 0]),
                    metadata,
                    txn,
                )
                if (ins, dels) != counts[pred]:
                    self.notes.append(
                        f"{pred}: the table took +{ins}/-{dels} rows of a +{counts[pred][0]}"
                        f"/-{counts[pred][1]} change (it was not in the state's image)"
                    )
                counts[pred] = (ins, dels)
            elif stamp_new and not _deltalog_commits(uri):
                version = delta_io.stamp(uri, metadata, txn)
            else:
                continue
            after[pred] = (seq, version)
            committed += 1
            if committed == 1:
                self.fault("mid_commit")
        self.fault("after_commit")
        return after, counts

    def save(
        self,
        engine: IncrementalEngine,
        seq: int,
        inputs: Mapping[str, int],
        edbs: Mapping[str, int],
        txns: Mapping[str, tuple[int | None, int]],
    ) -> StratumState:
        state = StratumState(
            digest=self.digest,
            seq=seq,
            input_versions=dict(inputs),
            edb_versions=dict(edbs),
            written={p: txns[p][0] for p in self.preds},
            table_versions={p: txns[p][1] for p in self.preds},
            engine=engine.dumps(),
        )
        self.state_bytes = save_state(self.path, state)
        self.fault("after_state")
        return state

    # -- the three paths ---------------------------------------------------------------
    def full_load(
        self, inputs: Mapping[str, int], edbs: Mapping[str, int], floor: int
    ) -> list[StratumResult]:
        """Load the engine from the input tables at ``inputs``; make each IDB table equal
        its result in one commit; save the state."""
        txns = self.table_txns()
        seq = max([floor, *(t or 0 for t, _ in txns.values())]) + 1
        rows = {pred: self.read_input(pred, v) for pred, v in inputs.items()}
        self.fault("after_read")
        engine = IncrementalEngine(stratum_program(self.spec.program, self.index), rows)
        stats = engine.last_stats.as_dict()
        out: dict[str, Delta] = {}
        for pred in self.preds:
            uri = self.spec.table_uri(self.root, pred)
            current: set[Row] = set()
            if delta_io.exists(uri):
                current = arrow_to_rows(delta_io.read_arrow(uri))
            out[pred] = diff(current, engine.relation(pred))
        txns, counts = self.write(out, seq, inputs, edbs, txns, stamp_new=True)
        self.save(engine, seq, inputs, edbs, txns)
        stats["idb_inserted"] = sum(i for i, _ in counts.values())
        stats["idb_erased"] = sum(d for _, d in counts.values())
        return self.results("full", seq, inputs, edbs, txns, counts, stats)

    def reconcile(self, state: StratumState) -> tuple[IncrementalEngine, StratumState]:
        """The engine of ``state``, with an interrupted run ``state.seq + 1`` finished when
        the tables show one; raises ``_Rebuild`` when the tables and the state disagree in
        any other way."""
        txns = self.table_txns()
        pending = []
        for pred in self.preds:
            txn, version = txns[pred]
            expected = (state.written.get(pred), state.table_versions.get(pred, -1))
            if (txn, version) == expected:
                continue
            if txn == state.seq + 1:
                pending.append(pred)
                continue
            raise _Rebuild(
                f"table '{pred}' is at version {version} with run {txn}, the saved state "
                f"(run {state.seq}) expects version {expected[1]} with run {expected[0]}"
            )
        engine = IncrementalEngine.loads(state.engine)
        if not pending:
            return engine, state
        seq = state.seq + 1
        commits = {}
        for pred in pending:
            uri = self.spec.table_uri(self.root, pred)
            info = next((i for i in _deltalog_commits(uri) if i.get(SEQ) == str(seq)), None)
            if info is None or int(info["version"]) != txns[pred][1]:
                raise _Rebuild(f"table '{pred}' has run {seq} but not as its newest commit")
            commits[pred] = info
        recorded = {(c[INPUT_VERSIONS], c[EDB_VERSIONS]) for c in commits.values()}
        if len(recorded) != 1:
            raise _Rebuild(f"the commits of run {seq} disagree on their input versions")
        [(inputs_json, edbs_json)] = recorded
        inputs = {k: int(v) for k, v in json_loads(inputs_json).items()}
        edbs = {k: int(v) for k, v in json_loads(edbs_json).items()}
        out = engine.apply(self.input_deltas(state.input_versions, inputs))
        for pred in pending:
            version = txns[pred][1]
            uri = self.spec.table_uri(self.root, pred)
            table_change = delta_io.changes(uri, version - 1, version)
            if table_change != out.get(pred, {}):
                raise _Rebuild(f"the commit of run {seq} to '{pred}' is not the change replayed")
        txns, _ = self.write(out, seq, inputs, edbs, txns, skip=frozenset(pending))
        self.notes.append(
            f"finished interrupted run {seq} (committed to {', '.join(pending)} at input "
            f"versions {json_dumps(inputs)}) from the saved state"
        )
        return engine, self.save(engine, seq, inputs, edbs, txns)

    def step(
        self,
        engine: IncrementalEngine,
        state: StratumState,
        inputs: Mapping[str, int],
        edbs: Mapping[str, int],
    ) -> list[StratumResult]:
        """Maintain from the state's input versions to ``inputs``: one run, ``seq + 1``."""
        txns = {p: (state.written.get(p), state.table_versions.get(p, -1)) for p in self.preds}
        if dict(inputs) == state.input_versions:
            counts = dict.fromkeys(self.preds, (0, 0))
            return self.results("unchanged", state.seq, inputs, edbs, txns, counts, {})
        deltas = self.input_deltas(state.input_versions, inputs)
        self.check_functional(engine, deltas, inputs)
        changed = sum(len(d) for d in deltas.values())
        size = sum(engine.size(p) for p in inputs)
        if changed >= RELOAD_MIN_ROWS and changed > RELOAD_SHARE * size:
            self.notes.append(
                f"the change ({changed} rows) is {changed / max(size, 1):.0%} of the inputs "
                f"({size} rows): the stratum was reloaded from the tables instead of maintained"
            )
            return self.full_load(inputs, edbs, state.seq)
        self.fault("after_read")
        out = engine.apply(deltas) if deltas else {}
        stats = engine.last_stats.as_dict() if deltas else {"edb_changes": 0}
        seq = state.seq + 1
        txns, counts = self.write(out, seq, inputs, edbs, txns)
        self.save(engine, seq, inputs, edbs, txns)
        return self.results("incremental", seq, inputs, edbs, txns, counts, stats)

    def results(
        self,
        mode: str,
        seq: int,
        inputs: Mapping[str, int],
        edbs: Mapping[str, int],
        txns: Mapping[str, tuple[int | None, int]],
        counts: Mapping[str, tuple[int, int]],
        stats: Mapping[str, Any],
    ) -> list[StratumResult]:
        seconds = time.perf_counter() - self.start
        out = []
        for pred in self.preds:
            uri = self.spec.table_uri(self.root, pred)
            version = txns[pred][1] if txns[pred][1] >= 0 else delta_io.table_version(uri)
            ins, dels = counts[pred]
            out.append(
                StratumResult(
                    pred,
                    delta_io.row_count(uri, version),
                    ins,
                    dels,
                    dict(inputs),
                    dict(edbs),
                    version,
                    seconds,
                    mode=mode,
                    seq=seq,
                    stats={**stats, "state_bytes": self.state_bytes},
                    notes=tuple(self.notes),
                    state_bytes=self.state_bytes,
                )
            )
        return out

    def run(self, rebuild: bool) -> list[StratumResult]:
        inputs, edbs = self.snapshot()
        state = load_state(self.path)
        floor = state.seq if state is not None else 0
        if rebuild:
            if drop_state(self.path):
                self.notes.append("rebuild requested: saved state dropped")
            return self.full_load(inputs, edbs, floor)
        if state is None:
            if self.path.exists():
                self.notes.append("saved state unreadable: rebuilt from the tables")
            return self.full_load(inputs, edbs, floor)
        if state.digest != self.digest:
            self.notes.append("the stratum's rules changed since the state was saved: rebuilt")
            return self.full_load(inputs, edbs, floor)
        try:
            engine, state = self.reconcile(state)
            # A finished interrupted run may have moved the consumed versions.
            return self.step(engine, state, inputs, edbs)
        except _Rebuild as why:
            self.notes.append(f"state and tables disagree ({why}): rebuilt from the tables")
            return self.full_load(inputs, edbs, floor + 1)


def json_dumps(value: Mapping[str, int]) -> str:
    return json.dumps(dict(value), sort_keys=True)


def json_loads(text: str) -> dict[str, Any]:
    return dict(json.loads(text))


def maintain_stratum(
    root: str | Path,
    spec: PipelineSpec,
    stratum_index: int,
    *,
    rebuild: bool = False,
    lock_wait: float,
) -> list[StratumResult]:
    """One run of stratum ``stratum_index`` under its lock (see the module docstring)."""
    path = state_path(root, spec.name, stratum_index)
    with stratum_lock(path, lock_wait):
        return _Maintenance(root, spec, stratum_index).run(rebuild)

