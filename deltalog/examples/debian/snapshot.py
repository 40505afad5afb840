"""Load the Debian example dataset as Arrow EDB tables, one set per snapshot version.

Version 1 is bookworm main; version 2 overlays bookworm-updates and bookworm-security, so the
two versions differ by a real, modest change set for the incremental engine to maintain.
"""

from __future__ import annotations

import csv
import functools
import io
import lzma
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO, cast

import pyarrow as pa
from debian import deb822
from debian.debian_support import Version

DATA_DIR = Path(__file__).resolve().parent / "data"
SNAPSHOT_VERSIONS = (1, 2)

# Index files (in data_dir) of each snapshot version, overlaid in this order.
_INDEXES: dict[int, tuple[str, ...]] = {
    1: ("bookworm-main.Packages.xz",),
    2: (
        "bookworm-main.Packages.xz",
        "bookworm-updates.Packages.xz",
        "bookworm-security.Packages.xz",
    ),
}
VULNERABLE_FILE = "vulnerable.csv"

# Debian policy 5.6.1: lower case letters, digits, "+", "-", "."; starts alphanumeric.
_PACKAGE_NAME = re.compile(r"[a-z0-9][a-z0-9+.\-]+")
# The separator of relation groups that PkgRelation.parse_relations splits on.
_RELATION_SEPARATOR = re.compile(r"\s*,\s*")


def _schema(*names: str) -> pa.Schema:
    return pa.schema([pa.field(name, pa.string(), nullable=False) for name in names])


SCHEMAS: dict[str, pa.Schema] = {
    "package": _schema("name", "version", "section"),
    "depends": _schema("pkg", "dep"),
    "provides": _schema("pkg", "virtual"),
    "vulnerable": _schema("name"),
}


@dataclass(frozen=True)
class PackageRecord:
    """The part of one Packages stanza the pipeline uses."""

    name: str
    version: str
    section: str  # "" when the stanza has no Section field
    depends: tuple[str, ...]  # first alternative of each Depends/Pre-Depends group
    provides: tuple[str, ...]
    source: str  # file name, for error messages
    line: int  # 1-based line of the stanza's first field


