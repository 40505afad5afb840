"""Engine state between runs: how long saving and loading the
saved engine takes against the data size, next to the change it serves.

For each program and data size a child process writes the EDB as Delta tables of a
one-stratum pipeline in a temporary warehouse and materializes it once (a full load, which
saves the engine state as ``pipelines.maintain`` does). Then, on that saved state:

* load: ``pipelines.state_store.load_state`` (read the state file) + ``IncrementalEngine.loads``
  (decode the engine);
* apply: ``IncrementalEngine.apply`` of a 10-tuple change (5 erasures of present rows, 5
  insertions of new ones), the median of three such changes;
* save: ``IncrementalEngine.dumps`` (encode) + ``save_state`` (atomic write: temp file,
  fsync, rename, fsync of the folder) to a temporary folder;

and the ratio (load + save) / apply: how many times the change's own work a run spends on
the state. Then one real incremental materialization (``StratumRun.materialize`` after a
10-tuple change to the EDB table) with its time split into state load, apply, state save and
the rest (Delta reads of the change feed, the IDB commit). The state file is read back from
the page cache (it was just written): a cold read adds the disk's time on top.

Programs: the triangle query of ``bench.maintain_vs_recompute`` (its generator: a random
graph with n/8 nodes) and the transitive closure of ``bench.recursion_vs_peers`` (its
program, on ``random_edges`` with 2n nodes, a sparse graph whose closure stays near 2n).

    .venv/bin/python -m bench.state_io [--quick] [--max-size N | --full]
"""

import argparse
import contextlib
import gc
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import format_table, peak_rss_mb
from engine.values import Row

ROOT = Path(__file__).resolve().parent.parent
SIZES = (1_000, 10_000, 100_000, 1_000_000)
DEFAULT_MAX = 100_000  # 10^6 takes minutes per program to load: --full or --max-size
CHANGE = 10
APPLIES = 3

Data = dict[str, set[Row]]


@dataclass(frozen=True)
class Program:
    name: str
    program: str
    make: Callable[[int, random.Random], Data]  # base tuples -> EDB relations
    changing: str  # the EDB relation the changes edit
    fresh: Callable[[random.Random, int], Row]  # a new row of `changing` (maybe present)


def _triangle() -> Program:
    from bench.maintain_vs_recompute import WORKLOADS

    w = WORKLOADS["triangle"]
    return Program("triangle", w.program, w.make, w.changing, w.fresh)


def _acyclic() -> Program:
    from bench.maintain_vs_recompute import WORKLOADS

    w = WORKLOADS["acyclic-3way"]
    return Program("acyclic-3way", w.program, w.make, w.changing, w.fresh)


def _tc_nodes(n: int) -> int:
    return max(2 * n, 10)


def _tc_data(n: int, rng: random.Random) -> Data:
    from bench.eval_vs_duckdb import random_edges

    t = random_edges(_tc_nodes(n), n, seed=rng.randrange(2**31))
    return {"edge": set(zip(t["src"].to_pylist(), t["dst"].to_pylist(), strict=True))}


def _tc_fresh(rng: random.Random, n: int) -> Row:
    while True:
        a, b = rng.randrange(_tc_nodes(n)), rng.randrange(_tc_nodes(n))
        if a != b:
            return (a, b)


def _tc() -> Program:
    # The program bench.recursion_vs_peers runs (it imports it from bench.eval_vs_duckdb).
    from bench.recursion_vs_peers import TC_PROGRAM

    return Program("transitive closure", TC_PROGRAM, _tc_data, "edge", _tc_fresh)


PROGRAMS: dict[str, Callable[[], Program]] = {
    "triangle": _triangle,
    "tc": _tc,
    "acyclic-3way": _acyclic,
}
DEFAULT_PROGRAMS = ("triangle", "tc")


# ---------------------------------------------------------------------------------------
# One (program, size), in a child process.


def _change(rng: random.Random, rows: list[Row], present: set[Row], fresh: Callable[[], Row],
            k: int = CHANGE) -> dict[Row, int]:
    """``k // 2`` erasures of present rows and the rest insertions of new ones; updates
    ``rows`` and ``present`` to the data after the change."""
    delta: dict[Row, int] = {}
    while len(delta) < k // 2:
        row = rows[rng.randrange(len(rows))]
        if row in present and row not in delta:
            delta[row] = -1
    while len(delta) < k:
        row = fresh()
        if row not in present and row not in delta:
            delta[row] = 1
    for row, w in delta.items():
        if w > 0:
            present.add(row)
            rows.append(row)
        else:
            present.discard(row)
    return delta


