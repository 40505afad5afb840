"""Partitioned maintenance on Spark (local Spark, two worker threads, 8 partitions) against
the single-process engine and the naive evaluator: random programs (recursive and not)
after every change; a partition's task killed after it saved its state is retried by Spark
and nothing is applied twice; a driver killed between its tasks and its commits finishes
the run next time with the same change; partitions as a knob (1 is the single-process
engine, and a state saved with one number of partitions is reloaded under another)."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.errors import DeltalogError
from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io
from deltalog.pipelines.commits import SEQ
from deltalog.pipelines.faults import FAULT_ENV
from deltalog.pipelines.partitions import pack_row, part_path, unpack_row
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spec import PipelineSpec, load_pipeline
from deltalog.pipelines.state_store import load_state, state_path
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_to_rows, rows_to_arrow
from tests.dagster_project.tiny import NODES, START
from tests.engine.dbsp.recursive_programs import recursive_programs
from tests.engine.programs import EDB_ARITY, edb_data, programs
from tests.pipelines import test_bag_inputs as bag_ops

pytestmark = pytest.mark.spark

PARTS = 8
REPO = Path(__file__).resolve().parents[2]


def _pipeline(folder: Path, text: str) -> PipelineSpec:
    prog = load_program(text)
    folder.mkdir(parents=True)
    (folder / "program.dl").write_text(text, encoding="utf-8")
    edb = "\n".join(f'{p} = "t/edb/{p}"' for p in sorted(EDB_ARITY))
    idb = "\n".join(f'{p} = "t/idb/{p}"' for p in sorted(prog.idb))
    (folder / "pipeline.toml").write_text(f"[edb]\n{edb}\n[idb]\n{idb}\n", encoding="utf-8")
    return load_pipeline(folder)


def _write(root: Path, spec: PipelineSpec, data) -> None:
    write_edb(root, spec, {p: rows_to_arrow(spec.program.schemas[p], data[p])
                           for p in EDB_ARITY})


def _run_all(root: Path, spec: PipelineSpec, **kw) -> list:
    out = []
    for i in range(len(spec.program.strata)):
        if spec.program.strata[i].rules:
            out += StratumRun(root, spec, i, **kw).materialize()
    return out


def _tables(root: Path, spec: PipelineSpec, *preds: str) -> dict[str, set]:
    return {p: arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, p)))
            for p in preds or spec.idb_tables}


def _differential(spark, text: str, steps) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        spec = _pipeline(Path(tmp) / "t", text)
        single, split = Path(tmp) / "single", Path(tmp) / "split"
        for data in steps:
            for root in (single, split):
                _write(root, spec, data)
            _run_all(single, spec)
            try:
                results = _run_all(split, spec, spark=spark, partitions=PARTS)
            except DeltalogError as err:  # e.g. arithmetic overflow: the single run agrees
                pytest.fail(f"partitioned run failed where the single one did not: {err}")
            expected = evaluate_naive(spec.program, data)
            got, alone = _tables(split, spec), _tables(single, spec)
            for pred in spec.idb_tables:
                assert got[pred] == alone[pred] == set(expected[pred]), (text, pred)
            assert all(r.stats.get("partitioning") for r in results)


# The ``spark`` fixture hands every example the run's one session (it is function-scoped
# only to check the session is alive around each test). Each example is a few partitioned
# Spark runs (2-4 s); the single-process oracle suites run many more programs.
FAST = settings(max_examples=6, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


@FAST
@given(text=programs(), steps=st.lists(edb_data(), min_size=2, max_size=3))
def test_random_programs_partitioned_equal_single_process(spark, text, steps):
    _differential(spark, text, steps)


@FAST
@given(text=recursive_programs(), steps=st.lists(edb_data(), min_size=2, max_size=3))
def test_random_recursive_programs_partitioned_equal_single_process(spark, text, steps):
    _differential(spark, text, steps)


CLOSURE = """\
.decl e(a: int, b: int)
.decl f(a: int, b: int)
.decl u(a: int)
tc(x, y) :- e(x, y).
tc(x, z) :- tc(x, y), e(y, z).
deg[x] = n <- agg<<n = count()>> tc(x, _).
"""


def _graph(n: int, shift: int) -> dict[str, set]:
    return {"e": {(i, (i * 7 + shift) % n) for i in range(0, n, 2)}
            | {(i, i + 1) for i in range(0, n, 5)}, "f": set(), "u": set()}


def _seqs(root: Path, spec: PipelineSpec, pred: str) -> list[str]:
    return [c[SEQ] for c in reversed(delta_io.history(spec.table_uri(root, pred))) if SEQ in c]


def test_a_task_killed_after_saving_its_partition_is_retried_and_applies_nothing_twice(
    spark, tmp_path, monkeypatch
):
    spec = _pipeline(tmp_path / "t", CLOSURE)
    root = tmp_path / "w"
    _write(root, spec, _graph(40, 3))

    def no_driver_read(*args, **kwargs):
        raise AssertionError("the load read a table into the driver")

    with monkeypatch.context() as m:  # the executors read the inputs and compare the result
        m.setattr(delta_io, "read_arrow", no_driver_read)
        [tc] = StratumRun(root, spec, spec.stratum_of("tc"), spark=spark,
                          partitions=PARTS).materialize()
    assert tc.mode == "full" and tc.stats["partitioning"].startswith("partitioned by key")
    _write(root, spec, _graph(40, 5))
    monkeypatch.setenv(FAULT_ENV, "partition_after_save@3")
    [tc] = StratumRun(root, spec, spec.stratum_of("tc"), spark=spark,
                      partitions=PARTS).materialize()
    monkeypatch.delenv(FAULT_ENV)
    # the first attempt saved partition 3 at this run, then its process died; the retry
    # found the partition at this run and returned the change it saved
    assert tc.mode == "incremental" and tc.stats["partition_retries"] == 1
    assert tc.inserted and tc.deleted
    expected = evaluate_naive(spec.program, _graph(40, 5))
    assert _tables(root, spec, "tc")["tc"] == set(expected["tc"])
    assert _seqs(root, spec, "tc") == ["1", "2"]
    folder = state_path(root, spec.name, spec.stratum_of("tc")).with_name(
        f"stratum-{spec.stratum_of('tc')}.parts") / str(PARTS)
    assert {load_state(part_path(folder, k)).seq for k in range(PARTS)} == {2}
    # and the next change is maintained from the partitions as they are
    _write(root, spec, _graph(40, 6))
    _run_all(root, spec, spark=spark, partitions=PARTS)
    assert _tables(root, spec) == {p: set(r) for p, r in evaluate_naive(
        spec.program, _graph(40, 6)).items() if p in spec.idb_tables}


CHILD = """
import sys
from pathlib import Path
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spark.session import FAST_START_CONF, make_spark_session
from deltalog.pipelines.spec import load_pipeline
spec = load_pipeline(Path(sys.argv[1]))
spark = make_spark_session("child", FAST_START_CONF)
StratumRun(sys.argv[2], spec, int(sys.argv[3]), spark=spark, partitions=8).materialize()
"""


def test_a_driver_killed_between_its_commits_and_its_state_finishes_the_run_next_time(
    spark, tmp_path
):
    spec = _pipeline(tmp_path / "t", CLOSURE)
    root = tmp_path / "w"
    index = spec.stratum_of("tc")
    _write(root, spec, _graph(30, 3))
    StratumRun(root, spec, index, spark=spark, partitions=PARTS).materialize()
    _write(root, spec, _graph(30, 4))
    env = {**os.environ, FAULT_ENV: f"after_commit@{index}", "PYTHONPATH": str(REPO)}
    child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "t"), str(root),
                            str(index)], env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == -9, child.stderr[-3000:]
    state = load_state(state_path(root, spec.name, index))
    assert state is not None and state.extra["pending"][0] == 2  # the run it started
    # the inputs move on before the next run: it finishes run 2 first, then runs 3
    _write(root, spec, _graph(30, 5))
    [tc] = StratumRun(root, spec, index, spark=spark, partitions=PARTS).materialize()
    assert any("finished interrupted run 2" in n for n in tc.notes), tc.notes
    assert tc.seq == 3 and _seqs(root, spec, "tc") == ["1", "2", "3"]
    assert _tables(root, spec, "tc")["tc"] == set(evaluate_naive(spec.program, _graph(30, 5))["tc"])


def test_a_finished_interrupted_run_is_the_result_when_nothing_newer_came(spark, tmp_path,
                                                                         monkeypatch):
    """The driver fails after its commits, before its state (as a driver killed there):
    the next run, on the same input versions, finishes that run and reports its change,
    not 'unchanged'."""
    spec = _pipeline(tmp_path / "t", CLOSURE)
    root = tmp_path / "w"
    index = spec.stratum_of("tc")
    _write(root, spec, _graph(30, 3))
    StratumRun(root, spec, index, spark=spark, partitions=PARTS).materialize()
    before = _tables(root, spec, "tc")["tc"]
    _write(root, spec, _graph(30, 4))

    def dies(*args, **kwargs):
        raise RuntimeError("driver died")

    with monkeypatch.context() as patch:
        patch.setattr(StratumRun, "_save_driver", dies)
        with pytest.raises(RuntimeError):
            StratumRun(root, spec, index, spark=spark, partitions=PARTS).materialize()
    [tc] = StratumRun(root, spec, index, spark=spark, partitions=PARTS).materialize()
    after = set(evaluate_naive(spec.program, _graph(30, 4))["tc"])
    assert any("finished interrupted run 2" in n for n in tc.notes), tc.notes
    assert (tc.mode, tc.seq) == ("incremental", 2)
    assert (tc.inserted, tc.deleted) == (len(after - before), len(before - after)) != (0, 0)
    assert _tables(root, spec, "tc")["tc"] == after


def test_partitions_are_a_knob_one_is_the_single_process_engine(spark, tmp_path):
    spec = _pipeline(tmp_path / "t", CLOSURE)
    root = tmp_path / "w"
    index = spec.stratum_of("tc")
    _write(root, spec, _graph(30, 3))
    [one] = StratumRun(root, spec, index, partitions=1).materialize()
    assert "partitioning" not in one.stats and one.mode == "full"
    _write(root, spec, _graph(30, 4))
    [eight] = StratumRun(root, spec, index, spark=spark, partitions=PARTS).materialize()
    assert eight.mode == "rebuilt" and "1 partition(s)" in eight.rebuilt_because
    assert eight.inserted + eight.deleted > 0
    _write(root, spec, _graph(30, 5))
    [two] = StratumRun(root, spec, index, spark=spark, partitions=2).materialize()
    assert two.mode == "rebuilt" and two.stats["partitions"] == 2
    _write(root, spec, _graph(30, 6))
    [back] = StratumRun(root, spec, index).materialize()
    assert back.mode == "rebuilt" and "2 partitions" in back.rebuilt_because
    assert _tables(root, spec, "tc")["tc"] == set(evaluate_naive(spec.program, _graph(30, 6))["tc"])
    # a stratum the planner cannot split runs in one process and says why
    text = CLOSURE + "sq(x, z) :- sq(x, y), sq(y, z).\nsq(x, y) :- f(x, y).\n"
    spec2 = _pipeline(tmp_path / "t2", text)
    _write(tmp_path / "w2", spec2, {**_graph(10, 3), "f": {(1, 2), (2, 3)}})
    [sq] = StratumRun(tmp_path / "w2", spec2, spec2.stratum_of("sq"), spark=spark,
                      partitions=PARTS).materialize()
    assert sq.stats["partitioning"].startswith("single process: ")
    assert any("non-linear recursion" in n for n in sq.notes)
    assert _tables(tmp_path / "w2", spec2, "sq")["sq"] == {(1, 2), (2, 3), (1, 3)}


def test_partitions_without_spark_are_refused_clearly(tmp_path):
    spec = _pipeline(tmp_path / "t", CLOSURE)
    with pytest.raises(DeltalogError, match="partitions need a Spark session"):
        StratumRun(tmp_path / "w", spec, spec.stratum_of("tc"), partitions=4)



def test_spark_submit_runs_the_update_job_partitioned(tmp_path):
    """The README's cluster submit, on local Spark: spark-submit runs the script that
    executes a pipeline's update job with spark-submit's session and 4 partitions."""
    from deltalog.dagster_project import submit
    from tests.dagster_project.tiny import EDGES_V1, make_pipeline

    spec, root = make_pipeline(tmp_path)
    env = {**os.environ, "DELTALOG_PIPELINES": str(tmp_path), "DELTALOG_WAREHOUSE": str(root),
           "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    env.pop("DAGSTER_HOME", None)
    spark_submit = Path(sys.executable).with_name("spark-submit")
    done = subprocess.run(
        [str(spark_submit), "--master", "local[2,4]", "--driver-memory", "1g",
         submit.__file__, "tiny_update", "--partitions", "4"],
        env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "success" in done.stdout
    expected = evaluate_naive(spec.program, {"edge": set(EDGES_V1), "node": set(NODES),
                                             "start": set(START)})
    assert _tables(root, spec) == {p: set(expected[p]) for p in spec.idb_tables}
    state = load_state(state_path(root, spec.name, spec.stratum_of("path")))
    assert state is not None and state.extra["partitions"] == 4
    unknown = subprocess.run([str(spark_submit), "--master", "local[1]", submit.__file__,
                              "no_such_job"], env=env, capture_output=True, text=True,
                             timeout=600)
    assert unknown.returncode == 2, unknown.stderr[-3000:]
    assert "no job 'no_such_job'" in unknown.stderr + unknown.stdout, [
        line for line in unknown.stderr.splitlines() if "job" in line]
    # a team's own definitions module (on the path, as its installed package would be)
    (tmp_path / "team_defs.py").write_text(
        "from deltalog.dagster_project.build import build_definitions\n"
        f"mine = build_definitions(paths=[{str(tmp_path)!r}])\n", encoding="utf-8")
    env_own = {**env, "PYTHONPATH": f"{REPO}:{tmp_path}"}
    env_own.pop("DELTALOG_PIPELINES")
    own = subprocess.run([sys.executable, submit.__file__, "--definitions", "team_defs:mine",
                          "no_such_job"], env=env_own, capture_output=True, text=True,
                         timeout=600)
    assert own.returncode == 2 and "tiny_update" in own.stderr, own.stderr[-3000:]
    gone = subprocess.run([sys.executable, submit.__file__, "--definitions", "nowhere",
                           "tiny_update"], env=env_own, capture_output=True, text=True,
                          timeout=600)
    assert gone.returncode == 2 and "no definitions 'nowhere'" in gone.stderr


@pytest.mark.parametrize("pipeline,whole", [
    ("debian", False),
    # (the WordNet subset, 38 s: in the slow run, as the whole examples are)
    pytest.param("wordnet", False, marks=pytest.mark.slow),
    pytest.param("debian", True, marks=pytest.mark.slow),
    pytest.param("wordnet", True, marks=pytest.mark.slow),
])
def test_the_example_pipelines_partitioned_equal_single_process(spark, tmp_path, pipeline,
                                                                whole):
    """Both examples, snapshot 1 then the change to snapshot 2, every stratum in 8
    partitions: on a subset (Debian: the packages of section admin; WordNet: four
    lexicographer files, in the slow run), and whole in the slow run."""
    from deltalog.dagster_project.demo import _loader
    from deltalog.examples.wordnet.snapshot import QUICK_LEXNAMES
    from deltalog.pipelines.warehouse import apply_snapshot, build_warehouse

    spec = load_pipeline(pipeline)
    subset = frozenset({"admin"}) if pipeline == "debian" else frozenset(QUICK_LEXNAMES)
    load = _loader(pipeline, None if whole else subset)
    single, split = tmp_path / "single", tmp_path / "split"
    plans = set()
    for version, write in ((1, build_warehouse), (2, apply_snapshot)):
        for root in (single, split):
            write(root, spec, version, load)
        _run_all(single, spec)
        results = _run_all(split, spec, spark=spark, partitions=PARTS)
        plans |= {r.stats["partitioning"].split(" (")[0] for r in results}
        alone, got = _tables(single, spec), _tables(split, spec)
        for pred in spec.idb_tables:
            assert got[pred] == alone[pred], (pipeline, version, pred)
        modes = {r.mode for r in results}
        assert modes == {"full"} if version == 1 else modes <= {"incremental", "unchanged"}
    assert "partitioned by key" in plans  # the closures, at least


def test_bad_input_stops_a_partitioned_run_naming_the_table_and_the_next_run_recovers(
    spark, tmp_path
):
    """A null in a first load (found by the executors), a null in a change, and a second
    value for a functional key met inside a partition: each is the input checks' DL306
    naming the table, nothing is committed, and after the fix the tables are right."""
    from deltalake import write_deltalake

    from deltalog.engine.errors import BAD_INPUT
    from deltalog.pipelines.quality import BadInputError
    from tests.pipelines.test_bad_input import (
        EDGES,
        WEIGHTS,
        _arrow,
        _expected,
        make_bad_pipeline,
    )

    spec, root = make_bad_pipeline(tmp_path, [*EDGES, (5, None)])
    reach = spec.stratum_of("reach")

    def refused(index: int, *needles: str) -> None:
        with pytest.raises(BadInputError) as caught:
            StratumRun(root, spec, index, spark=spark, partitions=PARTS).materialize()
        assert caught.value.code == BAD_INPUT
        for needle in needles:
            assert needle in str(caught.value), str(caught.value)

    refused(reach, "edge", "dst")
    assert not delta_io.exists(spec.table_uri(root, "reach"))
    write_deltalake(spec.table_uri(root, "edge"), _arrow("edge", EDGES), mode="overwrite")
    _run_all(root, spec, spark=spark, partitions=PARTS)
    write_deltalake(spec.table_uri(root, "edge"), _arrow("edge", [(4, None)]), mode="append")
    version = delta_io.table_version(spec.table_uri(root, "reach"))
    refused(reach, "edge", "dst")
    assert delta_io.table_version(spec.table_uri(root, "reach")) == version
    write_deltalake(spec.table_uri(root, "edge"), _arrow("edge", [*EDGES, (4, 1)]),
                    mode="overwrite")
    heavy = spec.stratum_of("heavy")
    write_deltalake(spec.table_uri(root, "weight"), _arrow("weight", [(3, 0.25)]),
                    mode="append")  # node 3 now has two weights
    refused(heavy, "weight")
    write_deltalake(spec.table_uri(root, "weight"), _arrow("weight", [*WEIGHTS[:2], (3, 0.25),
                                                                       WEIGHTS[3]]),
                    mode="overwrite")
    results = _run_all(root, spec, spark=spark, partitions=PARTS)
    assert _tables(root, spec) == {p: set(r) for p, r in _expected(spec, root).items()
                                   if p in spec.idb_tables}
    assert any(r.mode in ("rebuilt", "incremental") for r in results)


CLUSTER = """
import json, os, sys
from pathlib import Path
from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines.faults import FAULT_ENV
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spark.session import make_spark_session
from tests.pipelines.test_partitioned import CLOSURE, _graph, _pipeline, _tables, _write

