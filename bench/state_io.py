"""What a run costs against the data size, as users run it: the Dagster CLI executing a
pipeline's update job after a 10-row change to each of its two EDB tables.

The pipeline: the triangle query over one table ``e`` (a non-recursive stratum) and the
transitive closure over another, ``edge`` (a recursive one), both maintained by the
columnar DBSP kernel under ``auto``, with the data generators of
``bench.maintain_vs_recompute`` (a random graph with n/8 nodes) and of
``bench.recursion_vs_peers`` (``random_edges`` with 2n nodes, a sparse graph whose closure
stays near 2n). For each size: the EDB tables are written, the update job runs once (the
full load), then ``RUNS`` times: 5 erasures of present rows and 5 insertions of new ones
per table, then ``dagster job execute -m deltalog.dagster_project.definitions -j stateio_update``
in a process of its own (what a user or a schedule starts), timed from outside, its peak
RSS (the largest of its processes) taken from the OS, and the engine's own numbers read
from the run's materializations in the Dagster instance: ``state_open_s`` (reading the
saved state and opening the engine), ``state_bytes_read`` (segments read whole and the
pages of large sorted runs mapped in), ``state_save_s``, ``state_bytes_written`` and the
engine's own seconds, summed over the two strata; the strata's whole runs (``strata s``:
the run less the Dagster CLI's own start, definitions and event log, about 2 s here at any
size); and the run's own duration as the Dagster instance records it (its start to its
end: what the UI shows, without the CLI process's start). The median run of ``RUNS`` is
shown, with ratios against the size of 10^4 rows per table.

The peers, on the same data at each size: DuckDB recomputing both queries from the rows in
this process, and Spark (local, the session started beforehand) recomputing them from the
EDB tables' files with the program compiled as the ``<pipeline>_rebuild`` job does (best
of two, one from 10^6 rows per table; rows counted in Spark): what a run costs that
keeps no state at all.

    .venv/bin/python -m bench.state_io [--quick] [--max-size N | --full | --sizes N,M]
        [--no-spark]
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import format_table, write_pipeline
from deltalog.engine.values import Row

ROOT = Path(__file__).resolve().parent.parent
# Rows per table (two tables): 10^3 to 10^7 base tuples in all.
SIZES = (500, 10_000, 100_000, 1_000_000, 5_000_000)
DEFAULT_MAX = 100_000  # 10^6 per table takes minutes to load: --full or --max-size
RUNS = 3
CHANGE = 10
PIPELINE = "stateio"
JOB = f"{PIPELINE}_update"
STRATA_KEYS = ("tri", "path")  # one IDB table of each stratum

Data = dict[str, set[Row]]


def program() -> str:
    from bench.eval_vs_duckdb import TC_PROGRAM
    from bench.maintain_vs_recompute import TRIANGLE

    return TRIANGLE + "\n" + TC_PROGRAM + "\n"


def make_data(n: int, rng: random.Random) -> Data:
    from bench.eval_vs_duckdb import random_edges
    from bench.maintain_vs_recompute import WORKLOADS

    data = dict(WORKLOADS["triangle"].make(n, rng))
    t = random_edges(_tc_nodes(n), n, seed=rng.randrange(2**31))
    data["edge"] = set(zip(t["src"].to_pylist(), t["dst"].to_pylist(), strict=True))
    return data


def _tc_nodes(n: int) -> int:
    return max(2 * n, 10)


def _fresh(pred: str, rng: random.Random, n: int) -> Row:
    from bench.maintain_vs_recompute import WORKLOADS

    if pred == "e":
        return WORKLOADS["triangle"].fresh(rng, n)  # type: ignore[no-any-return]
    while True:
        a, b = rng.randrange(_tc_nodes(n)), rng.randrange(_tc_nodes(n))
        if a != b:
            return (a, b)


def change(data: Data, n: int, rng: random.Random) -> None:
    """5 erasures of present rows and 5 insertions of new ones in each table, in place."""
    for pred, rows in data.items():
        listed = sorted(rows)
        for row in rng.sample(listed, CHANGE // 2):
            rows.discard(row)
        added = 0
        while added < CHANGE - CHANGE // 2:
            row = _fresh(pred, rng, n)
            if row not in rows:
                rows.add(row)
                added += 1


def _tables(spec: Any, data: Data) -> dict[str, Any]:
    from deltalog.schemas.relation import rows_to_arrow

    return {p: rows_to_arrow(spec.program.schemas[p], rows) for p, rows in data.items()}


# The child that runs the Dagster CLI and reports its peak RSS: RUSAGE_CHILDREN holds the
# largest of the processes it waited for (the CLI and the step processes it starts).
_MEASURE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
seconds = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"code": proc.returncode, "seconds": seconds, "rss_mb": rss,
                  "stderr": proc.stderr[-3000:]}))
"""


