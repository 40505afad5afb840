"""A warehouse on object storage: a real S3-compatible server (moto's, a separate process
on 127.0.0.1 started and stopped by these tests) holds the EDB and IDB tables; the engine
state stays on a local disk. Runs load, maintain incrementally and equal the naive
evaluator; through Dagster too, with the warehouse resource's storage options; a remote
warehouse without a local state folder is a clear DL900."""

import json

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltalog.dagster_project.definitions import build_definitions
from deltalog.dagster_project.defs.resources import SparkResource, WarehouseResource
from deltalog.engine.errors import DataError, NotSupportedError
from deltalog.pipelines import delta_io
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spark import arrow_files
from deltalog.pipelines.warehouse import write_edb
from tests.dagster_project.tiny import (
    BINDING,
    EDGES_V1,
    PROGRAM,
    edb_tables,
    make_pipeline,
    tables_right,
)
from tests.local import write_pipeline

EDGES_V2 = [(1, 2), (2, 3), (3, 4), (4, 5), (5, 1), (6, 7)]


def _run_all(spec, root, state_root):
    out = {}
    for i in range(len(spec.program.strata)):
        for result in StratumRun(root, spec, i, state_root=state_root).materialize():
            out[result.pred] = result
    return out


def test_runs_load_and_maintain_tables_on_object_storage(s3, tmp_path):
    spec, _ = make_pipeline(tmp_path)
    root = "s3://deltalog-test/plain"
    delta_io.set_storage_options(root, s3)
    try:
        write_edb(root, spec, edb_tables(EDGES_V1))
        assert spec.table_uri(root, "edge") == "s3://deltalog-test/plain/tiny/edb/edge"
        first = _run_all(spec, root, tmp_path / "state")
        assert {r.mode for r in first.values()} == {"full"}
        assert tables_right(spec, root, EDGES_V1)
        write_edb(root, spec, edb_tables(EDGES_V2))
        second = _run_all(spec, root, tmp_path / "state")
        assert {r.mode for r in second.values()} <= {"incremental", "unchanged"}
        assert tables_right(spec, root, EDGES_V2)
        assert not (tmp_path / "plain").exists()  # nothing landed on the local disk
        with pytest.raises(NotSupportedError) as info:
            StratumRun(root, spec, 0)
        assert "error DL900" in str(info.value) and "state_root" in str(info.value)
    finally:
        delta_io.set_storage_options(root, None)


def test_the_environment_gives_options_to_what_no_resource_registered(s3, tmp_path,
                                                                      monkeypatch):
    spec, _ = make_pipeline(tmp_path)
    root = "s3://deltalog-test/env"
    monkeypatch.setenv(delta_io.STORAGE_OPTIONS_ENV, json.dumps(s3))
    write_edb(root, spec, edb_tables(EDGES_V1))  # the CLI's and the sensor's way
    assert delta_io.table_version(spec.table_uri(root, "edge")) == 1
    monkeypatch.setenv(delta_io.STORAGE_OPTIONS_ENV, "[1, 2]")
    with pytest.raises(DataError, match="is not a JSON object"):
        delta_io.table_version(spec.table_uri(root, "edge"))


def _bucket(s3, name):
    import boto3

    boto3.client("s3", endpoint_url=s3["AWS_ENDPOINT_URL"], region_name="us-east-1",
                 aws_access_key_id="deltalog", aws_secret_access_key="deltalog"
                 ).create_bucket(Bucket=name)


def test_an_input_in_another_bucket_is_read_where_it_is_with_the_warehouse_options(
        s3, tmp_path, monkeypatch):
    """A team's input table in its lake's bucket (bound by URI in [edb]), the outputs in
    the warehouse's bucket: runs read the input where it is, with the options registered
    for the warehouse (one store: one set of credentials), load and maintain the outputs
    equal to the naive evaluator's; a second warehouse on the same scheme with other
    options makes the input's options unknown: DL300, unless the environment gives them."""
    _bucket(s3, "deltalog-lake")
    lake = "s3://deltalog-lake/bronze/edge"
    spec = write_pipeline(tmp_path, "tiny", PROGRAM,
                          BINDING.replace('"tiny/edb/edge"', f'"{lake}"'))
    root = "s3://deltalog-test/lake-input"
    monkeypatch.delenv(delta_io.STORAGE_OPTIONS_ENV, raising=False)
    delta_io.set_storage_options(root, s3)
    try:
        write_edb(root, spec, edb_tables(EDGES_V1))
        assert spec.table_uri(root, "edge") == lake
        assert delta_io.table_version(lake) == 1
        first = _run_all(spec, root, tmp_path / "state")
        assert {r.mode for r in first.values()} == {"full"}
        assert tables_right(spec, root, EDGES_V1)
        write_edb(root, spec, edb_tables(EDGES_V2))
        second = _run_all(spec, root, tmp_path / "state")
        assert second["path"].mode == "incremental"
        assert tables_right(spec, root, EDGES_V2)
        other = "s3://deltalog-test/other-warehouse"
        delta_io.set_storage_options(other, {**s3, "AWS_SECRET_ACCESS_KEY": "wrong"})
        try:
            with pytest.raises(DataError, match="different storage options") as info:
                delta_io.table_version(lake)
            assert "error DL300" in str(info.value) and lake in str(info.value)
            monkeypatch.setenv(delta_io.STORAGE_OPTIONS_ENV, json.dumps(s3))
            assert delta_io.table_version(lake) == 2
        finally:
            delta_io.set_storage_options(other, None)
    finally:
        delta_io.set_storage_options(root, None)


