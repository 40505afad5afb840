"""A change that is a large share of a stratum's inputs reloads the stratum from the tables
(mode "full", said in the notes) instead of maintaining it row by row; a small change stays
incremental; both leave the tables equal to the naive evaluator and the next run
incremental again."""

import pytest

from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io, run
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_to_rows
from tests.dagster_project.tiny import EDGES_V1, NODES, START, edb_tables, make_pipeline


def _check(spec, root, edges, preds) -> None:
    expected = evaluate_naive(
        spec.program, {"edge": set(edges), "node": set(NODES), "start": set(START)}
    )
    for pred in preds:
        assert arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, pred))) == expected[pred]


@pytest.fixture
def small_thresholds(monkeypatch):
    monkeypatch.setattr(run, "RELOAD_MIN_ROWS", 3)
    monkeypatch.setattr(run, "RELOAD_SHARE", 0.5)


def test_large_change_reloads_small_change_maintains(tmp_path, small_thresholds):
    spec, root = make_pipeline(tmp_path)
    index = spec.stratum_of("path")
    StratumRun(root, spec, index).materialize()

    small = [*EDGES_V1, (4, 5)]  # 1 row of 5: maintained
    write_edb(root, spec, edb_tables(small))
    [result] = StratumRun(root, spec, index).materialize()
    assert result.mode == "incremental" and not result.notes
    _check(spec, root, small, ["path"])

    large = [*small, *((i, i + 1) for i in range(10, 20))]  # 10 rows on 6: reloaded
    write_edb(root, spec, edb_tables(large))
    [result] = StratumRun(root, spec, index).materialize()
    assert result.mode == "full"
    assert any("reloaded from the tables instead of maintained" in n for n in result.notes)
    assert result.inserted > 0 and result.deleted == 0
    _check(spec, root, large, ["path"])

    again = [*large, (20, 21)]  # and the run after continues incrementally
    write_edb(root, spec, edb_tables(again))
    [result] = StratumRun(root, spec, index).materialize()
    assert result.mode == "incremental"
    for i in range(len(spec.program.strata)):
        StratumRun(root, spec, i).materialize()
    _check(spec, root, again, spec.idb_tables)
