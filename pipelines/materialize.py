"""Materialize one stratum of a pipeline into its IDB Delta tables, and check an IDB table
against a full recompute on Spark.

Plain functions (no Dagster), so the Dagster assets stay one call long and the same steps can
run from a script or a test. Each IDB commit records the input table versions it consumed;
the incremental machinery itself is in ``pipelines.maintain``.
"""

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from engine.errors import MISSING_INPUT, DataError
from engine.heads import Row
from pipelines import delta_io
from pipelines.spec import PipelineSpec
from pipelines.state_store import load_state, state_path
from schemas.relation import arrow_schema, arrow_to_rows, normalize

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Commit metadata keys written on every IDB commit.
INPUT_VERSIONS = "deltalog.input_versions"  # direct inputs (EDB and IDB tables) -> version
EDB_VERSIONS = "deltalog.edb_versions"  # every EDB table the relation depends on -> version
SEQ = "deltalog.seq"  # the stratum run (application transaction version) of the commit
SAMPLE_LIMIT = 20
LOCK_WAIT_SECONDS = 600.0


@dataclass(frozen=True)
class StratumResult:
    """What materializing one IDB predicate did. ``seconds`` is the wall time of the whole
    stratum (read, maintain, write, save the state), shared by the predicates it defines;
    so are ``mode``, ``seq``, ``stats`` (the engine's counters) and ``notes``."""

    pred: str
    rows: int
    inserted: int
    deleted: int
    input_versions: dict[str, int]
    edb_versions: dict[str, int]
    table_version: int
    seconds: float
    mode: str = "full"  # "full" (loaded from the tables), "incremental", "unchanged"
    seq: int = 0
    stats: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    state_bytes: int = 0


@dataclass(frozen=True)
class CheckOutcome:
    """An IDB table compared with a full recompute; the row lists hold up to
    ``SAMPLE_LIMIT`` rows each, the counts are exact."""

    passed: bool
    engine_rows: int
    spark_rows: int
    missing_in_engine: list[Row]
    extra_in_engine: list[Row]
    n_missing: int = 0
    n_extra: int = 0
    edb_versions: dict[str, int] = field(default_factory=dict)
    table_version: int = -1


def _ensure_table(root: str | Path, spec: PipelineSpec, pred: str) -> str:
    uri = spec.table_uri(root, pred)
    if not delta_io.exists(uri):
        Path(uri).mkdir(parents=True, exist_ok=True)
        delta_io.create_table(uri, arrow_schema(spec.program.schemas[pred]))
    return uri


def _require(uri: str, pred: str, spec: PipelineSpec, what: str) -> None:
    if not delta_io.exists(uri):
        raise DataError(
            f"{what} table of '{pred}' does not exist at {uri}: "
            + ("build the warehouse first" if what == "EDB" else f"materialize '{pred}' first"),
            spec.name,
            MISSING_INPUT,
        )


def _edb_versions_of(uri: str, version: int) -> dict[str, int]:
    """EDB versions recorded by the newest deltalog commit of an IDB table up to ``version``."""
    for info in _deltalog_commits(uri):
        if int(info["version"]) <= version:
            return {k: int(v) for k, v in json.loads(info[EDB_VERSIONS]).items()}
    return {}


def _deltalog_commits(uri: str) -> list[dict[str, Any]]:
    return [info for info in delta_io.history(uri) if EDB_VERSIONS in info]


def materialize_stratum(
    root: str | Path,
    spec: PipelineSpec,
    stratum_index: int,
    *,
    rebuild: bool = False,
    lock_wait: float = LOCK_WAIT_SECONDS,
) -> list[StratumResult]:
    """Bring the IDB tables of stratum ``stratum_index`` up to date with its input tables:
    incrementally from the saved engine state when there is one (see ``pipelines.maintain``),
    else (or with ``rebuild``) by a full load from the tables.

    Raises ``DataError`` DL304 when an input table is missing, DL305 when another
    materialization of the stratum holds its lock for more than ``lock_wait`` seconds,
    DL3xx on bad data.
    """
    from pipelines.maintain import maintain_stratum

    return maintain_stratum(root, spec, stratum_index, rebuild=rebuild, lock_wait=lock_wait)


