"""Lineage over a table's history: ``show --as-of-edb`` (the IDB table version whose run
consumed given EDB versions, Delta time travel) equals the naive evaluator on the EDB rows
written at those versions; ``diff`` between two table versions equals the set difference of
the two recomputes, each row's attribution naming EDB rows the change really inserted or
deleted; errors are one DL line."""

import itertools
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deltalog.engine.errors import DeltalogError
from deltalog.engine.naive import evaluate_naive
from deltalog.engine.values import format_fact
from deltalog.pipelines import lineage
from deltalog.pipelines.warehouse import write_edb
from tests.dagster_project.tiny import EDGES_V1, NODES, START, edb_tables, make_pipeline, run_all

EDGE = st.tuples(st.integers(1, 5), st.integers(1, 5))


def _oracle(spec, edges, nodes=None):
    inputs = {"edge": set(edges), "node": set(nodes or NODES), "start": set(START)}
    return evaluate_naive(spec.program, inputs)


def _listed(lines, pred):
    """The (sign, fact text) rows ``diff`` listed for ``pred``, and each row's rest."""
    at = next(i for i, line in enumerate(lines) if re.match(rf"{pred}: \d+ added", line))
    out = {}
    for line in lines[at + 1:]:
        if line.startswith("..."):
            continue
        sign, rest = line[0], line[2:]
        fact, _, why = rest.partition("   ")
        out[(sign, fact)] = why
    return out


def _expected_rows(spec, pred, old, new):
    functional = spec.program.schemas[pred].functional
    show = lambda r: format_fact(pred, r, functional)[:-1]  # noqa: E731
    return ({("+", show(r)) for r in new[pred] - old[pred]}
            | {("-", show(r)) for r in old[pred] - new[pred]})


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sets(EDGE, max_size=6), st.booleans()), min_size=2, max_size=3))
# a run whose out-degrees equal the last ones commits nothing to out_degree's stratum: the
# versions it consumed are known from the saved state's record of runs
@example(steps=[(set(), False), ({(2, 1), (3, 1), (1, 1), (5, 1), (3, 2)}, True)])
# the edges come back to a set an earlier run consumed: the run after commits nothing to
# path and leaves its table as it was, so unreachable's inputs are the same tables; they
# stand for the new EDB version all the same, and that run must say so
@example(steps=[(set(), True), ({(1, 1)}, False), (set(), True)])
def test_show_as_of_edb_and_diff_equal_recomputes(tmp_path_factory, steps):
    """Each step writes an edge set (a new EDB version when it differs) and runs the
    pipeline or not (a version no run consumed)."""
    spec, root = make_pipeline(tmp_path_factory.mktemp("w"))
    edges_at = {1: set(EDGES_V1)}
    run_all(spec, root)
    consumed = [1]
    for edges, run in steps:
        (write,) = [w for w in write_edb(root, spec, edb_tables(sorted(edges))) if w.pred == "edge"]
        edges_at[write.table_version] = set(edges)
        if run:
            run_all(spec, root)
            consumed.append(write.table_version)
    for version, edges in edges_at.items():
        oracle = _oracle(spec, edges)
        for pred, asked in (("path", f"edge={version}"), ("out_degree", f"{version}"),
                            ("unreachable", f"edge={version},node=1")):
            if version in consumed:
                rows, note = lineage.show(root, spec, pred, asked)
                assert rows == oracle[pred], (pred, version, note)
                assert f"edge={version}" in note
            else:
                with pytest.raises(DeltalogError, match=r"DL300.*no run of"):
                    lineage.show(root, spec, pred, asked)
            rows, note = lineage.show(root, spec, pred, asked, recompute=True)
            assert rows == oracle[pred]
    # diff between every pair of the path table's versions: the rows the change feed
    # says, against the recomputes of the EDB versions the two runs consumed
    runs = {r.version: r for r in lineage._runs_of(root, spec, "path") if r.committed}
    versions = sorted(runs)
    pairs = {*itertools.pairwise(versions), (versions[0], versions[-1])}
    for start, end in sorted(pairs):
        if start < end:
            old = _oracle(spec, edges_at[runs[start].edb_versions["edge"]])
            new = _oracle(spec, edges_at[runs[end].edb_versions["edge"]])
            lines = lineage.diff(root, spec, "path", start, end, limit=1000)
            listed = _listed(lines, "path")
            assert set(listed) == _expected_rows(spec, "path", old, new)
            new_edges = edges_at[runs[end].edb_versions["edge"]]
            old_edges = edges_at[runs[start].edb_versions["edge"]]
            inserted, deleted = new_edges - old_edges, old_edges - new_edges
            for (sign, _), why in listed.items():
                # path is monotone: a new row's derivation uses an inserted edge, a lost
                # row's derivation used a deleted one
                used = re.findall(r"([+-]) edge\((\d+), (\d+)\)", why)
                assert used, why
                for s, a, b in used:
                    assert s == sign
                    assert (int(a), int(b)) in (inserted if sign == "+" else deleted)
    for pred in ("unreachable", "out_degree"):  # negation, aggregate: rows only
        runs = {r.version: r for r in lineage._runs_of(root, spec, pred) if r.committed}
        for start, end in itertools.pairwise(sorted(runs)):
            old = _oracle(spec, edges_at[runs[start].edb_versions["edge"]])
            new = _oracle(spec, edges_at[runs[end].edb_versions["edge"]])
            listed = _listed(lineage.diff(root, spec, pred, start, end, limit=1000), pred)
            assert set(listed) == _expected_rows(spec, pred, old, new)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """Runs 1-3 of the tiny pipeline; edge version 3 written after run 2 and never
    consumed; node changed at run 3 (two EDB tables moving). Made once for the module:
    the tests using it only read the tables and the runs' records."""

    spec, root = make_pipeline(tmp_path_factory.mktemp("history"))
    run_all(spec, root)                                          # run 1: edge=1, node=1
    write_edb(root, spec, edb_tables([*EDGES_V1, (4, 7)]))      # edge 2
    run_all(spec, root)                                          # run 2: edge=2, node=1
    write_edb(root, spec, edb_tables([*EDGES_V1, (4, 7), (7, 1)]))  # edge 3, never run
    tables = edb_tables([(1, 2), (2, 3), (3, 1), (3, 4)])            # edge 4
    tables["node"] = tables["node"].slice(0, 5)                      # node 2
    write_edb(root, spec, tables)
    run_all(spec, root)                                          # run 3: edge=4, node=2
    return spec, root


