"""An IDB change that only inserts is appended when the table is still at the version the
run's last commit left (O(change): a MERGE reads the whole target); with a commit of
someone else's in between, or with deletions, it is a MERGE. Either way the tables equal the
naive evaluator, downstream strata read the appended rows from the change feed, and the
commit carries the run's application transaction."""

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from deltalog.pipelines import delta_io
from deltalog.pipelines.commits import app_id
from deltalog.pipelines.warehouse import write_edb
from tests.dagster_project.tiny import EDGES_V1, edb_tables, make_pipeline, run_all, tables_right


def _last_operation(uri: str) -> str:
    return str(DeltaTable(uri).history(1)[0]["operation"])


def test_inserts_alone_are_appended_and_read_downstream(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    edges = [*EDGES_V1, (6, 7)]  # path gains (6, 7) and (5, 7), loses nothing
    write_edb(root, spec, edb_tables(edges))
    results = run_all(spec, root)
    path = spec.table_uri(root, "path")
    assert (results["path"].inserted, results["path"].deleted) == (2, 0)
    assert _last_operation(path) == "WRITE"
    index = spec.stratum_of("path")
    assert delta_io.transaction_version(path, app_id(spec, index, "path")) == 2
    # unreachable reads path's change (an append) from its change feed
    assert results["unreachable"].mode == "incremental"
    assert tables_right(spec, root, edges)


def test_a_table_past_the_callers_version_is_merged(tmp_path):
    """``commit_delta`` appends only when the table is at ``at_version``: past it (a commit
    the caller has not seen), the rows are merged, so a row already there is not added
    twice."""
    uri = str(tmp_path / "t")
    table = pa.table({"a": pa.array([1, 2], pa.int64())})
    write_deltalake(uri, table, configuration={"delta.enableChangeDataFeed": "true"})
    empty = table.slice(0, 0)
    one = pa.table({"a": pa.array([3], pa.int64())})
    _, _, version = delta_io.commit_delta(uri, one, empty, {}, ("app", 1), at_version=0)
    assert version == 1 and _last_operation(uri) == "WRITE"
    write_deltalake(uri, pa.table({"a": pa.array([4], pa.int64())}), mode="append")
    again = pa.table({"a": pa.array([4, 5], pa.int64())})  # 4 arrived meanwhile
    ins, _, _ = delta_io.commit_delta(uri, again, empty, {}, ("app", 2), at_version=1)
    assert ins == 1 and _last_operation(uri) == "MERGE"
    assert sorted(delta_io.read_arrow(uri).column("a").to_pylist()) == [1, 2, 3, 4, 5]
    assert delta_io.changes(uri, 1, 3) == {(4,): 1, (5,): 1}


def test_a_foreign_commit_in_between_rebuilds_and_stays_right(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    path = spec.table_uri(root, "path")
    write_deltalake(path, delta_io.read_arrow(path).slice(0, 1), mode="append")
    edges = [*EDGES_V1, (6, 7)]
    write_edb(root, spec, edb_tables(edges))
    assert run_all(spec, root)["path"].mode == "rebuilt"
    assert tables_right(spec, root, edges)


def test_deletions_are_merged(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    edges = [e for e in EDGES_V1 if e != (5, 6)]
    write_edb(root, spec, edb_tables(edges))
    results = run_all(spec, root)
    assert results["path"].deleted == 1
    assert _last_operation(spec.table_uri(root, "path")) == "MERGE"
    assert tables_right(spec, root, edges)


def test_copies_another_writer_appended_to_an_idb_table_are_removed_by_the_rebuild(tmp_path):
    """An IDB table is a set: copies of its rows that another writer appended make the
    next run rebuild the stratum, which rewrites the table as the relation in one commit
    (a MERGE keyed on every column deletes every copy or none); the notes say so, the
    strata reading the table follow, and every table holds each row once."""
    from tests.dagster_project.tiny import EDGES_V1 as edges

    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    path = spec.table_uri(root, "path")
    write_deltalake(path, delta_io.read_arrow(path).slice(0, 3), mode="append")
    changed = [*edges, (6, 7)]
    write_edb(root, spec, edb_tables(changed))
    results = run_all(spec, root)
    assert results["path"].mode == "rebuilt"
    assert any("3 extra copies" in n for n in results["path"].notes), results["path"].notes
    assert tables_right(spec, root, changed)
    for pred in spec.idb_tables:
        held = delta_io.read_arrow(spec.table_uri(root, pred))
        assert delta_io.extra_copies(held) == 0, pred
    assert {r.mode for r in run_all(spec, root).values()} == {"unchanged"}


CHILD = """
import resource, sys
from pathlib import Path
from deltalog.engine.errors import DeltalogError
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spec import load_pipeline
spec = load_pipeline(Path(sys.argv[1]))
resource.setrlimit(resource.RLIMIT_FSIZE, (2000, resource.RLIM_INFINITY))
try:
    StratumRun(Path(sys.argv[2]), spec, spec.stratum_of("path")).materialize()
except DeltalogError as err:
    print("CODE", err.code, err.where)
    print("MESSAGE", err.message)
"""


def test_storage_that_refuses_the_files_is_dl315_naming_the_table(tmp_path):
    """Files of at most 2,000 bytes (a full disk, as the OS tells it): the IDB commit
    fails with DL315 naming the table and the OS's reason (not DL307's "a deleted row
    absent?"), nothing committed; the next run, with room, is right."""
    import os
    import subprocess
    import sys

    spec, root = make_pipeline(tmp_path)
    chain = [(i, i + 1) for i in range(1, 60)]  # 1,770 paths: files past 2,000 bytes
    write_edb(root, spec, edb_tables(chain))
    repo = str(Path(__file__).resolve().parents[2])
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(spec.directory), str(root)], capture_output=True,
        text=True, env={**os.environ, "PYTHONPATH": repo}, timeout=300)
    out = child.stdout
    assert f"CODE DL315 {spec.table_uri(root, 'path')}" in out, (out, child.stderr[-2000:])
    assert "File too large" in out
    assert not delta_io.exists(spec.table_uri(root, "path")) or not delta_io.read_arrow(
        spec.table_uri(root, "path")).num_rows
    run_all(spec, root)
    assert tables_right(spec, root, chain)


def test_an_input_without_a_change_feed_is_said_in_the_notes(tmp_path):
    """A team's table without the change data feed is maintained from a comparison of two
    versions (O(table)): the run says so and names the table property to set."""
    from tests.dagster_project.tiny import edge_table

    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    uri = spec.table_uri(root, "edge")
    DeltaTable(uri).alter.set_table_properties({"delta.enableChangeDataFeed": "false"})
    write_deltalake(uri, edge_table([(6, 7)]), mode="append")
    results = run_all(spec, root)
    assert results["path"].mode == "incremental"
    notes = results["path"].notes
    assert any("input 'edge': no change data feed" in n and "enableChangeDataFeed" in n
               for n in notes), notes
    assert tables_right(spec, root, [*EDGES_V1, (6, 7)])
    assert not any("change data feed" in n for n in results["unreachable"].notes)
