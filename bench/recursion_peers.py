"""The peers of ``bench.recursion_vs_peers``: transitive closure in Pathway, egglog and
pydbsp, each run as ``<its venv>/bin/python -m bench.recursion_peers SYSTEM DATA.json``.

Standard library only at the top (it runs in the peers' own venvs, which have none of our
dependencies), each peer imported inside its runner. A runner reads the graph and the
change script written by the parent, performs the four steps (load, the 10+10 batch, a
one-edge insert, a one-edge delete) and prints one JSON line after each step, so a parent
that stops it at the time limit still has the steps that finished.
"""

import importlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.common import peak_rss_mb

Edge = tuple[int, int]
Change = dict[Edge, int]  # +1 insert, -1 delete


def load_script(path: str) -> tuple[list[Edge], list[tuple[str, Change]]]:
    """The initial edges and the three timed changes, from the parent's JSON file."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    edges = [(a, b) for a, b in data["edges"]]
    steps = []
    for name, change in data["steps"]:
        steps.append((name, {(a, b): w for a, b, w in change}))
    return edges, steps


def peak_mb() -> float:
    """This process's peak RSS in MiB: VmHWM, which starts afresh at exec (``ru_maxrss``
    of a child keeps the high-water mark of the parent it was forked from)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


def report(system: str, step: str, seconds: float, size: int, note: str = "") -> None:
    print(json.dumps({"system": system, "step": step, "seconds": seconds, "size": size,
                      "rss_mb": peak_mb(), "note": note}), flush=True)


def closure_steps(edges: list[Edge], steps: list[tuple[str, Change]]
                  ) -> Iterator[tuple[str, Change, set[Edge]]]:
    """The change of each step with the edge set after it (load first): the live set,
    edited in place by the next step, so nothing young and large is made per step."""
    current = set(edges)
    yield "load", {e: 1 for e in edges}, current
    for name, change in steps:
        for e, w in change.items():
            if w > 0:
                current.add(e)
            else:
                current.discard(e)
        yield name, change, current


# ---------------------------------------------------------------------------------------
# egglog: relations and two rules run to saturation. It has no retraction, so a change
# with a deletion rebuilds the e-graph from the new edges; an insert-only change adds the
# facts to the saturated e-graph and runs the rules again (monotone, so that is exact).

EGGLOG_PROGRAM = """\
(relation edge (i64 i64))
(relation path (i64 i64))
(rule ((edge a b)) ((path a b)))
(rule ((path a b) (edge b c)) ((path a c)))
"""
_RUN = "(run-schedule (saturate (run)))\n(print-size path)"


def run_egglog(edges: list[Edge], steps: list[tuple[str, Change]]) -> None:
    bindings: Any = importlib.import_module("egglog.bindings")
    egraph: Any = None

    def run(graph: Any, facts: list[Edge], text: str) -> int:
        # Facts parsed in chunks: egglog's parser grows super-linearly with the size of
        # one program text (4,000 facts in one text: 2 s and 1.7 GB).
        for i in range(0, len(facts), 256):
            chunk = "\n".join(f"(edge {a} {b})" for a, b in facts[i:i + 256])
            graph.run_program(*graph.parse_program(chunk))
        out = graph.run_program(*graph.parse_program(text))
        return int(out[-1].size)

    for name, change, current in closure_steps(edges, steps):
        start = time.perf_counter()
        if egraph is not None and all(w > 0 for w in change.values()):
            size = run(egraph, sorted(change), _RUN)
            note = "insert-only: facts added, rules re-run to saturation"
        else:
            egraph = bindings.EGraph()
            egraph.run_program(*egraph.parse_program(EGGLOG_PROGRAM))
            size = run(egraph, sorted(current), _RUN)
            note = "" if name == "load" else "no retraction: rebuilt from the new edges"
        report("egglog", name, time.perf_counter() - start, size, note)


# ---------------------------------------------------------------------------------------
# pydbsp: its indexed incremental reachability body (a doubly incremental join and
# distinct over a two-dimensional time lattice); the caller drives the inner fixed point
# and feeds each iteration's difference back as the state, as pydbsp's documentation says.


