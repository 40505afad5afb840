"""``DeltalogPipelines``: deltalog pipelines as a Dagster component, for projects laid out
for Dagster's ``dg`` tool (a ``defs/`` folder of ``defs.yaml`` files)::

    # <package>/defs/pipelines/defs.yaml
    type: deltalog.dagster_project.component.DeltalogPipelines
    attributes:
      paths: ["pipelines"]          # relative to the project root (the pyproject.toml folder)
      warehouse: warehouse          # optional; the same default as build_definitions

It builds the same definitions as ``build_definitions(paths=...)``: every pipeline folder
found in ``paths`` (each a folder of pipeline folders, or one pipeline folder), each loaded
on its own, with the ``warehouse`` and ``spark`` resources.
"""

from pathlib import Path

import dagster as dg
from pydantic import Field

from deltalog.dagster_project.build import build_definitions


class DeltalogPipelines(dg.Component, dg.Resolvable, dg.Model):
    """Every deltalog pipeline folder (``<name>/program.dl`` + ``pipeline.toml``) found in
    ``paths``: one asset group per pipeline, with its jobs, sensors, schedules and checks.
    A pipeline with an error becomes one placeholder asset whose description is the error."""

    paths: list[str] = Field(
        default_factory=lambda: ["pipelines"],
        description="Folders holding pipeline folders, or pipeline folders, relative to the "
        "project root.",
    )
    warehouse: str | None = Field(
        default=None,
        description="Warehouse root (a folder relative to the project root, or a URI). "
        "Default: $DELTALOG_WAREHOUSE, else [tool.deltalog] warehouse in pyproject.toml.",
    )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        base = Path(context.project_root)
        root: str | Path | None = None
        if self.warehouse is not None:
            root = self.warehouse if "://" in self.warehouse else base / self.warehouse
        return build_definitions(paths=[base / p for p in self.paths], root=root, project=base)
