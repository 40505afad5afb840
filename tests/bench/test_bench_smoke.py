"""Smoke run of the benchmarks at ``--quick`` sizes (marked ``bench``: never in the default
run). Checks that every module runs and prints its table; never asserts on times."""

import pytest

from bench import eval_vs_duckdb, run_all

pytestmark = pytest.mark.bench


def test_eval_vs_duckdb_quick_answers_agree_and_print_a_table() -> None:
    lines: list[str] = []
    results = eval_vs_duckdb.run(quick=True, out=lines.append)
    assert [r.workload.split()[0] for r in results] == [
        "transitive", "closure,", "triangles", "out-degree", "greatest", "4-cycles",
        "debian"]
    assert all(r.rows_out > 0 and r.rows_in > 0 for r in results)
    text = "\n".join(lines)
    assert "ours/duckdb" in text
    assert all(r.workload in text for r in results)
    only = eval_vs_duckdb.run(quick=True, out=lines.append, tuples=False, only=["4-cycles"])
    assert [r.workload.split()[0] for r in only] == ["4-cycles"]


def test_run_all_lists_importable_modules_with_main() -> None:
    import importlib

    for name in run_all.MODULES:
        assert callable(importlib.import_module(name).main), name
