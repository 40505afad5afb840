"""Refresh the Debian example dataset from the machine's apt lists.

The example pipeline needs real, versioned data that fits in the repo: this script strips the
bookworm Packages indexes down to the fields the pipeline reads and stores them xz-compressed.
"""

from __future__ import annotations

import argparse
import hashlib
import lzma
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from debian import deb822
from debian.debian_support import Version

DEFAULT_LISTS = Path("/var/lib/apt/lists")
DEFAULT_OUT = Path(__file__).resolve().parent / "data"
APT_HELPER = "/usr/lib/apt/apt-helper"

# Fields kept in the stripped copy, in this order.
KEEP_FIELDS = ("Package", "Version", "Source", "Section", "Depends", "Pre-Depends", "Provides")


@dataclass(frozen=True)
class Index:
    """One apt Packages index and the release file that dates it."""

    name: str  # output file stem, e.g. "bookworm-main"
    packages_prefix: str  # apt list file name without the compression suffix
    release_prefix: str  # apt list file name without "InRelease"/"Release"


INDEXES = (
    Index(
        "bookworm-main",
        "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages",
        "deb.debian.org_debian_dists_bookworm_",
    ),
    Index(
        "bookworm-updates",
        "deb.debian.org_debian_dists_bookworm-updates_main_binary-amd64_Packages",
        "deb.debian.org_debian_dists_bookworm-updates_",
    ),
    Index(
        "bookworm-security",
        "deb.debian.org_debian-security_dists_bookworm-security_main_binary-amd64_Packages",
        "deb.debian.org_debian-security_dists_bookworm-security_",
    ),
)

_COMPRESSION_SUFFIXES = ("", ".lz4", ".xz", ".gz", ".zst", ".bz2", ".lzma")


class RefreshError(Exception):
    """A problem the user can fix; reported as one line, without a traceback."""


@dataclass(frozen=True)
class IndexSummary:
    index: Index
    packages_file: Path
    release_file: Path
    date: str
    version: str
    stanzas: int
    names: int
    out_file: Path
    out_bytes: int
    sha256: str


def find_packages_file(lists: Path, index: Index) -> Path:
    for suffix in _COMPRESSION_SUFFIXES:
        candidate = lists / (index.packages_prefix + suffix)
        if candidate.is_file():
            return candidate
    raise RefreshError(
        f"{index.packages_prefix}* not found in {lists}: run apt-get update first "
        "(with bookworm, bookworm-updates and bookworm-security in the apt sources)"
    )


def find_release_file(lists: Path, index: Index) -> Path:
    for name in ("InRelease", "Release"):
        candidate = lists / (index.release_prefix + name)
        if candidate.is_file():
            return candidate
    raise RefreshError(
        f"{index.release_prefix}InRelease not found in {lists}: run apt-get update first"
    )


def read_apt_list(path: Path) -> str:
    """Decompressed text of an apt list file (apt stores them lz4/xz/gz-compressed)."""
    if path.suffix == "":
        return path.read_text(encoding="utf-8")
    if not Path(APT_HELPER).exists():
        raise RefreshError(f"{APT_HELPER} not found: cannot decompress {path}")
    result = subprocess.run([APT_HELPER, "cat-file", str(path)], capture_output=True, check=False)
    if result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip()
        raise RefreshError(f"cannot read {path}: {message}")
    return result.stdout.decode("utf-8")


def release_fields(path: Path) -> tuple[str, str]:
    """(Date, Version) of an InRelease/Release file."""
    text = path.read_text(encoding="utf-8", errors="replace")
    release = deb822.Release(text)  # skips the PGP armour of InRelease
    return release.get("Date", "unknown"), release.get("Version", "unknown")


def strip_index(text: str) -> tuple[str, int, int]:
    """Stripped stanza text sorted by (Package, Version), with stanza and name counts."""
    stanzas: list[tuple[str, Version, str]] = []
    for paragraph in deb822.Packages.iter_paragraphs(text, use_apt_pkg=False):
        if "Package" not in paragraph or "Version" not in paragraph:
            raise RefreshError(f"stanza without Package or Version: {paragraph!r:.200}")
        kept = deb822.Packages()
        for field in KEEP_FIELDS:
            if field in paragraph:
                kept[field] = paragraph[field]
        stanzas.append((paragraph["Package"], Version(paragraph["Version"]), kept.dump()))
    stanzas.sort(key=lambda item: (item[0], item[1]))
    names = len({name for name, _, _ in stanzas})
    return "\n".join(dump for _, _, dump in stanzas), len(stanzas), names


