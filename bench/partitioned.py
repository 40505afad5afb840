"""Partitioned maintenance on Spark against the single-process engine, on this machine.

Three workloads, each a one-stratum pipeline on Delta tables: the transitive closure of
the Debian ``requires`` edges and of WordNet's is-a edges (``bench.recursion_vs_peers``'
graphs: left-linear recursion, partitioned by its source with the edges broadcast, the
plan of BigDatalog), and the triangle query over a random graph (``bench.eval_vs_duckdb``'
program; a hypercube when the edges are too many to broadcast). For each workload and each
way of running it — one process (``partitions = 1``) and Spark with 2 and 8 partitions
(local Spark, two worker threads) — the EDB table is written, the stratum loaded, then
``RUNS`` changes of 10 rows (5 edges deleted, 5 edges from a new node inserted) are
maintained. Shown: the plan, the load's seconds, the median change's seconds and its
ratio to DuckDB recomputing the query on the same data in this process (the peer: what a
run costs that keeps no state), rows and bytes the change's shuffle carried (routed rows,
broadcast copies included), and the saved state (all partitions, and per partition).

The triangles run twice more with nothing broadcast (2 and 8 partitions): the hypercube.

    .venv/bin/python -m bench.partitioned [--quick] [--full] [--broadcast-rows N]
        [--only debian,wordnet,triangles]
"""

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from bench.common import format_table, write_pipeline

RUNS = 3
CHANGE = 10
MODES = (1, 2, 8)  # partitions; 1 is the single-process engine
HYPERCUBE = (2, 8)  # the triangles again, nothing broadcast: a hypercube
Edge = tuple[int, int]

CLOSURE = """\
.decl edge(src: int, dst: int)
path(x, y) :- edge(x, y).
path(x, z) :- path(x, y), edge(y, z)."""


def workloads(quick: bool, full: bool) -> list[tuple[str, str, str, list[Edge]]]:
    """(name, program, DuckDB SQL, edges): the Debian closure, the WordNet closure, the
    triangles."""
    from bench.eval_vs_duckdb import TC_SQL, TRIANGLE_PROGRAM, TRIANGLE_SQL, random_edges
    from bench.recursion_vs_peers import debian_graph, wordnet_graph

    out = []
    for graph in (debian_graph, wordnet_graph):
        name, edges = graph(quick)
        out.append((f"{name} closure", CLOSURE, TC_SQL, edges))
    nodes, n = (2_000, 10_000) if quick else (100_000, 1_000_000) if full else (20_000, 100_000)
    t = random_edges(nodes, n, seed=2)
    edges = list(zip(t["src"].to_pylist(), t["dst"].to_pylist(), strict=True))
    out.append((f"triangles {n:,} edges", TRIANGLE_PROGRAM, TRIANGLE_SQL, edges))
    return out


def _table(edges: Sequence[Edge]) -> pa.Table:
    return pa.table({"src": [a for a, _ in edges], "dst": [b for _, b in edges]},
                    schema=pa.schema([("src", pa.int64()), ("dst", pa.int64())]))


