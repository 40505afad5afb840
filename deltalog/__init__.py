"""deltalog: incremental Datalog views over Delta Lake tables, orchestrated by Dagster.

The packages: ``deltalog.engine`` (the pure library: parser, leapfrog triejoin, sensitivity
indices, DBSP, the state's format), ``deltalog.schemas`` (relations as Arrow),
``deltalog.pipelines`` (the run path over Delta tables, Spark, the CLI),
``deltalog.dagster_project`` (the Dagster definitions) and ``deltalog.examples`` (the two
example pipelines and their data snapshots).
"""
