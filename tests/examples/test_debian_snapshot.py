"""Tests of the Debian example dataset loader: the real snapshot and the stanza parser.

The real data is what demos and benchmarks run on, so its shape and the v1 -> v2 change are
checked here; parsing details are checked on tiny in-memory Packages texts.
"""

from __future__ import annotations

import io
import lzma
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from debian.debian_support import Version

from deltalog.examples.debian.snapshot import (
    DATA_DIR,
    SCHEMAS,
    SNAPSHOT_VERSIONS,
    load_snapshot,
    overlay,
    parse_packages,
    tables_from_records,
)

COLUMNS = {
    "package": ["name", "version", "section"],
    "depends": ["pkg", "dep"],
    "provides": ["pkg", "virtual"],
    "vulnerable": ["name"],
}

TINY = """\
Package: app
Version: 1:2.0-1
Source: app-src
Section: utils
Depends: libc6 (>= 2.36), python3:any (>= 3.11~) | python3-minimal, debconf (>= 0.5) | debconf-2.0
Pre-Depends: dpkg (>= 1.15.6~), init-system-helpers [amd64]
Provides: app-api (= 2.0), mail-transport-agent

Package: libc6
Version: 2.36-9+deb12u10
Section: libs
Depends: libgcc-s1, libc6
Provides: libc6-abi
"""


def rows(table: pa.Table) -> set[tuple[str, ...]]:
    return set(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


def contains(table: pa.Table, *row: str) -> bool:
    mask = None
    for column, value in zip(table.column_names, row, strict=True):
        equal = pc.equal(table.column(column), value)
        mask = equal if mask is None else pc.and_(mask, equal)
    return table.filter(mask).num_rows > 0


def minus(left: pa.Table, right: pa.Table) -> pa.Table:
    """Rows of `left` that are not in `right` (both duplicate-free)."""
    return left.join(right, keys=left.column_names, join_type="left anti")


@pytest.fixture(scope="module")
def snapshots() -> dict[int, dict[str, pa.Table]]:
    return {version: load_snapshot(version) for version in SNAPSHOT_VERSIONS}


def test_tables_have_exact_columns_no_nulls_no_duplicates(
    snapshots: dict[int, dict[str, pa.Table]],
) -> None:
    for tables in snapshots.values():
        assert sorted(tables) == sorted(COLUMNS)
        for name, table in tables.items():
            assert table.column_names == COLUMNS[name]
            assert table.schema.equals(SCHEMAS[name])
            assert all(t == pa.string() for t in table.schema.types)
            assert table.num_rows > 0
            assert all(table.column(c).null_count == 0 for c in table.column_names)
            distinct = table.group_by(table.column_names).aggregate([])
            assert distinct.num_rows == table.num_rows
            assert table.equals(table.sort_by([(c, "ascending") for c in table.column_names]))


def test_known_packages_and_relations(snapshots: dict[int, dict[str, pa.Table]]) -> None:
    for tables in snapshots.values():
        names = set(tables["package"].column("name").to_pylist())
        assert {"libc6", "bash", "dpkg", "python3"} <= names
        assert len(names) == tables["package"].num_rows  # one row per package name
        assert contains(tables["depends"], "libssl3", "libc6")
        assert contains(tables["provides"], "exim4-daemon-light", "mail-transport-agent")
        assert set(tables["vulnerable"].column("name").to_pylist()) <= names


def test_version_2_is_a_real_change(snapshots: dict[int, dict[str, pa.Table]]) -> None:
    v1, v2 = snapshots[1], snapshots[2]
    for table in ("package", "depends"):
        assert minus(v2[table], v1[table]).num_rows > 0, table
        assert minus(v1[table], v2[table]).num_rows > 0, table
    assert v1["vulnerable"].equals(v2["vulnerable"])
    old = dict(zip(*v1["package"].select(["name", "version"]).to_pydict().values(), strict=True))
    new = dict(zip(*v2["package"].select(["name", "version"]).to_pydict().values(), strict=True))
    assert set(old) <= set(new)  # the overlay only upgrades or adds
    changed = [name for name in old if old[name] != new[name]]
    assert len(changed) > 100
    assert all(Version(new[name]) > Version(old[name]) for name in changed)
    assert "libssl3" in changed


def test_parse_strips_alternatives_constraints_and_qualifiers() -> None:
    records = parse_packages(io.StringIO(TINY), source="tiny")
    assert [(r.name, r.version, r.section, r.line) for r in records] == [
        ("app", "1:2.0-1", "utils", 1),
        ("libc6", "2.36-9+deb12u10", "libs", 9),
    ]
    tables = tables_from_records(records, ["libc6"])
    assert rows(tables["depends"]) == {
        ("app", "libc6"),
        ("app", "python3"),
        ("app", "debconf"),
        ("app", "dpkg"),
        ("app", "init-system-helpers"),
        ("libc6", "libgcc-s1"),
        ("libc6", "libc6"),
    }
    assert rows(tables["provides"]) == {
        ("app", "app-api"),
        ("app", "mail-transport-agent"),
        ("libc6", "libc6-abi"),
    }
    assert rows(tables["vulnerable"]) == {("libc6",)}
    assert parse_packages(TINY) == parse_packages(io.StringIO(TINY))


def test_overlay_keeps_highest_debian_version() -> None:
    main = parse_packages("Package: aa\nVersion: 1.0-1\n\nPackage: bb\nVersion: 2.0\n", "main")
    security = parse_packages(
        "Package: aa\nVersion: 1.0-1+deb12u1\n\nPackage: bb\nVersion: 2.0~rc1\n"
        "\nPackage: aa\nVersion: 1.0-1+deb12u2\n\nPackage: cc\nVersion: 1:0.1\n",
        "security",
    )
    chosen = overlay(main, security)
    assert {name: r.version for name, r in chosen.items()} == {
        "aa": "1.0-1+deb12u2",
        "bb": "2.0",  # 2.0~rc1 sorts before 2.0
        "cc": "1:0.1",
    }


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("Package: aa\nVersion: 1\n\n\nSection: libs\nVersion: 2\n", 5, "without Package"),
        ("Package: aa\nVersion: 1\n\nPackage: bb\nSection: libs\n", 4, "without Version"),
        ("Package: aa\nVersion: 1\nDepends: bb (>= 1, cc\n", 1, "Depends"),
        ("Package: aa\nVersion: 1\n\nPackage: Bad_Name\nVersion: 1\n", 4, "package name"),
    ],
)
def test_bad_stanza_names_source_and_line(text: str, line: int, message: str) -> None:
    with pytest.raises(ValueError, match=rf"^bad\.Packages:{line}: .*{message}"):
        parse_packages(text, source="bad.Packages")


def test_bad_stanza_in_data_file_names_file_and_line(tmp_path: Path) -> None:
    shutil.copy(DATA_DIR / "vulnerable.csv", tmp_path / "vulnerable.csv")
    text = "Package: aa\nVersion: 1\n\nPackage: bb\nVersion: 1\n\nSection: libs\n"
    (tmp_path / "bookworm-main.Packages.xz").write_bytes(lzma.compress(text.encode()))
    with pytest.raises(ValueError, match=r"^bookworm-main\.Packages\.xz:7: .*without Package"):
        load_snapshot(1, data_dir=tmp_path)


def test_unknown_version_and_missing_data(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown snapshot version 3"):
        load_snapshot(3)
    with pytest.raises(FileNotFoundError, match="refresh_snapshot"):
        load_snapshot(1, data_dir=tmp_path)
