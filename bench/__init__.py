"""Benchmark commands: each module times one comparison and prints a table of measurements
and ratios (``make bench`` runs them all, ``--quick`` for a smoke run)."""
