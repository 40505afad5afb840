"""Smoke run of the state I/O benchmark at a tiny size (marked ``bench``: never in the
default run). Checks that it measures every part and prints both tables; never asserts on
times."""

import pytest

from bench import run_all, state_io

pytestmark = pytest.mark.bench


def test_state_io_tiny_measures_load_save_apply_and_a_pipeline_run() -> None:
    lines: list[str] = []
    results = state_io.run([300], ["triangle", "tc"], out=lines.append)
    assert [r["program"] for r in results] == ["triangle", "transitive closure"]
    for r in results:
        assert r["n"] == 300 and r["bytes"] > 0 and r["idb_rows"] > 0
        assert all(r[k] > 0 for k in ("load_s", "save_s", "apply_s", "read", "decode",
                                       "encode", "write"))
        run = r["run"]
        assert run["in"] == state_io.CHANGE  # the run saw exactly the table's change
        assert all(run[k] > 0 for k in ("run_s", "read", "decode", "apply", "encode",
                                         "write"))
    text = "\n".join(lines)
    assert "(load+save)/apply" in text and "state share" in text


def test_state_io_is_part_of_run_all() -> None:
    assert "bench.state_io" in run_all.MODULES