def refresh_index(lists: Path, out: Path, index: Index) -> IndexSummary:
    packages_file = find_packages_file(lists, index)
    release_file = find_release_file(lists, index)
    date, version = release_fields(release_file)
    stripped, stanzas, names = strip_index(read_apt_list(packages_file))
    data = lzma.compress(stripped.encode("utf-8"), preset=9)
    out_file = out / f"{index.name}.Packages.xz"
    tmp = out_file.with_suffix(".xz.tmp")
    tmp.write_bytes(data)
    tmp.replace(out_file)
    return IndexSummary(
        index=index,
        packages_file=packages_file,
        release_file=release_file,
        date=date,
        version=version,
        stanzas=stanzas,
        names=names,
        out_file=out_file,
        out_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def snapshot_markdown(summaries: Sequence[IndexSummary]) -> str:
    rows = [
        f"| `{s.out_file.name}` | `{s.packages_file.name}` | {s.date} | {s.version} "
        f"| {s.stanzas} | {s.names} | {s.out_bytes} |"
        for s in summaries
    ]
    checksums = [f"    {s.sha256}  {s.out_file.name}" for s in summaries]
    return "\n".join(
        [
            "# Debian package index snapshot",
            "",
            "Real example data for the `debian` pipeline: the Debian 12 (bookworm) amd64 `main`",
            "Packages indexes of deb.debian.org, stripped to the fields",
            f"{', '.join(KEEP_FIELDS)}",
            "(stanza format, sorted by Package, then Version) and xz-compressed (preset 9).",
            "Generated by `examples/debian/refresh_snapshot.py`;",
            "do not edit the `.xz` files or this file by hand.",
            "",
            "| file | source index (apt list) | InRelease Date | InRelease Version "
            "| stanzas | package names | bytes |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            "A name may have several stanzas (several versions) in one index, e.g. `linux-doc`.",
            "`examples/debian/snapshot.py` builds two EDB versions from these files:",
            "",
            "- version 1: bookworm main alone;",
            "- version 2: main overlaid with bookworm-updates and bookworm-security, where for",
            "  each package name the stanza with the highest Debian version wins.",
            "",
            "`vulnerable.csv` is a hand-written watch list (not generated) of binary packages",
            "marked vulnerable; every name in it exists in bookworm main.",
            "",
            "## Refresh",
            "",
            "    sudo apt-get update  # sources: bookworm, bookworm-updates, bookworm-security",
            "    python -m deltalog.examples.debian.refresh_snapshot "
            "[--lists /var/lib/apt/lists] [--out examples/debian/data]",
            "",
            "Refreshing changes the data and therefore the expected sizes in tests and demos.",
            "",
            "## SHA-256",
            "",
            *checksums,
            "",
        ]
    )


def refresh(lists: Path, out: Path) -> list[IndexSummary]:
    if not lists.is_dir():
        raise RefreshError(f"{lists} does not exist: run apt-get update first")
    for index in INDEXES:  # check everything before writing anything
        find_packages_file(lists, index)
        find_release_file(lists, index)
    out.mkdir(parents=True, exist_ok=True)
    summaries = [refresh_index(lists, out, index) for index in INDEXES]
    (out / "SNAPSHOT.md").write_text(snapshot_markdown(summaries), encoding="utf-8")
    return summaries


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lists", type=Path, default=DEFAULT_LISTS, help="apt lists directory")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output data directory")
    args = parser.parse_args(argv)
    try:
        summaries = refresh(args.lists, args.out)
    except RefreshError as error:
        print(f"refresh_snapshot: error: {error}", file=sys.stderr)
        return 2
    for s in summaries:
        print(
            f"{s.out_file}: {s.stanzas} stanzas, {s.names} names, {s.out_bytes} bytes "
            f"(from {s.packages_file.name}, {s.date}, Version {s.version})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
