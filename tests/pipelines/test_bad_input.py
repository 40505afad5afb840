"""Bad EDB input stops a materialization with a message naming the table, the column and an
offending row, and leaves the IDB tables and the saved engine state exactly as they were;
once the input is fixed, the next run continues incrementally and equals the naive
evaluator.

The EDB tables here are created the way a data team would (nullable columns, change data
feed on), and the bad input is written straight through deltalake, not through our helpers.
"""

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltalog.engine.errors import BAD_INPUT
from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io
from deltalog.pipelines.quality import BadInputError
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spec import PipelineSpec
from deltalog.pipelines.state_store import STATE_DIR
from deltalog.schemas.relation import arrow_to_rows
from tests.local import write_pipeline

PROGRAM = """\
.decl edge(src: int, dst: int)
.decl weight[node: int] = w: float
.decl label(id: int, name: string)

reach(x, y) :- edge(x, y).
reach(x, z) :- reach(x, y), edge(y, z).
heavy(x) :- weight[x] = w, w > 1.5.
named(x, n) :- label(x, n), heavy(x), reach(x, x).
"""

BINDING = """\
[edb]
edge = "bad/edb/edge"
weight = "bad/edb/weight"
label = "bad/edb/label"

[idb]
reach = "bad/idb/reach"
heavy = "bad/idb/heavy"
named = "bad/idb/named"
"""

EDGES = [(1, 2), (2, 3), (3, 1), (3, 4)]
WEIGHTS = [(1, 2.0), (2, 1.0), (3, 3.5), (4, 0.5)]
LABELS = [(1, "one"), (2, "two"), (3, "three"), (4, "four")]


def _arrow(pred: str, rows: list[tuple]) -> pa.Table:
    names = {"edge": ["src", "dst"], "weight": ["node", "w"], "label": ["id", "name"]}[pred]
    types = {
        "edge": [pa.int64(), pa.int64()],
        "weight": [pa.int64(), pa.float64()],
        "label": [pa.int64(), pa.string()],
    }[pred]
    schema = pa.schema([pa.field(n, t, nullable=True) for n, t in zip(names, types, strict=True)])
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in names]
    return pa.Table.from_arrays(
        [pa.array(c, type=t) for c, t in zip(columns, types, strict=True)], schema=schema
    )


def make_bad_pipeline(tmp_path: Path, edges: list[tuple] = EDGES) -> tuple[PipelineSpec, Path]:
    """The pipeline folder and its EDB tables, written as a data team would (``edges``
    may hold a bad row)."""
    spec = write_pipeline(tmp_path, "bad", PROGRAM, BINDING)
    root = tmp_path / "warehouse"
    for pred, rows in (("edge", edges), ("weight", WEIGHTS), ("label", LABELS)):
        write_deltalake(
            spec.table_uri(root, pred), _arrow(pred, rows), configuration=delta_io.CDF_CONFIG
        )
    return spec, root


@pytest.fixture
def pipeline(tmp_path: Path) -> tuple[PipelineSpec, Path]:
    return make_bad_pipeline(tmp_path)


def _run_all(spec: PipelineSpec, root: Path) -> None:
    for index in range(len(spec.program.strata)):
        StratumRun(root, spec, index).materialize()


def _expected(spec: PipelineSpec, root: Path) -> dict[str, frozenset]:
    edb = {
        pred: arrow_to_rows(
            delta_io.read_arrow(spec.table_uri(root, pred)).select(
                [c.name for c in spec.program.schemas[pred].columns]
            )
        )
        for pred in spec.edb_tables
    }
    return evaluate_naive(spec.program, edb)


def _idb(spec: PipelineSpec, root: Path) -> dict[str, set]:
    return {p: arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, p))) for p in spec.idb_tables}


def _fingerprint(spec: PipelineSpec, root: Path) -> tuple[dict[str, int], dict[str, bytes]]:
    """IDB table versions and the bytes of every saved state file."""
    versions = {
        p: delta_io.table_version(spec.table_uri(root, p))
        for p in spec.idb_tables
        if delta_io.exists(spec.table_uri(root, p))
    }
    states = {str(f): f.read_bytes() for f in sorted((root / STATE_DIR).rglob("*")) if f.is_file()}
    return versions, states


def _refused(spec: PipelineSpec, root: Path, *needles: str) -> str:
    """Every stratum that reads the bad table refuses; nothing changes."""
    before = _fingerprint(spec, root)
    messages = []
    for index in range(len(spec.program.strata)):
        try:
            StratumRun(root, spec, index).materialize()
        except BadInputError as err:
            assert err.code == BAD_INPUT
            messages.append(str(err))
    assert messages, "no stratum refused the bad input"
    assert _fingerprint(spec, root) == before
    text = messages[0]
    for needle in needles:
        assert needle in text, text
    assert "Traceback" not in text
    return text


def _continue(spec: PipelineSpec, root: Path) -> None:
    _run_all(spec, root)
    assert _idb(spec, root) == _expected(spec, root)


def test_null_key_in_a_change(pipeline):
    spec, root = pipeline
    _run_all(spec, root)
    uri = spec.table_uri(root, "edge")
    write_deltalake(uri, _arrow("edge", [(4, 1), (5, None)]), mode="append")
    text = _refused(spec, root, "'edge'", uri, "null in column 'dst'", "{src: 5, dst: None}")
    assert "version 1" in text
    DeltaTable(uri).delete("dst is null")
    _continue(spec, root)
    assert (4, 4) in _idb(spec, root)["reach"]


