"""Faults at the Delta layer, in random sequences between runs: EDB changes, vacuums with no
retention, removed change-data files, a log pruned behind a checkpoint, a data file of the
current version removed (then the table written anew), and a writer committing to an input
while a run is under way. After each run: either a DL error with a registered code (the
damaged table named) or IDB tables equal to the naive evaluator on the current EDB, never
another exception; a run after the damage is repaired is right again."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from deltalog.engine.errors import CODES, DeltalogError
from deltalog.pipelines import delta_io, run
from tests.dagster_project.tiny import edge_table, make_pipeline, run_all, tables_right

pytestmark = pytest.mark.filterwarnings("ignore")

_edges = st.sets(st.tuples(st.integers(1, 5), st.integers(1, 5)), max_size=8).map(sorted)
_ops = st.one_of(
    st.tuples(st.just("overwrite"), _edges),
    st.tuples(st.just("append"), _edges),
    st.tuples(st.just("delete"), st.integers(1, 5)),
    st.tuples(st.sampled_from(["vacuum", "drop_cdf", "prune_log", "remove_file"]), st.none()),
    st.tuples(st.just("concurrent"), _edges),
)


def _current(uri: str) -> list[tuple[int, int]] | None:
    """The edges of the table's latest version, or None when it cannot be read."""
    try:
        rows = delta_io.read_arrow(uri).to_pylist()
    except DeltalogError:
        return None
    return sorted({(r["src"], r["dst"]) for r in rows})


def _apply(op: str, arg, uri: str) -> None:
    table = DeltaTable(uri)
    if op == "overwrite":
        write_deltalake(uri, edge_table(arg), mode="overwrite")
    elif op == "append":
        write_deltalake(uri, edge_table(arg), mode="append")
    elif op == "delete":
        table.delete(f"src = {arg}")
    elif op == "vacuum":
        table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    elif op == "drop_cdf":
        shutil.rmtree(f"{uri}/_change_data", ignore_errors=True)
    elif op == "prune_log":
        table.create_checkpoint()
        version = table.version()
        for f in Path(uri, "_delta_log").glob("*.json"):
            if int(f.name.split(".")[0]) < version:
                f.unlink()
    elif op == "remove_file":
        files = [f.removeprefix("file://") for f in table.file_uris()]
        files = [f for f in files if os.path.exists(f)]
        if files:
            os.remove(files[0])


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(_ops, min_size=1, max_size=6))
def test_delta_faults_end_in_a_dl_error_or_right_tables(ops, monkeypatch):
    with tempfile.TemporaryDirectory() as tmp:
        spec, root = make_pipeline(Path(tmp))
        run_all(spec, root)
        uri = spec.table_uri(root, "edge")
        for op, arg in ops:
            note(f"{op} {arg}")
            concurrent = None
            if op == "concurrent":
                concurrent = arg  # written by another writer while the next run reads
            else:
                try:
                    _apply(op, arg, uri)
                except DeltaError as err:  # the writer itself fails on a damaged table
                    note(f"the writer's {op} failed: {err}")
                    continue
            _check_run(spec, root, uri, concurrent, monkeypatch)
        # Repair: write the table anew (a new version with every file present); then right.
        edges = _current(uri)
        if edges is None:
            write_deltalake(uri, edge_table([(1, 2)]), mode="overwrite")
            edges = [(1, 2)]
        run_all(spec, root)
        assert tables_right(spec, root, edges)


def _check_run(spec, root, uri, concurrent, monkeypatch) -> None:
    real_fault = run.fault
    pending = [concurrent] if concurrent is not None else []

    def writer_meanwhile(point: str, index: int) -> None:
        real_fault(point, index)
        if point == "after_read" and pending:
            write_deltalake(uri, edge_table(pending.pop()), mode="append")

    monkeypatch.setattr(run, "fault", writer_meanwhile)
    try:
        run_all(spec, root)
    except DeltalogError as err:
        assert err.code in CODES, err
        assert err.code == "DL311" and err.where == uri, err  # only the damaged input fails
        assert _current(uri) is None
        return
    finally:
        monkeypatch.setattr(run, "fault", real_fault)
    edges = _current(uri)
    if edges is None:  # a removed file the incremental run did not need to read
        return
    if concurrent is not None:
        run_all(spec, root)  # the concurrent commit is the next run's change
    assert tables_right(spec, root, edges)


def test_a_row_held_twice_and_overwritten_stays(tmp_path):
    """Shrunk from the sequences above: a Delta table is a bag. With the row twice (an
    append of a present row), an overwrite that writes it once is a net deletion in the
    change feed; the row is still there, and so are its consequences."""
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    uri = spec.table_uri(root, "edge")
    write_deltalake(uri, edge_table([(1, 1)]), mode="overwrite")
    run_all(spec, root)
    write_deltalake(uri, edge_table([(1, 1)]), mode="append")
    run_all(spec, root)
    write_deltalake(uri, edge_table([(1, 1)]), mode="overwrite")
    run_all(spec, root)
    assert tables_right(spec, root, [(1, 1)])
    DeltaTable(uri).delete("src = 1")
    run_all(spec, root)
    assert tables_right(spec, root, [])


@pytest.mark.parametrize("damage", ["torn", "pruned"])
def test_an_input_whose_log_cannot_be_read_is_dl311_naming_it(tmp_path, damage):
    """A commit file torn by a crashed writer, or the commits before the latest removed
    without a checkpoint: the run stops with DL311 naming the input (not delta-rs's own
    error); once the log is repaired the next run is right."""
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    uri = spec.table_uri(root, "edge")
    write_deltalake(uri, edge_table([(1, 2), (2, 3), (3, 1)]), mode="overwrite")
    log = sorted(Path(uri, "_delta_log").glob("*.json"))
    kept = {f: f.read_bytes() for f in log}
    if damage == "torn":
        log[-1].write_text('{"commitInfo": {')
    else:
        for f in log[:-1]:
            f.unlink()
    with pytest.raises(DeltalogError) as err:
        run_all(spec, root)
    assert err.value.code == "DL311" and err.value.where == uri, err.value
    assert "log" in err.value.message
    for f, blob in kept.items():  # repaired: the log restored
        f.write_bytes(blob)
    run_all(spec, root)
    assert tables_right(spec, root, [(1, 2), (2, 3), (3, 1)])
