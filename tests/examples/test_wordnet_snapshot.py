"""Tests of the WordNet example dataset: the real snapshot, its v1 -> v2 change set, the
pipeline binding, and the program evaluated on a real slice against plain-Python
graph searches (an independent computation of every IDB relation)."""

from __future__ import annotations

import lzma
import re
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from deltalog.engine.evaluate import evaluate
from deltalog.engine.values import Row
from deltalog.examples.wordnet.refresh_snapshot import RefreshError, parse_data_file
from deltalog.examples.wordnet.snapshot import (
    BASE_FILE,
    CATEGORIES_FILE,
    CHANGES_FILE,
    DATA_DIR,
    QUICK_LEXNAMES,
    SCHEMAS,
    SNAPSHOT_VERSIONS,
    SynsetRecord,
    apply_changes,
    format_base,
    load_snapshot,
    parse_base,
    parse_changes,
    restrict,
    tables_from_records,
)
from deltalog.pipelines.spec import discover_pipelines, load_pipeline
from deltalog.schemas.relation import arrow_schema, arrow_to_rows

ENTITY, DOG, CANINE, DOMESTIC_ANIMAL, ANIMAL = (
    100001740,
    102084071,
    102083346,
    101317541,
    100015388,
)
PARIS, NATIONAL_CAPITAL = 108932568, 108691669
Graph = Mapping[int, set[int]]


@pytest.fixture(scope="module")
def snapshots() -> dict[int, dict[str, pa.Table]]:
    return {version: load_snapshot(version) for version in SNAPSHOT_VERSIONS}


def rows(table: pa.Table) -> set[Row]:
    return arrow_to_rows(table)


def parents_of(tables: Mapping[str, pa.Table]) -> dict[int, set[int]]:
    parents: dict[int, set[int]] = defaultdict(set)
    for relation in ("hypernym", "instance_of"):
        for child, parent in rows(tables[relation]):
            parents[int(child)].add(int(parent))
    return parents


def reachable(graph: Graph, start: int) -> set[int]:
    """Nodes reachable from ``start`` in one or more steps (BFS)."""
    seen: set[int] = set()
    todo = deque(graph.get(start, ()))
    while todo:
        node = todo.popleft()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def is_acyclic(nodes: Iterable[int], parents: Graph) -> bool:
    """Kahn's algorithm on the is-a graph."""
    nodes = set(nodes)
    pending = {x: len(parents.get(x, ())) for x in nodes}
    children: dict[int, list[int]] = defaultdict(list)
    for x in nodes:
        for p in parents.get(x, ()):
            children[p].append(x)
    ready = [x for x, n in pending.items() if n == 0]
    done = 0
    while ready:
        done += 1
        for child in children[ready.pop()]:
            pending[child] -= 1
            if pending[child] == 0:
                ready.append(child)
    return done == len(nodes)


def snapshot_counts() -> dict[str, tuple[int, int]]:
    """Rows per relation and version, from the table in SNAPSHOT.md."""
    text = (DATA_DIR / "SNAPSHOT.md").read_text(encoding="utf-8")
    found = re.findall(r"^\| (\w+) \| (\d+) \| (\d+) \|$", text, re.MULTILINE)
    return {name: (int(v1), int(v2)) for name, v1, v2 in found}


# --- the committed data -----------------------------------------------------------------


def test_tables_have_declared_schemas_no_duplicates_sorted(
    snapshots: dict[int, dict[str, pa.Table]],
) -> None:
    program = load_pipeline("wordnet").program
    for tables in snapshots.values():
        assert sorted(tables) == sorted(SCHEMAS)
        for name, table in tables.items():
            assert table.schema.equals(SCHEMAS[name])
            assert table.schema.equals(arrow_schema(program.schemas[name]))  # the .decl
            assert table.num_rows > 0
            assert all(table.column(c).null_count == 0 for c in table.column_names)
            assert len(rows(table)) == table.num_rows
            assert table.equals(table.sort_by([(c, "ascending") for c in table.column_names]))


