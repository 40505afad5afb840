"""Incremental materialization of the tiny pipeline's strata: later runs maintain from the
saved state and equal the naive evaluator; a process killed at each step and run again
converges to the uninterrupted result with no change applied twice; two processes at once
commit each run once; the state and the tables never silently disagree."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deltalog.engine.errors import CONCURRENT
from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io
from deltalog.pipelines.commits import INPUT_VERSIONS, SEQ, app_id
from deltalog.pipelines.faults import FAULT_ENV, FAULT_POINTS
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spec import PipelineSpec, load_pipeline
from deltalog.pipelines.state_store import state_path, stratum_lock
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_to_rows, rows_to_arrow
from tests.dagster_project.tiny import EDGES_V1, NODES, START, edb_tables, make_pipeline

REPO = Path(__file__).resolve().parents[2]
EDGES_V2 = [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7)]
EDGES_V3 = [(2, 1), (3, 4), (4, 3), (7, 1), (1, 5)]


def _expected(spec: PipelineSpec, edges) -> dict[str, frozenset]:
    inputs = {"edge": set(edges), "node": set(NODES), "start": set(START)}
    return evaluate_naive(spec.program, inputs)


def _tables(spec: PipelineSpec, root) -> dict[str, set]:
    return {
        pred: arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, pred)))
        for pred in spec.idb_tables
    }


def _all(spec: PipelineSpec, root, **kw) -> dict[str, object]:
    """Materialize every stratum in order; pred -> its StratumResult."""
    out = {}
    for i in range(len(spec.program.strata)):
        for result in StratumRun(root, spec, i, **kw).materialize():
            out[result.pred] = result
    return out


def _seq_commits(spec: PipelineSpec, root) -> dict[str, list[str]]:
    """pred -> the run numbers of its table's commits, oldest first."""
    return {
        pred: [i[SEQ] for i in reversed(delta_io.history(spec.table_uri(root, pred))) if SEQ in i]
        for pred in spec.idb_tables
    }


SMALL_ENV = "DELTALOG_TEST_SMALL_SEGMENTS"
SMALL = {  # module -> name -> value: tiny pages and arrays, compaction at every change
    "deltalog.engine.segments": {"PAGE_ROWS": 2, "PAGED_MIN": 2, "COMPACT_SHARE": 0},
    "deltalog.engine.storage": {"PAGED_MIN": 2},
    "deltalog.engine.state_codec": {"ARRAY_MIN": 16},
    "deltalog.pipelines.state_store": {"ARRAY_SHARE": 0},
}

CHILD = """
import importlib, json, os, sys
for module, names in json.loads(os.environ.get("DELTALOG_TEST_SMALL_SEGMENTS", "{}")).items():
    for name, value in names.items():
        setattr(importlib.import_module(module), name, value)
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spec import load_pipeline
spec = load_pipeline(sys.argv[1])
modes = {}
for i in range(len(spec.program.strata)):
    for r in StratumRun(sys.argv[2], spec, i, lock_wait=float(sys.argv[3])).materialize():
        modes[r.pred] = [r.mode, r.seq, list(r.notes)]
print(json.dumps(modes))
"""


def _child(spec: PipelineSpec, root, fault: str | None = None, lock_wait: float = 60.0,
           small: bool = False):
    env = {k: v for k, v in os.environ.items() if k not in (FAULT_ENV, SMALL_ENV)}
    if fault:
        env[FAULT_ENV] = fault
    if small:
        env[SMALL_ENV] = json.dumps(SMALL)
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(spec.directory), str(root), str(lock_wait)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen) -> tuple[int, dict]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, (json.loads(out) if proc.returncode == 0 else {"stderr": err})