@pytest.mark.parametrize("value,shown", [("nan", "NaN"), ("inf", "inf"), ("-inf", "-inf")])
def test_nan_and_infinities_in_a_float_column(pipeline, value, shown):
    spec, root = pipeline
    _run_all(spec, root)
    uri = spec.table_uri(root, "weight")
    write_deltalake(uri, _arrow("weight", [(7, float(value))]), mode="append")
    _refused(spec, root, "'weight'", f"{shown} in column 'w'", "node: 7")
    DeltaTable(uri).delete("node = 7")
    _continue(spec, root)


def test_second_value_for_a_functional_key_against_the_table(pipeline):
    spec, root = pipeline
    _run_all(spec, root)
    uri = spec.table_uri(root, "weight")
    write_deltalake(uri, _arrow("weight", [(2, 9.0)]), mode="append")
    _refused(spec, root, "'weight'", uri, "weight[2] = 1.0", "weight[2] = 9.0")
    DeltaTable(uri).delete("node = 2 and w = 1.0")  # the update, done right
    _continue(spec, root)
    assert (2,) in _idb(spec, root)["heavy"]


def test_second_value_for_a_functional_key_within_a_change(pipeline):
    spec, root = pipeline
    _run_all(spec, root)
    uri = spec.table_uri(root, "weight")
    write_deltalake(uri, _arrow("weight", [(8, 1.0), (8, 2.0)]), mode="append")
    _refused(spec, root, "'weight'", "weight[8] = 1.0", "weight[8] = 2.0")


def test_schema_drift_type_change(pipeline):
    spec, root = pipeline
    _run_all(spec, root)
    uri = spec.table_uri(root, "edge")
    drifted = pa.table({"src": [1, 2], "dst": ["2", "3"]})
    write_deltalake(uri, drifted, mode="overwrite", schema_mode="overwrite")
    _refused(
        spec, root, "'edge'", "column 'dst' has type string", "declares int", "{src: 1, dst: '2'}"
    )
    write_deltalake(uri, _arrow("edge", EDGES), mode="overwrite", schema_mode="overwrite")
    _continue(spec, root)


def test_schema_drift_added_and_missing_columns(pipeline):
    """A column the program does not declare is not read (a team's table may hold audit
    columns); a declared column missing (renamed) is DL306."""
    spec, root = pipeline
    _run_all(spec, root)
    uri = spec.table_uri(root, "label")
    extra = pa.table({"id": [5], "name": ["five"], "lang": ["en"]})
    write_deltalake(uri, extra, mode="append", schema_mode="merge")
    _continue(spec, root)
    renamed = pa.table({"id": [1], "title": ["one"]})
    write_deltalake(uri, renamed, mode="overwrite", schema_mode="overwrite")
    _refused(spec, root, "'label'", "declared column 'name' (string) is missing")
    write_deltalake(uri, _arrow("label", LABELS), mode="overwrite", schema_mode="overwrite")
    _continue(spec, root)


def test_columns_in_another_order_are_read_by_name(pipeline):
    spec, root = pipeline
    _run_all(spec, root)
    uri = spec.table_uri(root, "edge")
    swapped = pa.table({"dst": [1, 2, 3, 4, 5], "src": [2, 3, 1, 3, 4]})
    write_deltalake(uri, swapped, mode="overwrite", schema_mode="overwrite")
    _continue(spec, root)
    assert (4, 5) in _idb(spec, root)["reach"]


def test_bad_input_on_the_first_load_creates_nothing(pipeline):
    spec, root = pipeline
    uri = spec.table_uri(root, "weight")
    write_deltalake(uri, _arrow("weight", [(1, 5.0)]), mode="append")
    with pytest.raises(BadInputError) as info:
        StratumRun(root, spec, spec.stratum_of("heavy")).materialize()
    assert "weight[1] = 2.0" in str(info.value) and "weight[1] = 5.0" in str(info.value)
    assert not delta_io.exists(spec.table_uri(root, "heavy"))
    assert not list((root / STATE_DIR).rglob("CURRENT"))


def test_columns_the_program_does_not_declare_are_not_read(tmp_path):
    """A team's input with audit columns: two rows that differ only there are one row of
    the relation (deleting one leaves it), a change to such a column alone is no change,
    and every step equals the naive evaluator on the declared columns."""
    from tests.dagster_project.tiny import make_pipeline, run_all, tables_right

    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    uri = spec.table_uri(root, "edge")

    def write(rows, mode="overwrite"):
        table = pa.table({"src": pa.array([r[0] for r in rows], pa.int64()),
                          "dst": pa.array([r[1] for r in rows], pa.int64()),
                          "loaded_by": pa.array([r[2] for r in rows], pa.string())})
        write_deltalake(uri, table, mode=mode, schema_mode="merge")

    write([(1, 2, "a"), (1, 2, "b"), (2, 3, "a"), (3, 4, "a")])
    assert {r.mode for r in run_all(spec, root).values()} <= {"incremental", "unchanged"}
    assert tables_right(spec, root, [(1, 2), (2, 3), (3, 4)])
    DeltaTable(uri).delete("loaded_by = 'b'")  # one of two copies of (1, 2)
    run_all(spec, root)
    assert tables_right(spec, root, [(1, 2), (2, 3), (3, 4)])
    DeltaTable(uri).update(updates={"loaded_by": "'z'"}, predicate="src = 3")
    results = run_all(spec, root)
    assert results["path"].inserted == results["path"].deleted == 0
    DeltaTable(uri).delete("src = 1")
    run_all(spec, root)
    assert tables_right(spec, root, [(2, 3), (3, 4)])
