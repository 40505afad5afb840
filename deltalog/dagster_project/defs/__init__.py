"""Factories that turn one ``PipelineSpec`` into Dagster definitions (one module per kind).

Submodules: ``resources`` (warehouse root, lazy Spark), ``edb`` (one asset per EDB table),
``idb`` (one multi-asset per stratum), ``checks`` (Spark recompute check per IDB predicate),
``expectations`` (the whole-table check of a team's Great Expectations suite on an EDB table),
``automation`` (update/check/rebuild jobs, the EDB version sensor, the daily check schedule),
``load_errors`` (the placeholder asset of a pipeline that did not load).
"""

import dagster as dg

from deltalog.dagster_project.defs.automation import pipeline_automation
from deltalog.dagster_project.defs.checks import idb_checks
from deltalog.dagster_project.defs.edb import asset_key, edb_assets, edb_checks
from deltalog.dagster_project.defs.expectations import expectation_checks
from deltalog.dagster_project.defs.idb import idb_assets
from deltalog.pipelines.spec import PipelineSpec


def pipeline_definitions(spec: PipelineSpec) -> dg.Definitions:
    """Assets and checks of one pipeline; resources ``warehouse`` and ``spark`` come from the
    caller (see ``resources.local_resources``), so the same factories serve every environment."""
    return dg.Definitions.merge(
        dg.Definitions(
            assets=[*edb_assets(spec), *idb_assets(spec)],
            asset_checks=[*edb_checks(spec), *expectation_checks(spec), *idb_checks(spec)],
        ),
        pipeline_automation(spec),
    )


__all__ = [
    "asset_key",
    "edb_assets",
    "edb_checks",
    "idb_assets",
    "idb_checks",
    "pipeline_definitions",
]
