"""A stratum maintained off the compiled core says so, with the reason, in the notes of
every run (the first load and the incremental runs after it), and its table is right; a
stratum on the columnar kernel (here one of three columns, and one whose variable joins
an int and a float column) has no such note."""

import pyarrow as pa

from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_to_rows
from tests.local import write_pipeline

PROGRAM = """\
.decl edge(src: int, dst: int)
.decl gate(node: float)
.decl twice[x: float] = n: int
hop(x, y, 1) :- edge(x, y).
hop(x, z, n) :- hop(x, y, m), edge(y, z), n = m + 1, n <= 3.
reach(x, y) :- edge(x, y), gate(y).
reach(x, z) :- reach(x, y), edge(y, z), gate(z).
twice[x] = n <- agg<<n = count()>> edge(x, y), !edge(y, 1), !edge(y, 9223372036854775807).
"""
BINDING = ('[edb]\nedge = "hops/edb/edge"\ngate = "hops/edb/gate"\n\n'
           '[idb]\nhop = "hops/idb/hop"\nreach = "hops/idb/reach"\n'
           'twice = "hops/idb/twice"\n')


def _tables(edges):
    return {"edge": pa.table({"src": [a for a, _ in edges], "dst": [b for _, b in edges]}),
            "gate": pa.table({"node": [1.0, 2.0, 3.0]})}


def test_a_stratum_on_the_tuple_kernel_says_why_in_every_run(tmp_path):
    spec = write_pipeline(tmp_path, "hops", PROGRAM, BINDING)
    root = tmp_path / "warehouse"
    why = (f"twice: rule at {tmp_path / 'hops' / 'program.dl'}:8:1 recorded its "
           "sensitivity intervals on the tuple join (a value at the ends of the 64-bit range)")
    for edges, mode in (([(1, 2), (2, 3), (3, 1)], "full"), ([(1, 2), (2, 3)], "incremental")):
        write_edb(root, spec, _tables(edges))
        edb = {"edge": set(edges), "gate": {(1.0,), (2.0,), (3.0,)}}
        expected = evaluate_naive(spec.program, edb)
        for pred in ("hop", "reach", "twice"):
            [result] = StratumRun(root, spec, spec.stratum_of(pred)).materialize()
            assert result.mode == mode, result
            slow = [n for n in result.notes if "tuple join" in n]
            assert slow == ([why] if pred == "twice" else []), result.notes
            # (twice's groups on arrays, its int key in a float column counted as rows)
            assert not [n for n in result.notes if "Python objects" in n], result.notes
            table = arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, pred)))
            assert table == expected[pred]
