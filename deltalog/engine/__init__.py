"""deltalog's engine: a pure library (no I/O, no Dagster, no Spark).

Submodules: ``errors``, ``syntax`` (AST and parser), ``analysis`` (safety, types,
stratification, variable order), ``join`` (tries and leapfrog triejoin), ``evaluate``
(semi-naive evaluation), ``naive`` (the test oracle), ``values`` (fact formatting).
"""
