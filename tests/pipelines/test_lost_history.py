"""History lost under a stratum (the versions since the one it consumed vacuumed, their
change-data files removed) ends in a reload from the tables' current versions, said in the
run's notes, with the tables equal to a recompute; never a raw Delta or Arrow error."""

import shutil

import pytest
from deltalake import DeltaTable, write_deltalake

from engine.naive import evaluate_naive
from pipelines import delta_io
from pipelines.run import StratumRun
from pipelines.spec import PipelineSpec
from schemas.relation import arrow_to_rows
from tests.dagster_project.tiny import EDGES_V1, NODES, START, edge_table, make_pipeline


def _run_all(spec: PipelineSpec, root) -> dict:
    out = {}
    for i in range(len(spec.program.strata)):
        for result in StratumRun(root, spec, i).materialize():
            out[result.pred] = result
    return out


def _right(spec: PipelineSpec, root, edges) -> bool:
    expected = evaluate_naive(
        spec.program, {"edge": set(edges), "node": set(NODES), "start": set(START)}
    )
    tables = {
        p: arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, p))) for p in spec.idb_tables
    }
    return tables == expected


@pytest.mark.parametrize("drop_change_data", [False, True])
def test_vacuumed_history_reloads(tmp_path, drop_change_data):
    spec, root = make_pipeline(tmp_path)
    _run_all(spec, root)
    uri = spec.table_uri(root, "edge")
    v2 = [(1, 2), (2, 3), (3, 4)]
    v3 = [*v2, (4, 1), (6, 7)]
    write_deltalake(uri, edge_table(v2), mode="overwrite")
    write_deltalake(uri, edge_table(v3), mode="overwrite")
    DeltaTable(uri).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    if drop_change_data:
        shutil.rmtree(f"{uri}/_change_data", ignore_errors=True)
    with pytest.raises(delta_io.HistoryLost, match="cannot be read any more"):
        delta_io.changes(uri, 1, delta_io.table_version(uri))
    result = _run_all(spec, root)["path"]
    assert result.mode == "full"
    assert any("cannot be read any more" in n for n in result.notes), result.notes
    assert _right(spec, root, v3)
    assert not _right(spec, root, EDGES_V1)  # the tables did move
