"""The Definitions Dagster loads (``dagster dev -m dagster_project.definitions``): every
pipeline folder under ``pipelines/`` with a ``pipeline.toml``, on the local resource set."""

from collections.abc import Iterable, Mapping
from pathlib import Path

import dagster as dg

from dagster_project.defs import pipeline_definitions
from dagster_project.defs.resources import local_resources
from pipelines.spec import PipelineSpec, discover_pipelines, load_pipeline


def build_definitions(
    specs: Iterable[PipelineSpec] | None = None,
    resources: Mapping[str, object] | None = None,
    root: str | Path | None = None,
) -> dg.Definitions:
    """Definitions of ``specs`` (default: every discovered pipeline) with ``resources``
    (default: the local set, warehouse at ``root``)."""
    if specs is None:
        specs = [load_pipeline(folder) for folder in discover_pipelines()]
    merged = dg.Definitions.merge(*(pipeline_definitions(spec) for spec in specs))
    return dg.Definitions(
        assets=merged.assets,
        asset_checks=merged.asset_checks,
        jobs=merged.jobs,
        sensors=merged.sensors,
        schedules=merged.schedules,
        resources=dict(resources) if resources is not None else local_resources(root),
    )


defs = build_definitions()