def rebuild_stratum(
    root: str | Path,
    spec: PipelineSpec,
    stratum_index: int,
    lock_wait: float = LOCK_WAIT_SECONDS,
    spark: "SparkSession | None" = None,
) -> list[StratumResult]:
    """Rebuild the IDB tables of stratum ``stratum_index`` from scratch (the backfill path).

    With ``spark``: under the stratum's lock, recompute the stratum on Spark from its input
    tables (EDB and upstream IDB tables) at their current versions, drop the saved engine
    state, and make each IDB table equal the Spark result in ONE commit per table, with the
    same commit metadata (input and EDB versions, seq) and application transaction
    (``deltalog:<pipeline>:<stratum>:<pred>`` at the next seq) as an incremental run. A
    table that already equals the result gets no commit (a rebuild of an unchanged
    warehouse commits nothing), except a first, stamped commit for a table that no deltalog
    run wrote yet. Results have mode ``"rebuild"``.

    The Python engine is not run: the next materialization finds no saved state, reloads the
    engine from the rebuilt tables (mode ``"full"``) and commits nothing when the engine
    agrees with Spark; should they disagree, that run's commit and notes show it. So a
    rebuild is independent of the engine state it replaces, and a rebuild killed at any
    point (state already dropped, some tables committed) converges on the next run, a
    rebuild or an incremental one.

    Without ``spark``: drop the state and reload it with the Python engine (its full load
    writes the tables' differences, mode ``"full"``).
    """
    if spark is None:
        return materialize_stratum(root, spec, stratum_index, rebuild=True, lock_wait=lock_wait)
    from pipelines.state_store import stratum_lock

    with stratum_lock(state_path(root, spec.name, stratum_index), lock_wait):
        return _spark_rebuild(spark, root, spec, stratum_index)


def _spark_rebuild(
    spark: "SparkSession", root: str | Path, spec: PipelineSpec, index: int
) -> list[StratumResult]:
    import time

    from pipelines.maintain import _Maintenance, app_id, json_dumps
    from pipelines.spark_backend import recompute
    from pipelines.state_store import drop_state

    run = _Maintenance(root, spec, index)
    inputs, edbs = run.snapshot()
    state = load_state(run.path)
    txns = run.table_txns()
    seq = max([state.seq if state is not None else 0, *(t or 0 for t, _ in txns.values())]) + 1
    started = time.perf_counter()
    frames = {
        pred: delta_io.spark_dataframe(spark, spec.table_uri(root, pred), version)
        for pred, version in inputs.items()
    }
    recomputed = recompute(spark, spec.program, frames, run.preds)
    expected = {}
    for pred in run.preds:
        schema = arrow_schema(spec.program.schemas[pred])
        arrow = normalize(recomputed[pred].toArrow())
        expected[pred] = arrow.rename_columns(schema.names).cast(schema)
    spark_seconds = time.perf_counter() - started
    run.fault("after_read")
    # Before any commit: a state that outlived a half-done rebuild would be reconciled
    # against tables it never produced.
    if drop_state(run.path):
        run.notes.append("rebuild on Spark: saved state dropped (the next run reloads it)")
    metadata = {
        "deltalog.pipeline": spec.name,
        "deltalog.stratum": str(index),
        INPUT_VERSIONS: json_dumps(inputs),
        EDB_VERSIONS: json_dumps(edbs),
        SEQ: str(seq),
        "deltalog.mode": "rebuild",
    }
    counts: dict[str, tuple[int, int]] = {}
    committed = 0
    for pred in run.preds:
        uri = _ensure_table(root, spec, pred)
        missing, extra = _compare(expected[pred], delta_io.read_arrow(uri))
        counts[pred] = (missing.num_rows, extra.num_rows)
        txn = (app_id(spec, index, pred), seq)
        if missing.num_rows or extra.num_rows:
            ins, dels, version = delta_io.commit_delta(uri, missing, extra, metadata, txn)
            counts[pred] = (ins, dels)
        elif not _deltalog_commits(uri):
            version = delta_io.stamp(uri, metadata, txn)
        else:
            continue
        txns[pred] = (seq, version)
        committed += 1
        if committed == 1:
            run.fault("mid_commit")
    run.fault("after_commit")
    stats = {
        "spark_seconds": round(spark_seconds, 3),
        "idb_inserted": sum(i for i, _ in counts.values()),
        "idb_erased": sum(d for _, d in counts.values()),
    }
    # The run number of the tables' newest deltalog commits (this rebuild's when it wrote).
    return run.results("rebuild", seq if committed else seq - 1, inputs, edbs, txns, counts, stats)