def _changes(edges: list[Edge], rng: random.Random) -> list[list[Edge]]:
    """The edge set after each of ``RUNS`` changes: 5 present edges deleted, 5 edges from a
    new node (no edge enters it, so no new cycle) to present nodes inserted."""
    current = set(edges)
    top = max(max(e) for e in edges) + 1
    targets = sorted({b for _, b in edges})
    out = []
    for run in range(RUNS):
        gone = rng.sample(sorted(current), CHANGE // 2)
        new = {(top + run, rng.choice(targets)) for _ in range(CHANGE // 2)}
        current = (current - set(gone)) | new
        out.append(sorted(current))
    return out


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.exists() else 0


def _duckdb_seconds(sql: str, edges: Sequence[Edge]) -> float:
    con = duckdb.connect()
    con.register("edge_in", _table(edges))
    con.execute("CREATE TABLE edge AS SELECT * FROM edge_in")
    start = time.perf_counter()
    con.execute(f"CREATE TABLE result AS {sql}")
    seconds = time.perf_counter() - start
    con.close()
    return seconds


def measure(spark: Any, name: str, program: str, sql: str, edges: list[Edge],
            parts: int, broadcast_rows: int, tmp: Path) -> dict[str, Any]:
    from deltalog.pipelines.run import StratumRun
    from deltalog.pipelines.state_store import state_dir
    from deltalog.pipelines.warehouse import write_edb

    spec = write_pipeline(tmp / f"p{parts}" / "bench", program)
    root = tmp / f"w{parts}"
    index = len(spec.program.strata) - 1
    kw: dict[str, Any] = {"partitions": parts, "broadcast_rows": broadcast_rows}
    if parts > 1:
        kw["spark"] = spark
    write_edb(root, spec, {"edge": _table(edges)})
    start = time.perf_counter()
    [first, *_] = StratumRun(root, spec, index, **kw).materialize()
    load_s = time.perf_counter() - start
    seconds, peer, shuffled, shuffled_bytes = [], [], [], []
    for after in _changes(edges, random.Random(7)):
        write_edb(root, spec, {"edge": _table(after)})
        start = time.perf_counter()
        [result, *_] = StratumRun(root, spec, index, **kw).materialize()
        seconds.append(time.perf_counter() - start)
        assert result.mode == "incremental", (result.mode, result.notes)
        shuffled.append(int(result.stats.get("shuffled_rows", 0)))
        shuffled_bytes.append(int(result.stats.get("shuffled_bytes", 0)))
        peer.append(_duckdb_seconds(sql, after))
    state = _folder_bytes(state_dir(root, spec.name))
    change_s, duck_s = statistics.median(seconds), statistics.median(peer)
    return {
        "workload": name, "edges": len(edges), "partitions": parts,
        "plan": first.stats.get("partitioning", "one process"),
        "rows": first.rows, "load_s": round(load_s, 3), "change_s": round(change_s, 4),
        "duckdb_s": round(duck_s, 4), "ratio": round(change_s / duck_s, 3),
        "shuffled_rows": int(statistics.median(shuffled)),
        "shuffled_bytes": int(statistics.median(shuffled_bytes)),
        "state_bytes": state, "state_bytes_per_partition": state // parts,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.partitioned", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small graphs, a smoke run")
    parser.add_argument("--full", action="store_true",
                        help="triangles at 10^6 edges (default 10^5; minutes per mode)")
    parser.add_argument("--broadcast-rows", type=int, default=1_000_000, metavar="N",
                        help="inputs of at most N rows may be broadcast (default 10^6, so "
                        "the closures' edges are, and 10^6 triangle edges take a hypercube "
                        "only below that)")
    parser.add_argument("--only", metavar="NAMES", default="debian,wordnet,triangles",
                        help="the workloads to run (default all three)")
    args = parser.parse_args(argv)
    from deltalog.pipelines.spark.session import make_spark_session

    spark = make_spark_session("deltalog-bench")
    print(f"# partitioned: maintenance on local Spark ({spark.sparkContext.master}) with "
          f"1 (one process), 2 and 8 partitions; median of {RUNS} changes of {CHANGE} rows")
    rows = []
    only = {w.strip() for w in args.only.split(",")}
    for name, program, sql, edges in workloads(args.quick, args.full):
        if name.split()[0] not in only:
            continue
        modes = [(parts, args.broadcast_rows) for parts in MODES]
        if name.startswith("triangles"):
            modes += [(parts, 0) for parts in HYPERCUBE]
        for parts, broadcast in modes:
            with tempfile.TemporaryDirectory() as tmp:
                r = measure(spark, name, program, sql, edges, parts, broadcast, Path(tmp))
            print(json.dumps(r), file=sys.stderr, flush=True)
            rows.append(r)
    print(format_table(
        ["workload", "edges", "partitions", "plan", "result rows", "load s", "change s",
         "DuckDB recompute s", "change/DuckDB", "shuffled rows", "shuffled KiB",
         "state MiB", "MiB/partition"],
        [[r["workload"], r["edges"], r["partitions"], r["plan"][:60], r["rows"], r["load_s"],
          r["change_s"], r["duckdb_s"], f"{r['ratio']:.2f}x", r["shuffled_rows"],
          round(r["shuffled_bytes"] / 1024, 1), round(r["state_bytes"] / 2**20, 1),
          round(r["state_bytes_per_partition"] / 2**20, 1)] for r in rows]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