def test_oracle_runs_after_the_first_are_incremental(tmp_path):
    spec, root = make_pipeline(tmp_path)
    first = _all(spec, root)
    assert {r.mode for r in first.values()} == {"full"}
    assert _tables(spec, root) == _expected(spec, EDGES_V1)
    versions = {p: r.table_version for p, r in first.items()}

    same = _all(spec, root)
    assert {r.mode for r in same.values()} == {"unchanged"}
    assert {p: r.table_version for p, r in same.items()} == versions  # no commit at all

    for edges in (EDGES_V2, EDGES_V3, EDGES_V1):
        write_edb(root, spec, edb_tables(edges))
        before = _tables(spec, root)
        results = _all(spec, root)
        assert _tables(spec, root) == _expected(spec, edges)
        for pred, r in results.items():
            assert r.mode == "incremental", pred
            after = _tables(spec, root)[pred]
            assert (r.inserted, r.deleted) == (len(after - before[pred]), len(before[pred] - after))
        assert results["path"].stats["edb_changes"] > 0
        assert results["path"].stats["rows_gathered"] > 0  # the columnar DBSP kernel
    path_uri = spec.table_uri(root, "path")
    assert (
        delta_io.transaction_version(path_uri, app_id(spec, spec.stratum_of("path"), "path")) == 4
    )
    assert json.loads(delta_io.commit_metadata(path_uri)[INPUT_VERSIONS]) == {"edge": 4}


def test_a_new_process_continues_incrementally(tmp_path):
    spec, root = make_pipeline(tmp_path)
    _all(spec, root)
    write_edb(root, spec, edb_tables(EDGES_V2))
    code, modes = _finish(_child(spec, root))
    assert code == 0, modes
    assert {m[0] for m in modes.values()} == {"incremental"}
    assert _tables(spec, root) == _expected(spec, EDGES_V2)


@pytest.mark.parametrize("first_run", [True, False], ids=["full_load", "incremental"])
@pytest.mark.parametrize("fault", [*FAULT_POINTS, "mid_commit@even"])
def test_killed_run_converges_to_the_uninterrupted_result(tmp_path, fault, first_run):
    spec, root = make_pipeline(tmp_path)
    if "@" in fault:  # the stratum of two predicates (even, odd): killed between their commits
        point, pred = fault.split("@")
        fault = f"{point}@{spec.stratum_of(pred)}"
    edges = EDGES_V1
    if not first_run:
        _all(spec, root)
        write_edb(root, spec, edb_tables(EDGES_V2))
        edges = EDGES_V2
    code, _ = _finish(_child(spec, root, fault))
    assert code == -9  # SIGKILL: the process really died there
    results = _all(spec, root)
    assert _tables(spec, root) == _expected(spec, edges)
    for pred, seqs in _seq_commits(spec, root).items():
        assert len(seqs) == len(set(seqs)), (pred, seqs)  # no run committed twice
    if not first_run and fault.startswith(("after_commit", "mid_commit")):
        notes = [n for r in results.values() for n in r.notes]
        assert any("finished interrupted run" in n for n in notes), notes
        assert not any("rebuilt" in n for n in notes), notes
        # the result says the run it finished: its change, not "unchanged"
        before, after = _expected(spec, EDGES_V1), _expected(spec, EDGES_V2)
        for pred, r in results.items():
            assert r.mode == "incremental", (pred, r.mode)
            assert (r.inserted, r.deleted) == (len(after[pred] - before[pred]),
                                               len(before[pred] - after[pred])), pred
    # and it goes on incrementally from there
    write_edb(root, spec, edb_tables(EDGES_V3))
    again = _all(spec, root)
    assert {r.mode for r in again.values()} == {"incremental"}
    assert _tables(spec, root) == _expected(spec, EDGES_V3)


