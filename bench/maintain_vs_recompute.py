"""Maintenance against full recompute, ours and DuckDB's, on the same data in the same run:
the sensitivity indices (Veldhuizen 2014; ``--strategy sensitivity``) and what ``auto``
runs (these non-recursive queries: the columnar DBSP kernel's delta queries).

For each workload, data size and strategy a child process loads the data once, given by
column as a pipeline's first run reads its tables from Arrow (initial evaluation:
sensitivity recording, or the kernel's counts), measures the state a save
writes (bytes per base tuple: ``IncrementalEngine.dumps`` into memory segments), then
applies change batches of 1, 10, 100, 1,000 and 10,000
tuples (half erasures of present rows, half insertions of new ones) and times each
``apply``; the process's first commit (two erasures and two insertions, before them,
then a second change and both undone, untimed) is timed apart: it also loads the compiled loops it
calls from numba's cache. After the batches it
recomputes from scratch with our evaluator and with DuckDB, and checks that the
maintained relations equal our recompute and have DuckDB's row counts. Each child
reports its own peak memory, so the numbers do not mix.

    .venv/bin/python -m bench.maintain_vs_recompute [--quick] [--max-size N] [--strategy S]
"""

import argparse
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import format_table, peak_rss_mb

ROOT = Path(__file__).resolve().parent.parent
CHANGE_SIZES = (1, 10, 100, 1_000, 10_000)


@dataclass(frozen=True)
class Workload:
    name: str
    program: str
    sql: dict[str, str]  # IDB name -> DuckDB query over the EDB tables
    make: Callable[[int, random.Random], dict[str, set[tuple[Any, ...]]]]
    changing: str  # the EDB relation the change batches edit
    fresh: Callable[[random.Random, int], tuple[Any, ...]]  # a new row of `changing`


TRIANGLE = """\
.decl e(x: int, y: int)
tri(x, y, z) :- e(x, y), e(y, z), e(x, z)."""

TRIANGLE_SQL = """\
SELECT DISTINCT a.x, a.y, b.y AS z FROM e a JOIN e b ON b.x = a.y
JOIN e c ON c.x = a.x AND c.y = b.y"""

ACYCLIC = """\
.decl a(x: int, y: int)
.decl b(y: int, z: int)
.decl c(z: int, w: int)
r(x, w) :- a(x, y), b(y, z), c(z, w)."""

ACYCLIC_SQL = """\
SELECT DISTINCT a.x, c.w FROM a JOIN b ON b.y = a.y JOIN c ON c.z = b.z"""

AGGREGATES = """\
.decl e(x: int, y: int)
degree[x] = n <- agg<<n = count()>> e(x, _).
total[x] = n <- agg<<n = sum(y)>> e(x, y).
top[x] = m <- agg<<m = max(y)>> e(x, y)."""

AGGREGATES_SQL = {
    "degree": "SELECT x, count(*) FROM e GROUP BY x",
    "total": "SELECT x, sum(y) FROM e GROUP BY x",
    "top": "SELECT x, max(y) FROM e GROUP BY x",
}


