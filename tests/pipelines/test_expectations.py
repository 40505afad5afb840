"""A team's own Great Expectations suite on an EDB table: the blocking input check
validates the rows a change inserted against the suite's row-wise expectations (a bad
change is reported with the table, the expectation and an offending row; a clean one
passes, reading only the change), table-level expectations are left to the whole-table
validation, and a suite file that does not fit is DL401 when the pipeline loads. The
oracle: the same suite validated by GX on the whole table."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltalog.engine.errors import DeltalogError
from deltalog.pipelines import delta_io, expectations, quality
from deltalog.pipelines.inputs import check_input
from deltalog.pipelines.spec import load_pipeline

PROGRAM = """\
.decl edge(src: int, dst: int)
.decl node(id: int, label: string)
hop(x, z) :- edge(x, y), edge(y, z).
named(l) :- node(_, l).
"""
BINDING = """\
[edb]
edge = "t/edb/edge"
node = "t/edb/node"
[idb]
hop = "t/idb/hop"
named = "t/idb/named"
[expectations]
edge = "expectations/edge.json"
node = "expectations/node.json"
"""
EDGE_SUITE = {"expectations": [
    {"type": "expect_column_values_to_be_between",
     "kwargs": {"column": "src", "min_value": 0, "max_value": 100}},
    {"type": "expect_column_pair_values_a_to_be_greater_than_b",
     "kwargs": {"column_A": "dst", "column_B": "src", "or_equal": True}},
    {"type": "expect_table_row_count_to_be_between", "kwargs": {"max_value": 4}},
]}
NODE_SUITE = {"expectations": [
    {"type": "expect_column_values_to_match_regex",
     "kwargs": {"column": "label", "regex": "^n[0-9]+$"}},
    {"type": "expect_column_values_to_be_in_set",
     "kwargs": {"column": "id", "value_set": [1, 2, 3, 4, 5]}},
]}


def _edges(rows) -> pa.Table:
    return pa.table({"src": pa.array([r[0] for r in rows], pa.int64()),
                     "dst": pa.array([r[1] for r in rows], pa.int64())})


def _nodes(rows) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "label": pa.array([r[1] for r in rows], pa.string())})


def _folder(tmp_path: Path, binding: str = BINDING, edge_suite=EDGE_SUITE) -> Path:
    folder = tmp_path / "t"
    (folder / "expectations").mkdir(parents=True)
    (folder / "program.dl").write_text(PROGRAM)
    (folder / "pipeline.toml").write_text(binding)
    (folder / "expectations" / "edge.json").write_text(json.dumps(edge_suite))
    (folder / "expectations" / "node.json").write_text(json.dumps(NODE_SUITE))
    return folder


@pytest.fixture
def pipeline(tmp_path):
    spec = load_pipeline(_folder(tmp_path))
    root = tmp_path / "warehouse"
    write_deltalake(spec.table_uri(root, "edge"), _edges([(1, 2), (2, 3), (3, 3)]),
                    configuration=delta_io.CDF_CONFIG)
    write_deltalake(spec.table_uri(root, "node"), _nodes([(1, "n1"), (2, "n2")]),
                    configuration=delta_io.CDF_CONFIG)
    return spec, root


def _whole(spec, root, pred):
    """The oracle: every expectation of the suite on the whole table."""
    table = delta_io.read_arrow(spec.table_uri(root, pred))
    return expectations.validate(spec.expectations[pred], pred, table, change_only=False)


def test_clean_tables_and_a_clean_change_pass(pipeline):
    spec, root = pipeline
    first = check_input(root, spec, "edge", None)
    assert not first.problems and not _whole(spec, root, "edge")
    write_deltalake(spec.table_uri(root, "edge"), _edges([(4, 9)]), mode="append")
    quick = check_input(root, spec, "edge", first.version)
    assert not quick.problems and quick.rows_read == 1


def test_a_change_that_breaks_a_row_wise_expectation_is_reported_with_its_row(pipeline):
    spec, root = pipeline
    first = check_input(root, spec, "edge", None)
    write_deltalake(spec.table_uri(root, "edge"), _edges([(5, 6), (500, 600)]), mode="append")
    quick = check_input(root, spec, "edge", first.version)
    assert len(quick.problems) == 1 and quick.rows_read == 2
    problem = quick.problems[0]
    assert problem.column == "src" and problem.row == {"src": 500, "dst": 600}
    assert "expect_column_values_to_be_between" in problem.what and "1 of 2 rows" in problem.what
    message = str(quality.error("edge", spec.table_uri(root, "edge"), quick.version,
                                quick.problems))
    assert "error DL306" in message and "edge.json" in message and "500" in message
    # the oracle finds it too (and the table-level row count, which a change cannot judge)
    whole = _whole(spec, root, "edge")
    kinds = sorted(p.what.split("(")[0] for p in whole)
    assert kinds == ["expectation expect_column_values_to_be_between",
                     "expectation expect_table_row_count_to_be_between"]


def test_pair_regex_and_set_expectations(pipeline):
    spec, root = pipeline
    first = check_input(root, spec, "node", None)
    assert not first.problems
    write_deltalake(spec.table_uri(root, "node"), _nodes([(3, "bad label"), (9, "n9")]),
                    mode="append")
    quick = check_input(root, spec, "node", first.version)
    got = {(p.column, p.row["id"] if p.row else None) for p in quick.problems}
    assert got == {("label", 3), ("id", 9)}
    edge_first = check_input(root, spec, "edge", None)
    write_deltalake(spec.table_uri(root, "edge"), _edges([(7, 2)]), mode="append")
    quick = check_input(root, spec, "edge", edge_first.version)
    assert [p.row for p in quick.problems] == [{"src": 7, "dst": 2}]
    assert "expect_column_pair_values_a_to_be_greater_than_b" in quick.problems[0].what


@pytest.mark.parametrize(("suite", "binding", "fragment"), [
    ("{not json", BINDING, "not valid JSON"),
    (json.dumps({"expectations": [{"type": "expect_column_values_to_be_between",
                                   "kwargs": {"column": "weight"}}]}), BINDING,
     "no column 'weight' in 'edge'"),
    (json.dumps({"rules": []}), BINDING, '{"expectations": ['),
    (json.dumps(EDGE_SUITE), BINDING.replace('edge = "expectations', 'hop = "expectations'),
     "[expectations] names 'hop'"),
    (json.dumps(EDGE_SUITE), BINDING.replace("expectations/edge.json", "../edge.json"),
     "inside the pipeline folder"),
])
def test_a_suite_that_does_not_fit_is_dl401_when_the_pipeline_loads(tmp_path, suite, binding,
                                                                    fragment):
    folder = _folder(tmp_path, binding)
    (folder / "expectations" / "edge.json").write_text(suite)
    with pytest.raises(DeltalogError) as info:
        load_pipeline(folder)
    assert "error DL401" in str(info.value) and fragment in str(info.value), str(info.value)


def test_an_unknown_expectation_type_is_a_problem_not_a_traceback(pipeline):
    spec, root = pipeline
    suite = expectations.Suite(Path("x.json"), ({"type": "expect_the_moon", "kwargs": {}},))
    table = delta_io.read_arrow(spec.table_uri(root, "edge"))
    problems = expectations.validate(suite, "edge", table, change_only=True)
    assert len(problems) == 1 and "not a Great Expectations one" in problems[0].what


def test_the_whole_table_validation_writes_data_docs(pipeline, tmp_path):
    spec, root = pipeline
    write_deltalake(spec.table_uri(root, "edge"), _edges([(5, 6), (500, 600)]), mode="append")
    table = delta_io.read_arrow(spec.table_uri(root, "edge"))
    docs = tmp_path / "docs"
    problems = expectations.validate(spec.expectations["edge"], "edge", table,
                                     change_only=False, docs=docs)
    assert problems == _whole(spec, root, "edge") and len(problems) == 2
    pages = sorted(p.relative_to(docs).parts[0] for p in docs.rglob("*.html"))
    assert "index.html" in pages and "validations" in pages
    page = "".join(p.read_text() for p in docs.rglob("*.html") if "validations" in p.parts)
    assert "src" in page and "500" in page


def test_a_suite_is_validated_in_a_process_whose_main_module_has_no_file(tmp_path):
    # (python -c, a notebook's kernel, a test worker: pyspark's connect package, which GX
    # imports, exits such a process with status 0 unless it looks interactive)
    folder = _folder(tmp_path)
    child = (
        "import sys, pyarrow as pa\n"
        "from deltalog.pipelines import expectations\n"
        "from deltalog.pipelines.spec import load_pipeline\n"
        f"spec = load_pipeline({str(folder)!r})\n"
        "table = pa.table({'src': pa.array([1, 200], pa.int64()),"
        " 'dst': pa.array([2, 3], pa.int64())})\n"
        "problems = expectations.validate(spec.expectations['edge'], 'edge', table,"
        " change_only=True)\n"
        "print(len(problems), hasattr(sys, 'ps1'))\n")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["2", "False"], out.stderr[-2000:]


def test_a_suite_without_great_expectations_installed_is_dl901_saying_how(pipeline,
                                                                         monkeypatch):
    """deltalog installed without its 'gx' extra: a suite's check is a "not supported"
    error naming the extra, not an import traceback."""
    from deltalog.engine.errors import NotSupportedError

    spec, root = pipeline
    monkeypatch.delitem(sys.modules, "great_expectations", raising=False)
    monkeypatch.setitem(sys.modules, "great_expectations", None)  # (import fails)
    with pytest.raises(NotSupportedError, match=r"deltalog\[gx\]"):
        check_input(root, spec, "edge", None)


def test_data_docs_of_a_warehouse_on_object_storage_go_under_its_state_root(tmp_path):
    """Data Docs are local files: under a local warehouse, else under the state root in the
    warehouse's folder there (they went to the working folder of whatever ran the check)."""
    from deltalog.engine.errors import NotSupportedError
    from deltalog.pipelines.state_store import warehouse_key

    assert expectations.docs_dir(tmp_path, "p", "edge").is_relative_to(tmp_path)
    remote = "s3://bucket/warehouse"
    docs = expectations.docs_dir(remote, "p", "edge", tmp_path / "state")
    assert docs.is_relative_to(tmp_path / "state" / warehouse_key(remote))
    assert docs.parts[-2:] == ("p", "edge")
    with pytest.raises(NotSupportedError, match="state_root"):
        expectations.docs_dir(remote, "p", "edge")
