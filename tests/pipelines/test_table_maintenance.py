"""Table maintenance compacts the tables and vacuums them without removing what a stratum
still reads: after it, every run is incremental (not rebuilt) and right, also for a stratum
that has not consumed its inputs' last versions yet; the control (a plain vacuum with no
retention) loses that stratum's history, so the test can fail."""

import pytest
from deltalake import DeltaTable, write_deltalake

from pipelines.run import StratumRun
from pipelines.table_maintenance import maintain_tables, needed_versions
from pipelines.warehouse import write_edb
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


def test_compaction_and_the_runs_after_it(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    edges = list(EDGES_V1)
    _grow(spec, root, edges, 5)
    reports = {r.pred: r for r in maintain_tables(root, spec, min_retention_hours=0)}
    assert reports["edge"].files_after == 1 < reports["edge"].files_before
    assert reports["path"].files_after == 1 < reports["path"].files_before
    again = {r.pred: r for r in maintain_tables(root, spec, min_retention_hours=0)}
    assert again["path"].removed_files > 0  # the files compacted away are vacuumed now
    edges.append((40, 1))
    write_edb(root, spec, edb_tables(edges))
    results = run_all(spec, root)
    assert {r.mode for r in results.values()} == {"incremental"}
    assert tables_right(spec, root, edges)


@pytest.mark.parametrize("protected", [True, False])
def test_a_stratum_behind_keeps_its_history(tmp_path, protected):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    behind = spec.stratum_of("path")  # has not read the edge table's last versions
    uri = spec.table_uri(root, "edge")
    edges = list(EDGES_V1)
    for i in range(3):  # a writer that overwrites (its change feed is the files it removed)
        edges = [*edges[1:], (20 + i, 21 + i)]
        write_deltalake(uri, edge_table(edges), mode="overwrite")
    assert needed_versions(root, spec)["edge"] < DeltaTable(uri).version()
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
        assert all(r.mode in ("incremental", "unchanged") for r in results.values())