def test_show_with_two_tables_and_an_unconsumed_version(history):
    spec, root = history
    nodes5 = NODES[:5]
    edges4 = [(1, 2), (2, 3), (3, 1), (3, 4)]
    rows, note = lineage.show(root, spec, "unreachable", "edge=4,node=2")
    assert rows == _oracle(spec, edges4, nodes5)["unreachable"]
    rows, _ = lineage.show(root, spec, "unreachable", "node=1")  # the newest run with node=1

    assert rows == _oracle(spec, [*EDGES_V1, (4, 7)])["unreachable"]
    with pytest.raises(DeltalogError) as err:
        lineage.show(root, spec, "unreachable", "edge=3,node=1")
    text = str(err.value)
    assert "error DL300" in text and "edge=2,node=1" in text and "\n" not in text
    rows, note = lineage.show(root, spec, "unreachable", "edge=3,node=1", recompute=True)
    assert "recomputed" in note
    assert rows == _oracle(spec, [*EDGES_V1, (4, 7), (7, 1)])["unreachable"]
    with pytest.raises(DeltalogError, match=r"DL301.*missing: node"):
        lineage.show(root, spec, "unreachable", "edge=3", recompute=True)
    rows, note = lineage.show(root, spec, "path")  # now
    assert rows == _oracle(spec, edges4, nodes5)["path"] and "run 3" in note


def test_history_lists_runs_that_did_not_change_the_table(history):
    spec, root = history
    lines = lineage.history(root, spec, "out_degree")
    assert [line.split("  ")[1] for line in lines] == [
        "run 1 (committed)", "run 2 (committed)", "run 3 (committed)"]
    assert lineage.history(root, spec, "even")[-1].endswith("EDB edge=4,start=1")


def test_errors_are_one_dl_line(history, capsys):
    from deltalog.pipelines.cli import main

    spec, root = history
    base = [str(spec.directory), "--warehouse", str(root)]
    cases = [
        (["show", *base, "pth"], "DL206", "did you mean 'path'"),
        (["show", *base, "edge"], "DL206", "derives no table 'edge'"),
        (["show", *base, "path", "--as-of-edb", "vertex=1"], "DL206", "no EDB table 'vertex'"),
        (["show", *base, "path", "--as-of-edb", "node=1"], "DL206", "does not depend"),
        (["show", *base, "path", "--as-of-edb", "edge=x"], "DL301", "expected table=VERSION"),
        (["show", *base, "path", "--as-of-edb", "edge=99"], "DL300", "no run of 'path'"),
        (["show", *base, "path", "--as-of-edb", "99", "--recompute"], "DL301", "not 99"),
        (["diff", *base, "path", "3", "2"], "DL301", "FROM < TO"),
        (["diff", *base, "path", "0", "99"], "DL301", "FROM < TO"),
        (["diff", *base, "nope", "0", "1"], "DL206", "derives no table"),
    ]
    for argv, code, text in cases:
        assert main(argv) == 1, argv
        out = capsys.readouterr()
        assert out.out == ""
        lines = out.err.splitlines()
        assert len(lines) == 1 and f"error {code}" in lines[0] and text in lines[0], out.err