def _write_pipeline(folder: Path, program: str) -> Any:
    """A one-stratum pipeline in ``folder``: every EDB and IDB predicate bound to a table."""
    from engine.analysis.analyze import load_program
    from pipelines.spec import load_pipeline

    prog = load_program(program)
    folder.mkdir(parents=True)
    (folder / "program.dl").write_text(program, encoding="utf-8")
    lines = ["[edb]", *(f'{p} = "bench/edb/{p}"' for p in sorted(prog.edb)),
             "", "[idb]", *(f'{p} = "bench/idb/{p}"' for p in sorted(prog.idb))]
    (folder / "pipeline.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = load_pipeline(folder)
    if len(spec.program.strata) != 1:
        raise ValueError(f"{folder}: the benchmark expects one stratum")
    return spec


def _tables(spec: Any, data: Data) -> dict[str, Any]:
    from schemas.relation import rows_to_arrow

    return {p: rows_to_arrow(spec.program.schemas[p], rows) for p, rows in data.items()}


def _release() -> None:
    """Let the collector free engines that ``gc.freeze`` moved out of its reach."""
    gc.unfreeze()
    gc.collect()


class _Clock:
    """Seconds spent in named calls, summed (wrapped around ``pipelines.maintain``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start

        return timed_call


@contextlib.contextmanager
def _instrumented(clock: _Clock) -> Iterator[None]:
    """Time the state and engine calls a materialization makes, and put them back after."""
    from engine.runtime import IncrementalEngine
    from pipelines import run as maintain

    saved = (maintain.load_state, maintain.save_state, IncrementalEngine.__dict__["loads"],
             IncrementalEngine.dumps, IncrementalEngine.apply)
    maintain.load_state = clock.wrap("read", maintain.load_state)  # type: ignore[assignment]
    maintain.save_state = clock.wrap("write", maintain.save_state)  # type: ignore[assignment]
    IncrementalEngine.loads = classmethod(  # type: ignore[method-assign, assignment]
        clock.wrap("decode", saved[2].__func__))
    IncrementalEngine.dumps = clock.wrap("encode", saved[3])  # type: ignore[method-assign]
    IncrementalEngine.apply = clock.wrap("apply", saved[4])  # type: ignore[method-assign]
    try:
        yield
    finally:
        maintain.load_state, maintain.save_state = saved[0], saved[1]
        IncrementalEngine.loads = saved[2]  # type: ignore[method-assign]
        IncrementalEngine.dumps, IncrementalEngine.apply = saved[3], saved[4]  # type: ignore[method-assign]


def _best(fn: Callable[[], float], budget: float = 1.0, repeat: int = 3) -> float:
    """The best of up to ``repeat`` timings ``fn`` returns, repeating only short ones."""
    best = fn()
    for _ in range(repeat - 1):
        if best >= budget:
            break
        best = min(best, fn())
    return best


def _load_apply_save(path: Path, out: Path, p: Program, n: int, rng: random.Random,
                     rows: list[Row], present: set[Row]) -> dict[str, float]:
    """Load the state at ``path`` as a run does (read the file, decode the engine), apply
    ``APPLIES`` changes of ``CHANGE`` tuples, save it as a run does (encode the engine,
    write the state file atomically) to ``out``: the seconds of each part."""
    from engine.runtime import IncrementalEngine
    from pipelines.state_store import load_state, save_state

    parts: dict[str, float] = {}
    loaded: list[Any] = []

    def load() -> float:
        if loaded:
            loaded.clear()
            _release()
        t0 = time.perf_counter()
        state = load_state(path)
        t1 = time.perf_counter()
        assert state is not None
        engine = IncrementalEngine.loads(state.engine)
        t2 = time.perf_counter()
        loaded.append((state, engine))
        if t2 - t0 < parts.get("read", 0.0) + parts.get("decode", float("inf")):
            parts["read"], parts["decode"] = t1 - t0, t2 - t1
        return t2 - t0

    load_s = _best(load)
    # Where the decoding time goes: the same load with the cyclic collector off (its
    # generational passes over the millions of new containers), a diagnostic only.
    loaded.clear()
    _release()
    blob = load_state(path)
    assert blob is not None
    gc.disable()
    try:
        t0 = time.perf_counter()
        IncrementalEngine.loads(blob.engine)
        parts["decode_nogc"] = time.perf_counter() - t0
    finally:
        gc.enable()
    del blob
    _release()
    state = load_state(path)
    assert state is not None
    engine = IncrementalEngine.loads(state.engine)

    applies = []
    for _ in range(APPLIES):
        delta = _change(rng, rows, present, lambda: p.fresh(rng, n))
        t0 = time.perf_counter()
        engine.apply({p.changing: delta})
        applies.append(time.perf_counter() - t0)

    def save() -> float:
        t0 = time.perf_counter()
        state.engine = engine.dumps()
        t1 = time.perf_counter()
        size = save_state(out, state)
        t2 = time.perf_counter()
        if t2 - t0 < parts.get("encode", 0.0) + parts.get("write", float("inf")):
            parts["encode"], parts["write"], parts["saved_bytes"] = t1 - t0, t2 - t1, size
        return t2 - t0

    save_s = _best(save)
    return {"load_s": load_s, "apply_s": statistics.median(applies), "save_s": save_s,
            "rss_mb": peak_rss_mb(), **parts}


def measure_one(name: str, n: int, pipeline: bool = True) -> dict[str, Any]:
    """Everything for one (program, data size), in this process."""
    from pipelines.run import StratumRun
    from pipelines.state_store import state_path
    from pipelines.warehouse import write_edb

    p = PROGRAMS[name]()
    rng = random.Random(20261123)
    data = p.make(n, rng)
    base = sum(len(v) for v in data.values())
    rows = list(data[p.changing])
    present = set(rows)
    # The pipeline run's change starts from the data the full load saw (the applies below
    # never reach the tables).
    run_rows, run_present = list(rows), set(rows)
    with tempfile.TemporaryDirectory(prefix="deltalog-state-io-") as tmp:
        spec = _write_pipeline(Path(tmp) / "stateio", p.program)
        root = Path(tmp) / "warehouse"
        write_edb(root, spec, _tables(spec, data))
        start = time.perf_counter()
        [full, *_] = StratumRun(root, spec, 0).materialize()
        full_s = time.perf_counter() - start
        assert full.mode == "full", full.mode
        idb_rows = full.rows
        _release()
        path = state_path(root, spec.name, 0)
        state_bytes = path.stat().st_size

        io = _load_apply_save(path, Path(tmp) / "saved" / path.name, p, n, rng, rows, present)
        _release()

        run: dict[str, Any] = {}
        if pipeline:
            # One real incremental materialization after a 10-tuple change to the table
            # (this run's own change, on the data the full load saw).
            _change(rng, run_rows, run_present, lambda: p.fresh(rng, n))
            changed = {k: (run_present if k == p.changing else v) for k, v in data.items()}
            write_edb(root, spec, _tables(spec, changed))
            clock = _Clock()
            with _instrumented(clock):
                start = time.perf_counter()
                [inc, *_] = StratumRun(root, spec, 0).materialize()
                run_s = time.perf_counter() - start
            assert inc.mode == "incremental", (inc.mode, inc.notes)
            run = {"run_s": run_s, **clock.seconds, "in": inc.stats.get("edb_changes", 0),
                   "out": inc.inserted + inc.deleted}
    return {
        "program": p.name, "n": base, "idb_rows": idb_rows, "bytes": state_bytes,
        "full_s": full_s, **io, "run": run,
    }


# ---------------------------------------------------------------------------------------
# The parent: one child per (program, size), then the tables.


def run(sizes: Sequence[int], programs: Sequence[str], out: Callable[[str], None] = print,
        pipeline: bool = True) -> list[dict[str, Any]]:
    results = []
    for name in programs:
        for n in sizes:
            cmd = [sys.executable, "-m", "bench.state_io", "--one", name, str(n)]
            if not pipeline:
                cmd.append("--no-pipeline")
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"{name} n={n} failed:\n{proc.stderr[-3000:]}")
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    rows = []
    for r in results:
        io = r["load_s"] + r["save_s"]
        rows.append([
            r["program"], r["n"], r["idb_rows"], f"{r['bytes'] / 2**20:.2f}",
            round(r["bytes"] / r["n"]), r["save_s"], r["encode"], r["load_s"], r["decode"],
            r["decode_nogc"],
            r["apply_s"] * 1000, f"{io / r['apply_s']:,.0f}x", r["full_s"],
            round(r["rss_mb"]),
        ])
    out(format_table(
        ["program", "base tuples", "IDB rows", "state MiB", "B/tuple", "save s", "encode s",
         "load s", "decode s", "decode gc off s", "apply 10 ms", "(load+save)/apply",
         "full load s", "peak RSS MiB"],
        rows,
    ))
    runs = [r for r in results if r["run"]]
    if runs:
        out("")
        out("One incremental materialization after a 10-tuple change to the EDB table:")
        rows = []
        for r in runs:
            m = r["run"]
            load = m.get("read", 0.0) + m.get("decode", 0.0)
            save = m.get("encode", 0.0) + m.get("write", 0.0)
            other = m["run_s"] - load - save - m.get("apply", 0.0)
            rows.append([
                r["program"], r["n"], f"{m['in']}/{m['out']}", m["run_s"], load,
                m.get("apply", 0.0) * 1000, save, other, f"{(load + save) / m['run_s'] * 100:.0f}%",
            ])
        out(format_table(
            ["program", "base tuples", "change in/out", "run s", "state load s", "apply ms",
             "state save s", "Delta + rest s", "state share"],
            rows,
        ))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--max-size", type=int, default=DEFAULT_MAX,
                    help=f"largest number of base tuples (default {DEFAULT_MAX:,})")
    ap.add_argument("--full", action="store_true", help="up to 10^6 base tuples")
    ap.add_argument("--program", action="append", choices=sorted(PROGRAMS))
    ap.add_argument("--no-pipeline", action="store_true",
                    help="skip the incremental materialization")
    ap.add_argument("--one", nargs=2, metavar=("PROGRAM", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one[0], int(args.one[1]), not args.no_pipeline)))
        return 0
    top = 10_000 if args.quick else (max(SIZES) if args.full else args.max_size)
    sizes = [s for s in SIZES if s <= top]
    print("Engine state between runs: save (encode + atomic write) and load (read + decode)"
          f" against the data size; apply: one {CHANGE}-tuple change (median of {APPLIES})")
    run(sizes, args.program or DEFAULT_PROGRAMS, pipeline=not args.no_pipeline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
