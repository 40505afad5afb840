"""DBSP (seed 004) for deltalog: Z-sets (``zset``), streams and their operators
(``stream``), incremental relational operators (``operators``), leapfrog triejoin seeded by
a delta (``lftj``), and one stratum maintained with nested time (``stratum``)."""