def test_counts_match_snapshot_md(snapshots: dict[int, dict[str, pa.Table]]) -> None:
    counts = snapshot_counts()
    assert set(counts) == set(SCHEMAS)
    for name, (v1, v2) in counts.items():
        assert (snapshots[1][name].num_rows, snapshots[2][name].num_rows) == (v1, v2), name
    # WordNet 3.0 (wnstats(7WN)): 82115 noun and 13767 verb synsets.
    pos = Counter(snapshots[1]["synset"].column("pos").to_pylist())
    assert pos == {"n": 82115, "v": 13767}
    text = (DATA_DIR / "SNAPSHOT.md").read_text(encoding="utf-8")
    for name in (BASE_FILE, CHANGES_FILE):
        size = (DATA_DIR / name).stat().st_size
        assert f"| `{name}` | {size} |" in text
    assert (DATA_DIR / BASE_FILE).stat().st_size < 2_000_000


def test_known_synsets_and_pointers(snapshots: dict[int, dict[str, pa.Table]]) -> None:
    for tables in snapshots.values():
        assert (DOG, "dog") in rows(tables["lemma"])
        assert {(DOG, CANINE), (DOG, DOMESTIC_ANIMAL)} <= rows(tables["hypernym"])
        assert (PARIS, NATIONAL_CAPITAL) in rows(tables["instance_of"])
        parents = parents_of(tables)
        assert {ANIMAL, ENTITY} <= reachable(parents, DOG)
        synsets = {int(x) for x, _, _ in rows(tables["synset"])}
        noun_roots = {x for x in synsets if x < 200_000_000 and not parents.get(x)}
        assert noun_roots == {ENTITY}
        assert is_acyclic(synsets, parents)
        category_ids = {int(x) for _, x in rows(tables["category"])}
        assert category_ids <= synsets


def test_version_2_is_version_1_plus_the_change_set(
    snapshots: dict[int, dict[str, pa.Table]],
) -> None:
    changes = parse_changes((DATA_DIR / CHANGES_FILE).read_text(encoding="utf-8"))
    assert 100 < len(changes) < 400
    for name in SCHEMAS:
        v1, v2 = rows(snapshots[1][name]), rows(snapshots[2][name])
        inserted = {c.row for c in changes if c.relation == name and c.op == "+"}
        deleted = {c.row for c in changes if c.relation == name and c.op == "-"}
        assert v2 - v1 == inserted, name
        assert v1 - v2 == deleted, name
    for name in ("synset", "lemma", "hypernym", "instance_of"):
        ops = {c.op for c in changes if c.relation == name}
        assert ops == ({"+", "-"} if name != "instance_of" else {"-"}), name
    assert (199000001, "smartphone") in rows(snapshots[2]["lemma"])


def test_change_file_errors_name_the_line(snapshots: dict[int, dict[str, pa.Table]]) -> None:
    bad = f"# comment\n-\thypernym\t{DOG}\t{ANIMAL}\n"  # not a direct hypernym
    with pytest.raises(ValueError, match=r"^v2\.tsv:2: deletes hypernym"):
        apply_changes(snapshots[1], parse_changes(bad, "v2.tsv"), "v2.tsv")
    with pytest.raises(ValueError, match=r"^v2\.tsv:1: inserts lemma"):
        apply_changes(snapshots[1], parse_changes(f"+\tlemma\t{DOG}\tdog\n", "v2.tsv"), "v2.tsv")
    with pytest.raises(ValueError, match=r"^v2\.tsv:1: not an integer"):
        parse_changes("+\thypernym\tdog\t1\n", "v2.tsv")
    with pytest.raises(ValueError, match=r"^v2\.tsv:1: expected"):
        parse_changes("+\tghost\t1\n", "v2.tsv")


