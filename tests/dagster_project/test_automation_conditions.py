"""Dagster's own forms: the EDB tables are observable external assets whose data version is
the Delta version, the IDB assets carry ``AutomationCondition.eager()`` (evaluated by the
``<pipeline>_automation`` sensor), and their materializations carry Dagster's table metadata
(name, schema, row count) next to the engine's seconds. The conditions are evaluated with
Dagster's own evaluator on a real instance and real Delta tables; the oracle for what must
run is the program's dependency graph."""

import dagster as dg
import pyarrow as pa
import pytest

from deltalog.dagster_project.definitions import build_definitions
from deltalog.dagster_project.defs import asset_key
from deltalog.dagster_project.defs.automation import automation_sensor_name, update_job_name
from deltalog.pipelines import delta_io
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_to_rows
from tests.dagster_project.tiny import EDGES_V1, NODES, edb_tables, make_pipeline, tables_right

pytestmark = pytest.mark.dagster
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def _tick(defs, instance, cursor):
    """One evaluation of the automation conditions, then a run of what it requested (as the
    daemon would launch it); returns the requested IDB predicates and the new cursor."""
    result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    keys = {
        k for k in defs.resolve_asset_graph().get_all_asset_keys() if result.get_num_requested(k)
    }
    if keys:
        owners = [a for a in defs.assets if set(getattr(a, "keys", ())) & keys]
        assert dg.materialize(
            owners, resources=defs.resources, instance=instance, run_config=QUIET
        ).success
    return {k.path[-1] for k in keys}, result.cursor


def _downstream(spec, changed: set[str]) -> set[str]:
    """IDB predicates reading (transitively) one of ``changed``, outside their strata."""
    out: set[str] = set()
    frontier = set(changed)
    while frontier:
        nxt = {
            p for p in spec.idb_tables
            if p not in out and set(spec.upstream_of((p,))) & frontier
        }
        out |= nxt
        frontier = nxt
    return out - changed


def test_edb_assets_are_observed_with_the_delta_version(tmp_path):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    graph = defs.resolve_asset_graph()
    for pred in spec.edb_tables:
        node = graph.get(asset_key(spec, pred))
        assert node.is_observable and not node.is_materializable
    for pred in spec.idb_tables:
        node = graph.get(asset_key(spec, pred))
        assert node.is_materializable
        assert node.automation_condition is not None
        assert node.automation_condition.get_label() == "eager"
    sensor = defs.resolve_sensor_def(automation_sensor_name(spec))
    assert isinstance(sensor, dg.AutomationConditionSensorDefinition)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING

    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(update_job_name(spec)).execute_in_process(
            instance=instance, run_config=QUIET
        )
        assert result.success
        for pred in spec.edb_tables:
            uri = spec.table_uri(root, pred)
            record = instance.fetch_observations(asset_key(spec, pred), limit=1).records[0]
            observation = record.asset_observation
            version = delta_io.table_version(uri)
            assert observation.data_version == str(version)
            meta = {k: v.value for k, v in observation.metadata.items()}
            assert meta["delta_version"] == version
            assert meta["dagster/row_count"] == len(arrow_to_rows(delta_io.read_arrow(uri)))
            assert meta["dagster/table_name"] == uri
            columns = [c.name for c in meta["dagster/column_schema"].columns]
            assert columns == [c.name for c in spec.program.schemas[pred].columns]
        for event in result.get_asset_materialization_events():
            mat = event.materialization
            pred = mat.asset_key.path[-1]
            meta = {k: v.value for k, v in mat.metadata.items()}
            uri = spec.table_uri(root, pred)
            assert meta["dagster/table_name"] == uri
            # the row count the run reports is the table's (checked here by reading it)
            assert meta["dagster/row_count"] == len(arrow_to_rows(delta_io.read_arrow(uri)))
            assert isinstance(meta["dagster/column_schema"], dg.TableSchema)
            assert 0 <= meta["engine_seconds"] <= meta["seconds"]


def test_eager_conditions_materialize_what_another_run_left_behind(tmp_path):
    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    update = defs.resolve_job_def(update_job_name(spec))
    with dg.instance_for_test() as instance:
        assert update.execute_in_process(instance=instance, run_config=QUIET).success
        # the first evaluation requests nothing: every table is there and up to date
        requested, cursor = _tick(defs, instance, None)
        assert requested == set()

        # An update run observes the EDB and materializes everything downstream in the same
        # run (what the `_edb_versions` sensor launches): nothing left for the conditions.
        write_edb(root, spec, edb_tables([*EDGES_V1, (6, 7)]))
        assert update.execute_in_process(instance=instance, run_config=QUIET).success
        requested, cursor = _tick(defs, instance, cursor)
        assert requested == set()

        # One stratum materialized on its own (as from the UI): what reads it is requested.
        path = [a for a in defs.assets if asset_key(spec, "path") in getattr(a, "keys", ())]
        write_edb(root, spec, edb_tables([*EDGES_V1, (6, 7), (7, 1)]))
        assert dg.materialize(path, resources=defs.resources, instance=instance,
                              run_config=QUIET).success
        requested, cursor = _tick(defs, instance, cursor)
        assert requested == _downstream(spec, {"path"}) == {"unreachable"}
        requested, cursor = _tick(defs, instance, cursor)  # that run triggers nothing more
        assert requested == set()

        # An EDB table observed with a new Delta version (UI "Observe"): the IDB assets
        # reading it directly are requested (their own downstream follow on later ticks).
        nodes = [*NODES, (9, "n9")]
        tables = edb_tables([*EDGES_V1, (6, 7), (7, 1)])
        tables["node"] = pa.table({"id": [n[0] for n in nodes], "label": [n[1] for n in nodes]})
        write_edb(root, spec, tables)
        node = [a for a in defs.assets if asset_key(spec, "node") in getattr(a, "keys", ())]
        assert dg.materialize(node, resources=defs.resources, instance=instance,
                              selection=[asset_key(spec, "node")], run_config=QUIET).success
        requested, cursor = _tick(defs, instance, cursor)
        assert requested == {p for p in spec.idb_tables if "node" in spec.upstream_of((p,))}
        assert requested == {"unreachable"}
        requested, cursor = _tick(defs, instance, cursor)
        assert requested == set()

        # The same version observed again is no update: nothing requested.
        assert dg.materialize(node, resources=defs.resources, instance=instance,
                              selection=[asset_key(spec, "node")], run_config=QUIET).success
        requested, cursor = _tick(defs, instance, cursor)
        assert requested == set()
        assert not tables_right(spec, root, [*EDGES_V1, (6, 7), (7, 1)], nodes)  # edge unseen

        # `edge` observed at last: its readers and everything downstream of them in one tick
        # (a dependency that will be requested counts as updated), then quiet; the tables then
        # equal the naive evaluation of the current EDB.
        edge = [a for a in defs.assets if asset_key(spec, "edge") in getattr(a, "keys", ())]
        assert dg.materialize(edge, resources=defs.resources, instance=instance,
                              selection=[asset_key(spec, "edge")], run_config=QUIET).success
        requested, cursor = _tick(defs, instance, cursor)
        readers = {p for p in spec.idb_tables if "edge" in spec.upstream_of((p,))}
        assert requested == readers | _downstream(spec, readers) == set(spec.idb_tables)
        requested, cursor = _tick(defs, instance, cursor)
        assert requested == set()
        assert tables_right(spec, root, [*EDGES_V1, (6, 7), (7, 1)], nodes)