def _split_stanzas(lines: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """(first line number, lines) of each blank-line separated stanza."""
    stanza: list[str] = []
    start = 0
    for number, line in enumerate(lines, start=1):
        if line.strip():
            if not stanza:
                start = number
            stanza.append(line if line.endswith("\n") else line + "\n")
        elif stanza:
            yield start, stanza
            stanza = []
    if stanza:
        yield start, stanza


@functools.lru_cache(maxsize=1 << 17)
def _first_alternative(group: str) -> str | None:
    """Package name of the first alternative of one relation group, e.g. "b" for
    "b:any (>= 1) [amd64] | c", parsed by python-debian (`deb822.Packages.relations` uses the
    same `PkgRelation.parse_relations`); None if it does not parse. Cached: groups repeat."""
    name = deb822.PkgRelation.parse_relations(group)[0][0]["name"]
    return name if _PACKAGE_NAME.fullmatch(name) else None


def _first_alternatives(paragraph: deb822.Deb822, field: str, where: str) -> list[str]:
    value = paragraph.get(field)
    if not value:
        return []
    groups = _RELATION_SEPARATOR.split(value.strip())
    names = [_first_alternative(group) for group in groups]
    for group, name in zip(groups, names, strict=True):
        if name is None:
            raise ValueError(f"{where}: cannot parse {field} relation {group!r}")
    return cast(list[str], names)


def parse_packages(text: str | TextIO, source: str = "<string>") -> list[PackageRecord]:
    """Records of a Packages index given as text or a text stream, in file order.

    Raises ValueError naming `source` and the stanza's line for a stanza without Package or
    Version, an invalid Debian version, or a relation that does not parse.
    """
    lines = io.StringIO(text) if isinstance(text, str) else text
    records = []
    for line, stanza in _split_stanzas(lines):
        where = f"{source}:{line}"
        paragraph = deb822.Deb822(stanza)
        name = paragraph.get("Package", "").strip()
        version = paragraph.get("Version", "").strip()
        if not name or not version:
            missing = "Package" if not name else "Version"
            raise ValueError(f"{where}: stanza without {missing}")
        if not _PACKAGE_NAME.fullmatch(name):
            raise ValueError(f"{where}: invalid package name {name!r}")
        if not Version.re_valid_version.match(version):  # what Version() checks, 3x faster
            raise ValueError(f"{where}: invalid Debian version {version!r}")
        depends = (
            *_first_alternatives(paragraph, "Depends", where),
            *_first_alternatives(paragraph, "Pre-Depends", where),
        )
        provides = tuple(_first_alternatives(paragraph, "Provides", where))
        records.append(
            PackageRecord(
                name=name,
                version=version,
                section=paragraph.get("Section", "").strip(),
                depends=depends,
                provides=provides,
                source=source,
                line=line,
            )
        )
    return records


@functools.lru_cache(maxsize=8)
def _read_index(path: Path, mtime_ns: int, size: int) -> tuple[PackageRecord, ...]:
    del mtime_ns, size  # cache key only: a refreshed file is read again
    with lzma.open(path, "rt", encoding="utf-8") as stream:
        return tuple(parse_packages(stream, source=path.name))


def _debian_version(record: PackageRecord) -> Version:
    try:
        return Version(record.version)
    except ValueError as error:
        raise ValueError(f"{record.source}:{record.line}: {error}") from None


def overlay(*indexes: Iterable[PackageRecord]) -> dict[str, PackageRecord]:
    """Per package name, the record with the highest Debian version (earliest on ties)."""
    chosen: dict[str, PackageRecord] = {}
    for records in indexes:
        for record in records:
            current = chosen.get(record.name)
            if current is None or _debian_version(record) > _debian_version(current):
                chosen[record.name] = record
    return chosen


def _table(name: str, columns: Sequence[list[str]]) -> pa.Table:
    """Deduplicated table of the given columns, sorted by all columns (UTF-8 byte order)."""
    schema = SCHEMAS[name]
    table = pa.Table.from_arrays(
        [pa.array(column, type=pa.string()) for column in columns], schema=schema
    )
    distinct = table.group_by(schema.names, use_threads=False).aggregate([])
    order = [(column, "ascending") for column in schema.names]
    return distinct.select(schema.names).sort_by(order).cast(schema)


def tables_from_records(
    records: Iterable[PackageRecord], vulnerable: Iterable[str] = ()
) -> dict[str, pa.Table]:
    """The four EDB tables for a set of records that has one record per package name."""
    records = list(records)
    depends = [(r.name, dep) for r in records for dep in r.depends]
    provides = [(r.name, virtual) for r in records for virtual in r.provides]
    return {
        "package": _table(
            "package",
            [[r.name for r in records], [r.version for r in records], [r.section for r in records]],
        ),
        "depends": _table("depends", [[p for p, _ in depends], [d for _, d in depends]]),
        "provides": _table("provides", [[p for p, _ in provides], [v for _, v in provides]]),
        "vulnerable": _table("vulnerable", [list(vulnerable)]),
    }


def read_vulnerable(path: Path) -> list[str]:
    """Package names of a one-column CSV with header `name`."""
    with path.open(newline="", encoding="utf-8") as stream:
        reader = csv.reader(stream)
        header = next(reader, None)
        if header != ["name"]:
            raise ValueError(f"{path.name}:1: expected header 'name', got {header!r}")
        names = []
        for row in reader:
            if not row:
                continue
            if len(row) != 1 or not _PACKAGE_NAME.fullmatch(row[0].strip()):
                raise ValueError(f"{path.name}:{reader.line_num}: invalid row {row!r}")
            names.append(row[0].strip())
    return names


def load_snapshot(version: int, data_dir: Path | None = None) -> dict[str, pa.Table]:
    """Tables `package`, `depends`, `provides`, `vulnerable` of snapshot `version` (1 or 2)."""
    if version not in _INDEXES:
        raise ValueError(f"unknown snapshot version {version}; known: {SNAPSHOT_VERSIONS}")
    directory = DATA_DIR if data_dir is None else Path(data_dir)
    indexes = []
    for file_name in _INDEXES[version]:
        path = (directory / file_name).resolve()
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} not found; run python -m deltalog.examples.debian.refresh_snapshot"
            )
        stat = path.stat()
        indexes.append(_read_index(path, stat.st_mtime_ns, stat.st_size))
    chosen = overlay(*indexes)
    return tables_from_records(chosen.values(), read_vulnerable(directory / VULNERABLE_FILE))
