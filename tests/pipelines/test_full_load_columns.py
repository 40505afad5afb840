"""A first run writes a columnar stratum's tables straight from the engine's coded columns
(no row is made): the tables equal a recompute for strings, floats and ints, their schema
is the program's, the run's lineage sample counts the whole table, and the next runs
maintain them; an int beyond 64 bits still gets the error naming its row, nothing written;
a table that already holds rows (a rebuild) takes the difference, found by anti-joins of
the engine's table and the stored one."""

import shutil

import pyarrow as pa
import pytest

from deltalog.engine.errors import DataError
from deltalog.engine.naive import evaluate_naive
from deltalog.engine.runtime import IncrementalEngine
from deltalog.pipelines import delta_io
from deltalog.pipelines.run import StratumRun
from deltalog.pipelines.state_store import state_dir
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import arrow_schema, arrow_to_rows
from tests.local import write_pipeline

PROGRAM = """\
.decl link(src: string, w: float, dst: string)
.decl edge(src: int, dst: int)
path(x, w, y) :- link(x, w, y).
path(x, w, z) :- path(x, w, y), link(y, w, z).
reach(x, y) :- edge(x, y).
reach(x, z) :- reach(x, y), edge(y, z).
"""
BINDING = ('[edb]\nlink = "g/edb/link"\nedge = "g/edb/edge"\n\n'
           '[idb]\npath = "g/idb/path"\nreach = "g/idb/reach"\n')


def _tables(links, edges):
    return {"link": pa.table({"src": [a for a, _, _ in links], "w": [w for _, w, _ in links],
                              "dst": [b for _, _, b in links]}),
            "edge": pa.table({"src": pa.array([a for a, _ in edges], pa.int64()),
                              "dst": pa.array([b for _, b in edges], pa.int64())})}


def _run(root, spec, pred):
    [result] = StratumRun(root, spec, spec.stratum_of(pred)).materialize()
    return result


def test_first_run_writes_coded_columns_and_later_runs_maintain(tmp_path, monkeypatch):
    def no_rows(engine, name):
        raise AssertionError(f"the rows of {name} were made")

    spec = write_pipeline(tmp_path, "g", PROGRAM, BINDING)
    root = tmp_path / "warehouse"
    links = [("a", -1.5, "b"), ("b", -1.5, "c"), ("c", -1.5, "a"), ("a", 2.0, "é")]
    edges = [(1, 2), (2, -3), (-3, 2**62)]
    steps = [(links, edges, "full"), (links[1:], [*edges, (2**62, 1)], "incremental")]
    for i, (ls, es, mode) in enumerate(steps):
        write_edb(root, spec, _tables(ls, es))
        if i == 0:
            monkeypatch.setattr(IncrementalEngine, "relation", no_rows)
        else:
            monkeypatch.undo()
        expected = evaluate_naive(spec.program, {"link": set(ls), "edge": set(es)})
        for pred in ("path", "reach"):
            result = _run(root, spec, pred)
            assert result.mode == mode, result
            table = delta_io.read_arrow(spec.table_uri(root, pred))
            assert table.schema.equals(arrow_schema(spec.program.schemas[pred]))
            assert arrow_to_rows(table) == expected[pred], pred
            assert result.rows == len(expected[pred])
            if i == 0:  # the whole table is the first run's change
                sample = result.lineage
                assert f"+{len(expected[pred])} / -0 rows in this run" in sample, sample


def test_an_int_beyond_64_bits_is_named_and_nothing_is_written(tmp_path):
    spec = write_pipeline(tmp_path, "g", PROGRAM.replace(
        "reach(x, z) :- reach(x, y), edge(y, z).",
        "reach(x, z) :- reach(x, y), edge(y, z).\nreach(x, z) :- edge(x, y), z = y * y."),
        BINDING)
    root = tmp_path / "warehouse"
    write_edb(root, spec, _tables([("a", 1.0, "b")], [(1, 2**40)]))
    with pytest.raises(DataError, match="outside the 64-bit integers"):
        _run(root, spec, "reach")
    assert not delta_io.exists(spec.table_uri(root, "reach"))


def test_a_rebuild_writes_the_difference_found_by_anti_joins(tmp_path, monkeypatch):
    """The saved state gone, a run rebuilds from the tables: the difference between the
    engine's columns and each table (rows added, rows gone, -0.0 equal to 0.0) is what it
    commits, and no row of the relation is made."""
    spec = write_pipeline(tmp_path, "g", PROGRAM, BINDING)
    root = tmp_path / "warehouse"
    links = [("a", -1.5, "b"), ("b", -1.5, "c"), ("c", 0.0, "d"), ("d", 0.0, "a")]
    edges = [(1, 2), (2, 3), (3, 4)]
    write_edb(root, spec, _tables(links, edges))
    for pred in ("path", "reach"):
        _run(root, spec, pred)
    links2 = [("a", -1.5, "b"), ("c", -0.0, "d"), ("d", 0.0, "a"), ("b", 2.5, "x")]
    edges2 = [(1, 2), (3, 4), (4, 1)]
    write_edb(root, spec, _tables(links2, edges2))
    shutil.rmtree(state_dir(root, spec.name))
    monkeypatch.setattr(IncrementalEngine, "relation", lambda e, n: pytest.fail(n))
    expected = evaluate_naive(spec.program, {"link": set(links2), "edge": set(edges2)})
    before = evaluate_naive(spec.program, {"link": set(links), "edge": set(edges)})
    for pred in ("path", "reach"):
        result = _run(root, spec, pred)
        assert result.mode == "rebuilt", result
        table = delta_io.read_arrow(spec.table_uri(root, pred))
        assert arrow_to_rows(table) == expected[pred], pred
        added, gone = expected[pred] - before[pred], before[pred] - expected[pred]
        assert (result.inserted, result.deleted) == (len(added), len(gone)), pred
        assert f"+{len(added)} / -{len(gone)} rows in this run" in result.lineage
