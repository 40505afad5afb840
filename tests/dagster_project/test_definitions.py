"""The Dagster definitions load, and their lineage is the program's: one asset per EDB table,
one multi-asset per stratum, deps from rule bodies, one Spark check per IDB predicate."""

import dagster as dg
import pytest

from deltalog.dagster_project.definitions import build_definitions
from deltalog.dagster_project.defs import asset_key
from deltalog.dagster_project.defs.checks import CHECK_NAME
from deltalog.dagster_project.defs.edb import INPUT_CHECK
from deltalog.dagster_project.defs.resources import WAREHOUSE_ENV, WarehouseResource
from deltalog.pipelines.spec import PipelineSpec, load_pipeline
from tests.dagster_project.tiny import make_pipeline

pytestmark = pytest.mark.dagster


def _keys(spec: PipelineSpec) -> set[dg.AssetKey]:
    return {asset_key(spec, p) for p in (*spec.edb_tables, *spec.idb_tables)}


def _lineage_matches_program(spec: PipelineSpec, defs: dg.Definitions) -> None:
    graph = defs.resolve_asset_graph()
    prog = spec.program
    assert _keys(spec) <= set(graph.get_all_asset_keys())
    for pred in spec.edb_tables:
        assert graph.get(asset_key(spec, pred)).parent_keys == set()
    for pred in spec.idb_tables:
        stratum = prog.strata[spec.stratum_of(pred)]
        expected = {asset_key(spec, q) for q in prog.dependencies[pred] if q not in stratum.preds}
        assert graph.get(asset_key(spec, pred)).parent_keys == expected, pred


def _multi_assets(defs: dg.Definitions) -> list[dg.AssetsDefinition]:
    return [a for a in defs.assets if isinstance(a, dg.AssetsDefinition) and not a.is_external]


def test_module_definitions_load():
    from deltalog.dagster_project.definitions import defs
    from deltalog.pipelines.spec import discover_pipelines

    specs = [load_pipeline(folder) for folder in discover_pipelines()]
    assert {s.name for s in specs} >= {"debian", "wordnet"}
    for spec in specs:
        _lineage_matches_program(spec, defs)
    # Every asset belongs to exactly one pipeline: nothing more, nothing less.
    assert set(defs.resolve_asset_graph().get_all_asset_keys()) == set().union(
        *(_keys(s) for s in specs)
    )
    assert set(defs.resources) == {"warehouse", "spark"}
    defs.resolve_implicit_global_asset_job_def()  # resolves: resources satisfy every asset


def test_every_asset_has_group_kinds_description():
    from deltalog.dagster_project.definitions import defs

    for spec in defs.resolve_asset_graph().asset_nodes:
        assert spec.group_name == spec.key.path[0]  # the pipeline's name
        assert "delta" in spec.kinds
        assert spec.description


def test_one_multi_asset_per_stratum(tmp_path):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    idb_defs = [a for a in _multi_assets(defs) if set(a.keys) & {asset_key(spec, "path")}]
    assert len(idb_defs) == 1
    by_keys = {frozenset(a.keys) for a in _multi_assets(defs)}
    for stratum in spec.program.strata:
        assert frozenset(asset_key(spec, p) for p in stratum.preds) in by_keys
    recursive = [s for s in spec.program.strata if s.recursive]
    assert {s.preds for s in recursive} == {("path",), ("even", "odd")}
    assert frozenset({asset_key(spec, "even"), asset_key(spec, "odd")}) in by_keys


def test_lineage_of_tiny_pipeline(tmp_path):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    _lineage_matches_program(spec, defs)
    graph = defs.resolve_asset_graph()
    assert graph.get(asset_key(spec, "unreachable")).parent_keys == {
        asset_key(spec, "node"),
        asset_key(spec, "path"),
    }
    assert graph.get(asset_key(spec, "even")).parent_keys == {
        asset_key(spec, "start"),
        asset_key(spec, "edge"),
    }


def test_one_recompute_check_per_idb_and_one_input_check_per_edb(tmp_path):
    spec, root = make_pipeline(tmp_path)
    graph = build_definitions([spec], root=root).resolve_asset_graph()
    checks = graph.asset_check_keys
    assert checks == {
        *(dg.AssetCheckKey(asset_key(spec, p), CHECK_NAME) for p in spec.idb_tables),
        *(dg.AssetCheckKey(asset_key(spec, p), INPUT_CHECK) for p in spec.edb_tables),
    }


def test_warehouse_root_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path))
    assert WarehouseResource().root == str(tmp_path)
    monkeypatch.delenv(WAREHOUSE_ENV)
    assert WarehouseResource().root.endswith("warehouse")
