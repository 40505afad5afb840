"""Smoke run of the run-cost benchmark at a tiny size (marked ``bench``: never in the
default run). Checks that it runs the Dagster CLI, reads the engine's numbers back from the
instance and prints the table; never asserts on times."""

import pytest

from bench import run_all, state_io

pytestmark = pytest.mark.bench


def test_state_io_tiny_runs_the_update_job_and_reads_its_numbers(monkeypatch) -> None:
    monkeypatch.setattr(state_io, "RUNS", 1)
    lines: list[str] = []
    [result] = state_io.run([300], say=lines.append, spark=True)
    assert result["n"] == 600  # two tables
    assert result["state_mb"] > 0 and result["rss_mb"] > 0
    assert result["state_bytes_written"] > 0 and result["engine_seconds"] > 0
    text = "\n".join(lines)
    assert "state KiB written" in text and "state KiB read" in text
    assert "run / DuckDB" in text and "run / Spark" in text
    assert result["spark_s"] > 0 and result["dagster_run_s"] > 0


def test_state_io_is_part_of_run_all() -> None:
    assert "bench.state_io" in run_all.MODULES
