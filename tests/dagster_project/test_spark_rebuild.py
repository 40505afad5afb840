"""Rebuilding strata on Spark (``StratumRun(...).rebuild(spark=...)``, the ``deltalog/rebuild``
run tag with value ``spark``): the IDB tables equal the Spark recompute after one commit
each, with the incremental runs' commit metadata and application transaction; a rebuild of
an unchanged warehouse commits nothing; the incremental runs that follow reload the engine
(committing nothing) and then maintain; a rebuild killed between its commits converges."""

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from deltalog.dagster_project.definitions import build_definitions
from deltalog.dagster_project.defs.idb import REBUILD_ON_SPARK, REBUILD_TAG
from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io
from deltalog.pipelines.commits import EDB_VERSIONS, INPUT_VERSIONS, SEQ, app_id
from deltalog.pipelines.faults import FAULT_ENV
from deltalog.pipelines.recompute import spark_recompute_checks
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spec import PipelineSpec
from deltalog.pipelines.state_store import load_state, state_path
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_to_rows
from tests.dagster_project.tiny import EDGES_V1, NODES, START, edb_tables, make_pipeline

pytestmark = [pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
EDGES_V2 = [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7)]
EDGES_V3 = [(2, 1), (3, 4), (4, 3), (7, 1), (1, 5)]


def _expected(spec: PipelineSpec, edges) -> dict[str, frozenset]:
    return evaluate_naive(
        spec.program, {"edge": set(edges), "node": set(NODES), "start": set(START)}
    )


def _tables(spec: PipelineSpec, root) -> dict[str, set]:
    return {
        pred: arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, pred)))
        for pred in spec.idb_tables
    }


def _versions(spec: PipelineSpec, root) -> dict[str, int]:
    return {p: delta_io.table_version(spec.table_uri(root, p)) for p in spec.idb_tables}


def _each_stratum(spec: PipelineSpec, run) -> dict[str, object]:
    out = {}
    for i in range(len(spec.program.strata)):
        for result in run(i):
            out[result.pred] = result
    return out


def _materialize_all(spec: PipelineSpec, root) -> dict[str, object]:
    return _each_stratum(spec, lambda i: StratumRun(root, spec, i).materialize())


def _rebuild_all(spec: PipelineSpec, root, spark) -> dict[str, object]:
    return _each_stratum(spec, lambda i: StratumRun(root, spec, i).rebuild(spark=spark))


def _checks_pass(spark, spec: PipelineSpec, root) -> None:
    outcomes = spark_recompute_checks(spark, root, spec, spec.idb_tables)
    failed = {
        p: (o.missing_in_engine, o.extra_in_engine) for p, o in outcomes.items() if not o.passed
    }
    assert not failed


def test_rebuild_after_an_edb_change_then_incremental_runs(tmp_path, spark):
    spec, root = make_pipeline(tmp_path)
    _materialize_all(spec, root)
    write_edb(root, spec, edb_tables(EDGES_V2))
    before = _versions(spec, root)
    results = _rebuild_all(spec, root, spark)
    assert _tables(spec, root) == _expected(spec, EDGES_V2)
    _checks_pass(spark, spec, root)
    after = _versions(spec, root)
    for pred, result in results.items():
        uri = spec.table_uri(root, pred)
        index = spec.stratum_of(pred)
        assert result.mode == "rebuild"
        assert load_state(state_path(root, spec.name, index)) is None
        if (result.inserted, result.deleted) == (0, 0):
            assert after[pred] == before[pred], pred  # equal already: no commit
            continue
        assert after[pred] == before[pred] + 1, pred  # one commit
        info = delta_io.commit_metadata(uri)
        assert info[SEQ] == str(result.seq) and info["deltalog.mode"] == "rebuild"
        assert json.loads(info[INPUT_VERSIONS]) == result.input_versions
        assert json.loads(info[EDB_VERSIONS]) == result.edb_versions
        assert result.edb_versions["edge"] == 2
        assert delta_io.transaction_version(uri, app_id(spec, index, pred)) == result.seq
    assert results["path"].inserted + results["path"].deleted > 0

    # The next run reloads the engine from the rebuilt tables and commits nothing.
    reload = _materialize_all(spec, root)
    assert {r.mode for r in reload.values()} == {"full"}
    assert _versions(spec, root) == after
    # Then the runs are incremental again, and still equal the recompute.
    write_edb(root, spec, edb_tables(EDGES_V3))
    step = _materialize_all(spec, root)
    assert step["path"].mode == "incremental"
    assert step["path"].seq > reload["path"].seq > results["path"].seq  # no txn reused
    assert _tables(spec, root) == _expected(spec, EDGES_V3)  # (checks after a run: elsewhere)


