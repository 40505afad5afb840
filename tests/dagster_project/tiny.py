"""A tiny pipeline for the Dagster tests: a cyclic graph with recursion, mutual recursion,
negation and a count aggregate, written to a temporary folder with its EDB Delta tables."""

from pathlib import Path

import pyarrow as pa

from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spec import PipelineSpec
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_to_rows
from tests.local import write_pipeline

PROGRAM = """\
.decl edge(src: int, dst: int)
.decl node(id: int, label: string)
.decl start(id: int)

path(x, y) :- edge(x, y).
path(x, z) :- path(x, y), edge(y, z).

even(x) :- start(x).
even(y) :- odd(x), edge(x, y).
odd(y) :- even(x), edge(x, y).

unreachable(x, y) :- node(x, _), node(y, _), !path(x, y).
out_degree[x] = n <- agg<<n = count()>> edge(x, _).
"""

BINDING = """\
[edb]
edge = "tiny/edb/edge"
node = "tiny/edb/node"
start = "tiny/edb/start"

[idb]
path = "tiny/idb/path"
even = "tiny/idb/even"
odd = "tiny/idb/odd"
unreachable = "tiny/idb/unreachable"
out_degree = "tiny/idb/out_degree"
"""

EDGES_V1 = [(1, 2), (2, 3), (3, 1), (3, 4), (5, 6)]
NODES = [(i, f"n{i}") for i in range(1, 8)]
START = [(1,)]


def edge_table(edges: list[tuple[int, int]]) -> pa.Table:
    return pa.table({"src": [e[0] for e in edges], "dst": [e[1] for e in edges]})


def edb_tables(edges: list[tuple[int, int]]) -> dict[str, pa.Table]:
    return {
        "edge": edge_table(edges),
        "node": pa.table({"id": [n[0] for n in NODES], "label": [n[1] for n in NODES]}),
        "start": pa.table({"id": [s[0] for s in START]}),
    }


def make_pipeline(tmp_path: Path) -> tuple[PipelineSpec, Path]:
    """Write the pipeline folder and the EDB tables (version 1); return (spec, warehouse)."""
    spec = write_pipeline(tmp_path, "tiny", PROGRAM, BINDING)
    root = tmp_path / "warehouse"
    write_edb(root, spec, edb_tables(EDGES_V1))
    return spec, root


def run_all(spec: PipelineSpec, root, **kw) -> dict:
    """Materialize every stratum in order, outside Dagster (``kw`` for each
    ``StratumRun``); pred -> its StratumResult."""
    out = {}
    for i in range(len(spec.program.strata)):
        for result in StratumRun(root, spec, i, **kw).materialize():
            out[result.pred] = result
    return out


def tables_right(spec: PipelineSpec, root, edges, nodes=None) -> bool:
    """The IDB tables equal the naive evaluator's result on ``edges`` (the oracle)."""
    inputs = {"edge": set(edges), "node": set(nodes or NODES), "start": set(START)}
    tables = {
        p: arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, p))) for p in spec.idb_tables
    }
    return tables == evaluate_naive(spec.program, inputs)
