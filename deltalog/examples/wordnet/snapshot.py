"""Load the WordNet example dataset as Arrow EDB tables, one set per snapshot version.

Version 1 is WordNet 3.0's noun and verb hypernym graph; version 2 applies the committed
change set (new words, re-attached and removed synsets), so the two versions differ by a
modest, documented change for the incremental engine to maintain.
"""

from __future__ import annotations

import csv
import functools
import io
import lzma
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.engine.values import Row

DATA_DIR = Path(__file__).resolve().parent / "data"
SNAPSHOT_VERSIONS = (1, 2)
BASE_FILE = "wordnet-3.0.synsets.tsv.xz"
CHANGES_FILE = "wordnet-3.0-v2.changes.tsv"
CATEGORIES_FILE = "categories.csv"
# A quick-demo subset (load_snapshot(..., lexnames=QUICK_LEXNAMES)): about a fifth of the
# synsets and a quarter of the closure.
QUICK_LEXNAMES = ("noun.animal", "noun.food", "noun.plant", "verb.consumption")
BASE_HEADER = ("id", "pos", "lexname", "words", "hypernyms", "instance_hypernyms")

# Synset ids as in the WordNet SQL databases: 100000000 * (1 noun, 2 verb) + synset_offset.
POS_PREFIX = {"n": 1, "v": 2}
_ID_BASE = 100_000_000


def synset_id(pos: str, offset: int) -> int:
    return POS_PREFIX[pos] * _ID_BASE + offset


def _schema(*columns: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(name, typ, nullable=False) for name, typ in columns])


_INT, _STR = pa.int64(), pa.string()
SCHEMAS: dict[str, pa.Schema] = {
    "synset": _schema(("id", _INT), ("pos", _STR), ("lexname", _STR)),
    "lemma": _schema(("id", _INT), ("word", _STR)),
    "hypernym": _schema(("child", _INT), ("parent", _INT)),
    "instance_of": _schema(("child", _INT), ("parent", _INT)),
    "category": _schema(("name", _STR), ("id", _INT)),
}


@dataclass(frozen=True)
class SynsetRecord:
    """One line of the base file: a synset, its words and its is-a pointers."""

    id: int
    pos: str  # "n" or "v"
    lexname: str  # lexicographer file, e.g. "noun.animal"
    words: tuple[str, ...]
    hypernyms: tuple[int, ...]  # '@' pointers
    instance_hypernyms: tuple[int, ...]  # '@i' pointers


@dataclass(frozen=True)
class Change:
    """One line of the change file: insert (+) or delete (-) one row of one relation."""

    op: str
    relation: str
    row: Row
    line: int


def format_base(records: Iterable[SynsetRecord], source: str) -> str:
    """The base file's text (before compression)."""
    lines = [
        f"# WordNet 3.0 noun and verb synsets with hypernym pointers, from {source}.",
        "# WordNet 3.0 Copyright 2006 by Princeton University.  All rights reserved.",
        "# Licence: see SNAPSHOT.md. Columns are tab-separated; lists are space-separated.",
        "\t".join(BASE_HEADER),
    ]
    for r in records:
        fields = (
            str(r.id),
            r.pos,
            r.lexname,
            " ".join(r.words),
            " ".join(map(str, r.hypernyms)),
            " ".join(map(str, r.instance_hypernyms)),
        )
        lines.append("\t".join(fields))
    return "\n".join(lines) + "\n"


def _ids(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split())


def parse_base(text: str | TextIO, source: str = "<string>") -> list[SynsetRecord]:
    """Records of a base file given as text or a text stream; ValueError names source:line."""
    stream = io.StringIO(text) if isinstance(text, str) else text
    records = []
    header_seen = False
    for number, line in enumerate(stream, start=1):
        if line.startswith("#") or not line.strip():
            continue
        fields = line.rstrip("\n").split("\t")
        where = f"{source}:{number}"
        if not header_seen:
            if tuple(fields) != BASE_HEADER:
                raise ValueError(f"{where}: expected header {' '.join(BASE_HEADER)}")
            header_seen = True
            continue
        if len(fields) != len(BASE_HEADER):
            raise ValueError(f"{where}: expected {len(BASE_HEADER)} fields, got {len(fields)}")
        id_, pos, lexname, words, hypernyms, instances = fields
        if pos not in POS_PREFIX or not words.strip():
            raise ValueError(f"{where}: bad synset {line.strip()!r:.80}")
        try:
            records.append(
                SynsetRecord(
                    int(id_), pos, lexname, tuple(words.split()), _ids(hypernyms), _ids(instances)
                )
            )
        except ValueError:
            raise ValueError(f"{where}: bad synset id in {line.strip()!r:.80}") from None
    if not header_seen:
        raise ValueError(f"{source}: no header row")
    return records


