"""Run a pipeline's Dagster job inside ``spark-submit``: the Spark session spark-submit
configured (master, executor memory, any ``--conf``) is the one the job's ``spark`` resource
uses, and the run is recorded in the Dagster instance of ``$DAGSTER_HOME`` (an ephemeral
one when that is not set)::

    spark-submit --master spark://spark-head:7077 --executor-memory 8g \\
        "$(python -c 'import deltalog.dagster_project.submit as m; print(m.__file__)')" \\
        debian_update --partitions 32

``--partitions`` (default ``$DELTALOG_PARTITIONS``, else 1) sets the spark resource's
partitions per stratum. ``--definitions MODULE[:NAME]`` names a team's own definitions
(``my_project.definitions``, its ``defs`` unless NAME says; default deltalog's, which
read ``[tool.deltalog]``). Exit status 0 when the run succeeded, 1 when it failed (its
failures printed), 2 for an unknown job or definitions.
"""

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

import dagster as dg

DEFAULT_DEFINITIONS = "deltalog.dagster_project.definitions:defs"


def _definitions(name: str) -> dg.Definitions | str:
    """The ``dg.Definitions`` that ``MODULE[:NAME]`` names, or why there are none."""
    module, _, attr = name.partition(":")
    try:
        found = getattr(importlib.import_module(module), attr or "defs")
    except (ImportError, AttributeError) as err:
        return f"no definitions '{name}' ({err})"
    if not isinstance(found, dg.Definitions):
        return f"'{name}' is a {type(found).__name__}, not dagster Definitions"
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark-submit .../submit.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", help="a job of the definitions, e.g. debian_update")
    parser.add_argument("--partitions", type=int, metavar="N",
                        help="partitions per stratum (default $DELTALOG_PARTITIONS, else 1)")
    parser.add_argument("--definitions", default=DEFAULT_DEFINITIONS, metavar="MODULE[:NAME]",
                        help="the Definitions to run a job of: a module (and its attribute, "
                             f"default defs); default {DEFAULT_DEFINITIONS}")
    args = parser.parse_args(argv)
    if args.partitions is not None:
        if args.partitions < 1:
            parser.error("--partitions must be at least 1")
        os.environ["DELTALOG_PARTITIONS"] = str(args.partitions)

    from pyspark.sql import SparkSession

    defs = _definitions(args.definitions)
    if isinstance(defs, str):
        print(defs, file=sys.stderr)
        return 2
    try:
        job = defs.resolve_job_def(args.job)
    except dg.DagsterInvariantViolationError:
        names = ", ".join(sorted(j.name for j in defs.resolve_all_job_defs()))
        print(f"no job '{args.job}'; the jobs are: {names}", file=sys.stderr)
        return 2
    SparkSession.builder.getOrCreate()  # spark-submit's settings; the resource reuses it
    instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else (
        dg.DagsterInstance.ephemeral())
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data is not None:
            error = event.step_failure_data.error
            print(f"{event.step_key}: {error.message.strip() if error else 'failed'}",
                  file=sys.stderr)
    print(f"run {result.run_id}: {'success' if result.success else 'failure'}")
    return 0 if result.success else 1


if __name__ == "__main__":
    raise SystemExit(main())