def run_pydbsp(edges: list[Edge], steps: list[tuple[str, Change]]) -> None:
    circuit_mod: Any = importlib.import_module("pydbsp.circuit")
    compute: Any = importlib.import_module("pydbsp.compute")
    core: Any = importlib.import_module("pydbsp.core")
    evaluate: Any = importlib.import_module("pydbsp.evaluate")
    ops: Any = importlib.import_module("pydbsp.indexed_relational_operators")
    operator: Any = importlib.import_module("pydbsp.operator")
    storage: Any = importlib.import_module("pydbsp.storage")
    zset: Any = importlib.import_module("pydbsp.zset")

    group = zset.ZSetAddition()
    ev = evaluate.Evaluator(circuit=circuit_mod.Circuit(), storage=storage.DictStorage(),
                            ctx=compute.ComputeCtx(lattice=core.dbsp_time(2)), group=group)
    edges_in = operator.Input(frontier=core.Antichain(core.dbsp_time(1))).connect(ev.circuit, ())
    state = operator.Input(frontier=core.Antichain(core.dbsp_time(2))).connect(ev.circuit, ())
    body = ops.IndexedIncrementalReachabilityBody(edge_group=group).connect(
        ev.circuit, (edges_in, state))
    reach: dict[Edge, int] = {}
    max_inner = -1
    for outer, (name, change, _) in enumerate(closure_steps(edges, steps)):
        start = time.perf_counter()
        ev.push(edges_in, zset.ZSet(dict(change)), t=(outer,))
        k = 0
        for k, diff in ev.saturate_inner(body, outer, is_empty=lambda d: not d.inner,
                                         min_inner=max_inner):
            ev.push(state, diff, t=(outer, k))
            for row, w in diff.inner.items():
                n = reach.get(row, 0) + w
                if n:
                    reach[row] = n
                else:
                    del reach[row]
        max_inner = max(max_inner, k)
        report("pydbsp", name, time.perf_counter() - start, len(reach))


# ---------------------------------------------------------------------------------------
# Pathway: pw.iterate over a join and a groupby (differential dataflow underneath), fed by
# a Python connector that commits one transaction per step. A step's time is from its
# first row to the end of its output time (on_time_end of a subscription). Pathway reports
# no time without output changes, so every step also moves a marker self-loop on a node of
# its own (-1, -2, ...): one row in the closure, not counted.


def run_pathway(edges: list[Edge], steps: list[tuple[str, Change]]) -> None:
    pw: Any = importlib.import_module("pathway")
    all_steps = list(closure_steps(edges, steps))
    done = threading.Event()
    reach: dict[Edge, int] = {}
    failure: list[BaseException] = []

    class Schema(pw.Schema):  # type: ignore[misc, name-defined]
        src: int = pw.column_definition(primary_key=True)
        dst: int = pw.column_definition(primary_key=True)

    class Subject(pw.io.python.ConnectorSubject):  # type: ignore[misc, name-defined]
        def run(self) -> None:
            try:
                self._disable_commits()
                for i, (name, change, _) in enumerate(all_steps):
                    done.clear()
                    start = time.perf_counter()
                    self.next(src=-1 - i, dst=-1 - i)
                    if i:
                        self.delete(src=-i, dst=-i)
                    for (a, b), w in change.items():
                        if w > 0:
                            self.next(src=a, dst=b)
                        else:
                            self.delete(src=a, dst=b)
                    self.commit()
                    done.wait()
                    report("pathway", name, time.perf_counter() - start, len(reach) - 1)
            except BaseException as e:  # reported by the main thread
                failure.append(e)

    def step(paths: Any, edges: Any) -> dict[str, Any]:
        hop = paths.join(edges, paths.dst == edges.src).select(src=paths.src, dst=edges.dst)
        grown = pw.Table.concat_reindex(paths, hop)
        return {"paths": grown.groupby(pw.this.src, pw.this.dst).reduce(pw.this.src,
                                                                         pw.this.dst),
                "edges": edges}

    table = pw.io.python.read(Subject(), schema=Schema, autocommit_duration_ms=None)
    start_paths = pw.iterate_universe(table.select(pw.this.src, pw.this.dst))
    out = pw.iterate(step, paths=start_paths, edges=table)["paths"]

    def on_change(key: Any, row: dict[str, Any], time: int, is_addition: bool) -> None:
        e = (row["src"], row["dst"])
        n = reach.get(e, 0) + (1 if is_addition else -1)
        if n:
            reach[e] = n
        else:
            del reach[e]

    pw.io.subscribe(out, on_change=on_change, on_time_end=lambda t: done.set())
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    if failure:
        raise failure[0]


RUNNERS: dict[str, Callable[[list[Edge], list[tuple[str, Change]]], None]] = {
    "egglog": run_egglog,
    "pydbsp": run_pydbsp,
    "pathway": run_pathway,
}


def main(argv: list[str]) -> int:
    system, path = argv
    edges, steps = load_script(path)
    RUNNERS[system](edges, steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
