"""``build_definitions``: Dagster definitions of deltalog pipelines, for this repository's
code location (``deltalog.dagster_project.definitions``) and for a team's own Dagster project::

    from deltalog.dagster_project.build import build_definitions

    defs = dg.Definitions.merge(my_defs, build_definitions(paths=["pipelines"]))

Importing this module loads no pipeline. Each pipeline is loaded on its own: one with an
error becomes a placeholder asset carrying the error (see ``defs.load_errors``), and the
others load as usual.
"""

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from deltalog.dagster_project.defs import pipeline_definitions
from deltalog.dagster_project.defs.load_errors import load_error_asset, safe_name
from deltalog.dagster_project.defs.resources import default_warehouse_root, local_resources
from deltalog.engine.errors import DeltalogError
from deltalog.pipelines.spec import (
    PipelineSpec,
    discover_pipelines,
    load_pipeline,
    pipeline_folders,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadError:
    """A pipeline folder that did not load, and the one-line error why."""

    folder: Path
    error: str


def _one_line(err: Exception, folder: Path) -> str:
    """``where: error DLnnn: message`` on one line; an exception that is no DeltalogError
    (a defect, or an unreadable file) gets DL000 and its type, and only this pipeline is
    lost."""
    if not isinstance(err, DeltalogError):
        err = DeltalogError(f"unexpected {type(err).__name__}: {err}", str(folder))
    return " ".join(str(err).split())


def _names(defs: dg.Definitions) -> set[str]:
    """Every name ``defs`` puts in the code location's namespaces (asset keys, check keys,
    jobs, sensors, schedules), to find two pipelines that would clash."""
    names: set[str] = set()
    for asset in defs.assets or ():
        if isinstance(asset, dg.AssetsDefinition):
            names.update(f"asset:{k.to_user_string()}" for k in asset.keys)
            names.update(f"check:{k.to_user_string()}" for k in asset.check_keys)
        elif isinstance(asset, dg.AssetSpec):
            names.add(f"asset:{asset.key.to_user_string()}")
    for check in defs.asset_checks or ():
        names.update(f"check:{k.to_user_string()}" for k in check.check_keys)
    for kind, items in (("job", defs.jobs), ("sensor", defs.sensors),
                        ("schedule", defs.schedules)):
        names.update(f"{kind}:{item.name}" for item in items or ())
    return names


def _pipeline_defs(
    sources: Iterable[PipelineSpec | Path],
) -> tuple[list[dg.Definitions], list[LoadError]]:
    """Definitions of each pipeline that loads, and the errors of those that do not.

    A pipeline whose program, binding or definitions raise, or whose names (asset keys,
    jobs, sensors, schedules) clash with an earlier pipeline's, is left out with its error.
    """
    loaded: list[dg.Definitions] = []
    errors: list[LoadError] = []
    taken: dict[str, Path] = {}
    for source in sources:
        folder = source.directory if isinstance(source, PipelineSpec) else Path(source)
        try:
            spec = source if isinstance(source, PipelineSpec) else load_pipeline(source)
            defs = pipeline_definitions(spec)
            names = _names(defs)
            clash = sorted(names & set(taken))
            if clash:
                other = taken[clash[0]]
                raise DeltalogError(
                    f"pipeline '{spec.name}' defines {clash[0].partition(':')[2]} "
                    f"({clash[0].partition(':')[0]}), as does the pipeline in {other}: "
                    "rename one (name = \"...\" in its pipeline.toml)",
                    str(folder),
                )
        except Exception as err:  # isolate the pipeline, whatever went wrong in it
            message = _one_line(err, folder)
            log.error("deltalog pipeline %s did not load: %s", folder, message,
                      exc_info=not isinstance(err, DeltalogError))
            errors.append(LoadError(folder, message))
            continue
        taken.update(dict.fromkeys(names, folder))
        loaded.append(defs)
    return loaded, errors


def _placeholders(errors: Sequence[LoadError], taken: set[str]) -> list[dg.AssetSpec]:
    out = []
    for err in errors:
        group = safe_name(err.folder.name)
        key, n = group, 1
        while f"asset:{key}" in taken:
            n += 1
            key = f"{group}_{n}"
        taken.add(f"asset:{key}")
        out.append(load_error_asset(key, group, err.folder, err.error))
    return out


def build_definitions(
    specs: Iterable[PipelineSpec] | None = None,
    resources: Mapping[str, object] | None = None,
    root: str | Path | None = None,
    paths: Iterable[str | Path] | None = None,
    project: str | Path | None = None,
) -> dg.Definitions:
    """Dagster definitions of deltalog pipelines, on a ``warehouse`` and a ``spark`` resource.

    Which pipelines: ``specs`` (already loaded), or the pipeline folders found in ``paths``
    (each a folder of pipeline folders, or one pipeline folder; relative paths are taken
    from the current directory), else the search folders: ``$DELTALOG_PIPELINES``, else
    ``[tool.deltalog] pipelines`` of the nearest ``pyproject.toml`` with that table, looking
    from ``project`` (default: the current directory) upward, else the bundled examples.

    Resources: ``resources`` as given, else the local set with the warehouse at ``root``,
    else ``$DELTALOG_WAREHOUSE``, else ``[tool.deltalog] warehouse`` (found as above, or
    from the first of ``paths``), else ``warehouse/`` beside the nearest ``pyproject.toml``
    above the first of ``paths`` (a team's own pipelines), else in this repository.

    Each pipeline is loaded on its own: one with an error is logged and becomes a
    placeholder asset named after its folder whose description is the error.
    """
    if specs is not None and paths is not None:
        raise ValueError("build_definitions takes specs or paths, not both")
    sources: list[PipelineSpec | Path]
    first: str | Path | None = None  # the first folder of pipelines given
    if specs is not None:
        sources = list(specs)
    else:
        bases = list(paths) if paths is not None else pipeline_folders(project)
        if paths is not None and bases:
            first = bases[0]
        sources = list(discover_pipelines(bases))
    loaded, errors = _pipeline_defs(sources)
    merged = dg.Definitions.merge(*loaded) if loaded else dg.Definitions()
    taken = set().union(*(_names(d) for d in loaded))
    if resources is None:
        if root is None:  # (the project of the pipelines given, when no project is)
            root = default_warehouse_root(project if project is not None else first)
        resources = local_resources(root)
    return dg.Definitions(
        assets=[*(merged.assets or ()), *_placeholders(errors, taken)],
        asset_checks=merged.asset_checks,
        jobs=merged.jobs,
        sensors=merged.sensors,
        schedules=merged.schedules,
        resources=dict(resources),
    )

