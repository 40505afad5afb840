"""Recursion the DBSP way (Budiu et al. 2023): one stratum maintained with nested time
(``stratum``: the tuple kernel; ``columnar``, ``kernels``: the columnar kernel for
graph-shaped strata), each join term a leapfrog triejoin seeded by its delta (``lftj``).
The algebra itself (Z-sets, streams, operators) is the tests' reference model."""
