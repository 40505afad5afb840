"""The Spark recompute check judges an IDB table against the EDB versions its stratum's last
completed run consumed, so a table left stale by a run that wrote nothing fails the check
(the commit metadata alone would still name the old versions and pass)."""

import dataclasses

import pytest

from deltalog.pipelines import delta_io
from deltalog.pipelines.recompute import spark_recompute_checks
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.state_store import load_state, save_state, state_path
from deltalog.pipelines.warehouse import write_edb
from tests.dagster_project.tiny import EDGES_V1, edb_tables, make_pipeline, run_all

pytestmark = pytest.mark.spark


def test_a_stale_table_fails_the_check(tmp_path, spark):
    spec, root = make_pipeline(tmp_path)
    index = spec.stratum_of("path")
    StratumRun(root, spec, index).materialize()
    assert spark_recompute_checks(spark, root, spec, ["path"])["path"].passed

    write_edb(root, spec, edb_tables([*EDGES_V1, (4, 5)]))
    # A faulty run: it records the new versions as consumed but writes no change.
    path = state_path(root, spec.name, index)
    state = load_state(path)
    assert state is not None
    edge = spec.table_uri(root, "edge")
    now = delta_io.table_version(edge)
    save_state(
        path,
        dataclasses.replace(
            state,
            input_versions={**state.input_versions, "edge": now},
            edb_versions={**state.edb_versions, "edge": now},
        ),
    )
    outcome = spark_recompute_checks(spark, root, spec, ["path"])["path"]
    assert not outcome.passed
    assert outcome.edb_versions == {"edge": now}
    assert (4, 5) in outcome.missing_in_engine and (1, 5) in outcome.missing_in_engine

    # The real run from the true state: the table catches up and passes.
    save_state(path, state)
    StratumRun(root, spec, index).materialize()
    assert spark_recompute_checks(spark, root, spec, ["path"])["path"].passed


def test_the_check_reads_no_table_into_the_driver(tmp_path, spark, monkeypatch):
    """The comparison runs in Spark: no table version is read through delta-rs into this
    process (only the logs are), and the outcome's samples come sorted from Spark."""
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)

    def refused(*args, **kwargs):
        raise AssertionError(f"a table read into the driver: {args}")

    monkeypatch.setattr(delta_io, "read_arrow", refused)
    outcomes = spark_recompute_checks(spark, root, spec, ["path", "unreachable"])
    assert all(o.passed for o in outcomes.values())
    assert outcomes["path"].engine_rows == outcomes["path"].spark_rows > 0


def test_copies_of_a_row_in_a_table_version_fail_the_check(tmp_path, spark):
    """A table is a set: a version holding a row twice is not the recompute (a check by
    set difference alone would pass it)."""
    from deltalake import write_deltalake

    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    path = spec.table_uri(root, "path")
    copies = delta_io.read_arrow(path).slice(0, 2)
    write_deltalake(path, copies, mode="append")
    # the state and the commit metadata stand for the new version (as a deltalog writer
    # that appended twice would leave them)
    index = spec.stratum_of("path")
    state_file = state_path(root, spec.name, index)
    state = load_state(state_file)
    assert state is not None
    now = delta_io.table_version(path)
    save_state(state_file, dataclasses.replace(
        state, table_versions={**state.table_versions, "path": now}))
    outcome = spark_recompute_checks(spark, root, spec, ["path"])["path"]
    assert outcome.table_version == now
    assert not outcome.passed and outcome.n_missing == 0 and outcome.n_extra == 2
    assert outcome.engine_rows == outcome.spark_rows + 2


def test_the_check_reads_the_declared_columns_of_an_input_with_more(tmp_path, spark):
    """The Spark recompute reads an input's declared columns only (a team's table may
    hold more): the maintained tables pass."""
    import pyarrow as pa
    from deltalake import write_deltalake

    spec, root = make_pipeline(tmp_path)
    uri = spec.table_uri(root, "edge")
    rows = [*EDGES_V1, (4, 5)]
    write_deltalake(uri, pa.table({"loaded_by": ["x"] * len(rows),
                                   "src": [r[0] for r in rows], "dst": [r[1] for r in rows]}),
                    mode="overwrite", schema_mode="overwrite")
    run_all(spec, root)
    outcomes = spark_recompute_checks(spark, root, spec, ["path", "unreachable"])
    assert all(o.passed for o in outcomes.values()), outcomes