def test_command_line_show_and_diff(history, capsys):
    from deltalog.pipelines.cli import main

    spec, root = history
    base = [str(spec.directory), "--warehouse", str(root)]
    assert main(["show", *base, "path", "--as-of-edb", "edge=2"]) == 0
    out = capsys.readouterr()
    assert "path(4, 7)." in out.out.splitlines() and "version 2" in out.err
    assert main(["diff", *base, "path", "1", "2", "--limit", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "path: table version 1 -> 2 (run 1 -> 2), EDB edge 1 -> 2"
    assert lines[1:3] == ["EDB changes (1):", "  + edge(4, 7)"]
    assert lines[3] == "path: 4 added, 0 removed"
    assert lines[4] == "+ path(1, 7)   uses + edge(4, 7)" and lines[-1] == "... 2 more (--limit)"


# -- the sample of a run's change in the IDB materialization metadata ---------------------

SAMPLE_LINE = re.compile(r"^- (added|removed) `(.+)`:?$")


def _sampled(markdown):
    """(kind, fact text) of every row the sample names, and the leaves of its trees."""
    rows, leaves = set(), set()
    for line in markdown.splitlines():
        m = SAMPLE_LINE.match(line)
        if m:
            rows.add((m.group(1), m.group(2)))
        elif "[edb fact] (stratum input)" in line:
            leaves.add(line.split("─ ", 1)[-1].split("   ")[0])
    return rows, leaves


def test_run_sample_names_rows_of_the_change_with_trees_over_its_inputs(tmp_path):
    spec, root = make_pipeline(tmp_path)
    first = run_all(spec, root)
    edges2 = [e for e in EDGES_V1 if e != (3, 1)] + [(4, 7), (7, 6)]
    write_edb(root, spec, edb_tables(edges2))
    second = run_all(spec, root)
    old, new = _oracle(spec, EDGES_V1), _oracle(spec, edges2)
    inputs = {f"edge({a}, {b})" for a, b in edges2} | {f'node({i}, "{s}")' for i, s in NODES}
    inputs |= {format_fact("path", r)[:-1] for r in new["path"]}  # unreachable's input
    for pred in ("path", "unreachable", "out_degree"):
        md = second[pred].lineage
        assert len(md.encode()) <= lineage.SAMPLE_BYTES + 64
        expected = _expected_rows(spec, pred, old, new)
        added = sum(1 for s, _ in expected if s == "+")
        assert md.startswith(f"+{added} / -{len(expected) - added} rows in this run")
        rows, leaves = _sampled(md)
        named = {("+" if k == "added" else "-", f) for k, f in rows}
        assert named and named <= expected
        assert len(named) == min(added, 3) + min(len(expected) - added, 3)
        assert leaves and leaves <= inputs, (pred, leaves - inputs)
    assert first["path"].lineage.startswith(f"+{len(old['path'])} / -0 rows")


def test_run_sample_is_bounded(tmp_path, monkeypatch):
    spec, root = make_pipeline(tmp_path)
    # 1 -> 100 -> 99 -> ... -> 61: trees up to 40 levels high, cut at TREE_LINES; the
    # sample's first rows (path(1, 61), ...: the change's first, in the order of the
    # values) have the highest
    chain = [(1, 100), *((i, i - 1) for i in range(100, 61, -1))]
    write_edb(root, spec, edb_tables(chain))
    md = run_all(spec, root)["path"].lineage
    assert "more lines" in md and len(md.encode()) <= lineage.SAMPLE_BYTES + 64
    monkeypatch.setattr(lineage, "TREE_MAX_ROWS", 10)
    write_edb(root, spec, edb_tables([*chain[1:], (40, 41)]))
    md = run_all(spec, root)["path"].lineage
    assert "No more trees" in md and "```" not in md and "- removed `path(1, " in md
    assert "- added `path(" in md
    monkeypatch.setattr(lineage, "TREE_MAX_ROWS", 10**6)
    monkeypatch.setattr(lineage, "TREE_MAX_WORK", 1)  # one tree, then rows only
    write_edb(root, spec, edb_tables([*chain, (50, 51), (52, 53)]))
    md = run_all(spec, root)["path"].lineage
    assert md.count("```") == 2 and "more than 1 facts" in md
    assert md.count("- added `path(") == 3
    monkeypatch.setattr(lineage, "SAMPLE_BYTES", 300)
    assert len(lineage._bounded("x" * 1000).encode()) <= 300


@pytest.mark.dagster
def test_the_materialization_metadata_carries_the_sample(tmp_path):
    import dagster as dg

    from deltalog.dagster_project.definitions import build_definitions

    spec, root = make_pipeline(tmp_path)
    defs = build_definitions([spec], root=root)
    assets = dg.AssetSelection.all().without_checks()
    write_edb(root, spec, edb_tables([*EDGES_V1, (4, 7)]))
    result = dg.materialize(defs.assets, resources=defs.resources, selection=assets)
    meta = {
        e.materialization.asset_key.path[-1]: e.materialization.metadata
        for e in result.get_asset_materialization_events()
    }
    value = meta["path"]["lineage"]
    assert isinstance(value, dg.MarkdownMetadataValue)
    expected = _oracle(spec, [*EDGES_V1, (4, 7)])["path"]
    assert value.value.startswith(f"+{len(expected)} / -0 rows in this run")
    rows, leaves = _sampled(value.value)
    assert len(rows) == 3 and leaves and "```" in value.value
    again = dg.materialize(defs.assets, resources=defs.resources, selection=assets)
    assert all("lineage" not in e.materialization.metadata  # unchanged: no sample
               for e in again.get_asset_materialization_events())
