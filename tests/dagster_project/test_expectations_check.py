"""The whole-table ``expectations`` check of an EDB table whose pipeline names a Great
Expectations suite: it passes on a clean table, fails on a table that breaks a row-wise or
a table-level expectation (naming them), and leaves GX Data Docs in the warehouse."""

import json

import dagster as dg
import pytest

from deltalog.dagster_project.definitions import build_definitions
from deltalog.dagster_project.defs import asset_key
from deltalog.dagster_project.defs.expectations import CHECK_NAME
from deltalog.pipelines.spec import load_pipeline
from deltalog.pipelines.warehouse import write_edb
from tests.dagster_project.tiny import EDGES_V1, edb_tables, make_pipeline

pytestmark = [pytest.mark.dagster]

SUITE = {"expectations": [
    {"type": "expect_column_values_to_be_between",
     "kwargs": {"column": "src", "min_value": 0, "max_value": 20}},
    {"type": "expect_table_row_count_to_be_between", "kwargs": {"max_value": 6}},
]}


def _check(defs, instance, spec) -> dg.AssetCheckEvaluation:
    key = asset_key(spec, "edge")
    result = dg.materialize(
        [a for a in defs.assets if key in getattr(a, "keys", ())] + list(defs.asset_checks),
        resources=defs.resources, instance=instance, selection=[key], raise_on_error=False)
    [check] = [c for c in result.get_asset_check_evaluations()
               if c.asset_key == key and c.check_name == CHECK_NAME]
    return check


def test_the_expectations_check_validates_the_whole_table_and_writes_data_docs(tmp_path):
    spec, root = make_pipeline(tmp_path)
    (spec.directory / "expectations").mkdir()
    (spec.directory / "expectations" / "edge.json").write_text(json.dumps(SUITE))
    with (spec.directory / "pipeline.toml").open("a") as toml:
        toml.write('\n[expectations]\nedge = "expectations/edge.json"\n')
    spec = load_pipeline(spec.directory)
    defs = build_definitions([spec], root=root)
    with dg.instance_for_test() as instance:
        first = _check(defs, instance, spec)
        assert first.passed and first.metadata["rows"].value == len(EDGES_V1)
        docs = root / "_deltalog" / "data_docs" / spec.name / "edge" / "index.html"
        assert docs.is_file() and first.metadata["data_docs"].value == str(docs)

        write_edb(root, spec, edb_tables([*EDGES_V1, (40, 41), (1, 7)]))
        second = _check(defs, instance, spec)
        failed = second.metadata["failed"].value
        assert not second.passed and len(failed) == 2
        assert "expect_column_values_to_be_between" in failed[0] + failed[1]
        assert "expect_table_row_count_to_be_between" in failed[0] + failed[1]