def parse_changes(text: str | TextIO, source: str = "<string>") -> list[Change]:
    """Changes of a change file; ValueError names source:line for a malformed line."""
    stream = io.StringIO(text) if isinstance(text, str) else text
    changes = []
    for number, line in enumerate(stream, start=1):
        if line.startswith("#") or not line.strip():
            continue
        op, relation, *values = line.rstrip("\n").split("\t")
        where = f"{source}:{number}"
        schema = SCHEMAS.get(relation)
        if op not in ("+", "-") or schema is None or len(values) != len(schema):
            raise ValueError(f"{where}: expected +/-, a relation and its columns: {line!r:.80}")
        try:
            row = tuple(
                int(v) if f.type == _INT else v for v, f in zip(values, schema, strict=True)
            )
        except ValueError:
            raise ValueError(f"{where}: not an integer in {line.strip()!r:.80}") from None
        changes.append(Change(op, relation, row, number))
    return changes


def read_categories(path: Path) -> list[tuple[str, int]]:
    """(name, synset id) rows of a CSV with header `name,id`."""
    with path.open(newline="", encoding="utf-8") as stream:
        reader = csv.reader(stream)
        header = next(reader, None)
        if header != ["name", "id"]:
            raise ValueError(f"{path.name}:1: expected header 'name,id', got {header!r}")
        rows = []
        for row in reader:
            if not row:
                continue
            try:
                name, id_ = row
                rows.append((name.strip(), int(id_)))
            except ValueError:
                raise ValueError(f"{path.name}:{reader.line_num}: invalid row {row!r}") from None
    return rows


def _table(name: str, rows: Iterable[Row]) -> pa.Table:
    """Deduplicated table of ``rows``, sorted by all columns."""
    schema = SCHEMAS[name]
    distinct = list(set(rows))
    columns = [[row[i] for row in distinct] for i in range(len(schema))]
    table = pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )
    return table.sort_by([(column, "ascending") for column in schema.names])