def test_base_file_round_trip_and_errors(tmp_path: Path) -> None:
    records = [
        SynsetRecord(100000010, "n", "noun.Tops", ("thing",), (), ()),
        SynsetRecord(100000020, "n", "noun.animal", ("dog", "Canis_familiaris"), (100000010,), ()),
        SynsetRecord(100000030, "n", "noun.animal", ("Rex",), (), (100000020,)),
    ]
    text = format_base(records, "test")
    assert parse_base(text) == records
    tables = tables_from_records(records, [("animals", 100000020)])
    assert rows(tables["instance_of"]) == {(100000030, 100000020)}
    with pytest.raises(ValueError, match=r"^base:6: bad synset id"):
        parse_base(text.replace("100000020\tn", "x\tn", 1), "base")
    for name in (CHANGES_FILE, CATEGORIES_FILE):
        (tmp_path / name).write_bytes((DATA_DIR / name).read_bytes())
    (tmp_path / BASE_FILE).write_bytes(lzma.compress(b"id\tpos\n"))
    with pytest.raises(ValueError, match=rf"^{re.escape(BASE_FILE)}:1: expected header"):
        load_snapshot(1, data_dir=tmp_path)
    (tmp_path / BASE_FILE).write_bytes(lzma.compress(text.encode()))
    with pytest.raises(ValueError, match=r"category\.id \d+ is not a synset id"):
        load_snapshot(1, data_dir=tmp_path)