def _dagster_run(env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, "-c", _MEASURE, str(Path(sys.executable).parent / "dagster"),
           "job", "execute", "-m", "deltalog.dagster_project.definitions", "-j", JOB]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["code"] != 0:
        raise RuntimeError(f"{JOB} failed:\n{out['stderr']}")
    return out


def _engine_numbers(home: Path) -> dict[str, float]:
    """The last run's state and engine numbers, summed over the strata (one IDB table of
    each), from the materializations the Dagster instance recorded."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home)
    totals = {"state_open_s": 0.0, "state_save_s": 0.0, "state_bytes_written": 0.0,
              "state_bytes_read": 0.0, "engine_seconds": 0.0, "strata_s": 0.0}
    with dg.DagsterInstance.get() as instance:
        keys = {k.path[-1]: k for k in instance.get_asset_keys()}
        for name in STRATA_KEYS:
            event = instance.get_latest_materialization_event(keys[name])
            assert event is not None and event.asset_materialization is not None
            meta = event.asset_materialization.metadata
            if str(meta["mode"].value) != "incremental":
                raise RuntimeError(f"{name}: a {meta['mode'].value} run, not incremental")
            for k in totals:
                name_in_meta = "seconds" if k == "strata_s" else k
                totals[k] += float(meta[name_in_meta].value)  # type: ignore[arg-type]
    return totals


def _duckdb_seconds(data: Data) -> float:
    """DuckDB recomputing both queries from the data (tables already in memory)."""
    import duckdb
    import pyarrow as pa

    from bench.eval_vs_duckdb import TC_SQL
    from bench.maintain_vs_recompute import TRIANGLE_SQL

    con = duckdb.connect()
    e = pa.table({"x": [r[0] for r in data["e"]], "y": [r[1] for r in data["e"]]})
    edge = pa.table({"src": [r[0] for r in data["edge"]], "dst": [r[1] for r in data["edge"]]})
    con.register("e", e)
    con.register("edge", edge)
    start = time.perf_counter()
    con.execute(f"SELECT count(*) FROM ({TRIANGLE_SQL})").fetchall()
    con.execute(f"SELECT count(*) FROM ({TC_SQL})").fetchall()
    return time.perf_counter() - start


def _dagster_run_seconds(home: Path) -> float:
    """The last run's own duration in the Dagster instance (its start to its end, as the
    UI shows it): the run without the CLI process's start and definitions."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home)
    with dg.DagsterInstance.get() as instance:
        [record] = instance.get_run_records(limit=1)
        assert record.start_time is not None and record.end_time is not None
        return record.end_time - record.start_time


def _spark_seconds(spark: Any, root: Path, spec: Any) -> float:
    """Spark recomputing both queries from the EDB tables' latest versions (read from their
    files), counted in Spark; the session is started before."""
    from deltalog.pipelines.recompute import table_frames
    from deltalog.pipelines.spark.compiler import recompute

    frames = table_frames(spark, root, spec, dict.fromkeys(spec.program.edb))
    start = time.perf_counter()
    got = recompute(spark, spec.program, frames, list(STRATA_KEYS))
    for df in got.values():
        df.count()
    return time.perf_counter() - start


