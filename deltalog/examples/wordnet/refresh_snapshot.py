"""Refresh the WordNet example dataset from Debian's ``wordnet-base`` package.

The example pipeline needs real data that fits in the repo: this script reduces the WordNet 3.0
noun and verb database files (wndb(5WN)) to synsets, words and hypernym pointers, stores them
as xz-compressed TSV, and writes the deterministic change set that makes EDB version 2.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import lzma
import random
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from deltalog.examples.wordnet.snapshot import (
    BASE_FILE,
    CATEGORIES_FILE,
    CHANGES_FILE,
    POS_PREFIX,
    QUICK_LEXNAMES,
    SNAPSHOT_VERSIONS,
    SynsetRecord,
    format_base,
    load_snapshot,
    synset_id,
)

PACKAGE = "wordnet-base"
DEFAULT_OUT = Path(__file__).resolve().parent / "data"
WORDNET_DIR = Path("usr/share/wordnet")
LEXNAMES_MAN = Path("usr/share/man/man5/lexnames.5WN.gz")
COPYRIGHT = Path(f"usr/share/doc/{PACKAGE}/copyright")
DATA_FILES = {"n": "data.noun", "v": "data.verb"}
INDEX_FILES = {"n": "index.noun", "v": "index.verb"}
HYPERNYM, INSTANCE_HYPERNYM = "@", "@i"

# Change set of version 2. Everything below is fixed so that a refresh from the same package
# writes the same files byte for byte.
SEED = 20061201  # WordNet 3.0 was released in December 2006
# New ids: offsets past the end of every data file (data.noun has 15.3 MB).
NEW_ID_OFFSET = 99_000_000
# Words coined after WordNet 3.0, each a new synset under a parent given as
# "lemma.pos.sense" (sense numbers as in index.noun / index.verb); the new synset takes
# the lexicographer file of its parent.
NEW_SYNSETS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("smartphone", "smart_phone"), "cellular_telephone.n.1"),
    (("selfie",), "photograph.n.1"),
    (("tablet_computer", "tablet"), "portable_computer.n.1"),
    (("podcast",), "broadcast.n.2"),
    (("podcaster",), "broadcaster.n.1"),
    (("emoji",), "ideogram.n.1"),
    (("hashtag",), "tag.n.2"),
    (("mobile_app", "app"), "application.n.4"),
    (("wiki",), "web_site.n.1"),
    (("vlog", "video_blog"), "blog.n.1"),
    (("vlogger",), "blogger.n.1"),
    (("tweet",), "post.v.2"),
    (("binge-watch",), "watch.v.3"),
    (("livestream", "live-stream"), "broadcast.v.1"),
)
CLOSED_UP = 20  # new lemmas: "check-in" -> "checkin"
SIDEWAYS_MOVES = 20  # x: p -> a sibling of p
LIFTS = 10  # x: p -> the parent of p
DROPPED_SECOND_HYPERNYMS = 10  # x keeps one of its several hypernyms
REMOVED_SYNSETS = 6  # leaves, half of them instances
# Hyphenated nouns with a prefix or a particle, whose hyphen English tends to drop.
_HYPHENATED = re.compile(
    r"(?:co|re|e|pre|non|anti|multi|mid|sub|up|out|over|by)-[a-z]{3,}"
    r"|[a-z]{3,6}-(?:up|out|down|off|over|back|in|on|away)"
)


class RefreshError(Exception):
    """A problem the user can fix; reported as one line, without a traceback."""


@dataclass(frozen=True)
class SourceFile:
    name: str  # path inside the package
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Package:
    deb: Path
    version: str
    deb_bytes: int
    deb_sha256: str
    root: Path  # where the .deb was extracted


@dataclass
class ChangeGroup:
    """Changes of one kind, with a comment line per item."""

    title: str
    items: list[tuple[str, list[tuple[str, str, tuple[object, ...]]]]] = field(default_factory=list)

    def add(self, note: str, *changes: tuple[str, str, tuple[object, ...]]) -> None:
        self.items.append((note, list(changes)))


def _run(args: Sequence[str], cwd: Path | None = None) -> str:
    try:
        result = subprocess.run(args, capture_output=True, check=False, cwd=cwd)
    except FileNotFoundError:
        raise RefreshError(f"{args[0]} not found (this script needs a Debian system)") from None
    if result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RefreshError(f"{' '.join(args)} failed: {message[-1] if message else '?'}")
    return result.stdout.decode("utf-8")


def fetch_package(deb: Path | None, work: Path) -> Package:
    """The given .deb, or `apt-get download wordnet-base` into ``work``; extracted."""
    if deb is None:
        _run(["apt-get", "download", PACKAGE], cwd=work)
        debs = sorted(work.glob(f"{PACKAGE}_*.deb"))
        if not debs:
            raise RefreshError(f"apt-get download {PACKAGE} wrote no .deb: run apt-get update")
        deb = debs[-1]
    if not deb.is_file():
        raise RefreshError(f"{deb} not found")
    name = _run(["dpkg-deb", "-f", str(deb), "Package"]).strip()
    if name != PACKAGE:
        raise RefreshError(f"{deb} is package {name!r}, expected {PACKAGE}")
    version = _run(["dpkg-deb", "-f", str(deb), "Version"]).strip()
    root = work / "root"
    _run(["dpkg-deb", "-x", str(deb), str(root)])
    data = deb.read_bytes()
    return Package(deb, version, len(data), hashlib.sha256(data).hexdigest(), root)


def _source(root: Path, relative: Path) -> SourceFile:
    path = root / relative
    if not path.is_file():
        raise RefreshError(f"{relative} is not in the {PACKAGE} package")
    data = path.read_bytes()
    return SourceFile(str(relative), len(data), hashlib.sha256(data).hexdigest())


def read_lexnames(root: Path) -> dict[int, str]:
    """Lexicographer file number -> name, from the table in lexnames(5WN)."""
    text = gzip.decompress((root / LEXNAMES_MAN).read_bytes()).decode("utf-8")
    names = {int(m[1]): m[2] for m in re.finditer(r"^(\d\d)\t(\S+)\s*\t", text, re.MULTILINE)}
    if len(names) < 45:
        raise RefreshError(f"{LEXNAMES_MAN}: found only {len(names)} lexicographer files")
    return names


def parse_data_file(path: Path, pos: str, lexnames: Mapping[int, str]) -> list[SynsetRecord]:
    """Synsets of a wndb(5WN) data file with their hypernym and instance-hypernym pointers.

    Checks that each synset_offset is the line's byte offset and that the pointers stay in
    the part of speech; raises RefreshError naming the file and line otherwise.
    """
    records = []
    offset = 0
    with path.open("rb") as stream:
        for number, raw in enumerate(stream, start=1):
            line, start = raw.decode("utf-8"), offset
            offset += len(raw)
            if line.startswith("  "):  # licence header
                continue
            where = f"{path.name}:{number}"
            fields = line.split(" | ", 1)[0].split()
            try:
                if int(fields[0]) != start:
                    raise RefreshError(f"{where}: synset_offset {fields[0]} is not {start}")
                ss_type = fields[2]
                if ss_type != pos:
                    raise RefreshError(f"{where}: ss_type {ss_type!r} in the {pos} file")
                w_cnt = int(fields[3], 16)
                words = tuple(dict.fromkeys(fields[4 : 4 + 2 * w_cnt : 2]))
                i = 4 + 2 * w_cnt
                p_cnt = int(fields[i])
                hypernyms: list[int] = []
                instances: list[int] = []
                for k in range(p_cnt):
                    symbol, target, target_pos, source_target = fields[
                        i + 1 + 4 * k : i + 5 + 4 * k
                    ]
                    if symbol not in (HYPERNYM, INSTANCE_HYPERNYM):
                        continue
                    if target_pos != pos or source_target != "0000":
                        raise RefreshError(f"{where}: unexpected hypernym pointer {target}")
                    out = hypernyms if symbol == HYPERNYM else instances
                    out.append(synset_id(pos, int(target)))
            except (IndexError, ValueError) as error:
                raise RefreshError(f"{where}: cannot parse ({error})") from None
            if len(words) == 0:
                raise RefreshError(f"{where}: synset without words")
            records.append(
                SynsetRecord(
                    id=synset_id(pos, start),
                    pos=pos,
                    lexname=lexnames[int(fields[1])],
                    words=words,
                    hypernyms=tuple(sorted(set(hypernyms))),
                    instance_hypernyms=tuple(sorted(set(instances))),
                )
            )
    return records


def read_senses(path: Path, pos: str) -> dict[str, list[int]]:
    """Lemma -> synset ids in sense order, from an index.pos file."""
    senses = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("  "):
            continue
        fields = line.split()
        p_cnt = int(fields[3])
        senses[fields[0]] = [synset_id(pos, int(o)) for o in fields[6 + p_cnt :]]
    return senses


# --- The change set of version 2 --------------------------------------------------------


class _Graph:
    """The is-a graph of version 1, for choosing realistic, cycle-free changes."""

    def __init__(self, records: Iterable[SynsetRecord]) -> None:
        self.by_id = {r.id: r for r in records}
        self.children: dict[int, set[int]] = defaultdict(set)
        for r in self.by_id.values():
            for p in (*r.hypernyms, *r.instance_hypernyms):
                self.children[p].add(r.id)

    def name(self, x: int) -> str:
        return f"{self.by_id[x].words[0]} ({x})"

    def descendants(self, x: int) -> set[int]:
        seen: set[int] = set()
        todo = [x]
        while todo:
            for child in self.children.get(todo.pop(), ()):
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        return seen

    def single_hypernym(self, x: int) -> int | None:
        r = self.by_id[x]
        return r.hypernyms[0] if len(r.hypernyms) == 1 and not r.instance_hypernyms else None


def _resolve_sense(key: str, senses: Mapping[str, Mapping[str, list[int]]]) -> int:
    lemma, pos, number = key.rsplit(".", 2)
    ids = senses[pos].get(lemma, [])
    if not 1 <= int(number) <= len(ids):
        raise RefreshError(f"sense {key} not found in {INDEX_FILES[pos]}")
    return ids[int(number) - 1]


def change_set(
    records: Sequence[SynsetRecord],
    senses: Mapping[str, Mapping[str, list[int]]],
    protected: Iterable[int] = (),
) -> list[ChangeGroup]:
    """The version 1 -> 2 changes; deterministic for given records. Synsets in ``protected``
    (the categories) are never removed. No change creates an is-a cycle."""
    graph = _Graph(records)
    rng = random.Random(SEED)
    touched = set(protected)
    groups = []

    new = ChangeGroup("new synsets: words coined after WordNet 3.0 (hand-picked)")
    counters = dict.fromkeys(POS_PREFIX, 0)
    for words, parent_key in NEW_SYNSETS:
        parent = _resolve_sense(parent_key, senses)
        pos = graph.by_id[parent].pos
        counters[pos] += 1
        x = synset_id(pos, NEW_ID_OFFSET + counters[pos])
        new.add(
            f"{' '.join(words)} ({x}) is a {graph.name(parent)}",
            ("+", "synset", (x, pos, graph.by_id[parent].lexname)),
            *(("+", "lemma", (x, word)) for word in words),
            ("+", "hypernym", (x, parent)),
        )
        touched.add(parent)
    groups.append(new)

    closed_up = ChangeGroup("new lemmas: hyphenated nouns spelled closed up (seeded)")
    known: dict[str, set[str]] = {pos: set() for pos in POS_PREFIX}
    for r in records:
        known[r.pos].update(w.lower() for w in r.words)
    candidates = sorted(
        (r.id, word)
        for r in records
        for word in r.words[:1]
        if r.pos == "n"
        and _HYPHENATED.fullmatch(word)
        and word.replace("-", "") not in known[r.pos]
    )
    for x, word in rng.sample(candidates, CLOSED_UP):
        spelling = word.replace("-", "")
        closed_up.add(f"{graph.name(x)}: also {spelling}", ("+", "lemma", (x, spelling)))
        touched.add(x)
    groups.append(closed_up)

    def pick(candidates: list[int]) -> int:
        while True:
            x = rng.choice(candidates)
            if x not in touched:
                return x

    # Synsets with one hypernym p (no instance pointer) whose p has one hypernym g.
    chain = sorted(
        x
        for x in graph.by_id
        if (p := graph.single_hypernym(x)) is not None and graph.single_hypernym(p) is not None
    )
    sideways = ChangeGroup("re-attached synsets: from the parent p to a sibling of p (seeded)")
    while len(sideways.items) < SIDEWAYS_MOVES:
        x = pick(chain)
        p = graph.single_hypernym(x)
        assert p is not None
        g = graph.single_hypernym(p)
        assert g is not None
        below = graph.descendants(x)
        siblings = sorted(
            q
            for q in graph.children[g] - below - {p, x}
            # a hyponym of g (not an instance of it) from the same lexicographer file as p
            if g in graph.by_id[q].hypernyms and graph.by_id[q].lexname == graph.by_id[p].lexname
        )
        if not siblings:
            touched.add(x)
            continue
        q = rng.choice(siblings)
        sideways.add(
            f"{graph.name(x)}: {graph.name(p)} -> {graph.name(q)}",
            ("-", "hypernym", (x, p)),
            ("+", "hypernym", (x, q)),
        )
        touched.update((x, p, q))
    groups.append(sideways)

    lifts = ChangeGroup("lifted synsets: from the parent p to the parent of p (seeded)")
    while len(lifts.items) < LIFTS:
        x = pick(chain)
        p = graph.single_hypernym(x)
        assert p is not None
        g = graph.single_hypernym(p)
        assert g is not None
        lifts.add(
            f"{graph.name(x)}: {graph.name(p)} -> {graph.name(g)}",
            ("-", "hypernym", (x, p)),
            ("+", "hypernym", (x, g)),
        )
        touched.update((x, p, g))
    groups.append(lifts)

    several = sorted(x for x, r in graph.by_id.items() if len(r.hypernyms) > 1)
    dropped = ChangeGroup("dropped second hypernyms of synsets with several (seeded)")
    while len(dropped.items) < DROPPED_SECOND_HYPERNYMS:
        x = pick(several)
        p = rng.choice(graph.by_id[x].hypernyms)
        dropped.add(f"{graph.name(x)} is no longer a {graph.name(p)}", ("-", "hypernym", (x, p)))
        touched.update((x, p))
    groups.append(dropped)

    leaves = sorted(x for x in graph.by_id if not graph.children.get(x))
    removed = ChangeGroup("removed leaf synsets with their words and pointers (seeded)")
    kinds = (
        [r for r in leaves if graph.by_id[r].hypernyms],
        [r for r in leaves if graph.by_id[r].instance_hypernyms],
    )
    for i in range(REMOVED_SYNSETS):
        x = pick(kinds[i % 2])
        r = graph.by_id[x]
        removed.add(
            f"{graph.name(x)} ({r.lexname})",
            ("-", "synset", (x, r.pos, r.lexname)),
            *(("-", "lemma", (x, word)) for word in r.words),
            *(("-", "hypernym", (x, p)) for p in r.hypernyms),
            *(("-", "instance_of", (x, p)) for p in r.instance_hypernyms),
        )
        touched.add(x)
    groups.append(removed)
    return groups


def format_changes(groups: Sequence[ChangeGroup], package: Package) -> str:
    lines = [
        "# Changes from EDB version 1 (WordNet 3.0 as released) to version 2.",
        f"# Generated by examples/wordnet/refresh_snapshot.py from {PACKAGE} "
        f"{package.version} (seed {SEED}); do not edit by hand.",
        "# One change per line: op (+ insert, - delete), relation, then the relation's",
        "# columns, tab-separated. Lines starting with # are comments.",
    ]
    for group in groups:
        lines += ["", f"## {group.title}"]
        for note, changes in group.items:
            lines.append(f"# {note}")
            lines += ["\t".join([op, rel, *map(str, values)]) for op, rel, values in changes]
    return "\n".join(lines) + "\n"


# --- SNAPSHOT.md ------------------------------------------------------------------------


def _file_row(path: Path) -> str:
    data = path.read_bytes()
    return f"| `{path.name}` | {len(data)} | `{hashlib.sha256(data).hexdigest()}` |"


def snapshot_markdown(
    package: Package,
    sources: Sequence[SourceFile],
    records: Sequence[SynsetRecord],
    groups: Sequence[ChangeGroup],
    out: Path,
    license_text: str,
) -> str:
    counts = {version: load_snapshot(version, out) for version in SNAPSHOT_VERSIONS}
    relations = sorted(counts[1])
    per_pos = {pos: sum(1 for r in records if r.pos == pos) for pos in POS_PREFIX}
    change_rows = []
    for group in groups:
        ops: dict[str, int] = defaultdict(int)
        for _, changes in group.items:
            for op, rel, _ in changes:
                ops[f"{op}{rel}"] += 1
        summary = ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))
        change_rows.append(f"| {group.title} | {len(group.items)} | {summary} |")
    return "\n".join(
        [
            "# WordNet hypernym graph snapshot",
            "",
            "Real example data for the `wordnet` pipeline: the noun and verb synsets of",
            f"WordNet 3.0 from Debian's `{PACKAGE}` package, version `{package.version}`",
            f"(`{package.deb.name}`, {package.deb_bytes} bytes, SHA-256",
            f"`{package.deb_sha256}`),",
            "reduced to synsets, their words and their hypernym (`@`) and instance hypernym",
            "(`@i`) pointers. Generated by `examples/wordnet/refresh_snapshot.py`;",
            "do not edit the generated files or this file by hand.",
            "",
            "| source file in the package | bytes | SHA-256 |",
            "|---|---|---|",
            *[f"| `/{s.name}` | {s.bytes} | `{s.sha256}` |" for s in sources],
            "",
            f"`{BASE_FILE}` is xz-compressed (preset 9) UTF-8 TSV, one line per synset,",
            "sorted by id, after `#` comment lines and a header row:",
            "",
            "    id  pos  lexname  words  hypernyms  instance_hypernyms",
            "",
            "- `id`: 100000000 for nouns or 200000000 for verbs plus the synset_offset in",
            "  data.noun / data.verb (the synset ids of the WordNet SQL databases);",
            "  entity is 100001740;",
            "- `pos`: `n` or `v`; `lexname`: the lexicographer file (lexnames(5WN)), e.g.",
            "  `noun.animal`;",
            "- `words`: the synset's words in file order, space-separated, case kept,",
            "  spaces inside a word written `_` as in WordNet (`ice_cream`);",
            "- `hypernyms`, `instance_hypernyms`: space-separated ids (may be empty).",
            "",
            f"`{CHANGES_FILE}` is the change set of version 2 (below), plain TSV.",
            f"`{CATEGORIES_FILE}` is a hand-written list (not generated) of category synsets",
            "for the `category` relation; every id in it exists in both versions.",
            "",
            "| generated file | bytes | SHA-256 |",
            "|---|---|---|",
            _file_row(out / BASE_FILE),
            _file_row(out / CHANGES_FILE),
            "",
            f"Synsets: {len(records)} ({per_pos['n']} nouns, {per_pos['v']} verbs); "
            f"word senses: {sum(len(r.words) for r in records)}.",
            "",
            "## EDB versions",
            "",
            "`examples/wordnet/snapshot.py` builds two EDB versions:",
            "",
            "- version 1: WordNet 3.0 as released;",
            f"- version 2: version 1 with the changes of `{CHANGES_FILE}` applied. WordNet",
            "  3.0 is the last release Debian packages, so the change is generated (seed",
            f"  {SEED}) rather than taken from a later release, in the kinds of edits later",
            "  WordNets made: new words, new spellings, re-attached and removed synsets.",
            "  The seeded re-attachments are realistic in shape (a synset moves to a sibling",
            "  of its hypernym in the same lexicographer file, or up one level), not in",
            "  meaning: a vase may become a kind of tank. No change creates an is-a cycle.",
            "",
            "| relation | version 1 rows | version 2 rows |",
            "|---|---|---|",
            *[
                f"| {rel} | {counts[1][rel].num_rows} | {counts[2][rel].num_rows} |"
                for rel in relations
            ],
            "",
            "`load_snapshot(version, lexnames=...)` keeps only the synsets of the given",
            "lexicographer files and all their ancestors (upward closed, so every kept",
            "synset has the same ancestors and depth as in the whole graph);",
            f"`QUICK_LEXNAMES` ({', '.join(QUICK_LEXNAMES)}) is the quick-demo subset.",
            "",
            "| change | items | rows (+insert / -delete, per relation) |",
            "|---|---|---|",
            *change_rows,
            "",
            "## Refresh",
            "",
            "    sudo apt-get update",
            "    python -m deltalog.examples.wordnet.refresh_snapshot [--deb wordnet-base_*.deb] "
            "[--out examples/wordnet/data]",
            "",
            f"Without `--deb` it runs `apt-get download {PACKAGE}` in a temporary folder and",
            "extracts the package with `dpkg-deb -x`. Nothing is downloaded at run time by the",
            "pipeline itself. Refreshing changes the expected sizes in tests and demos.",
            "",
            "## Licence",
            "",
            f"The WordNet data is used under the WordNet 3.0 licence; the `{PACKAGE}`",
            "package's copyright file, verbatim:",
            "",
            *[f"    {line}".rstrip() for line in license_text.splitlines()],
            "",
        ]
    )


def refresh(deb: Path | None, out: Path) -> tuple[Package, list[SynsetRecord], list[ChangeGroup]]:
    with tempfile.TemporaryDirectory(prefix="wordnet-refresh-") as tmp:
        package = fetch_package(deb, Path(tmp))
        root = package.root
        lexnames = read_lexnames(root)
        relative = [WORDNET_DIR / DATA_FILES[p] for p in POS_PREFIX]
        relative += [WORDNET_DIR / INDEX_FILES[p] for p in POS_PREFIX]
        sources = [_source(root, path) for path in [*relative, LEXNAMES_MAN, COPYRIGHT]]
        records = [
            record
            for pos, name in DATA_FILES.items()
            for record in parse_data_file(root / WORDNET_DIR / name, pos, lexnames)
        ]
        records.sort(key=lambda r: r.id)
        senses = {
            pos: read_senses(root / WORDNET_DIR / INDEX_FILES[pos], pos) for pos in POS_PREFIX
        }
        license_text = (root / COPYRIGHT).read_text(encoding="utf-8")
        out.mkdir(parents=True, exist_ok=True)
        protected = _category_ids(out / CATEGORIES_FILE)
        groups = change_set(records, senses, protected)
        base = format_base(records, f"{PACKAGE} {package.version}")
        _write(out / BASE_FILE, lzma.compress(base.encode("utf-8"), preset=9))
        _write(out / CHANGES_FILE, format_changes(groups, package).encode("utf-8"))
        markdown = snapshot_markdown(package, sources, records, groups, out, license_text)
        _write(out / "SNAPSHOT.md", markdown.encode("utf-8"))
        return package, records, groups


def _category_ids(path: Path) -> set[int]:
    if not path.is_file():
        return set()
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    return {int(line.split(",")[1]) for line in lines if line.strip()}


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deb", type=Path, help=f"a {PACKAGE} .deb (default: apt-get download)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output data directory")
    args = parser.parse_args(argv)
    try:
        package, records, groups = refresh(args.deb, args.out)
    except RefreshError as error:
        print(f"refresh_snapshot: error: {error}", file=sys.stderr)
        return 2
    changes = sum(len(changes) for g in groups for _, changes in g.items)
    print(
        f"{args.out / BASE_FILE}: {len(records)} synsets from {PACKAGE} {package.version}; "
        f"{args.out / CHANGES_FILE}: {changes} changes"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
