"""The blocking ``valid_input`` check in Dagster: its first evaluation reads the whole EDB
table, a later one (same instance) only the change since the version that last passed, and
a bad change (here a schema drift) still fails it."""

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltalog.dagster_project.definitions import build_definitions
from deltalog.dagster_project.defs import asset_key
from deltalog.dagster_project.defs.edb import INPUT_CHECK
from deltalog.pipelines.warehouse import write_edb
from tests.dagster_project.tiny import EDGES_V1, edb_tables, make_pipeline

pytestmark = [pytest.mark.dagster]


def _edge_check(defs, instance, spec) -> dg.AssetCheckEvaluation:
    key = asset_key(spec, "edge")
    result = dg.materialize(
        [a for a in defs.assets if key in getattr(a, "keys", ())] + list(defs.asset_checks),
        resources=defs.resources,
        instance=instance,
        selection=[key],
        raise_on_error=False,
    )
    [check] = [
        c
        for c in result.get_asset_check_evaluations()
        if c.asset_key == key and c.check_name == INPUT_CHECK
    ]
    return check


def test_later_evaluations_read_only_the_change(tmp_path):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    with dg.instance_for_test() as instance:
        first = _edge_check(defs, instance, spec)
        assert first.passed and first.metadata["checked"].value == "whole table"
        assert first.metadata["rows_read"].value == len(EDGES_V1)

        write_edb(root, spec, edb_tables([*EDGES_V1, (40, 41)]))
        second = _edge_check(defs, instance, spec)
        assert second.passed
        assert (
            second.metadata["checked"].value
            == f"change since {first.metadata['delta_version'].value}"
        )
        assert second.metadata["rows_read"].value == 1
        assert second.metadata["rows"].value == len(EDGES_V1) + 1

        drifted = pa.table({"src": pa.array([50], pa.int64()), "dst": pa.array(["x"])})
        write_deltalake(
            spec.table_uri(root, "edge"), drifted, mode="overwrite", schema_mode="overwrite"
        )
        third = _edge_check(defs, instance, spec)
        assert not third.passed and third.metadata["column"].value == "dst"
        assert third.metadata["checked"].value.startswith("change since")

        # after a failure the next evaluation reads the whole table again
        fourth = _edge_check(defs, instance, spec)
        assert not fourth.passed and fourth.metadata["checked"].value == "whole table"
