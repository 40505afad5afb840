"""A stratum maintained off the compiled core says so, with the reason, in the notes of
every run (the first load and the incremental runs after it), and its table is right."""

import pyarrow as pa

from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_to_rows
from tests.local import write_pipeline

PROGRAM = """\
.decl edge(src: int, dst: int)
hop(x, y, 1) :- edge(x, y).
hop(x, z, n) :- hop(x, y, m), edge(y, z), n = m + 1, n <= 3.
"""
BINDING = '[edb]\nedge = "hops/edb/edge"\n\n[idb]\nhop = "hops/idb/hop"\n'


def _edges(edges):
    return {"edge": pa.table({"src": [a for a, _ in edges], "dst": [b for _, b in edges]})}


def test_a_stratum_on_the_tuple_kernel_says_why_in_every_run(tmp_path):
    spec = write_pipeline(tmp_path, "hops", PROGRAM, BINDING)
    root = tmp_path / "warehouse"
    why = "hop: maintained by the tuple-at-a-time DBSP kernel ('hop' has 3 columns, not one or two)"
    for edges, mode in (([(1, 2), (2, 3), (3, 1)], "full"), ([(1, 2), (2, 3)], "incremental")):
        write_edb(root, spec, _edges(edges))
        [result] = StratumRun(root, spec, spec.stratum_of("hop")).materialize()
        assert result.mode == mode and why in result.notes, result.notes
        table = arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, "hop")))
        assert table == evaluate_naive(spec.program, {"edge": set(edges)})["hop"]