def test_rebuild_of_an_unchanged_warehouse_commits_nothing(tmp_path, spark, monkeypatch):
    spec, root = make_pipeline(tmp_path)
    _materialize_all(spec, root)
    before = _versions(spec, root)

    def no_driver_read(*args, **kwargs):
        raise AssertionError("the rebuild read a table into the driver")

    # the executors read the inputs and the tables and compute the differences: no table
    # passes through the driver (here, no difference either)
    with monkeypatch.context() as m:
        m.setattr(delta_io, "read_arrow", no_driver_read)
        results = _rebuild_all(spec, root, spark)
    assert _versions(spec, root) == before
    assert all((r.inserted, r.deleted) == (0, 0) for r in results.values())
    assert all(any("state dropped" in n for n in r.notes) for r in results.values())
    assert _tables(spec, root) == _expected(spec, EDGES_V1)
    # A second rebuild (no state to drop) commits nothing either; a run afterwards neither.
    _rebuild_all(spec, root, spark)
    _materialize_all(spec, root)
    assert _versions(spec, root) == before


def test_first_rebuild_creates_and_stamps_the_tables(tmp_path, spark):
    spec, root = make_pipeline(tmp_path)
    _rebuild_all(spec, root, spark)
    assert _tables(spec, root) == _expected(spec, EDGES_V1)
    for pred in spec.idb_tables:
        assert SEQ in delta_io.commit_metadata(spec.table_uri(root, pred)), pred
    _checks_pass(spark, spec, root)


CHILD = """
import sys
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spark.session import FAST_START_CONF, make_spark_session
from deltalog.pipelines.spec import load_pipeline
spec = load_pipeline(sys.argv[1])
spark = make_spark_session("rebuild-child", FAST_START_CONF)
for i in range(len(spec.program.strata)):
    StratumRun(sys.argv[2], spec, i).rebuild(spark=spark)
"""


@pytest.mark.parametrize("then", [pytest.param("rebuild", marks=pytest.mark.slow), "incremental"])
def test_a_killed_rebuild_converges(tmp_path, spark, then):
    """SIGKILL after the first table commit of the two-table stratum (even, odd): a rerun
    of the rebuild, or an ordinary incremental run, gives the uninterrupted result."""
    spec, root = make_pipeline(tmp_path)
    _materialize_all(spec, root)
    write_edb(root, spec, edb_tables(EDGES_V2))
    index = spec.stratum_of("even")
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env[FAULT_ENV] = f"mid_commit@{index}"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(spec.directory), str(root)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    tables = _tables(spec, root)
    assert tables != _expected(spec, EDGES_V2)  # half done
    if then == "rebuild":
        _rebuild_all(spec, root, spark)
    else:
        _materialize_all(spec, root)
    assert _tables(spec, root) == _expected(spec, EDGES_V2)
    write_edb(root, spec, edb_tables(EDGES_V3))
    _materialize_all(spec, root)
    assert _tables(spec, root) == _expected(spec, EDGES_V3)


@pytest.mark.dagster
def test_rebuild_tag_recomputes_on_spark(tmp_path, spark):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    assets_only = dg.AssetSelection.all().without_checks()
    assert dg.materialize(defs.assets, resources=defs.resources, selection=assets_only).success
    write_edb(root, spec, edb_tables(EDGES_V2))
    rebuilt = dg.materialize(
        defs.assets,
        resources=defs.resources,
        selection=assets_only,
        tags={REBUILD_TAG: REBUILD_ON_SPARK},
    )
    assert rebuilt.success
    modes = {
        e.materialization.asset_key.path[-1]: e.materialization.metadata["mode"].value
        for e in rebuilt.get_asset_materialization_events()
        if e.materialization.asset_key.path[-1] in spec.idb_tables
    }
    assert {modes[p] for p in spec.idb_tables} == {"rebuild"}
    assert _tables(spec, root) == _expected(spec, EDGES_V2)


@pytest.mark.slow
def test_rebuild_removes_copies_another_writer_appended(tmp_path, spark):
    """A table holding copies of rows it keeps is rewritten whole by the rebuild (in one
    commit): every table holds each row once, and the checks pass."""
    from deltalake import write_deltalake

    spec, root = make_pipeline(tmp_path)
    _materialize_all(spec, root)
    path = spec.table_uri(root, "path")
    write_deltalake(path, delta_io.read_arrow(path).slice(0, 3), mode="append")
    before = delta_io.table_version(path)
    results = _rebuild_all(spec, root, spark)
    assert any("3 extra copies" in n for n in results["path"].notes), results["path"].notes
    assert delta_io.table_version(path) == before + 1
    assert _tables(spec, root) == _expected(spec, EDGES_V1)
    for pred in spec.idb_tables:
        assert delta_io.extra_copies(delta_io.read_arrow(spec.table_uri(root, pred))) == 0
    _checks_pass(spark, spec, root)