@pytest.mark.parametrize("fault", ["mid_compaction", "mid_state"])
def test_killed_in_the_middle_of_a_store_compaction_converges(tmp_path, monkeypatch, fault):
    """A state of sorted runs and arrays (made small), killed while a save writes them
    anew (compaction) or before its manifest: the old state stands, and the next run
    finishes or repeats the run from it."""
    for module, names in SMALL.items():
        for name, value in names.items():
            monkeypatch.setattr(importlib.import_module(module), name, value)
    spec, root = make_pipeline(tmp_path)
    _all(spec, root)
    write_edb(root, spec, edb_tables(EDGES_V2))
    code, _ = _finish(_child(spec, root, fault, small=True))
    assert code == -9  # SIGKILL: the process really died there
    _all(spec, root)
    assert _tables(spec, root) == _expected(spec, EDGES_V2)
    for pred, seqs in _seq_commits(spec, root).items():
        assert len(seqs) == len(set(seqs)), (pred, seqs)  # no run committed twice
    write_edb(root, spec, edb_tables(EDGES_V3))
    again = _all(spec, root)
    assert {r.mode for r in again.values()} == {"incremental"}
    assert _tables(spec, root) == _expected(spec, EDGES_V3)


def test_two_processes_at_once_commit_each_run_once(tmp_path):
    spec, root = make_pipeline(tmp_path)
    _all(spec, root)
    write_edb(root, spec, edb_tables(EDGES_V2))
    procs = [_child(spec, root), _child(spec, root)]
    finished = [_finish(p) for p in procs]
    assert [code for code, _ in finished] == [0, 0], finished
    assert _tables(spec, root) == _expected(spec, EDGES_V2)
    for pred, seqs in _seq_commits(spec, root).items():
        assert len(seqs) == len(set(seqs)), (pred, seqs)
    # per stratum, one process did the run and the other found nothing left to do
    for pred in spec.idb_tables:
        modes = sorted(modes[pred][0] for _, modes in finished)
        assert modes == ["incremental", "unchanged"], (pred, modes)


def test_a_held_lock_fails_with_a_clear_message(tmp_path):
    spec, root = make_pipeline(tmp_path)
    index = spec.stratum_of("path")
    with stratum_lock(state_path(root, spec.name, index), 0):
        code, out = _finish(_child(spec, root, lock_wait=0.2))
    assert code == 1
    assert (
        f"error {CONCURRENT}: another materialization of this stratum is running" in out["stderr"]
    )


def test_a_table_changed_behind_the_state_is_rebuilt_and_said_so(tmp_path):
    spec, root = make_pipeline(tmp_path)
    _all(spec, root)
    uri = spec.table_uri(root, "out_degree")
    tampered = (arrow_to_rows(delta_io.read_arrow(uri)) - {(1, 1)}) | {(9, 9)}
    delta_io.replace_contents(
        uri, rows_to_arrow(spec.program.schemas["out_degree"], tampered), {"by": "a test"}
    )
    write_edb(root, spec, edb_tables(EDGES_V2))
    results = _all(spec, root)
    assert _tables(spec, root) == _expected(spec, EDGES_V2)
    assert results["out_degree"].mode == "rebuilt"
    assert "state and tables disagree" in results["out_degree"].rebuilt_because
    assert results["path"].mode == "incremental"


def test_rebuild_drops_the_state_and_reloads(tmp_path):
    spec, root = make_pipeline(tmp_path)
    _all(spec, root)
    index = spec.stratum_of("path")
    version = delta_io.table_version(spec.table_uri(root, "path"))
    [result] = StratumRun(root, spec, index).rebuild()
    assert result.mode == "rebuilt" and "rebuild requested: saved state dropped" in result.notes
    assert result.rebuilt_because == "rebuild requested: saved state dropped"
    assert (result.inserted, result.deleted, result.table_version) == (0, 0, version)
    write_edb(root, spec, edb_tables(EDGES_V2))
    assert _all(spec, root)["path"].mode == "incremental"
    assert _tables(spec, root) == _expected(spec, EDGES_V2)


