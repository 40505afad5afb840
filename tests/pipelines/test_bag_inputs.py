"""A Delta table is a bag; the engine's relations are sets. A run tells which rows an input
gained or lost from the change feed and the numbers of copies the saved state keeps for
rows held more than once, without looking rows up in the table: random writes (appends of
rows already there, overwrites with and without repeats, deletes by predicate, a MERGE that
deletes one row) leave the IDB tables equal to the naive evaluator on the set of rows, and
no run reads the input table for a lookup."""

import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from deltalog.pipelines import delta_io, inputs
from deltalog.pipelines.state_store import load_state, state_path
from tests.dagster_project.tiny import edge_table, make_pipeline, run_all, tables_right

pytestmark = pytest.mark.filterwarnings("ignore")

_edge = st.tuples(st.integers(1, 3), st.integers(1, 3))
_ops = st.one_of(
    st.tuples(st.just("append"), st.lists(_edge, max_size=4)),
    st.tuples(st.just("overwrite"), st.lists(_edge, max_size=6)),
    st.tuples(st.just("delete"), st.integers(1, 3)),
    st.tuples(st.just("merge_delete"), _edge),
)


def _apply(op: str, arg, uri: str, bag: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Write ``op`` to the table; returns the bag of rows after it."""
    if op == "append":
        write_deltalake(uri, edge_table(arg), mode="append")
        return bag + list(arg)
    if op == "overwrite":
        write_deltalake(uri, edge_table(arg), mode="overwrite")
        return list(arg)
    if op == "delete":
        DeltaTable(uri).delete(f"src = {arg}")
        return [e for e in bag if e[0] != arg]
    source = pa.table({"src": [arg[0]], "dst": [arg[1]]})
    (DeltaTable(uri).merge(source, "t.src = s.src AND t.dst = s.dst", source_alias="s",
                           target_alias="t").when_matched_delete().execute())
    return [e for e in bag if e != arg]


def count_lookups(monkeypatch) -> list[int]:
    """The number of rows of every lookup in an input table from now on (the list grows)."""
    lookups: list[int] = []
    real = delta_io.rows_with_keys

    def counted(uri, version, keys):
        lookups.append(keys.num_rows)
        return real(uri, version, keys)

    monkeypatch.setattr(delta_io, "rows_with_keys", counted)
    return lookups


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(first=st.lists(_edge, max_size=6), ops=st.lists(_ops, min_size=1, max_size=6))
def test_copies_follow_the_feed_and_no_row_is_looked_up(first, ops, monkeypatch):
    lookups = count_lookups(monkeypatch)
    with tempfile.TemporaryDirectory() as tmp:
        spec, root = make_pipeline(Path(tmp))
        uri = spec.table_uri(root, "edge")
        write_deltalake(uri, edge_table(first), mode="overwrite")
        bag = list(first)
        run_all(spec, root)
        for op, arg in ops:
            note(f"{op} {arg}")
            bag = _apply(op, arg, uri, bag)
            event(f"edge held twice: {len(bag) > len(set(bag))}")
            event(f"path maintained: {run_all(spec, root)['path'].mode}")
            assert tables_right(spec, root, sorted(set(bag)))
            state = load_state(state_path(root, spec.name, spec.stratum_of("path")))
            many = {e: bag.count(e) for e in set(bag) if bag.count(e) > 1}
            assert state.copies["edge"] == many
        assert lookups == []


def test_too_many_copies_are_not_kept_and_rows_are_looked_up(tmp_path, monkeypatch):
    """Past ``COPIES_MAX`` rows held more than once, the state keeps none (None) and the
    change reader looks deleted rows up in the table instead: still right."""
    monkeypatch.setattr(inputs, "COPIES_MAX", 1)
    spec, root = make_pipeline(tmp_path)
    uri = spec.table_uri(root, "edge")
    write_deltalake(uri, edge_table([(1, 2), (1, 2), (2, 3), (2, 3)]), mode="overwrite")
    run_all(spec, root)
    path = state_path(root, spec.name, spec.stratum_of("path"))
    assert load_state(path).copies["edge"] is None
    DeltaTable(uri).delete("src = 2")
    run_all(spec, root)
    assert tables_right(spec, root, [(1, 2)])
    write_deltalake(uri, edge_table([(1, 2)]), mode="overwrite")  # one copy of two gone
    run_all(spec, root)
    assert tables_right(spec, root, [(1, 2)])
