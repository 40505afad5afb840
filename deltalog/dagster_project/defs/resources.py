"""Resources: where the warehouse is, and a Spark session started only when asked for.

Environments differ by the resource set passed to ``Definitions`` (a test passes a
``tmp_path`` warehouse), never by branches inside asset bodies.
"""

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field

from deltalog.engine.partition import BROADCAST_LIMIT
from deltalog.pipelines import delta_io
from deltalog.pipelines.spec import WAREHOUSE_ENV, default_warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parents[3]
STATE_ENV = "DELTALOG_STATE"
STORAGE_OPTIONS_ENV = delta_io.STORAGE_OPTIONS_ENV
SPARK_MASTER_ENV = "DELTALOG_SPARK_MASTER"
SPARK_DRIVER_MEMORY_ENV = "DELTALOG_SPARK_DRIVER_MEMORY"
SPARK_EXECUTOR_MEMORY_ENV = "DELTALOG_SPARK_EXECUTOR_MEMORY"
PARTITIONS_ENV = "DELTALOG_PARTITIONS"


def default_warehouse_root(start: str | Path | None = None) -> str:
    """``deltalog.pipelines.spec.default_warehouse``: ``$DELTALOG_WAREHOUSE``, else the
    ``warehouse`` of ``[tool.deltalog]`` in the nearest ``pyproject.toml`` that has that
    table, else ``warehouse/`` in the repository (as the commands' ``--warehouse``)."""
    return default_warehouse(start)


class WarehouseResource(dg.ConfigurableResource):
    """Where the pipelines' Delta tables live: a local folder, or a URI on object storage
    (``s3://bucket/warehouse``, with ``storage_options``), and where the engine state is."""

    root: str = Field(
        default_factory=default_warehouse_root,
        description=(
            "Warehouse root: a folder or a URI (s3://bucket/wh, az://..., gs://...); every "
            "table path in pipeline.toml is relative to it. "
            f"Default: ${WAREHOUSE_ENV}, else the warehouse of [tool.deltalog] in the "
            "nearest pyproject.toml that has that table, else warehouse/ in the repository."
        ),
    )

    state_root: str | None = Field(
        default_factory=lambda: os.environ.get(STATE_ENV) or None,
        description=(
            "Folder of the engine state saved between runs (one subfolder per pipeline), for "
            "a local disk apart from the warehouse. Default: $DELTALOG_STATE, else "
            "_deltalog_state/ in the warehouse. Losing it costs a full load, not data: the "
            "next run rebuilds it from the tables."
        ),
    )

    storage_options: dict[str, str] = Field(
        default_factory=lambda: json.loads(os.environ.get(STORAGE_OPTIONS_ENV) or "{}"),
        description=(
            "For a warehouse on object storage (root s3://..., az://..., gs://...): delta-rs "
            'storage options, e.g. {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", '
            '"AWS_REGION": "us-east-1"}. Default: the JSON in '
            f"${STORAGE_OPTIONS_ENV}, else none (delta-rs also reads AWS_*, AZURE_*, "
            "GOOGLE_* from the environment)."
        ),
    )

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        delta_io.set_storage_options(self.root, self.storage_options)

    @property
    def path(self) -> Path:
        return Path(self.root)


class SparkResource(dg.ConfigurableResource):
    """The Spark session of the checks and the rebuild job, created on first use (assets
    that never call ``session()`` start no JVM) and shared by the whole process. Local
    (``local[*]``) by default; any cluster by ``master`` and ``spark_config``, as Dagster
    configuration or from the environment."""

    app_name: str = Field(
        default="deltalog", description="Spark application name (shown in Spark's logs)."
    )
    master: str = Field(
        default_factory=lambda: os.environ.get(SPARK_MASTER_ENV) or "local[*,4]",
        description=(
            "Spark master URL: local[*] (every core of this machine), local[N], "
            f"spark://host:7077, yarn, k8s://... Default: ${SPARK_MASTER_ENV}, else "
            "local[*,4] (every core; a failed task is tried up to 4 times, as on a cluster)."
        ),
    )
    driver_memory: str = Field(
        default_factory=lambda: os.environ.get(SPARK_DRIVER_MEMORY_ENV) or "2g",
        description=f"spark.driver.memory. Default: ${SPARK_DRIVER_MEMORY_ENV}, else 2g.",
    )
    executor_memory: str | None = Field(
        default_factory=lambda: os.environ.get(SPARK_EXECUTOR_MEMORY_ENV) or None,
        description=(
            f"spark.executor.memory on a cluster. Default: ${SPARK_EXECUTOR_MEMORY_ENV}, "
            "else Spark's own."
        ),
    )
    partitions: int = Field(
        default_factory=lambda: int(os.environ.get(PARTITIONS_ENV) or 1),
        ge=1,
        description=(
            "Partitions per stratum of the incremental maintenance: 1 runs each stratum in "
            "the Dagster process; N > 1 runs every stratum the planner can split as N Spark "
            "tasks, each with its own partition state under the state folder (which every "
            f"executor must reach). Default: ${PARTITIONS_ENV}, else 1."
        ),
    )
    broadcast_rows: int = Field(
        default=BROADCAST_LIMIT,
        ge=0,
        description=(
            "With partitions > 1: an input table of at most this many rows may be copied to "
            "every partition (with its changes) when that makes a stratum partitionable; a "
            "larger one is partitioned, or the stratum takes a hypercube or one process."
        ),
    )
    spark_config: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "More Spark settings (as PySparkResource's spark_config), e.g. "
            '{"spark.sql.shuffle.partitions": "64"}; they win over the fields above.'
        ),
    )

    def conf(self) -> dict[str, str]:
        """The Spark settings this resource asks for."""
        conf = {"spark.master": self.master, "spark.driver.memory": self.driver_memory}
        if self.executor_memory:
            conf["spark.executor.memory"] = self.executor_memory
        return {**conf, **{str(k): str(v) for k, v in self.spark_config.items()}}

    def session(self) -> "SparkSession":
        from pyspark.sql import SparkSession

        from deltalog.pipelines.spark.session import context_stopped, make_spark_session

        # Reuse the process's session as is (the builder would warn about ignored settings),
        # unless Spark stopped its context after an internal error: then a new one.
        active = SparkSession.getActiveSession()
        if active is not None and not context_stopped(active):
            return active
        return make_spark_session(self.app_name, self.conf())


def local_resources(root: str | Path | None = None) -> dict[str, dg.ConfigurableResource]:
    """The resource set of a local run: the warehouse at ``root`` (default as above)."""
    warehouse = WarehouseResource() if root is None else WarehouseResource(root=str(root))
    return {"warehouse": warehouse, "spark": SparkResource()}
