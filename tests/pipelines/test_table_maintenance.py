"""Table maintenance compacts the tables and vacuums them without removing what a stratum or
a check still reads: after it, every run is incremental (not rebuilt) and equal to the naive
evaluator's result (the recompute oracle), also for a stratum that has not consumed its
inputs' last versions yet, and the EDB versions the recompute check reads stay readable.
The control (a plain vacuum with no retention) loses the history of the stratum behind, so
the test can fail. Real local Delta tables, no mocks."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake

from deltalog.engine.errors import DeltalogError
from deltalog.pipelines import delta_io
from deltalog.pipelines.faults import FAULT_ENV
from deltalog.pipelines.recompute import table_edb_versions
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.state_store import drop_state, load_state, state_path
from deltalog.pipelines.table_maintenance import maintain_tables, needed_versions
from deltalog.pipelines.warehouse import write_edb
from tests.dagster_project.tiny import (
    EDGES_V1,
    edb_tables,
    edge_table,
    make_pipeline,
    run_all,
    tables_right,
)


def _grow(spec, root, edges, n, skip=()):
    """``n`` changes to the edges, each followed by a run of every stratum but ``skip``."""
    for i in range(n):
        edges.append((10 + i, 11 + i))
        write_edb(root, spec, edb_tables(edges))
        for index in range(len(spec.program.strata)):
            if index not in skip:
                StratumRun(root, spec, index).materialize()


def _change(spec, root, old, edges, writer):
    """Change the edge table from ``old`` to ``edges``: a MERGE of the difference (its
    change feed is change-data files), or a plain writer (the feed is the data files it
    added and removed): an append when only rows are added, else an overwrite."""
    uri = spec.table_uri(root, "edge")
    if writer == "merge":
        write_edb(root, spec, edb_tables(edges))
    elif set(old) <= set(edges):
        write_deltalake(uri, edge_table([e for e in edges if e not in old]), mode="append")
    else:
        write_deltalake(uri, edge_table(edges), mode="overwrite")


def _notes(results) -> list:
    return [r.notes for r in results.values()]


def _incremental(results) -> bool:
    return all(r.mode in ("incremental", "unchanged") for r in results.values())


def test_compaction_and_the_runs_after_it(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    edges = list(EDGES_V1)
    _grow(spec, root, edges, 5)
    reports = {r.pred: r for r in maintain_tables(root, spec, min_retention_hours=0)}
    assert reports["edge"].files_after == 1 < reports["edge"].files_before
    assert reports["path"].files_after == 1 < reports["path"].files_before
    assert reports["path"].bytes_compacted > 0
    # what the states and checks read predates the compaction: nothing of it went
    assert all(r.retention_hours >= 1 for r in reports.values() if r.bytes_compacted)
    again = {r.pred: r for r in maintain_tables(root, spec, min_retention_hours=0)}
    # path's readers (a later stratum's feed, its own check) are at its current version now
    assert again["path"].needed_by == "current" and again["path"].retention_hours == 0
    assert again["path"].removed_files > 0 and again["path"].bytes_removed > 0
    edges.append((40, 1))
    write_edb(root, spec, edb_tables(edges))
    results = run_all(spec, root)
    assert {r.mode for r in results.values()} == {"incremental"}, _notes(results)
    assert tables_right(spec, root, edges)


@pytest.mark.parametrize("writer", ["merge", "plain"])
def test_change_compaction_change_run(tmp_path, writer):
    """The change feed read across a compaction (a commit with dataChange=false) is the
    change of the rows, not a re-insert of the compacted files."""
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    uri = spec.table_uri(root, "edge")
    start = delta_io.table_version(uri)
    first = [*EDGES_V1, (4, 5), (6, 7)]
    _change(spec, root, EDGES_V1, first, writer)
    maintain_tables(root, spec, min_retention_hours=0)
    edges = [e for e in first if e != (3, 1)] + [(7, 1)]
    _change(spec, root, first, edges, writer)
    maintain_tables(root, spec, min_retention_hours=0)
    end = delta_io.table_version(uri)
    ops = [i["operation"] for i in delta_io.history(uri) if start < int(i["version"]) <= end]
    assert "OPTIMIZE" in ops
    old, new = set(EDGES_V1), set(edges)
    expected = {**dict.fromkeys(new - old, 1), **dict.fromkeys(old - new, -1)}
    assert delta_io.changes(uri, start, end, ["src", "dst"]) == expected
    results = run_all(spec, root)
    assert {r.mode for r in results.values()} == {"incremental"}, _notes(results)
    assert tables_right(spec, root, edges)


@pytest.mark.parametrize("protected", [True, False])
def test_a_stratum_behind_keeps_its_history(tmp_path, protected):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    behind = spec.stratum_of("path")  # will not read the edge table's next versions
    uri = spec.table_uri(root, "edge")
    edges = list(EDGES_V1)
    for i in range(3):  # a writer that overwrites (its change feed is the files it removed)
        edges = [*edges[1:], (20 + i, 21 + i)]
        write_deltalake(uri, edge_table(edges), mode="overwrite")
        for index in range(len(spec.program.strata)):
            if index != behind:
                StratumRun(root, spec, index).materialize()
    consumed = load_state(state_path(root, spec.name, behind)).input_versions["edge"]
    assert needed_versions(root, spec)["edge"].version == consumed < DeltaTable(uri).version()
    if protected:
        maintain_tables(root, spec, min_retention_hours=0)
        maintain_tables(root, spec, min_retention_hours=0)
    else:  # the control: what a vacuum that ignores the strata does
        for pred in [*spec.edb_tables, *spec.idb_tables]:
            table = DeltaTable(spec.table_uri(root, pred))
            table.optimize.compact()
            table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    [result] = StratumRun(root, spec, behind).materialize()
    if protected:
        assert result.mode == "incremental", result.notes
    else:
        assert result.mode == "rebuilt" and "cannot be read" in result.rebuilt_because
    results = run_all(spec, root)  # every other stratum catches up, right either way
    assert tables_right(spec, root, edges)
    if protected:
        assert _incremental(results), _notes(results)


@pytest.mark.parametrize("protected", [True, False])
def test_a_restored_old_state_keeps_its_history(tmp_path, protected):
    """A stratum's state file copied before some runs and put back before maintenance (a
    stratum left at an old version: its runs failed, or it was not scheduled): the versions
    it consumed are kept, its next run is incremental; the control loses them."""
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    index = spec.stratum_of("even")
    path = state_path(root, spec.name, index)
    saved = tmp_path / "saved-state"
    shutil.copytree(path, saved)
    tables = {p: delta_io.table_version(spec.table_uri(root, p)) for p in ("even", "odd")}
    uri = spec.table_uri(root, "edge")
    edges = list(EDGES_V1)
    for i in range(3):  # edges no start reaches: even and odd do not change
        edges.append((20 + i, 21 + i))
        write_deltalake(uri, edge_table(edges[-1:]), mode="append")
        run_all(spec, root)
    assert tables == {p: delta_io.table_version(spec.table_uri(root, p)) for p in tables}
    shutil.rmtree(path)
    shutil.copytree(saved, path)
    consumed = load_state(path).input_versions["edge"]
    assert needed_versions(root, spec)["edge"].version == consumed < delta_io.table_version(uri)
    if protected:
        maintain_tables(root, spec, min_retention_hours=0)
        maintain_tables(root, spec, min_retention_hours=0)
    else:
        for pred in [*spec.edb_tables, *spec.idb_tables]:
            table = DeltaTable(spec.table_uri(root, pred))
            table.optimize.compact()
            table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    results = StratumRun(root, spec, index).materialize()
    if protected:
        assert {r.mode for r in results} == {"incremental"}, results[0].notes
    else:
        assert {r.mode for r in results} == {"rebuilt"}
        assert "cannot be read" in results[0].rebuilt_because
    results = run_all(spec, root)
    assert tables_right(spec, root, edges)
    if protected:
        assert _incremental(results), _notes(results)


@pytest.mark.parametrize("states", [True, False])
def test_the_versions_the_checks_read_stay(tmp_path, states):
    """The recompute check reads each EDB table at the version its IDB table's last run
    stands for (the saved state's, or with no state, as after a Spark rebuild, the one its
    newest commit recorded); maintenance keeps those versions' files. Once the strata have
    run past the compaction, the next maintenance removes the files compacted away."""
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    edges = list(EDGES_V1)
    _grow(spec, root, edges, 3)
    if not states:
        for index in range(len(spec.program.strata)):
            assert drop_state(state_path(root, spec.name, index))
        edges.append((30, 31))  # an EDB version no run consumed
        write_edb(root, spec, edb_tables(edges))
    read = {p: table_edb_versions(root, spec, p)[1] for p in spec.idb_tables}
    for _ in range(2):
        maintain_tables(root, spec, min_retention_hours=0)
    for pred, versions in read.items():
        assert table_edb_versions(root, spec, pred)[1] == versions
        for edb, version in versions.items():
            delta_io.read_arrow(spec.table_uri(root, edb), version)  # DL311 if its files went
    results = run_all(spec, root)
    assert tables_right(spec, root, edges)
    if not states:
        return
    assert _incremental(results), _notes(results)
    edge = {r.pred: r for r in maintain_tables(root, spec, min_retention_hours=0)}["edge"]
    assert edge.needed_by == "current" and edge.removed_files > 0


CHILD = """
import sys
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spec import load_pipeline
spec = load_pipeline(sys.argv[1])
StratumRun(sys.argv[2], spec, int(sys.argv[3])).materialize()
"""


def test_an_interrupted_run_is_left_to_finish(tmp_path):
    """A run killed after its commit, before saving its state: maintenance leaves that
    stratum's tables alone (the next run finishes the interrupted one from the state,
    which needs its commit to be the newest), not rebuilt."""
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    edges = [*EDGES_V1, (4, 5)]
    write_edb(root, spec, edb_tables(edges))
    index = spec.stratum_of("path")
    env = {**os.environ, FAULT_ENV: f"after_commit@{index}"}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(spec.directory), str(root), str(index)],
        cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, timeout=300,
    )
    assert child.returncode == -9, child.stderr  # killed there
    reports = {r.pred: r for r in maintain_tables(root, spec, min_retention_hours=0)}
    assert "did not finish" in reports["path"].skipped
    assert reports["path"].version_after == reports["path"].version_before
    assert not reports["edge"].skipped
    results = run_all(spec, root)
    assert any("finished interrupted run" in n for n in results["path"].notes)
    assert _incremental(results), _notes(results)
    assert tables_right(spec, root, edges)


def test_a_damaged_table_is_a_deltalog_error(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    edges = list(EDGES_V1)
    _grow(spec, root, edges, 2)
    uri = spec.table_uri(root, "path")
    for name in DeltaTable(uri).file_uris():
        os.remove(name)
    with pytest.raises(DeltalogError, match="table maintenance of 'path' stopped"):
        maintain_tables(root, spec, min_retention_hours=0)
    with pytest.raises(DeltalogError, match="min_retention_hours"):
        maintain_tables(root, spec, min_retention_hours=-1)