@pytest.mark.dagster
def test_dagster_materializes_into_object_storage_with_the_resources_options(s3, tmp_path):
    spec, _ = make_pipeline(tmp_path)
    root = "s3://deltalog-test/dagster"
    warehouse = WarehouseResource(root=root, state_root=str(tmp_path / "state"),
                                  storage_options=s3)
    delta_io.set_storage_options(root, s3)  # the test's own writes of the EDB tables
    write_edb(root, spec, edb_tables(EDGES_V1))
    delta_io.set_storage_options(root, None)  # from here on, only the resource's
    defs = build_definitions([spec], resources={"warehouse": warehouse,
                                                "spark": SparkResource()})
    with dg.instance_for_test() as instance:
        job = defs.resolve_job_def(f"{spec.name}_update")
        assert job.execute_in_process(instance=instance).success
    delta_io.set_storage_options(root, s3)
    try:
        assert tables_right(spec, root, EDGES_V1)
    finally:
        delta_io.set_storage_options(root, None)


@pytest.mark.slow  # (the default run reads S3 through Arrow in Spark in test_own_project_on_s3)
@pytest.mark.dagster
@pytest.mark.spark
def test_spark_checks_read_object_storage_through_arrow(s3, tmp_path, monkeypatch):
    """pyspark from PyPI has no S3A filesystem (hadoop-aws comes from Maven, out of reach
    here): Spark's tasks read the tables' files with Arrow's S3 filesystem, and every
    recompute check passes against the tables on the S3 server after an incremental run
    (the checks after a load and after a change on local tables: ``test_materialize``);
    a damaged table is told apart (the check fails)."""
    read = []
    real = arrow_files.read_files
    monkeypatch.setattr(arrow_files, "read_files",
                        lambda spark, files, *a: read.append(files) or real(spark, files, *a))
    spec, _ = make_pipeline(tmp_path)
    root = "s3://deltalog-test/spark"
    warehouse = WarehouseResource(root=root, state_root=str(tmp_path / "state"),
                                  storage_options=s3)
    delta_io.set_storage_options(root, s3)
    try:
        write_edb(root, spec, edb_tables(EDGES_V1))
        defs = build_definitions([spec], resources={"warehouse": warehouse,
                                                    "spark": SparkResource()})
        with dg.instance_for_test() as instance:
            update = defs.resolve_job_def(f"{spec.name}_update")
            for edges in (EDGES_V1, EDGES_V2):  # a load, then an incremental run
                write_edb(root, spec, edb_tables(edges))
                assert update.execute_in_process(instance=instance).success
            checks = defs.resolve_job_def(f"{spec.name}_recompute_checks")
            result = checks.execute_in_process(instance=instance, raise_on_error=False)
            evaluations = result.get_asset_check_evaluations()
            assert evaluations and all(c.passed for c in evaluations), [
                c.description for c in evaluations if not c.passed]
            # a row the engine did not derive, written into an IDB table: the check fails
            path = spec.table_uri(root, "path")
            extra = delta_io.read_arrow(path).slice(0, 0)
            extra = pa.table({n: pa.array([99], extra.schema.field(n).type)
                              for n in extra.column_names})
            write_deltalake(path, extra, mode="append", storage_options=s3)
            result = defs.resolve_job_def(f"{spec.name}_recompute_checks").execute_in_process(
                instance=instance, raise_on_error=False)
            failed = [c for c in result.get_asset_check_evaluations() if not c.passed]
            assert [c.asset_key.path[-1] for c in failed] == ["path"]
        assert read and all(f.startswith("s3://deltalog-test/spark/") for fs in read
                            for f, _ in fs)
    finally:
        delta_io.set_storage_options(root, None)


@pytest.mark.spark
def test_a_partitioned_table_on_object_storage_reads_with_its_partition_columns(s3):
    """The Arrow reader takes a partitioned table's partition values from its files' paths
    (a null one included), typed as the log says, as Spark's parquet reader would."""
    from deltalog.pipelines.spark.session import make_spark_session

    uri = "s3://deltalog-test/partitioned"
    table = pa.table({"k": pa.array([1, 2, 3, 4], pa.int64()),
                      "day": pa.array([7, 7, 8, None], pa.int64()),
                      "name": pa.array(["a", "b", "c", "d"])})
    write_deltalake(uri, table, partition_by=["day"], storage_options=s3)
    delta_io.set_storage_options(uri, s3)
    try:
        df = delta_io.spark_dataframe(make_spark_session(), uri)
        rows = sorted((r["k"], r["day"], r["name"]) for r in df.collect())
    finally:
        delta_io.set_storage_options(uri, None)
    assert rows == [(1, 7, "a"), (2, 7, "b"), (3, 8, "c"), (4, None, "d")]
    assert df.schema.names == ["k", "day", "name"]
