"""Derived tables carry the program's column names (declared, or the head variables of an
undeclared predicate's first rule), and a program whose derived relation changed shape
stops with DL313 before writing into the old table."""

import shutil

import pytest

from deltalog.engine.errors import DataError
from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io
from deltalog.pipelines.spec import load_pipeline
from deltalog.schemas.relation import arrow_to_rows
from tests.dagster_project.tiny import EDGES_V1, NODES, START, make_pipeline, run_all


def test_undeclared_derived_tables_are_named_by_their_rules_head_variables(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    names = {p: delta_io.arrow_schema_of(spec.table_uri(root, p)).names for p in spec.idb_tables}
    assert names == {"path": ["x", "y"], "even": ["x"], "odd": ["y"],
                     "unreachable": ["x", "y"], "out_degree": ["x", "n"]}


def test_a_derived_relation_that_changed_shape_is_dl313_and_nothing_is_written(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    uri = spec.table_uri(root, "path")
    before = delta_io.table_version(uri)
    program = spec.directory / "program.dl"
    program.write_text(".decl path(src: int, dst: int)\n" + program.read_text())
    changed = load_pipeline(spec.directory)
    with pytest.raises(DataError) as info:
        run_all(changed, root)
    msg = str(info.value)
    assert "error DL313" in msg and "(x int64, y int64)" in msg and "(src int64, dst int64)" in msg
    assert delta_io.table_version(uri) == before


def test_removing_the_old_table_lets_the_next_run_derive_it_again(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    program = spec.directory / "program.dl"
    program.write_text(".decl path(src: int, dst: int)\n" + program.read_text())
    changed = load_pipeline(spec.directory)
    shutil.rmtree(changed.table_uri(root, "path"))
    results = run_all(changed, root)
    assert results["path"].mode == "rebuilt"
    want = evaluate_naive(changed.program, {"edge": set(EDGES_V1), "node": set(NODES),
                                            "start": set(START)})
    for pred in changed.idb_tables:
        table = delta_io.read_arrow(changed.table_uri(root, pred))
        assert arrow_to_rows(table) == set(want[pred]), pred
    assert delta_io.arrow_schema_of(changed.table_uri(root, "path")).names == ["src", "dst"]