def measure(n: int, say: Any = print, spark: Any = None) -> dict[str, Any]:
    from deltalog.pipelines.warehouse import write_edb

    rng = random.Random(20261125)
    data = make_data(n, rng)
    base = sum(len(v) for v in data.values())
    with tempfile.TemporaryDirectory(prefix="deltalog-state-io-") as tmp:
        spec = write_pipeline(Path(tmp) / "pipelines" / PIPELINE, program())
        root = Path(tmp) / "warehouse"
        home = Path(tmp) / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
        env = {**os.environ, "DAGSTER_HOME": str(home), "DELTALOG_WAREHOUSE": str(root),
               "DELTALOG_PIPELINES": str(spec.directory.parent)}
        env.pop("DELTALOG_STATE", None)
        write_edb(root, spec, _tables(spec, data))
        full = _dagster_run(env)
        say(f"  {base:,} base tuples: full load {full['seconds']:.1f} s")
        runs = []
        for _ in range(RUNS):
            change(data, n, rng)
            write_edb(root, spec, _tables(spec, data))
            got = _dagster_run(env)
            got.update(_engine_numbers(home))
            got["dagster_run_s"] = _dagster_run_seconds(home)
            runs.append(got)
        state_bytes = sum(f.stat().st_size for f in (root / "_deltalog_state").rglob("*")
                          if f.is_file())
        duck = min(_duckdb_seconds(data) for _ in range(2))
        tries = 2 if n < 1_000_000 else 1  # a recompute at 10^6 rows per table takes minutes
        sparks = min(_spark_seconds(spark, root, spec) for _ in range(tries)) if spark else None
    median = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    return {"n": base, "full_s": full["seconds"], "state_mb": state_bytes / 2**20,
            "duckdb_s": duck, "spark_s": sparks,
            **{k: v for k, v in median.items() if k != "stderr"},
            "bytes_written_runs": [r["state_bytes_written"] for r in runs]}


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def run(sizes: Sequence[int], say: Any = print, spark: bool = False) -> list[dict[str, Any]]:
    session = None
    if spark:
        from deltalog.pipelines.spark.session import make_spark_session

        session = make_spark_session("deltalog-bench-state-io")
    try:
        results = []
        for n in sizes:
            results.append(measure(n, say, session))
            # each size's numbers as soon as they are measured (a larger size may take long)
            say("  " + json.dumps({k: v for k, v in results[-1].items()
                                   if k != "bytes_written_runs"}))
    finally:
        if session is not None:
            session.stop()
    # The reference row: 10^4 rows per table when measured (the aim compares 10^6 with it).
    ref = next((r for r in results if r["n"] == 20_000), results[0])
    say(f"Ratios against {ref['n']:,} base tuples.")
    say(format_table(
        ["base tuples", "state MiB", "full load s", "run s (CLI)", "ratio", "Dagster run s",
         "ratio", "strata s", "ratio", "peak RSS MiB", "RSS vs ref MiB"],
        [[r["n"], f"{r['state_mb']:.1f}", r["full_s"], r["seconds"],
          _ratio(r["seconds"], ref["seconds"]), r["dagster_run_s"],
          _ratio(r["dagster_run_s"], ref["dagster_run_s"]), r["strata_s"],
          _ratio(r["strata_s"], ref["strata_s"]), round(r["rss_mb"]),
          round(r["rss_mb"] - ref["rss_mb"])] for r in results],
    ))
    say(format_table(
        ["base tuples", "state open s", "ratio", "state KiB read", "ratio", "state KiB written",
         "ratio", "engine s", "state save s"],
        [[r["n"], r["state_open_s"], _ratio(r["state_open_s"], ref["state_open_s"]),
          f"{r['state_bytes_read'] / 1024:,.0f}",
          _ratio(r["state_bytes_read"], ref["state_bytes_read"]),
          f"{r['state_bytes_written'] / 1024:,.0f}",
          _ratio(r["state_bytes_written"], ref["state_bytes_written"]),
          r["engine_seconds"], r["state_save_s"]] for r in results],
    ))
    say(format_table(
        ["base tuples", "run s (CLI)", "DuckDB recompute s", "run / DuckDB",
         "Spark recompute s", "run / Spark"],
        [[r["n"], r["seconds"], r["duckdb_s"], _ratio(r["seconds"], r["duckdb_s"]),
          "-" if r["spark_s"] is None else r["spark_s"],
          "-" if r["spark_s"] is None else _ratio(r["seconds"], r["spark_s"])]
         for r in results],
    ))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10^4 tuples per table only")
    ap.add_argument("--max-size", type=int, default=DEFAULT_MAX,
                    help=f"largest number of tuples per table (default {DEFAULT_MAX:,})")
    ap.add_argument("--full", action="store_true",
                    help="up to 5*10^6 tuples per table (10^7 base tuples)")
    ap.add_argument("--no-spark", action="store_true", help="DuckDB as the only peer")
    ap.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")],
                    help="rows per table, comma-separated (instead of the sizes above)")
    args = ap.parse_args(argv)
    top = 10_000 if args.quick else (max(SIZES) if args.full else args.max_size)
    sizes = args.sizes or [s for s in SIZES if s <= top]
    print(f"A run through the Dagster CLI after a {CHANGE}-row change to each of two tables "
          f"(both maintained by the columnar DBSP kernel); median of {RUNS} runs")
    run(sizes, spark=not args.no_spark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
