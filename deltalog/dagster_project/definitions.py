"""The Definitions Dagster loads (``dagster dev -m deltalog.dagster_project.definitions``): every
pipeline folder of the search folders (``$DELTALOG_PIPELINES``, else ``[tool.deltalog]
pipelines`` of the nearest ``pyproject.toml`` that has that table, else the bundled examples)
on the local resource set. A team's own project calls ``build_definitions`` itself (see
``deltalog.dagster_project.build``)."""

from deltalog.dagster_project.build import LoadError, build_definitions

__all__ = ["LoadError", "build_definitions", "defs"]

defs = build_definitions()
