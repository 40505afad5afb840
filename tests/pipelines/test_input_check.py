"""The EDB input check after a passed evaluation reads only the change since the version it
passed (rows read follow the change, not the table) and still finds every kind of bad input
the whole-table check finds: nulls, NaN, a second value for a functional key (against rows
of the table the change did not touch), schema drift; a table that went back is read whole.
Checked against the whole-table check (``since=None``) as the oracle."""

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltalog.pipelines import delta_io
from deltalog.pipelines.inputs import check_input
from deltalog.pipelines.spec import PipelineSpec
from tests.local import write_pipeline

PROGRAM = """\
.decl price[item: int] = amount: float
.decl edge(src: int, dst: int)
cheap(x) :- price[x] = a, a < 10.0.
hop(x, z) :- edge(x, y), edge(y, z).
"""
BINDING = """\
[edb]
price = "t/edb/price"
edge = "t/edb/edge"
[idb]
cheap = "t/idb/cheap"
hop = "t/idb/hop"
"""
N = 2_000


def _price(items, amounts) -> pa.Table:
    return pa.table(
        {"item": pa.array(items, pa.int64()), "amount": pa.array(amounts, pa.float64())}
    )


@pytest.fixture
def pipeline(tmp_path: Path) -> tuple[PipelineSpec, Path]:
    spec = write_pipeline(tmp_path, "t", PROGRAM, BINDING)
    root = tmp_path / "warehouse"
    write_deltalake(
        spec.table_uri(root, "price"),
        _price(range(N), [float(i) for i in range(N)]),
        configuration=delta_io.CDF_CONFIG,
    )
    edges = pa.table(
        {
            "src": pa.array(range(N), pa.int64()),
            "dst": pa.array([(i + 1) % N for i in range(N)], pa.int64()),
        }
    )
    write_deltalake(spec.table_uri(root, "edge"), edges, configuration=delta_io.CDF_CONFIG)
    return spec, root


def _both(root, spec, pred, since):
    """The incremental check and the whole-table oracle agree on pass/fail and column."""
    quick = check_input(root, spec, pred, since)
    whole = check_input(root, spec, pred, None)
    assert bool(quick.problems) == bool(whole.problems)
    assert [p.column for p in quick.problems][:1] == [p.column for p in whole.problems][:1]
    assert whole.rows_read == whole.rows and whole.since is None
    return quick


def test_a_clean_change_reads_only_the_change(pipeline):
    spec, root = pipeline
    first = check_input(root, spec, "edge", None)
    assert not first.problems and first.rows_read == N
    write_deltalake(
        spec.table_uri(root, "edge"),
        pa.table(
            {"src": pa.array([N + 1, N + 2], pa.int64()), "dst": pa.array([1, 2], pa.int64())}
        ),
        mode="append",
    )
    quick = _both(root, spec, "edge", first.version)
    assert not quick.problems
    assert quick.since == first.version and quick.rows == N + 2
    assert quick.rows_read == 2  # the two inserted rows, not the table


def test_functional_conflict_with_an_untouched_row_is_found(pipeline):
    spec, root = pipeline
    first = check_input(root, spec, "price", None)
    write_deltalake(spec.table_uri(root, "price"), _price([7], [99.0]), mode="append")
    quick = _both(root, spec, "price", first.version)
    assert quick.problems and quick.problems[0].column == "amount"
    assert "two values" in quick.problems[0].what
    assert quick.rows_read < 10  # the inserted row and the rows sharing its key


def test_a_new_key_of_a_functional_relation_passes(pipeline):
    spec, root = pipeline
    first = check_input(root, spec, "price", None)
    write_deltalake(spec.table_uri(root, "price"), _price([N + 5], [1.0]), mode="append")
    assert not _both(root, spec, "price", first.version).problems


@pytest.mark.parametrize(
    "amount,what",
    [(None, "null"), (float("nan"), "NaN"), (float("inf"), "inf"), (float("-inf"), "-inf")],
)
def test_null_and_nan_in_a_change_are_found(pipeline, amount, what):
    spec, root = pipeline
    first = check_input(root, spec, "price", None)
    write_deltalake(spec.table_uri(root, "price"), _price([N + 9], [amount]), mode="append")
    quick = _both(root, spec, "price", first.version)
    assert quick.problems and what in quick.problems[0].what


def test_schema_drift_is_found_from_the_log(pipeline):
    spec, root = pipeline
    first = check_input(root, spec, "edge", None)
    drifted = pa.table({"src": pa.array([1], pa.int64()), "dst": pa.array(["x"], pa.string())})
    write_deltalake(
        spec.table_uri(root, "edge"), drifted, mode="overwrite", schema_mode="overwrite"
    )
    quick = _both(root, spec, "edge", first.version)
    assert "has type string" in quick.problems[0].what


def test_a_table_behind_the_passed_version_is_read_whole(pipeline):
    spec, root = pipeline
    version = DeltaTable(spec.table_uri(root, "edge")).version()
    quick = check_input(root, spec, "edge", version + 5)
    assert quick.since is None and quick.rows_read == N and not quick.problems
