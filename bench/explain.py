"""Lineage latency against data size: ``deltalog explain`` and ``deltalog what-if`` on a
transitive closure over random graphs, beside DuckDB recomputing the same closure.

For each size (10^3, 10^4, 10^5 edges; ``--sizes`` to choose), in a temporary warehouse: a
one-stratum pipeline (``path`` over ``edge``, the closure of ``bench.eval_vs_duckdb``) on a
seeded random graph of n edges between 2n nodes, materialized once (a full load, as
``deltalog.pipelines.run`` does); then, each the median of 3:

- ``explain``: ``deltalog.pipelines.lineage.explain`` of a row of ``path`` (one of the rows with the
  tallest derivation), all of it: reading the current tables, building the explainer, the
  search, the versions of the EDB leaves from the change feed; ``in memory`` is the part
  after the tables are read (``deltalog.engine.explain.Explainer`` built on the rows, then asked);
- ``what-if``: ``deltalog.pipelines.lineage.what_if`` deleting one edge: the saved state loaded, the
  change applied in memory, nothing written;
- DuckDB 2: the same closure recomputed (``WITH RECURSIVE ... UNION``) on the same edges,
  already loaded in an in-memory table, best of 3: what answering "what if" costs by
  recomputing.

Then the bytes stored under the warehouse (tables and saved state) before and after the
lineage questions: lineage stores nothing. And one incremental run after a 10-edge change,
with the time its materialization spent on the metadata's lineage sample.

Run: ``.venv/bin/python -m bench.explain`` (about a minute on 2 cores).
"""

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from bench.common import format_table, timed, write_pipeline
from bench.eval_vs_duckdb import TC_PROGRAM, TC_SQL, random_edges

SIZES = (1_000, 10_000, 100_000)


def _stored(root: Path) -> tuple[int, int]:
    """(files, bytes) under ``root``."""
    files = [f for f in root.rglob("*") if f.is_file()]
    return len(files), sum(f.stat().st_size for f in files)


def _median(fn: Callable[[], Any], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _tallest_row(spec: Any, root: Path) -> tuple[int, int]:
    """A row of ``path`` with the tallest minimal derivation among a sample of rows."""
    from deltalog.engine.explain import Explainer
    from deltalog.pipelines import lineage

    relations, _ = lineage.current_relations(root, spec)
    explainer = Explainer(spec.program, relations)
    rows = sorted(relations["path"])
    sample = random.Random(7).sample(rows, min(200, len(rows)))

    def height(row: tuple[Any, ...]) -> int:
        tree = explainer.explain("path", row)
        return tree.height if tree is not None else -1

    a, b = max(sample, key=height)
    return int(a), int(b)


def measure(n: int, folder: Path) -> dict[str, Any]:
    from deltalog.engine.explain import Explainer
    from deltalog.pipelines import lineage
    from deltalog.pipelines.run import StratumRun
    from deltalog.pipelines.warehouse import write_edb

    spec = write_pipeline(folder / "tc", TC_PROGRAM)
    root = folder / "warehouse"
    edges = random_edges(2 * n, n, seed=n)
    write_edb(root, spec, {"edge": edges})
    (result,), load_s = timed(lambda: StratumRun(root, spec, 0).materialize())
    a, b = _tallest_row(spec, root)
    fact = f"path({a}, {b})"
    before = _stored(root)
    explain_s = _median(lambda: lineage.explain(root, spec, fact))
    relations, _ = lineage.current_relations(root, spec)
    search_s = _median(lambda: Explainer(spec.program, relations).explain("path", (a, b)))
    tree = Explainer(spec.program, relations).explain("path", (a, b))
    assert tree is not None
    src, dst = edges.column("src")[0].as_py(), edges.column("dst")[0].as_py()
    change: dict[str, Any] = {}

    def what_if() -> None:
        change.update(lineage.what_if(root, spec, delete=[f"edge({src}, {dst})"]))

    what_if_s = _median(what_if)
    after = _stored(root)
    con = duckdb.connect()
    con.register("edges_arrow", edges)
    con.execute("CREATE TABLE edge AS SELECT * FROM edges_arrow")
    def recompute() -> int:
        row = con.execute(f"SELECT count(*) FROM ({TC_SQL})").fetchone()
        assert row is not None
        return int(row[0])

    duck_rows, duck_s = timed(recompute, repeat=3)
    if duck_rows != result.rows:
        raise AssertionError(f"DuckDB's closure has {duck_rows} rows, ours {result.rows}")
    # one incremental run after 10 changed edges, and its lineage sample's own time
    rng = random.Random(n + 1)
    present = set(zip(edges.column("src").to_pylist(), edges.column("dst").to_pylist(),
                      strict=True))
    removed = set(rng.sample(sorted(present), 5))
    present -= removed
    while len(present) < n:
        x, y = rng.randrange(2 * n), rng.randrange(2 * n)
        if x != y and (x, y) not in removed:
            present.add((x, y))
    pairs = sorted(present)
    write_edb(root, spec, {"edge": pa.table({"src": [p[0] for p in pairs],
                                             "dst": [p[1] for p in pairs]})})
    (step,), step_s = timed(lambda: StratumRun(root, spec, 0).materialize())
    sample_ms = float(step.lineage.rsplit("computed in ", 1)[1].split(" ms")[0]) \
        if step.lineage else 0.0
    return {
        "edges": n, "closure": result.rows, "load_s": load_s, "fact": fact,
        "height": tree.height, "explain_ms": explain_s * 1000, "search_ms": search_s * 1000,
        "what_if_ms": what_if_s * 1000, "what_if_rows": sum(len(d) for d in change.values()),
        "duckdb_ms": duck_s * 1000, "stored_before": before, "stored_after": after,
        "run_ms": step_s * 1000, "sample_ms": sample_ms, "trees": "```" in step.lineage,
    }


def run(sizes: Sequence[int], out: Callable[[str], None] = print) -> list[dict[str, Any]]:
    results = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="deltalog-bench-explain-") as tmp:
            results.append(measure(n, Path(tmp)))
    out("Lineage latency (median of 3) against data size: transitive closure over random "
        f"graphs (n edges, 2n nodes); DuckDB {duckdb.__version__} recomputes the closure")
    out(format_table(
        ["edges", "closure rows", "row explained", "height", "explain ms", "in memory ms",
         "what-if ms", "rows changed", "DuckDB recompute ms", "stored bytes before/after"],
        [[r["edges"], r["closure"], r["fact"], r["height"], round(r["explain_ms"], 1),
          round(r["search_ms"], 2), round(r["what_if_ms"], 1), r["what_if_rows"],
          round(r["duckdb_ms"], 1),
          f"{r['stored_before'][1]:,}/{r['stored_after'][1]:,}"
          + ("" if r["stored_before"] == r["stored_after"] else " CHANGED")]
         for r in results],
    ))
    out("")
    out("One incremental run after a 10-edge change, and its materialization's lineage sample:")
    out(format_table(
        ["edges", "stratum rows", "run ms", "lineage sample ms", "share", "trees drawn"],
        [[r["edges"], r["edges"] + r["closure"], round(r["run_ms"], 1), round(r["sample_ms"], 2),
          f"{r['sample_ms'] / r['run_ms']:.0%}",
          "yes" if r["trees"] else "no (stratum over the limit)"] for r in results],
    ))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    args = parser.parse_args(argv)
    results = run(args.sizes)
    return 0 if all(r["stored_before"] == r["stored_after"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
