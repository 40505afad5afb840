"""Shared pytest fixtures: the repository root on sys.path, one Spark session per run, and
one S3-compatible server per run (moto's, a process on 127.0.0.1, started on first use).

Spark takes seconds to start and allows one session per process, so every test marked
``spark`` shares the session-scoped ``spark`` fixture; tests that never ask for it start no JVM.
"""

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.local import free_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def _spark_jvm() -> Iterator[None]:
    """Stops this run's Spark session at the end of the run."""
    yield
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()


@pytest.fixture
def spark(_spark_jvm: None) -> Iterator["SparkSession"]:
    """The run's Spark session (one JVM per run). If Spark stopped its context on its own
    (an internal error), the test in which that happened fails, saying so (its captured
    output holds the JVM's log of the cause), and the next test gets a new context rather
    than every later Spark test failing on the dead one."""
    from deltalog.pipelines.spark.session import (
        FAST_START_CONF,
        context_stopped,
        make_spark_session,
    )

    session = make_spark_session("deltalog-tests", FAST_START_CONF)
    yield session
    if context_stopped(session):
        pytest.fail("Spark stopped its context during this test (see the JVM's log above)")


@pytest.fixture(scope="session")
def s3():
    """An S3 endpoint (moto's server) with an empty bucket; its delta-rs storage options."""
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "deltalog",
               "AWS_SECRET_ACCESS_KEY": "deltalog", "AWS_REGION": "us-east-1",
               "AWS_ALLOW_HTTP": "true"}
    try:
        import boto3

        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="deltalog", aws_secret_access_key="deltalog")
        for _ in range(100):
            try:
                client.create_bucket(Bucket="deltalog-test")
                break
            except Exception:  # the server is still starting
                time.sleep(0.1)
        else:
            raise RuntimeError("the S3 server did not start")
        yield options
    finally:
        server.terminate()
        server.wait(timeout=10)