spark = make_spark_session("two-executors", {"spark.master": "local-cluster[2,1,1024]"})
tmp = Path(sys.argv[1])
spec = _pipeline(tmp / "t", CLOSURE)
root = tmp / "w"
index = spec.stratum_of("tc")
out = []
for step, shift in enumerate((3, 5, 6)):
    _write(root, spec, _graph(40, shift))
    if step == 1:
        os.environ[FAULT_ENV] = "executor_after_save@3"
    [tc] = StratumRun(root, spec, index, spark=spark, partitions=8).materialize()
    os.environ.pop(FAULT_ENV, None)
    right = _tables(root, spec, "tc")["tc"] == set(evaluate_naive(spec.program,
                                                                  _graph(40, shift))["tc"])
    out.append([tc.mode, tc.seq, tc.stats.get("partition_retries", 0), right, tc.notes])
print(json.dumps({"steps": out, "executors": spark.sparkContext.master}))
spark.stop()
"""


@pytest.mark.slow  # (about 60 s: two executor JVMs; the default run keeps the local retries)
def test_an_executor_lost_mid_run_on_a_two_executor_cluster_applies_nothing_twice(tmp_path):
    """Local Spark with two executor processes (``local-cluster[2,1,1024]``): the executor
    running partition 3 is killed (its JVM) right after the partition saved its state; Spark
    runs the lost tasks on the other executor, the retried partition returns the change it
    saved, and every run's table equals the naive evaluator's."""
    import json

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(FAULT_ENV, None)
    child = subprocess.run([sys.executable, "-c", CLUSTER, str(tmp_path)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    steps = result["steps"]
    assert [s[0] for s in steps] == ["full", "incremental", "incremental"], steps
    assert [s[1] for s in steps] == [1, 2, 3] and all(s[3] for s in steps)
    assert steps[1][2] >= 1  # the lost partition's retry returned its saved change
    assert "Lost executor" in child.stderr or "lost executor" in child.stderr.lower()


# (3 random examples beside the two below: each is a few partitioned Spark runs, about 4 s;
# the single-process bag tests run many more of the same operations)
@settings(max_examples=3, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@example(first=[(1, 2), (1, 2), (2, 3)], ops=[("overwrite", [(1, 2), (2, 3)]),
                                              ("append", [(2, 3)]), ("delete", 2)])
@example(first=[(1, 2)], ops=[("append", [(1, 2), (3, 1)]), ("merge_delete", (1, 2))])
@given(first=st.lists(bag_ops._edge, max_size=6),
       ops=st.lists(bag_ops._ops, min_size=1, max_size=5))
def test_bag_inputs_partitioned_tell_last_copies_apart_without_lookups(spark, first, ops,
                                                                     monkeypatch):
    """Random bag writes (appends of rows already there, overwrites with repeats, deletes
    by predicate, a MERGE that deletes): the partitions keep the copies and turn the
    feed's weights into set changes themselves; no run looks a row up in the table, and
    the tables equal the naive evaluator on the set of rows."""
    from deltalake import write_deltalake

    from tests.dagster_project.tiny import edge_table, make_pipeline, run_all, tables_right

    lookups = bag_ops.count_lookups(monkeypatch)
    with tempfile.TemporaryDirectory() as tmp:
        spec, root = make_pipeline(Path(tmp))
        uri = spec.table_uri(root, "edge")
        write_deltalake(uri, edge_table(first), mode="overwrite")
        bag = list(first)
        run_all(spec, root, spark=spark, partitions=4)
        for op, arg in ops:
            bag = bag_ops._apply(op, arg, uri, bag)
            results = run_all(spec, root, spark=spark, partitions=4)
            assert tables_right(spec, root, sorted(set(bag))), (op, arg)
            assert results["path"].stats["partitioning"].startswith("partitioned by key")
        assert lookups == []


def test_too_many_copies_in_a_partition_send_that_tables_changes_as_sets(spark, tmp_path,
                                                                        monkeypatch):
    """Past ``COPIES_MAX`` rows held more than once in a partition, it keeps none and the
    driver sends that table's later changes as set changes (deleted rows looked up)."""
    from deltalake import DeltaTable, write_deltalake

    from deltalog.pipelines import inputs
    from tests.dagster_project.tiny import edge_table, make_pipeline, run_all, tables_right

    monkeypatch.setattr(inputs, "COPIES_MAX", 1)
    spec, root = make_pipeline(tmp_path)
    uri = spec.table_uri(root, "edge")
    write_deltalake(uri, edge_table([(1, 2), (1, 2), (2, 3), (2, 3)]), mode="overwrite")
    run_all(spec, root, spark=spark, partitions=4)
    path = state_path(root, spec.name, spec.stratum_of("path"))
    assert load_state(path).extra["set_inputs"] == ["edge"]
    DeltaTable(uri).delete("src = 2")
    run_all(spec, root, spark=spark, partitions=4)
    assert tables_right(spec, root, [(1, 2)])
    write_deltalake(uri, edge_table([(1, 2)]), mode="overwrite")  # one copy of two gone
    run_all(spec, root, spark=spark, partitions=4)
    assert tables_right(spec, root, [(1, 2)])


