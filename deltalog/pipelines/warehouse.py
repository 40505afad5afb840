"""The local warehouse: EDB Delta tables of a pipeline, created and changed from snapshots.

``build_warehouse`` and ``apply_snapshot`` load the Debian snapshots; ``write_edb`` is the
generic step under both (any pipeline, any Arrow tables), so each snapshot becomes one Delta
commit per changed table and the change data feed carries the real inserts and deletes.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from deltalog.engine.errors import MISSING_INPUT, DataError
from deltalog.pipelines import delta_io
from deltalog.pipelines.spec import PipelineSpec
from deltalog.schemas.relation import arrow_schema

SnapshotLoader = Callable[[int], Mapping[str, pa.Table]]


@dataclass(frozen=True)
class EdbWrite:
    """What one snapshot did to one EDB table."""

    pred: str
    rows: int
    inserted: int
    deleted: int
    table_version: int


def _debian_snapshot(version: int) -> Mapping[str, pa.Table]:
    from deltalog.examples.debian.snapshot import load_snapshot  # parses ~30 MB of Packages lazily

    return load_snapshot(version)


def write_edb(
    root: str | Path,
    spec: PipelineSpec,
    tables: Mapping[str, pa.Table],
    metadata: Mapping[str, str] | None = None,
) -> list[EdbWrite]:
    """Make every EDB table of ``spec`` under ``root`` equal ``tables`` (creating missing
    tables with the change data feed on), one commit per table that changed."""
    missing = sorted(set(spec.edb_tables) - set(tables))
    if missing:
        raise DataError(f"no data for EDB table(s) {', '.join(missing)}", spec.name, MISSING_INPUT)
    out = []
    for pred in sorted(spec.edb_tables):
        schema = arrow_schema(spec.program.schemas[pred])
        uri = spec.table_uri(root, pred)
        if not delta_io.exists(uri):
            delta_io.create_table(uri, schema)
        table = tables[pred]
        try:
            table = table.select(schema.names).cast(schema)
        except (KeyError, ValueError, pa.ArrowInvalid) as err:
            raise DataError(
                f"data for '{pred}' does not fit its schema {schema}: {err}", uri
            ) from None
        ins, dels, version = delta_io.replace_contents(
            uri, table, {"deltalog.pipeline": spec.name, **(metadata or {})}
        )
        out.append(EdbWrite(pred, delta_io.row_count(uri, version), ins, dels, version))
    return out


def build_warehouse(
    root: str | Path,
    spec: PipelineSpec,
    version: int = 1,
    load: SnapshotLoader = _debian_snapshot,
) -> list[EdbWrite]:
    """Create the EDB tables of ``spec`` under ``root`` from snapshot ``version``."""
    return write_edb(root, spec, load(version), {"deltalog.snapshot": str(version)})


def apply_snapshot(
    root: str | Path,
    spec: PipelineSpec,
    version: int = 2,
    load: SnapshotLoader = _debian_snapshot,
) -> list[EdbWrite]:
    """Change the EDB tables to snapshot ``version``: only the differing rows are written."""
    return write_edb(root, spec, load(version), {"deltalog.snapshot": str(version)})
