"""One asset per EDB Delta table: it observes the table (version, rows, schema) and records
that as materialization metadata; writing EDB tables is the job of whoever owns the data."""

import dagster as dg

from dagster_project.defs.resources import WarehouseResource
from engine.errors import DeltalogError
from pipelines import delta_io
from pipelines.spec import PipelineSpec
from schemas.relation import dagster_table_schema

KINDS = {"delta", "datalog"}


def asset_key(spec: PipelineSpec, pred: str) -> dg.AssetKey:
    """The asset key of the table of ``pred``: ``<pipeline>/<pred>``."""
    return dg.AssetKey([spec.name, pred])


def _edb_asset(spec: PipelineSpec, pred: str) -> dg.AssetsDefinition:
    schema = spec.program.schemas[pred]
    columns = ", ".join(f"{c.name}: {c.type}" for c in schema.columns)

    @dg.asset(
        key=asset_key(spec, pred),
        group_name=spec.name,
        kinds=KINDS,
        description=(
            f"EDB table `{pred}({columns})` of pipeline {spec.name}, at "
            f"`{spec.edb_tables[pred]}` in the warehouse. Materializing it records the current "
            "Delta version; it does not write the table."
        ),
        metadata={"table_path": spec.edb_tables[pred]},
    )
    def _observe(warehouse: WarehouseResource) -> dg.MaterializeResult:
        uri = spec.table_uri(warehouse.root, pred)
        try:
            if not delta_io.exists(uri):
                raise DeltalogError(f"EDB table of '{pred}' does not exist at {uri}", spec.name)
            version = delta_io.table_version(uri)
            rows = delta_io.row_count(uri, version)
        except DeltalogError as err:
            raise dg.Failure(description=str(err), allow_retries=False) from None
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": rows,
                "dagster/column_schema": dagster_table_schema(schema),
                "delta_version": version,
                "uri": dg.MetadataValue.path(uri),
            },
            data_version=dg.DataVersion(str(version)),
        )

    return _observe


def edb_assets(spec: PipelineSpec) -> list[dg.AssetsDefinition]:
    """One observing asset per bound EDB table of ``spec``."""
    return [_edb_asset(spec, pred) for pred in sorted(spec.edb_tables)]
