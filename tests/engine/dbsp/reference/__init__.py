"""The DBSP algebra as an executable reference model (Budiu et al., "DBSP: Automatic
Incremental View Maintenance for Rich Query Languages", 2023): Z-sets, streams, lifting,
integration, delay, differentiation, distinct and the incremental operators.

It is not what the engine runs (the kernels in ``engine/dbsp/`` carry deltas as plain
dicts, for speed); the tests check the algebra's laws here and check the production
kernels against what this model computes.
"""
