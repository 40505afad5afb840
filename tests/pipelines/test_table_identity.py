"""The state stands for tables, not paths: an input removed and created again at the same
path (until it reaches the same or a higher version) and a state copied from another
warehouse are told by the Delta table ids, and the stratum is rebuilt, said in the notes,
with the tables equal to a recompute."""

import shutil

from deltalake import write_deltalake

from deltalog.pipelines import delta_io
from deltalog.pipelines.state_store import state_dir
from tests.dagster_project.tiny import (
    EDGES_V1,
    edge_table,
    make_pipeline,
    run_all,
    tables_right,
)


def test_a_recreated_input_is_told_apart(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    uri = spec.table_uri(root, "edge")
    old_version = delta_io.table_version(uri)
    shutil.rmtree(uri)
    edges = [(2, 7), (7, 2), (1, 3)]
    write_deltalake(uri, edge_table(edges[:1]), configuration=delta_io.CDF_CONFIG)
    for n in range(2, len(edges) + 1):  # climb back to (at least) the consumed version
        write_deltalake(uri, edge_table(edges[:n]), mode="overwrite")
    assert delta_io.table_version(uri) >= old_version
    result = run_all(spec, root)["path"]
    assert result.mode == "rebuilt"
    assert "input 'edge' is not the table" in result.rebuilt_because
    assert tables_right(spec, root, edges)
    assert run_all(spec, root)["path"].mode == "unchanged"


def test_a_state_from_another_warehouse_is_rebuilt(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    spec, root = make_pipeline(tmp_path / "a")
    run_all(spec, root)
    other_spec, other_root = make_pipeline(tmp_path / "b")
    edges = [*EDGES_V1, (6, 7)]
    write_deltalake(other_spec.table_uri(other_root, "edge"), edge_table(edges), mode="overwrite")
    run_all(other_spec, other_root)
    shutil.rmtree(state_dir(root, spec.name))
    shutil.copytree(state_dir(other_root, spec.name), state_dir(root, spec.name))
    results = run_all(spec, root)
    assert {r.mode for r in results.values()} == {"rebuilt"}
    assert all(r.rebuilt_because in r.notes for r in results.values())
    assert tables_right(spec, root, EDGES_V1)
