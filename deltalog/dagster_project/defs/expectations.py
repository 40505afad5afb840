"""The whole-table check of a team's Great Expectations suite: one ``expectations`` asset
check per EDB table whose ``pipeline.toml`` names a suite, run by the scheduled check job.
It validates every expectation of the suite (table-level ones included, which the blocking
``valid_input`` check cannot judge from a change) on the table's current version and
writes GX Data Docs under the warehouse (``_deltalog/data_docs/<pipeline>/<table>``)."""

import dagster as dg

from deltalog.dagster_project.defs.edb import asset_key
from deltalog.dagster_project.defs.resources import WarehouseResource
from deltalog.pipelines.expectations import docs_dir, validate_table
from deltalog.pipelines.spec import PipelineSpec

CHECK_NAME = "expectations"


def _check(spec: PipelineSpec, pred: str) -> dg.AssetChecksDefinition:
    suite = spec.expectations[pred]

    @dg.asset_check(
        asset=asset_key(spec, pred),
        name=CHECK_NAME,
        description=f"`{pred}` meets every expectation of {suite.path.name} (whole table, "
                    "Great Expectations; Data Docs in the warehouse, or its state root).",
    )
    def _expectations(warehouse: WarehouseResource) -> dg.AssetCheckResult:
        report = validate_table(spec.table_uri(warehouse.root, pred), pred, suite,
                                docs_dir(warehouse.root, spec.name, pred,
                                         warehouse.state_root))
        return dg.AssetCheckResult(
            passed=not report.problems,
            severity=dg.AssetCheckSeverity.ERROR,
            description=report.summary,
            metadata={
                "delta_version": report.version,
                "rows": report.rows,
                "failed": dg.MetadataValue.json([p.what for p in report.problems][:20]),
                "data_docs": dg.MetadataValue.path(str(report.docs / "index.html")),
            },
        )

    return _expectations


def expectation_checks(spec: PipelineSpec) -> list[dg.AssetChecksDefinition]:
    """One ``expectations`` check per EDB table of ``spec`` with a suite."""
    return [_check(spec, pred) for pred in sorted(spec.expectations)]
