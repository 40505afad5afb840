"""End to end on a tiny pipeline: Dagster materializes every asset in process from EDB Delta
tables, the IDB tables equal the naive evaluator's result, a change to the EDB is carried
over as exact inserts and deletes, and the Spark recompute check catches a tampered table."""

import dagster as dg
import pyarrow as pa
import pytest

from deltalog.dagster_project.definitions import build_definitions
from deltalog.dagster_project.defs import asset_key
from deltalog.dagster_project.defs.checks import CHECK_NAME
from deltalog.dagster_project.defs.edb import INPUT_CHECK
from deltalog.dagster_project.defs.idb import REBUILD_TAG
from deltalog.engine.errors import MISSING_INPUT, DeltalogError
from deltalog.engine.naive import evaluate_naive
from deltalog.pipelines import delta_io
from deltalog.pipelines.commits import EDB_VERSIONS, INPUT_VERSIONS
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.spec import PipelineSpec
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_to_rows, rows_to_arrow
from tests.dagster_project.tiny import EDGES_V1, NODES, START, edb_tables, make_pipeline

pytestmark = [pytest.mark.dagster, pytest.mark.spark]

# Break the cycle 1 -> 2 -> 3 -> 1, join the two components, add a new edge.
EDGES_V2 = [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7)]


def _expected(spec: PipelineSpec, edges) -> dict[str, frozenset]:
    inputs = {"edge": set(edges), "node": set(NODES), "start": set(START)}
    return evaluate_naive(spec.program, inputs)


def _tables(spec: PipelineSpec, root) -> dict[str, set]:
    return {
        pred: arrow_to_rows(delta_io.read_arrow(spec.table_uri(root, pred)))
        for pred in spec.idb_tables
    }


def _materialize(defs: dg.Definitions, selection=None) -> dg.ExecuteInProcessResult:
    # The EDB assets are observable source assets: a run observes them (and evaluates their
    # valid_input checks) only when its selection includes sources.
    return dg.materialize(
        [*defs.assets, *defs.asset_checks],
        resources=defs.resources,
        selection=dg.AssetSelection.all(include_sources=True) if selection is None else selection,
        raise_on_error=False,
    )


def _idb_metadata(spec: PipelineSpec, result) -> dict[str, dict]:
    out = {}
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        pred = mat.asset_key.path[-1]
        if pred in spec.idb_tables:
            out[pred] = {k: v.value for k, v in mat.metadata.items()}
    return out


def _checks(result, name: str = CHECK_NAME) -> dict[str, dg.AssetCheckEvaluation]:
    evaluations = result.get_asset_check_evaluations()
    return {c.asset_key.path[-1]: c for c in evaluations if c.check_name == name}


def test_materialize_change_and_check(tmp_path, spark):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)

    first = _materialize(defs)
    assert first.success
    v1 = _expected(spec, EDGES_V1)
    assert _tables(spec, root) == v1
    checks = _checks(first)
    assert set(checks) == set(spec.idb_tables)
    assert all(c.passed for c in checks.values()), {p: c.metadata for p, c in checks.items()}
    inputs = _checks(first, INPUT_CHECK)
    assert set(inputs) == set(spec.edb_tables) and all(c.passed for c in inputs.values())
    meta = _idb_metadata(spec, first)
    for pred, rows in v1.items():
        assert (meta[pred]["mode"], meta[pred]["incremental"]) == ("full", False)
        assert meta[pred]["dagster/row_count"] == len(rows)
        assert (meta[pred]["inserted"], meta[pred]["deleted"]) == (len(rows), 0)
        assert "dagster/column_schema" in meta[pred]
        assert meta[pred]["seconds"] >= 0
    assert meta["path"]["input_versions"] == {"edge": 1}
    assert meta["unreachable"]["input_versions"] == {"node": 1, "path": 1}
    assert meta["unreachable"]["edb_versions"] == {"edge": 1, "node": 1}

    edb_writes = {w.pred: w for w in write_edb(root, spec, edb_tables(EDGES_V2))}
    assert (edb_writes["edge"].inserted, edb_writes["edge"].deleted) == (2, 1)
    assert edb_writes["edge"].table_version == 2
    assert edb_writes["node"].table_version == 1  # unchanged: no commit

    second = _materialize(defs)
    assert second.success
    v2 = _expected(spec, EDGES_V2)
    assert _tables(spec, root) == v2
    assert all(c.passed for c in _checks(second).values())
    meta = _idb_metadata(spec, second)
    assert {m["mode"] for m in meta.values()} == {"incremental"}
    # path is recursive and graph-shaped: the columnar DBSP kernel, which gathers rows
    assert meta["path"]["edb_changes"] == 3 and meta["path"]["rows_gathered"] > 0
    for key in ("idb_inserted", "idb_erased", "oracle_regions", "engine_seconds", "seq",
                "state_open_s", "state_save_s"):
        assert key in meta["path"], key
    assert meta["path"]["state_bytes_written"] > 0 and meta["path"]["state_open_s"] > 0
    for pred in spec.idb_tables:
        inserted, deleted = len(v2[pred] - v1[pred]), len(v1[pred] - v2[pred])
        assert (meta[pred]["inserted"], meta[pred]["deleted"]) == (inserted, deleted), pred
        assert meta[pred]["table_version"] == (2 if inserted or deleted else 1), pred
    assert meta["path"]["input_versions"] == {"edge": 2}
    info = delta_io.commit_metadata(spec.table_uri(root, "path"))
    assert info[INPUT_VERSIONS] == '{"edge": 2}'
    assert info[EDB_VERSIONS] == '{"edge": 2}'