def _rows(table: pa.Table) -> set[Row]:
    return set(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


def tables_from_records(
    records: Iterable[SynsetRecord], categories: Iterable[tuple[str, int]] = ()
) -> dict[str, pa.Table]:
    """The five EDB tables of a set of synset records."""
    records = list(records)
    return {
        "synset": _table("synset", ((r.id, r.pos, r.lexname) for r in records)),
        "lemma": _table("lemma", ((r.id, w) for r in records for w in r.words)),
        "hypernym": _table("hypernym", ((r.id, p) for r in records for p in r.hypernyms)),
        "instance_of": _table(
            "instance_of", ((r.id, p) for r in records for p in r.instance_hypernyms)
        ),
        "category": _table("category", categories),
    }


def apply_changes(
    tables: Mapping[str, pa.Table], changes: Sequence[Change], source: str = "<changes>"
) -> dict[str, pa.Table]:
    """``tables`` with ``changes`` applied. Every deleted row must exist and every inserted
    row must be new, or ValueError names the change's source:line."""
    out = dict(tables)
    for relation in sorted({c.relation for c in changes}):
        rows = _rows(tables[relation])
        for change in (c for c in changes if c.relation == relation):
            where = f"{source}:{change.line}"
            if change.op == "-":
                if change.row not in rows:
                    raise ValueError(f"{where}: deletes {relation}{change.row}, which is absent")
                rows.remove(change.row)
            else:
                if change.row in rows:
                    raise ValueError(f"{where}: inserts {relation}{change.row}, already present")
                rows.add(change.row)
        out[relation] = _table(relation, rows)
    return out


def check_references(tables: Mapping[str, pa.Table], where: str) -> None:
    """ValueError unless every id in lemma, hypernym, instance_of, category is a synset."""
    synsets = tables["synset"].column("id")
    for relation, columns in (
        ("lemma", ("id",)),
        ("hypernym", ("child", "parent")),
        ("instance_of", ("child", "parent")),
        ("category", ("id",)),
    ):
        for column in columns:
            values = tables[relation].column(column)
            unknown = pc.filter(values, pc.invert(pc.is_in(values, value_set=synsets)))
            if len(unknown):
                raise ValueError(f"{where}: {relation}.{column} {unknown[0]} is not a synset id")


def restrict(tables: Mapping[str, pa.Table], lexnames: Collection[str]) -> dict[str, pa.Table]:
    """The synsets of the lexicographer files ``lexnames`` and all their ancestors, with
    the rows that mention only them. Upward closed: each kept synset keeps all its
    hypernyms, so its ancestors and depth are the same as in the whole graph."""
    synset = tables["synset"]
    chosen = synset.filter(pc.is_in(synset["lexname"], pa.array(sorted(lexnames), _STR)))
    keep = set(chosen.column("id").to_pylist())
    parents: dict[int, list[int]] = {}
    for relation in ("hypernym", "instance_of"):
        for child, parent in _rows(tables[relation]):
            parents.setdefault(int(child), []).append(int(parent))
    todo = list(keep)
    while todo:
        for parent in parents.get(todo.pop(), ()):
            if parent not in keep:
                keep.add(parent)
                todo.append(parent)
    ids = pa.array(sorted(keep), type=_INT)
    key = {"synset": "id", "lemma": "id", "hypernym": "child", "instance_of": "child"}
    out = {rel: tables[rel].filter(pc.is_in(tables[rel][col], ids)) for rel, col in key.items()}
    out["category"] = tables["category"].filter(pc.is_in(tables["category"]["id"], ids))
    return out


def _stamp(path: Path) -> tuple[Path, int, int]:
    path = path.resolve()
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found; run python -m deltalog.examples.wordnet.refresh_snapshot"
        )
    stat = path.stat()
    return path, stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=4)
def _read_base(path: Path, mtime_ns: int, size: int) -> tuple[SynsetRecord, ...]:
    del mtime_ns, size  # cache key only: a refreshed file is read again
    with lzma.open(path, "rt", encoding="utf-8") as stream:
        return tuple(parse_base(stream, source=path.name))


@functools.lru_cache(maxsize=4)
def _load(version: int, stamps: tuple[tuple[Path, int, int], ...]) -> Mapping[str, pa.Table]:
    _, changes, categories = (path for path, _, _ in stamps)
    if version == 2:
        text = changes.read_text(encoding="utf-8")
        tables = apply_changes(_load(1, stamps), parse_changes(text, changes.name), changes.name)
        check_references(tables, changes.name)
        return tables
    tables = tables_from_records(_read_base(*stamps[0]), read_categories(categories))
    check_references(tables, categories.name)
    return tables


def load_snapshot(
    version: int, data_dir: Path | None = None, lexnames: Collection[str] | None = None
) -> dict[str, pa.Table]:
    """Tables `synset`, `lemma`, `hypernym`, `instance_of`, `category` of snapshot
    `version` (1 or 2); only the synsets of ``lexnames`` and their ancestors when given."""
    if version not in SNAPSHOT_VERSIONS:
        raise ValueError(f"unknown snapshot version {version}; known: {SNAPSHOT_VERSIONS}")
    directory = DATA_DIR if data_dir is None else Path(data_dir)
    files = (BASE_FILE, CHANGES_FILE, CATEGORIES_FILE)
    tables = dict(_load(version, tuple(_stamp(directory / name) for name in files)))
    return tables if lexnames is None else restrict(tables, lexnames)


def snapshot_loader(
    lexnames: Collection[str] | None = None,
) -> Callable[[int], dict[str, pa.Table]]:
    """``load_snapshot`` as a one-argument loader (pipelines.warehouse.SnapshotLoader)."""
    return functools.partial(load_snapshot, data_dir=None, lexnames=lexnames)
