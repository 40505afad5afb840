"""The Spark resource's configuration surface: master URL, memory and any Spark setting
from Dagster configuration or the environment, local[*,4] by default; a session it starts
has them (checked in a process of its own, whose JVM is not the test session's)."""

import json
import subprocess
import sys

import pytest

from deltalog.dagster_project.defs.resources import SparkResource


def test_defaults_are_local_with_every_core(monkeypatch):
    for name in ("DELTALOG_SPARK_MASTER", "DELTALOG_SPARK_DRIVER_MEMORY",
                 "DELTALOG_SPARK_EXECUTOR_MEMORY", "DELTALOG_PARTITIONS"):
        monkeypatch.delenv(name, raising=False)
    conf = SparkResource().conf()
    assert conf == {"spark.master": "local[*,4]", "spark.driver.memory": "2g"}
    assert SparkResource().partitions == 1  # the single-process engine
    monkeypatch.setenv("DELTALOG_PARTITIONS", "8")
    assert SparkResource().partitions == 8


def test_environment_and_configuration(monkeypatch):
    monkeypatch.setenv("DELTALOG_SPARK_MASTER", "spark://head:7077")
    monkeypatch.setenv("DELTALOG_SPARK_EXECUTOR_MEMORY", "8g")
    conf = SparkResource(spark_config={"spark.sql.shuffle.partitions": "64"}).conf()
    assert conf["spark.master"] == "spark://head:7077"
    assert conf["spark.executor.memory"] == "8g"
    assert conf["spark.sql.shuffle.partitions"] == "64"
    conf = SparkResource(master="local[1]", spark_config={"spark.master": "local[2]"}).conf()
    assert conf["spark.master"] == "local[2]"  # spark_config wins


CHILD = """
import json
from deltalog.dagster_project.defs.resources import SparkResource
spark = SparkResource(
    master="local[1]", driver_memory="1g", spark_config={"spark.sql.shuffle.partitions": "3"}
).session()
print(json.dumps({k: spark.conf.get(k) for k in
                  ("spark.master", "spark.driver.memory", "spark.sql.shuffle.partitions")}))
spark.stop()
"""


def test_a_session_has_what_the_resource_asks():
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {
        "spark.master": "local[1]",
        "spark.driver.memory": "1g",
        "spark.sql.shuffle.partitions": "3",
    }


@pytest.mark.spark
def test_a_context_spark_stopped_on_its_own_is_replaced(_spark_jvm):
    """Spark stops its context after an internal error (its scheduler out of memory, say)
    without the Python side knowing; a Dagster process then handed that dead session to
    every later run. The resource and ``make_spark_session`` start a new context instead."""
    from deltalog.pipelines.spark.session import (
        FAST_START_CONF,
        context_stopped,
        make_spark_session,
    )

    dead = make_spark_session("deltalog-tests", FAST_START_CONF)
    dead.sparkContext._jsc.sc().stop()  # the JVM's own stop, as after an internal error
    assert context_stopped(dead)
    live = SparkResource().session()
    assert not context_stopped(live) and live.range(5).count() == 5
    assert make_spark_session("deltalog-tests", FAST_START_CONF).range(3).count() == 3