def _edb_frames(
    spark: "SparkSession", root: str | Path, spec: PipelineSpec, versions: Mapping[str, int]
) -> dict[str, "DataFrame"]:
    """The EDB tables at ``versions`` as DataFrames (tables not listed are left out: the
    backend treats them as empty, and the relations under check do not read them)."""
    return {
        pred: delta_io.spark_dataframe(spark, spec.table_uri(root, pred), version)
        for pred, version in versions.items()
    }


def _recorded_edb_versions(
    root: str | Path, spec: PipelineSpec, pred: str
) -> tuple[int, dict[str, int]]:
    """(table version, EDB versions the table stands for): those the stratum's last
    completed run consumed, from its saved state, when the table is still at the version
    that run left (a run with no change to write commits nothing, yet the table claims to
    be up to date with the newer EDB versions: a stale table must fail the check); else
    those its newest deltalog commit recorded. EDB tables that neither recorded (a table
    written by hand) default to their current version."""
    uri = spec.table_uri(root, pred)
    _require(uri, pred, spec, "IDB")
    version = delta_io.table_version(uri)
    state = load_state(state_path(root, spec.name, spec.stratum_of(pred)))
    if state is not None and state.table_versions.get(pred) == version:
        recorded = dict(state.edb_versions)
    else:
        recorded = _edb_versions_of(uri, version)
    versions = {}
    for edb in spec.edb_closure(pred):
        if edb in recorded:
            versions[edb] = recorded[edb]
        else:
            versions[edb] = delta_io.table_version(spec.table_uri(root, edb))
    return version, versions


def _compare(expected: pa.Table, actual: pa.Table) -> tuple[pa.Table, pa.Table]:
    names = actual.column_names
    missing = expected.join(actual, keys=names, join_type="left anti").select(names)
    extra = actual.join(expected, keys=names, join_type="left anti").select(names)
    return missing, extra


def _sample(table: pa.Table) -> list[Row]:
    return sorted(arrow_to_rows(table))[:SAMPLE_LIMIT]


def _recompute(
    spark: "SparkSession",
    root: str | Path,
    spec: PipelineSpec,
    versions: Mapping[str, int],
    wanted: Iterable[str],
) -> dict[str, "DataFrame"]:
    """Spark recompute of ``wanted`` from the EDB tables at ``versions`` only (no IDB table
    is read: the recompute must not trust what it checks)."""
    from pipelines.spark_backend import recompute

    return recompute(spark, spec.program, _edb_frames(spark, root, spec, versions), wanted)


def spark_recompute_checks(
    spark: "SparkSession", root: str | Path, spec: PipelineSpec, preds: Iterable[str]
) -> dict[str, CheckOutcome]:
    """``spark_recompute_check`` for several predicates, sharing one Spark recompute among
    those whose tables were produced from the same EDB versions (e.g. one stratum)."""
    groups: dict[str, list[tuple[str, int]]] = {}
    snapshots: dict[str, dict[str, int]] = {}
    for pred in preds:
        version, edb_versions = _recorded_edb_versions(root, spec, pred)
        key = json.dumps(edb_versions, sort_keys=True)
        groups.setdefault(key, []).append((pred, version))
        snapshots[key] = edb_versions
    out: dict[str, CheckOutcome] = {}
    for key, members in groups.items():
        edb_versions = snapshots[key]
        recomputed = _recompute(spark, root, spec, edb_versions, [p for p, _ in members])
        for pred, version in members:
            schema = arrow_schema(spec.program.schemas[pred])
            arrow = normalize(recomputed[pred].toArrow())
            expected = arrow.rename_columns(schema.names).cast(schema)
            actual = delta_io.read_arrow(spec.table_uri(root, pred), version)
            missing, extra = _compare(expected, actual)
            out[pred] = CheckOutcome(
                passed=missing.num_rows == 0 and extra.num_rows == 0,
                engine_rows=actual.num_rows,
                spark_rows=expected.num_rows,
                missing_in_engine=_sample(missing),
                extra_in_engine=_sample(extra),
                n_missing=missing.num_rows,
                n_extra=extra.num_rows,
                edb_versions=dict(edb_versions),
                table_version=version,
            )
    return out


def spark_recompute_check(
    spark: "SparkSession", root: str | Path, spec: PipelineSpec, pred: str
) -> CheckOutcome:
    """Compare the IDB table of ``pred`` with a full recompute on Spark from the EDB versions
    that its newest materialization consumed (recorded in the commit metadata)."""
    return spark_recompute_checks(spark, root, spec, [pred])[pred]
