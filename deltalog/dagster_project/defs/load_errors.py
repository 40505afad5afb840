"""A pipeline that does not load, shown in Dagster instead of taking the code location down.

Each pipeline folder is loaded on its own (``definitions.build_definitions``). One whose
program, binding or definitions have an error becomes a single placeholder: an external
asset named after the pipeline, in the pipeline's asset group, whose description and
metadata carry the one-line error. It has no materialization function, so nothing can run
it; every other pipeline loads and runs as usual. Fix the folder and reload the code
location: the placeholder gives way to the pipeline's assets.
"""

import re
from pathlib import Path

import dagster as dg

LOAD_ERROR_KEY = "deltalog/load_error"  # metadata: the one-line error
FOLDER_KEY = "deltalog/pipeline_folder"  # metadata: where the pipeline's files are
KINDS = {"datalog"}


def safe_name(name: str) -> str:
    """``name`` as a Dagster name (asset key part, group): letters, digits, underscores."""
    cleaned = re.sub(r"\W", "_", name, flags=re.ASCII)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"p_{cleaned}"


def load_error_asset(key: str, group: str, folder: Path, error: str) -> dg.AssetSpec:
    """The placeholder of a pipeline that did not load: asset ``key`` in ``group``."""
    return dg.AssetSpec(
        key=dg.AssetKey([key]),
        group_name=group,
        kinds=KINDS,
        description=f"Pipeline {folder.name} did not load: {error}",
        metadata={LOAD_ERROR_KEY: error, FOLDER_KEY: str(folder)},
        tags={"deltalog/not_loaded": "true"},
    )
