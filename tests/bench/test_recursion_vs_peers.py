"""Smoke run of ``bench.recursion_vs_peers`` (marked ``bench``: never in the default run).
Ours and DuckDB only, so no peer venv is made; never asserts on times."""

import pytest

from bench import recursion_vs_peers as rvp

pytestmark = pytest.mark.bench


def test_change_script_deletes_ten_inserts_ten_and_closes_no_new_cycle() -> None:
    edges = [(i, i + 1) for i in range(50)] + [(i, i + 2) for i in range(0, 48, 3)]
    steps = rvp.change_script(edges, no_new_cycles=True)
    assert [name for name, _ in steps] == ["batch", "insert 1", "delete 1"]
    batch = steps[0][1]
    assert sorted(batch.values()).count(-1) == 10 and sorted(batch.values()).count(1) == 10
    assert all((e in edges) == (w < 0) for e, w in batch.items())
    (one, w1), = steps[1][1].items()
    assert w1 == 1 and steps[2][1] == {one: -1}
    final = {e for e in edges if e not in batch} | {e for e, w in batch.items() if w > 0}
    succ: dict[int, set[int]] = {}
    for a, b in final | {one}:
        succ.setdefault(a, set()).add(b)
    assert not any(rvp._reaches(succ, b, a) for a, b in final | {one})
    # more single edges, drawn against the edges after the steps (one deleted again)
    spread = rvp.spread_edges(edges, steps, no_new_cycles=True)
    assert len(set(spread)) == rvp.SPREAD and not set(spread) & final
    succ = {}
    for a, b in final:
        succ.setdefault(a, set()).add(b)
    for a, b in spread:  # (each alone closes no cycle)
        assert a != b and not rvp._reaches(succ, b, a)


def test_quick_debian_ours_and_duckdb_agree_and_print_a_table() -> None:
    lines: list[str] = []
    results = rvp.run(quick=True, limit=120, systems=["ours", "duckdb"], graphs=["debian"],
                      out=lines.append)
    (outcomes,) = results.values()
    assert [o.system for o in outcomes] == ["ours", "duckdb"]
    ours, duckdb = outcomes
    assert not ours.stopped and set(ours.steps) == {*rvp.STEPS, "spread"}
    assert not duckdb.stopped and set(duckdb.steps) == set(rvp.STEPS)
    # the spread of more single edges: ours is back to the closure after "delete 1"
    assert ours.steps["spread"]["size"] == ours.steps["delete 1"]["size"]
    assert "10+10 batch ms" in "\n".join(lines)
    assert f"{rvp.SPREAD} more edges, each inserted and deleted: median" in "\n".join(lines)