def test_a_changed_program_rebuilds(tmp_path):
    spec, root = make_pipeline(tmp_path)
    _all(spec, root)
    program = spec.directory / "program.dl"
    program.write_text(
        program.read_text().replace(
            "out_degree[x] = n <- agg<<n = count()>> edge(x, _).",
            "out_degree[x] = n <- agg<<n = count()>> edge(_, x).",
        ),
    )
    spec2 = load_pipeline(spec.directory)
    result = _all(spec2, root)["out_degree"]
    assert result.mode == "rebuilt" and "rules changed" in result.rebuilt_because
    expected = evaluate_naive(
        spec2.program, {"edge": set(EDGES_V1), "node": set(NODES), "start": set(START)}
    )
    assert _tables(spec2, root)["out_degree"] == expected["out_degree"]


def test_row_counts_come_from_the_run_not_the_tables(tmp_path, monkeypatch):
    """Results count each table's rows from the engine (or the Spark result), never by
    reading the table or its log; the counts equal the tables'."""
    spec, root = make_pipeline(tmp_path)
    _all(spec, root)
    write_edb(root, spec, edb_tables(EDGES_V2))

    def refuse(*_args, **_kwargs):
        raise AssertionError("a run counted a table's rows from Delta")

    monkeypatch.setattr(delta_io, "row_count", refuse)
    results = _all(spec, root)
    assert {r.mode for r in results.values()} == {"incremental"}
    monkeypatch.undo()
    for pred, result in results.items():
        assert result.rows == delta_io.row_count(spec.table_uri(root, pred)), pred


@pytest.mark.parametrize("narrow", ["int64", "float32"])
def test_an_input_column_rewritten_in_a_narrower_type_is_read_as_each_version_holds_it(
        tmp_path, narrow):
    """Another tool rewrites a float input as ints (or float32), which the input check
    accepts: the change feed would read the old rows in the new type (2.5 as 2, a row no
    version held, so nothing the engine holds is deleted); the run compares the two
    versions instead, each read in its own types, and the tables equal a recompute."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from deltalog.engine.evaluate import evaluate
    from tests.local import write_pipeline

    spec = write_pipeline(tmp_path, "n", ".decl m(k: int, v: float)\nvs(v) :- m(_, v).\n",
                          '[edb]\nm = "n/edb/m"\n\n[idb]\nvs = "n/idb/vs"\n')
    root = tmp_path / "warehouse"
    uri = spec.table_uri(root, "m")
    write_deltalake(uri, pa.table({"k": [1, 2], "v": [0.1, 2.5]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    StratumRun(root, spec, 0).materialize()
    write_deltalake(uri, pa.table({"k": pa.array([3]), "v": pa.array([7], getattr(pa, narrow)())}),
                    mode="overwrite", schema_mode="overwrite")
    StratumRun(root, spec, 0).materialize()
    got = arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, "vs")))
    want = evaluate(spec.program, {"m": arrow_to_rows(delta_io.read_arrow(uri))})["vs"]
    assert got == set(want) == {(7.0,)}


def test_an_input_table_outside_the_warehouse_is_read_where_it_is(tmp_path):
    """[edb] binds an input by absolute path (a team's lake beside the warehouse): runs read
    it there, and the outputs under the warehouse follow its changes incrementally."""
    from tests.dagster_project.tiny import BINDING, PROGRAM, run_all, tables_right
    from tests.local import write_pipeline

    lake = tmp_path / "lake" / "edge"
    spec = write_pipeline(tmp_path, "tiny", PROGRAM,
                          BINDING.replace('"tiny/edb/edge"', f'"{lake}"'))
    root = tmp_path / "warehouse"
    write_edb(root, spec, edb_tables(EDGES_V1))
    assert delta_io.table_version(str(lake)) == 1
    assert not (root / "tiny" / "edb" / "edge").exists()
    assert {r.mode for r in run_all(spec, root).values()} == {"full"}
    assert tables_right(spec, root, EDGES_V1)
    edges = [*EDGES_V1[1:], (9, 1)]
    write_edb(root, spec, edb_tables(edges))
    assert run_all(spec, root)["path"].mode == "incremental"
    assert tables_right(spec, root, edges)