def test_a_task_whose_input_was_cut_short_changes_nothing(tmp_path):
    """PySpark ends a task's input quietly when the JVM side fails to fetch it (a lost
    executor's shuffle files): without every map partition's trailer, or with other rows
    than they count, the task fails before it touches its partition."""
    import msgpack

    from deltalog.engine.partition import plan_partitioning, split_stratum
    from deltalog.pipelines.partitions import END, IncompleteInput, PartitionJob, run_partition
    from deltalog.pipelines.stratum_program import stratum_program

    prog = load_program(CLOSURE)
    index = next(i for i, s in enumerate(prog.strata) if "tc" in s.preds)
    sub = stratum_program(prog, index)
    plan = plan_partitioning(sub, next(s for s in sub.strata if s.rules), parts=2)
    split = split_stratum(sub, plan, 2)
    job = PartitionJob(str(tmp_path), "d", split.program, ("tc",), 1, {"e": 1}, True,
                       maps=2, sources={n: r.source for n, r in split.routes.items()})
    assert set(split.routes) == {"e", "e@0"}  # the edges, and the base rule's local copy
    rows = [(name, 1, pack_row(edge)) for name in ("e", "e@0") for edge in ((1, 2), (2, 3))]
    trailer = [(END, 0, msgpack.packb(3)), (END, 1, msgpack.packb(1))]
    for cut in (rows + trailer[:1], rows[:1] + trailer):
        with pytest.raises(IncompleteInput):
            list(run_partition(job, 0, cut))
        assert load_state(part_path(tmp_path, 0)) is None
    out = list(run_partition(job, 0, rows + trailer))
    assert {unpack_row(d) for n, _, d in out if n == "tc"} == {(1, 2), (2, 3), (1, 3)}
    assert load_state(part_path(tmp_path, 0)).seq == 1
