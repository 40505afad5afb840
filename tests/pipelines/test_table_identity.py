"""The state stands for tables, not paths: an input removed and created again at the same
path (until it reaches the same or a higher version) and a state copied from another
warehouse are told by the Delta table ids, and the stratum is rebuilt, said in the notes,
with the tables equal to a recompute."""

import shutil

from deltalake import write_deltalake

from engine.naive import evaluate_naive
from pipelines import delta_io
from pipelines.run import StratumRun
from pipelines.spec import PipelineSpec
from pipelines.state_store import state_dir
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


def test_a_recreated_input_is_told_apart(tmp_path):
    spec, root = make_pipeline(tmp_path)
    _run_all(spec, root)
    uri = spec.table_uri(root, "edge")
    old_version = delta_io.table_version(uri)
    shutil.rmtree(uri)
    edges = [(2, 7), (7, 2), (1, 3)]
    write_deltalake(uri, edge_table(edges[:1]), configuration=delta_io.CDF_CONFIG)
    for n in range(2, len(edges) + 1):  # climb back to (at least) the consumed version
        write_deltalake(uri, edge_table(edges[:n]), mode="overwrite")
    assert delta_io.table_version(uri) >= old_version
    result = _run_all(spec, root)["path"]
    assert result.mode == "full"
    assert any("input 'edge' is not the table" in n for n in result.notes)
    assert _right(spec, root, edges)
    assert _run_all(spec, root)["path"].mode == "unchanged"


def test_a_state_from_another_warehouse_is_rebuilt(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    spec, root = make_pipeline(tmp_path / "a")
    _run_all(spec, root)
    other_spec, other_root = make_pipeline(tmp_path / "b")
    edges = [*EDGES_V1, (6, 7)]
    write_deltalake(other_spec.table_uri(other_root, "edge"), edge_table(edges), mode="overwrite")
    _run_all(other_spec, other_root)
    shutil.rmtree(state_dir(root, spec.name))
    shutil.copytree(state_dir(other_root, spec.name), state_dir(root, spec.name))
    results = _run_all(spec, root)
    assert {r.mode for r in results.values()} == {"full"}
    assert all(r.notes for r in results.values())
    assert _right(spec, root, EDGES_V1)