def test_unknown_version_and_missing_data(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown snapshot version 3"):
        load_snapshot(3)
    with pytest.raises(FileNotFoundError, match="refresh_snapshot"):
        load_snapshot(1, data_dir=tmp_path)


def test_wndb_parser_checks_offsets_and_keeps_hypernyms(tmp_path: Path) -> None:
    header = "  1 This software and database is being provided to you\n"  # 56 bytes
    first = "00000056 03 n 01 entity 0 001 ~ 00000124 n 0000 | that which exists\n"
    second = (
        "00000124 05 n 02 dog 0 domestic_dog 0 003 @ 00000056 n 0000 @i 00000056 n 0000 "
        "+ 01234567 v 0101 | a member of the genus Canis\n"
    )
    assert (len(header), len(header + first)) == (56, 124)
    path = tmp_path / "data.noun"
    path.write_text(header + first + second, encoding="utf-8")
    records = parse_data_file(path, "n", {3: "noun.Tops", 5: "noun.animal"})
    assert records == [
        SynsetRecord(100000056, "n", "noun.Tops", ("entity",), (), ()),
        SynsetRecord(
            100000124, "n", "noun.animal", ("dog", "domestic_dog"), (100000056,), (100000056,)
        ),
    ]
    path.write_text(header + first.replace("00000056", "00000057", 1), encoding="utf-8")
    with pytest.raises(RefreshError, match=r"data\.noun:2: synset_offset 00000057 is not 56"):
        parse_data_file(path, "n", {3: "noun.Tops"})


# --- the pipeline and its program -------------------------------------------------------


def test_pipeline_binding_is_complete() -> None:
    spec = load_pipeline("wordnet")
    assert set(spec.edb_tables) == set(spec.program.edb) == set(SCHEMAS)
    assert set(spec.idb_tables) == set(spec.program.idb)
    for pred, path in (*spec.edb_tables.items(), *spec.idb_tables.items()):
        kind = "edb" if pred in spec.edb_tables else "idb"
        assert path == f"wordnet/{kind}/{pred}"
    assert "wordnet" in {p.name for p in discover_pipelines()}
    recursive = {p for s in spec.program.strata if s.recursive for p in s.preds}
    assert recursive == {"ancestor", "level"}
    assert spec.edb_closure("root") == ("hypernym", "instance_of", "synset")


def expected_idb(tables: Mapping[str, pa.Table]) -> dict[str, set[Any]]:
    """Every IDB relation of program.dl, by graph searches in plain Python."""
    synsets = {int(x) for x, _, _ in rows(tables["synset"])}
    parents = parents_of(tables)
    children: dict[int, set[int]] = defaultdict(set)
    for x, ps in parents.items():
        for p in ps:
            children[p].add(x)
    ancestors = {x: reachable(parents, x) for x in synsets}
    roots = {x for x in synsets if not parents.get(x)}
    depth = dict.fromkeys(roots, 0)  # multi-source BFS down from the roots
    todo = deque(sorted(roots))
    while todo:
        x = todo.popleft()
        for child in children[x]:
            if child not in depth:
                depth[child] = depth[x] + 1
                todo.append(child)
    level = set()  # every path length from x to a root
    for x in synsets:
        lengths, frontier = set(), {x}
        for d in range(64):
            lengths |= {d for y in frontier if y in roots}
            frontier = {p for y in frontier for p in parents.get(y, ())}
        level |= {(x, d) for d in lengths}
    categories = rows(tables["category"])
    in_category = {(x, c) for c, y in categories for x in synsets if x == y or y in ancestors[x]}
    cats_of: dict[int, set[str]] = defaultdict(set)
    for x, c in in_category:
        cats_of[int(x)].add(str(c))
    word_cats: dict[str, set[str]] = defaultdict(set)
    for synset, word in rows(tables["lemma"]):
        word_cats[str(word)] |= cats_of[int(synset)]
    hyponyms = Counter(a for x in synsets for a in ancestors[x])
    return {
        "isa": {(x, p) for x, ps in parents.items() for p in ps},
        "ancestor": {(x, a) for x in synsets for a in ancestors[x]},
        "ancestor_count": {(x, len(a)) for x, a in ancestors.items() if a},
        "hyponym_count": set(hyponyms.items()),
        "has_hypernym": {(x,) for x in synsets if parents.get(x)},
        "root": {(x,) for x in roots},
        "level": level,
        "depth": set(depth.items()),
        "in_category": in_category,
        "crossover": {
            (w, c1, c2) for w, cs in word_cats.items() for c1 in cs for c2 in cs if c1 < c2
        },
        "cycle": set(),
    }


@pytest.mark.parametrize("version", SNAPSHOT_VERSIONS)
def test_program_on_a_real_slice_equals_graph_search(
    snapshots: dict[int, dict[str, pa.Table]], version: int
) -> None:
    tables = restrict(snapshots[version], ["noun.food", "verb.consumption"])
    assert 2_000 < tables["synset"].num_rows < 5_000
    program = load_pipeline("wordnet").program
    got = evaluate(program, {name: rows(table) for name, table in tables.items()})
    expected = expected_idb(tables)
    assert set(got) == set(expected)
    for name, relation in expected.items():
        assert set(got[name]) == relation, name
    assert len(got["ancestor"]) > 20_000
    assert ("drink", "consume", "food") in got["crossover"]  # a beverage; to drink


@pytest.mark.slow
def test_program_on_the_whole_graph_equals_graph_search(
    snapshots: dict[int, dict[str, pa.Table]],
) -> None:
    tables = snapshots[1]
    program = load_pipeline("wordnet").program
    got = evaluate(program, {name: rows(table) for name, table in tables.items()})
    expected = expected_idb(tables)
    for name, relation in expected.items():
        assert set(got[name]) == relation, name
    assert len(got["ancestor"]) == 778_320
    assert {("chicken", "animal", "food"), ("Washington", "location", "person")} <= set(
        got["crossover"]
    )


def test_restrict_is_upward_closed(snapshots: dict[int, dict[str, pa.Table]]) -> None:
    full = snapshots[2]
    part = load_snapshot(2, lexnames=QUICK_LEXNAMES)
    kept = {int(x) for x, _, _ in rows(part["synset"])}
    lexnames = {str(lex) for _, _, lex in rows(part["synset"])}
    assert set(QUICK_LEXNAMES) <= lexnames
    assert 0 < len(kept) < full["synset"].num_rows
    full_parents, part_parents = parents_of(full), parents_of(part)
    for x in kept:  # every kept synset keeps all its hypernyms
        assert part_parents.get(x, set()) == full_parents.get(x, set())
    assert rows(part["lemma"]) == {r for r in rows(full["lemma"]) if r[0] in kept}
