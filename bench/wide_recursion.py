"""Recursion over relations of three columns: reachability by edge label on a random
graph, ``lab(x, z, l) :- lab(x, y, l), t(y, z, l).``, maintained by the columnar DBSP
kernel (rows packed through pair codes) and by the tuple-at-a-time kernel it replaced, and
recomputed by DuckDB (``WITH RECURSIVE ... UNION``) on the same data in the same run.

``python -m bench.wide_recursion [--quick]``. Each system loads the graph, takes a batch
of 10 deleted and 10 inserted edges, then one inserted edge, then its deletion; the
closure's size after every step is asserted equal across systems.
"""

import argparse
import random
from collections.abc import Sequence
from typing import Any

from bench.common import format_table, timed

PROGRAM = """
.decl t(a: int, b: int, l: int)
lab(x, y, l) :- t(x, y, l).
lab(x, z, l) :- lab(x, y, l), t(y, z, l).
"""
QUERY = """
WITH RECURSIVE lab(x, y, l) AS (
    SELECT a, b, l FROM t
    UNION
    SELECT lab.x, t.b, lab.l FROM lab JOIN t ON t.a = lab.y AND t.l = lab.l)
SELECT count(*) FROM lab"""
Row = tuple[int, int, int]


def graph(nodes: int, edges: int, labels: int, seed: int = 1) -> set[Row]:
    rng = random.Random(seed)
    out: set[Row] = set()
    while len(out) < edges:
        a, b = rng.randrange(nodes), rng.randrange(nodes)
        if a != b:
            out.add((a, b, rng.randrange(labels)))
    return out


def steps(edges: set[Row], nodes: int, labels: int, seed: int = 2
          ) -> list[tuple[str, dict[Row, int]]]:
    rng = random.Random(seed)
    deleted = rng.sample(sorted(edges), 10)
    fresh: set[Row] = set()
    while len(fresh) < 11:
        a, b = rng.randrange(nodes), rng.randrange(nodes)
        row = (a, b, rng.randrange(labels))
        if a != b and row not in edges:
            fresh.add(row)
    one = sorted(fresh)[-1]
    batch = {r: -1 for r in deleted} | {r: 1 for r in sorted(fresh)[:10]}
    return [("batch", batch), ("insert 1", {one: 1}), ("delete 1", {one: -1})]


def run_ours(edges: set[Row], changes: list[tuple[str, dict[Row, int]]],
             columnar: bool) -> dict[str, tuple[float, int]]:
    from deltalog.engine.analysis.analyze import load_program
    from deltalog.engine.dbsp.columnar import ColumnarStratum
    from deltalog.engine.runtime import IncrementalEngine

    prog = load_program(PROGRAM)
    engine, seconds = timed(lambda: IncrementalEngine(prog, {"t": set(edges)}, "auto",
                                                      columnar=columnar))
    on_columnar = any(isinstance(m, ColumnarStratum) for _, m in engine.strata)
    assert on_columnar == columnar, "the stratum is not on the kernel asked for"
    out = {"load": (seconds, len(engine.relation("lab")))}
    for name, change in changes:
        _, seconds = timed(lambda c=change: engine.apply({"t": c}))  # type: ignore[misc]
        out[name] = (seconds, len(engine.relation("lab")))
    return out


def run_duckdb(edges: set[Row], changes: list[tuple[str, dict[Row, int]]]
               ) -> dict[str, tuple[float, int]]:
    import duckdb
    import pyarrow as pa

    con = duckdb.connect()
    rows = sorted(edges)
    table = pa.table({"a": [r[0] for r in rows], "b": [r[1] for r in rows],
                      "l": [r[2] for r in rows]})

    def load() -> int:
        con.register("edges_in", table)
        con.execute("CREATE TABLE t AS SELECT * FROM edges_in")
        return int(con.execute(QUERY).fetchone()[0])  # type: ignore[index]

    count, seconds = timed(load)
    out = {"load": (seconds, count)}
    for name, change in changes:
        def step(c: dict[Row, int] = change) -> int:
            for (a, b, lab), w in c.items():
                if w > 0:
                    con.execute("INSERT INTO t VALUES (?, ?, ?)", [a, b, lab])
                else:
                    con.execute("DELETE FROM t WHERE a = ? AND b = ? AND l = ?", [a, b, lab])
            return int(con.execute(QUERY).fetchone()[0])  # type: ignore[index]

        count, seconds = timed(step)
        out[name] = (seconds, count)
    con.close()
    return out


def _ratio(theirs: float, ours: float) -> str:
    return f"{theirs / ours:.1f}x" if ours > 0 else "n/a"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wide_recursion", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a small graph, for a smoke run")
    args = parser.parse_args(argv)
    nodes, n_edges, labels = (500, 1_500, 3) if args.quick else (3_000, 9_000, 3)
    edges = graph(nodes, n_edges, labels)
    changes = steps(edges, nodes, labels)
    results: dict[str, dict[str, tuple[float, int]]] = {
        "columnar kernel": run_ours(edges, changes, columnar=True),
        "tuple kernel": run_ours(edges, changes, columnar=False),
        "duckdb": run_duckdb(edges, changes),
    }
    names = ["load", *(name for name, _ in changes)]
    for name in names:
        sizes = {system: r[name][1] for system, r in results.items()}
        assert len(set(sizes.values())) == 1, (name, sizes)
    ours = results["columnar kernel"]
    rows: list[list[Any]] = []
    for system, r in results.items():
        row: list[Any] = [system, r["load"][0]]
        for name, _ in changes:
            row.append(r[name][0] * 1000)
            row.append("" if system == "columnar kernel" else _ratio(r[name][0], ours[name][0]))
        rows.append(row)
    print(f"reachability by label: {nodes:,} nodes, {n_edges:,} edges, {labels} labels; "
          f"closure {ours['load'][1]:,} rows (equal in every system after every step)")
    print(format_table(["system", "load s", "10+10 batch ms", "vs ours", "insert 1 ms",
                        "vs ours", "delete 1 ms", "vs ours"], rows))
    print("ms: wall clock of one step; 'vs ours': their time over the columnar kernel's "
          "(above 1x: the columnar kernel is faster). duckdb edits its table and recomputes.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
