"""The engine state can live apart from the warehouse (``WarehouseResource.state_root``,
``$DELTALOG_STATE``): runs keep it there and nothing under the warehouse; when it is lost,
the next run loads the stratum from the tables and the tables stay right."""

import os
import shutil

import dagster as dg
import pytest

from deltalog.dagster_project.definitions import build_definitions
from deltalog.dagster_project.defs.resources import SparkResource, WarehouseResource
from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io
from deltalog.pipelines.state_store import STATE_DIR, warehouse_key
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_to_rows
from tests.dagster_project.tiny import EDGES_V1, NODES, START, edb_tables, make_pipeline

pytestmark = [pytest.mark.dagster]


def _modes(spec, result) -> dict[str, str]:
    return {
        e.materialization.asset_key.path[-1]: e.materialization.metadata["mode"].value
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key.path[-1] in spec.idb_tables
    }


def test_state_lives_under_its_own_root(tmp_path):
    spec, root = make_pipeline(tmp_path)
    state_root = tmp_path / "local-disk" / "state"
    warehouse = WarehouseResource(root=str(root), state_root=str(state_root))
    defs = build_definitions([spec], resources={"warehouse": warehouse, "spark": SparkResource()})
    job = defs.resolve_job_def(f"{spec.name}_update")

    first = job.execute_in_process()
    assert set(_modes(spec, first).values()) == {"full"}
    assert sorted(p.name for p in (state_root / warehouse_key(root) / spec.name).glob(
        "stratum-*/CURRENT"))
    assert not (root / STATE_DIR).exists()

    edges = [*EDGES_V1, (4, 5)]
    write_edb(root, spec, edb_tables(edges))
    assert set(_modes(spec, job.execute_in_process()).values()) == {"incremental"}

    shutil.rmtree(state_root)  # the local disk is lost
    edges = [e for e in edges if e != (1, 2)]
    write_edb(root, spec, edb_tables(edges))
    assert set(_modes(spec, job.execute_in_process()).values()) == {"rebuilt"}
    expected = evaluate_naive(
        spec.program, {"edge": set(edges), "node": set(NODES), "start": set(START)}
    )
    tables = {
        p: arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, p))) for p in spec.idb_tables
    }
    assert tables == expected


def test_state_root_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DELTALOG_STATE", str(tmp_path / "s"))
    assert WarehouseResource(root=str(tmp_path)).state_root == str(tmp_path / "s")
    monkeypatch.delenv("DELTALOG_STATE")
    assert WarehouseResource(root=str(tmp_path)).state_root is None
    assert isinstance(WarehouseResource(root=str(tmp_path)), dg.ConfigurableResource)


def test_two_warehouses_sharing_a_state_root_keep_their_own_states(tmp_path):
    """Two projects with a pipeline of one name and one $DELTALOG_STATE: each warehouse's
    states (and locks) stay apart, so each goes on incrementally."""
    from tests.dagster_project.tiny import run_all

    state_root = tmp_path / "shared-state"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a_spec, a_root = make_pipeline(tmp_path / "a")
    b_spec, b_root = make_pipeline(tmp_path / "b")
    assert a_spec.name == b_spec.name
    for spec, root in ((a_spec, a_root), (b_spec, b_root)):
        assert {r.mode for r in run_all(spec, root, state_root=state_root).values()} == {"full"}
    for spec, root, extra in ((a_spec, a_root, (4, 5)), (b_spec, b_root, (6, 7))):
        edges = [*EDGES_V1, extra]
        write_edb(root, spec, edb_tables(edges))
        results = run_all(spec, root, state_root=state_root)
        assert {r.mode for r in results.values()} == {"incremental"}, results
    assert warehouse_key(a_root) != warehouse_key(b_root)
    assert warehouse_key(a_root) == warehouse_key(os.path.relpath(a_root))