def test_check_fails_on_a_tampered_table(tmp_path, spark):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    assets_only = dg.AssetSelection.all().without_checks()
    assert _materialize(defs, assets_only).success

    uri = spec.table_uri(root, "out_degree")
    rows = arrow_to_rows(delta_io.read_arrow(uri))
    schema = spec.program.schemas["out_degree"]
    tampered = (rows - {(1, 1)}) | {(1, 7), (9, 9)}
    delta_io.replace_contents(uri, rows_to_arrow(schema, tampered), {"by": "a test"})

    key = dg.AssetCheckKey(asset_key(spec, "out_degree"), CHECK_NAME)
    result = _materialize(defs, dg.AssetSelection.checks(key))
    check = _checks(result)["out_degree"]
    assert not check.passed
    meta = {k: v.value for k, v in check.metadata.items()}
    assert meta["missing_in_engine"] == [[1, 1]]
    assert meta["extra_in_engine"] == [[1, 7], [9, 9]]
    assert (meta["n_missing_in_engine"], meta["n_extra_in_engine"]) == (1, 2)
    assert meta["edb_versions"] == {"edge": 1}


def test_missing_upstream_table_is_a_clear_error(tmp_path):
    spec, root = make_pipeline(tmp_path)
    with pytest.raises(DeltalogError) as info:
        StratumRun(root, spec, spec.stratum_of("unreachable")).materialize()
    assert info.value.code == MISSING_INPUT
    assert "materialize 'path' first" in str(info.value)


def test_empty_first_result_records_its_inputs(tmp_path):
    spec, root = make_pipeline(tmp_path)
    empty_edges = pa.table({"src": pa.array([], pa.int64()), "dst": pa.array([], pa.int64())})
    write_edb(root, spec, {**edb_tables(EDGES_V1), "edge": empty_edges})
    [result] = StratumRun(root, spec, spec.stratum_of("path")).materialize()
    assert (result.rows, result.inserted, result.deleted) == (0, 0, 0)
    info = delta_io.commit_metadata(spec.table_uri(root, "path"))
    assert info[EDB_VERSIONS] == '{"edge": 2}'


def test_rebuild_tag_reloads_from_the_tables(tmp_path):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    assets_only = dg.AssetSelection.all().without_checks()
    assert _materialize(defs, assets_only).success
    again = _materialize(defs, assets_only)
    assert {m["mode"] for m in _idb_metadata(spec, again).values()} == {"unchanged"}
    rebuilt = dg.materialize(
        defs.assets, resources=defs.resources, selection=assets_only, tags={REBUILD_TAG: "1"}
    )
    meta = _idb_metadata(spec, rebuilt)
    assert {m["mode"] for m in meta.values()} == {"rebuilt"}
    assert all("rebuild requested" in m["rebuilt_because"] for m in meta.values())
    assert _tables(spec, root) == _expected(spec, EDGES_V1)


def test_materialize_partitioned_on_spark_shows_the_plan(tmp_path, spark):
    """The spark resource's ``partitions``: the same tables as the naive evaluator, and each
    IDB materialization says how its stratum ran (a key plan, or one process and why); the
    recompute checks pass on what the partitioned runs committed."""
    from deltalog.dagster_project.defs.resources import SparkResource, WarehouseResource

    spec, root = make_pipeline(tmp_path)
    resources = {"warehouse": WarehouseResource(root=str(root)),
                 "spark": SparkResource(partitions=4)}
    defs = build_definitions([spec], resources=resources, root=root)
    runs_only = dg.AssetSelection.all(include_sources=True).without_checks()
    for edges in (EDGES_V1, EDGES_V2):  # (the checks after the second run only)
        write_edb(root, spec, edb_tables(edges))
        result = _materialize(defs, runs_only if edges is EDGES_V1 else None)
        assert result.success
        assert _tables(spec, root) == _expected(spec, edges)
    meta = _idb_metadata(spec, result)
    assert meta["path"]["partitioning"].startswith("partitioned by key")
    assert meta["path"]["partitions"] == 4 and meta["path"]["shuffled_rows"] > 0
    assert meta["even"]["partitioning"].startswith("single process: ")
    assert "not in 4 partitions" in meta["even"]["notes"]
    assert meta["path"]["mode"] == "incremental"
    checks = _checks(result)
    assert set(checks) == set(spec.idb_tables)
    assert all(c.passed for c in checks.values()), {p: c.metadata for p, c in checks.items()}
