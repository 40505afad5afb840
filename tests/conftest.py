"""Shared pytest fixtures: the repository root on sys.path and one Spark session per run.

Spark takes seconds to start and allows one session per process, so every test marked
``spark`` shares the session-scoped ``spark`` fixture; tests that never ask for it start no JVM.
"""

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def spark() -> Iterator["SparkSession"]:
    from deltalog.pipelines.spark.session import FAST_START_CONF, make_spark_session

    session = make_spark_session("deltalog-tests", FAST_START_CONF)
    yield session
    session.stop()
