"""History lost under a stratum (the versions since the one it consumed vacuumed, their
change-data files removed) ends in a reload from the tables' current versions, said in the
run's notes, with the tables equal to a recompute; never a raw Delta or Arrow error."""

import shutil

import pytest
from deltalake import DeltaTable, write_deltalake

from deltalog.pipelines import delta_io
from tests.dagster_project.tiny import (
    EDGES_V1,
    edge_table,
    make_pipeline,
    run_all,
    tables_right,
)


@pytest.mark.parametrize("drop_change_data", [False, True])
def test_vacuumed_history_reloads(tmp_path, drop_change_data):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
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
    result = run_all(spec, root)["path"]
    assert result.mode == "rebuilt"
    assert "cannot be read any more" in result.rebuilt_because, result.notes
    assert tables_right(spec, root, v3)
    assert not tables_right(spec, root, EDGES_V1)  # the tables did move