def _random_graph(per_node: int) -> Callable[[int, random.Random],
                                             dict[str, set[tuple[Any, ...]]]]:
    """n distinct edges ``e`` of a random graph on n / ``per_node`` nodes (10 at least)."""
    def make(n: int, rng: random.Random) -> dict[str, set[tuple[Any, ...]]]:
        nodes = max(n // per_node, 10)
        edges: set[tuple[Any, ...]] = set()
        while len(edges) < n:
            edges.add((rng.randrange(nodes), rng.randrange(nodes)))
        return {"e": edges}

    return make


def _acyclic_data(n: int, rng: random.Random) -> dict[str, set[tuple[Any, ...]]]:
    k = n // 3
    dom = max(k // 2, 5)
    out: dict[str, set[tuple[Any, ...]]] = {}
    for name in ("a", "b", "c"):
        rows: set[tuple[Any, ...]] = set()
        while len(rows) < k:
            rows.add((rng.randrange(dom), rng.randrange(dom)))
        out[name] = rows
    return out


def _debian_nonrecursive() -> str:
    """The non-recursive rules of examples/debian/program.dl (requires, the reverse
    dependency count, required, leaf), with the declarations."""
    text = (ROOT / "deltalog" / "examples" / "debian" / "program.dl").read_text()
    keep = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith(".decl") or s.startswith(("requires(", "rdepends_count[",
                                                  "required(", "leaf(")):
            keep.append(line)
    return "\n".join(keep)


DEBIAN_SQL = {
    "requires": """\
SELECT DISTINCT d.pkg, d.dep FROM depends d WHERE d.dep IN (SELECT name FROM package)
UNION
SELECT DISTINCT d.pkg, v.pkg FROM depends d JOIN provides v ON v."virtual" = d.dep
WHERE d.dep NOT IN (SELECT name FROM package)""",
}


def _debian_data(n: int, rng: random.Random) -> dict[str, set[tuple[Any, ...]]]:
    from deltalog.examples.debian.snapshot import load_snapshot

    tables = load_snapshot(1)
    out: dict[str, set[tuple[Any, ...]]] = {}
    for name in ("package", "depends", "provides", "vulnerable"):
        t = tables[name]
        cols = [t.column(i).to_pylist() for i in range(t.num_columns)]
        out[name] = set(zip(*cols, strict=True))
    return out


def _debian_fresh(rng: random.Random, n: int) -> tuple[Any, ...]:
    return (f"pkg{rng.randrange(10**9)}", f"lib{rng.randrange(3000)}")


WORKLOADS = {
    "triangle": Workload(
        "triangle", TRIANGLE, {"tri": TRIANGLE_SQL}, _random_graph(8), "e",
        lambda rng, n: (rng.randrange(max(n // 8, 10)), rng.randrange(max(n // 8, 10))),
    ),
    "acyclic-3way": Workload(
        "acyclic-3way", ACYCLIC, {"r": ACYCLIC_SQL}, _acyclic_data, "b",
        lambda rng, n: (rng.randrange(max(n // 6, 5)), rng.randrange(max(n // 6, 5))),
    ),
    "aggregates": Workload(
        "aggregates", AGGREGATES, AGGREGATES_SQL, _random_graph(10), "e",
        lambda rng, n: (rng.randrange(max(n // 10, 10)), rng.randrange(max(n // 10, 10))),
    ),
    "debian-nonrec": Workload(
        "debian-nonrec", "", DEBIAN_SQL, _debian_data, "depends", _debian_fresh,
    ),
}


def _program(w: Workload) -> str:
    return w.program or _debian_nonrecursive()


STRATEGIES = ("sensitivity", "auto")


def state_bytes(engine: Any) -> int:
    """What a save of ``engine`` writes: its root record, segments and arrays."""
    from deltalog.engine.segments import MemorySegments

    store = MemorySegments()
    root = engine.dumps(store)
    return len(root) + sum(map(len, store.segments.values())) + sum(
        a.nbytes for a in store.arrays)


def measure_one(name: str, n: int, sizes: Sequence[int],
                strategy: str = "sensitivity") -> dict[str, Any]:
    """Everything for one (workload, data size), in this process."""
    import duckdb
    import pyarrow as pa

    from deltalog.engine.analysis.analyze import load_program
    from deltalog.engine.evaluate import evaluate
    from deltalog.engine.runtime import IncrementalEngine
    from deltalog.schemas.relation import arrow_to_columns, rows_to_arrow

    w = WORKLOADS[name]
    rng = random.Random(20261123)
    prog = load_program(_program(w))
    data = w.make(n, rng)
    base = sum(len(v) for v in data.values())
    # The benchmark's own bookkeeping exists before the engine loads, so that the engine's
    # gc.freeze() covers it too: a young million-element container would otherwise be
    # walked by every collection during the timed applies, which is not the engine's cost.
    rows = list(data[w.changing])
    present = set(rows)
    # the inputs as a pipeline's first run gives them: columns read from Arrow
    given = {name: arrow_to_columns(rows_to_arrow(prog.schemas[name], rows))
             for name, rows in data.items()}
    start = time.perf_counter()
    engine = IncrementalEngine(prog, given, strategy)
    init_s = time.perf_counter() - start
    del given
    rss_after_load = peak_rss_mb()
    state = state_bytes(engine)
    # The process's first commit also loads the compiled loops it calls (numba's cache):
    # timed apart (two erasures and two insertions, then undone), so the table's commits
    # are warm.
    warm: list[dict[tuple[Any, ...], int]] = []
    for _ in range(2):
        batch: dict[tuple[Any, ...], int] = dict.fromkeys(
            rng.sample([r for r in rows if all(r not in b for b in warm)], 2), -1)
        while len(batch) < 4:
            row = w.fresh(rng, n)
            if row not in present and row not in batch and all(row not in b for b in warm):
                batch[row] = 1
        warm.append(batch)
    t0 = time.perf_counter()
    engine.apply({w.changing: warm[0]})
    first_s = time.perf_counter() - t0
    # untimed: a second change on top of the first, then both undone (loops the first
    # does not call: a merge into the overlay, a stab of what the first recorded)
    engine.apply({w.changing: warm[1]})
    for batch in reversed(warm):
        engine.apply({w.changing: {row: -wgt for row, wgt in batch.items()}})
    changes = []
    for k in sizes:
        if k > len(rows) // 4:
            continue
        delta: dict[tuple[Any, ...], int] = {}
        for _ in range(k // 2 or 1):
            while True:
                row = rows[rng.randrange(len(rows))]
                if row in present and row not in delta:
                    break
            delta[row] = -1
        while len(delta) < k:
            row = w.fresh(rng, n)
            if row not in present and row not in delta:
                delta[row] = 1
        t0 = time.perf_counter()
        out = engine.apply({w.changing: delta})
        dt = time.perf_counter() - t0
        for row, wgt in delta.items():
            if wgt > 0:
                present.add(row)
                rows.append(row)
            else:
                present.discard(row)
        work = engine.last_stats.work
        changes.append({
            "k": k,
            "seconds": dt,
            "iterator_ops": work.get("iterator_ops"),
            "oracle_regions": work.get("oracle_regions"),
            "delta_queries": work.get("delta_queries"),
            "out": sum(len(d) for d in out.values()),
        })
    # Recompute from scratch on the final data: ours, then DuckDB; check the answers.
    edb = {p: (present if p == w.changing else data[p]) for p in prog.edb}
    t0 = time.perf_counter()
    expected = evaluate(prog, edb)
    ours_s = time.perf_counter() - t0
    for p in prog.idb:
        if engine.relation(p) != expected[p]:
            raise AssertionError(f"{name} n={n}: maintained {p} differs from recompute")
    con = duckdb.connect()
    for p in prog.edb:
        schema = prog.schemas[p]
        cols: list[Sequence[Any]] = (
            list(zip(*edb[p], strict=True)) if edb[p] else [[] for _ in schema.columns]
        )
        table = pa.table({c.name: list(v) for c, v in zip(schema.columns, cols, strict=True)})
        con.register(f"_{p}", table)
        con.execute(f'CREATE TABLE "{p}" AS SELECT * FROM "_{p}"')
    duck_s = 0.0
    for p, sql in w.sql.items():
        t0 = time.perf_counter()
        count = con.execute(f"SELECT count(*) FROM ({sql})").fetchone()
        duck_s += time.perf_counter() - t0
        assert count is not None
        if count[0] != len(expected[p]):
            raise AssertionError(f"{name} n={n}: DuckDB {p} has {count[0]} rows, "
                                 f"we have {len(expected[p])}")
    return {
        "workload": name, "strategy": strategy, "n": base, "state_b": state / base,
        "init_s": init_s, "first_ms": first_s * 1000,
        "ours_s": ours_s, "duck_s": duck_s,
        "rss_load_mb": rss_after_load, "rss_peak_mb": peak_rss_mb(), "changes": changes,
        "out_rows": sum(len(v) for v in expected.values()),
    }


def run(sizes: Sequence[int], workloads: Sequence[str], out: Callable[[str], None] = print,
        changes: Sequence[int] = CHANGE_SIZES,
        strategies: Sequence[str] = STRATEGIES) -> list[dict[str, Any]]:
    results = []
    for name in workloads:
        for n in (sizes if name != "debian-nonrec" else sizes[:1]):
            for strategy in strategies:
                cmd = [sys.executable, "-m", "bench.maintain_vs_recompute", "--one", name,
                       str(n), "--changes", ",".join(map(str, changes)),
                       "--strategy", strategy]
                proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                      check=False)
                if proc.returncode != 0:
                    raise RuntimeError(f"{name} n={n} {strategy} failed:\n"
                                       f"{proc.stderr[-3000:]}")
                results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    rows = []
    for r in results:
        for c in r["changes"]:
            ms = c["seconds"] * 1000
            rows.append([
                r["workload"], r["strategy"], r["n"], c["k"], ms,
                *("-" if c[k] is None else c[k]
                  for k in ("iterator_ops", "oracle_regions", "delta_queries")),
                r["ours_s"], r["duck_s"], f"{r['ours_s'] * 1000 / ms:,.0f}x",
                f"{r['duck_s'] * 1000 / ms:,.1f}x", r["init_s"], r["first_ms"],
                round(r["state_b"]), round(r["rss_peak_mb"]),
            ])
    out(format_table(
        ["workload", "strategy", "base tuples", "change", "maintain ms", "iter ops",
         "oracle regions", "delta queries", "recompute ours s", "recompute DuckDB s",
         "ours/maintain", "DuckDB/maintain", "load s", "first commit ms",
         "state B/tuple", "peak RSS MiB"],
        rows,
    ))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--max-size", type=int, default=1_000_000,
                    help="largest number of base tuples (default 10^6)")
    ap.add_argument("--workload", action="append", choices=sorted(WORKLOADS))
    ap.add_argument("--one", nargs=2, metavar=("WORKLOAD", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--changes", default=",".join(map(str, CHANGE_SIZES)),
                    help=argparse.SUPPRESS)
    ap.add_argument("--strategy", action="append", choices=STRATEGIES,
                    help="the strategies to compare (default: both)")
    args = ap.parse_args(argv)
    changes = [int(x) for x in args.changes.split(",")]
    strategies = args.strategy or list(STRATEGIES)
    if args.one:
        print(json.dumps(measure_one(args.one[0], int(args.one[1]), changes, strategies[0])))
        return 0
    if args.quick:
        sizes = [1_000, 10_000]
        changes = [1, 10, 100]
    else:
        sizes = [s for s in (10_000, 100_000, 1_000_000) if s <= args.max_size]
    names = args.workload or ["triangle", "acyclic-3way", "aggregates", "debian-nonrec"]
    print("Maintenance (sensitivity indices; auto: the columnar DBSP kernel) vs full "
          "recompute; changes: half erasures, half insertions")
    run(sizes, names, changes=changes, strategies=strategies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
