"""A saved state is data: a damaged store (bytes flipped, cut or swapped in the manifest or
any segment) is told by its checksums and rebuilt from the tables, a crafted one (valid
checksums, an engine root that names code to run) is refused without running anything;
either way the run says so in its notes and the tables equal a recompute.

Segments are made small here (``small_segments``: sorted runs of 2-row pages, arrays of
16 bytes and up), so the tiny pipeline's state has sorted runs, array segments and deltas
to damage, as a large state would."""

import os
import pickle

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deltalog.engine.dbsp.aggregates
import deltalog.engine.ivm.stratum
import deltalog.engine.segments
import deltalog.engine.state_codec
import deltalog.engine.storage
import deltalog.pipelines.state_store
from deltalog.engine import state_codec
from deltalog.engine.runtime import IncrementalEngine
from deltalog.pipelines.state_store import CURRENT, load_state, save_state, state_path
from deltalog.pipelines.warehouse import write_edb
from tests.dagster_project.tiny import (
    EDGES_V1,
    edb_tables,
    make_pipeline,
    run_all,
    tables_right,
)

EDGES_V2 = [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7)]
EDGES_V3 = [(1, 2), (2, 3), (3, 4), (4, 5), (6, 7), (7, 1)]


@pytest.fixture
def small_segments(monkeypatch):
    monkeypatch.setattr(deltalog.engine.segments, "PAGE_ROWS", 2)
    monkeypatch.setattr(deltalog.engine.segments, "PAGED_MIN", 2)
    monkeypatch.setattr(deltalog.engine.storage, "PAGED_MIN", 2)
    monkeypatch.setattr(deltalog.engine.state_codec, "ARRAY_MIN", 16)


class _RunsCode:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _names(module: str, name: str) -> bytes:
    """An engine root of the current format whose object names ``module.name`` instead of
    the engine class."""
    obj = msgpack.ExtType(state_codec._OBJ, msgpack.packb([module, name, msgpack.packb(None)]))
    fmt = IncrementalEngine.STATE_FORMAT
    tree = msgpack.packb(msgpack.ExtType(state_codec._TUPLE, msgpack.packb([fmt, obj])))
    return msgpack.packb([tree], use_bin_type=True)


_damage = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**9), st.integers(0, 7)),
    st.tuples(st.just("truncate"), st.integers(0, 10**9), st.just(0)),
    st.tuples(st.just("swap"), st.integers(0, 10**9), st.integers(1, 64)),
)


def _apply(blob: bytearray, damage) -> bytearray:
    kind, at, arg = damage
    at %= len(blob)
    if kind == "flip":
        blob[at] ^= 1 << arg
    elif kind == "truncate":
        del blob[at:]
    else:  # swap two byte ranges of length arg
        other = (at * 7 + 13) % len(blob)
        a, b = sorted((at, other))
        n = min(arg, b - a, len(blob) - b)
        blob[a : a + n], blob[b : b + n] = blob[b : b + n], blob[a : a + n]
    return blob


def _store_files(path):
    return sorted(f for f in path.iterdir() if f.is_file())


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(which=st.integers(0, 10**6), damages=st.lists(_damage, min_size=1, max_size=3),
       change=st.booleans())
def test_damaged_store_is_rebuilt_and_tables_right(tmp_path_factory, small_segments, which,
                                                    damages, change):
    """Whatever bytes of a file of the store are flipped, cut or swapped, the next run
    rebuilds and says why (or, for bytes swapped with equal ones, maintains): the tables
    equal a recompute."""
    tmp_path = tmp_path_factory.mktemp("damaged")
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    write_edb(root, spec, edb_tables(EDGES_V3))
    run_all(spec, root)  # a second save: deltas and kept segments beside new ones
    path = state_path(root, spec.name, spec.stratum_of("path"))
    files = _store_files(path)
    assert len(files) > 3  # the manifest, the root, sorted runs, arrays
    target = files[which % len(files)]
    original = target.read_bytes()
    blob = bytearray(original)
    for damage in damages:
        if blob:
            blob = _apply(blob, damage)
    target.write_bytes(bytes(blob))
    edges = EDGES_V2 if change else EDGES_V3
    if change:
        write_edb(root, spec, edb_tables(edges))
    result = run_all(spec, root)["path"]
    if bytes(blob) != original:  # any damage is told: rebuilt, and the notes say why
        assert result.mode == "rebuilt", (target.name, result.notes)
        why = result.rebuilt_because
        assert "unreadable" in why or "cannot be read" in why, why
    else:  # a swap of equal bytes: the state is intact
        assert result.mode == ("incremental" if change else "unchanged")
    assert tables_right(spec, root, edges)
    assert run_all(spec, root)["path"].mode == "unchanged"  # the rebuilt state is good


def test_a_flipped_manifest_byte_is_told_by_the_checksum(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    path = state_path(root, spec.name, spec.stratum_of("path"))
    blob = bytearray((path / CURRENT).read_bytes())
    blob[len(blob) // 2] ^= 0x10
    (path / CURRENT).write_bytes(bytes(blob))
    assert load_state(path) is None
    write_edb(root, spec, edb_tables(EDGES_V2))
    results = run_all(spec, root)
    assert results["path"].mode == "rebuilt"
    assert "checksum" in results["path"].rebuilt_because
    assert tables_right(spec, root, EDGES_V2)
    assert run_all(spec, root)["path"].mode == "unchanged"  # the rebuilt state is good


def test_a_page_read_on_demand_that_fails_is_rebuilt_before_any_commit(
    tmp_path, small_segments, monkeypatch
):
    """Sorted runs past ``CHECKED_MAX`` are checked a page at a time, when a page is
    read: a damaged page met in the middle of a run rebuilds from the tables. (A
    sensitivity stratum whose support counts are in a mapping keeps them as sorted
    runs: the aggregate's stratum is made one here, as a state saved before aggregates
    and support counts were kept on arrays has it; arrays are checked whole.)"""
    monkeypatch.setattr(deltalog.pipelines.state_store, "CHECKED_MAX", 0)
    monkeypatch.setattr(deltalog.engine.dbsp.aggregates, "aggregates_reason",
                        lambda prog, stratum: "(this test: sorted runs to damage)")
    monkeypatch.setattr(deltalog.engine.ivm.stratum, "_array_reason",
                        lambda prog, stratum, pred: "(this test: sorted runs to damage)")
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    path = state_path(root, spec.name, spec.stratum_of("out_degree"))
    state = load_state(path)
    runs = [n for n, (_, _, paged, _) in state.segments.items() if paged]
    assert runs
    for name in runs:  # a byte of every run's first page
        blob = bytearray((path / name).read_bytes())
        blob[1] ^= 0x01
        (path / name).write_bytes(bytes(blob))
    write_edb(root, spec, edb_tables(EDGES_V2))
    result = run_all(spec, root)["out_degree"]
    assert result.mode == "rebuilt"
    assert "checksum" in result.rebuilt_because
    assert tables_right(spec, root, EDGES_V2)


def test_crafted_state_runs_no_code(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    index = spec.stratum_of("path")
    path = state_path(root, spec.name, index)
    marker = tmp_path / "ran"
    for hostile, why in (
        (pickle.dumps((1, _RunsCode(str(marker)))), "cannot be read"),  # a pickle is no state
        (_names("os", "system"), "UnsafeState"),  # a state naming os.system
    ):
        state = load_state(path)
        assert state is not None
        save_state(path, state, lambda _writer, blob=hostile: blob)  # valid checksums
        results = run_all(spec, root)
        assert not marker.exists()
        assert results["path"].mode == "rebuilt"
        assert "cannot be read" in results["path"].rebuilt_because
        assert why in results["path"].rebuilt_because
    assert tables_right(spec, root, EDGES_V1)


def test_a_state_of_the_earlier_whole_file_format_is_rebuilt_and_removed(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    path = state_path(root, spec.name, spec.stratum_of("path"))
    for f in _store_files(path):
        f.unlink()
    path.rmdir()
    old = path.with_name(path.name + ".state")
    old.write_bytes(b"deltalog-state/3\n" + bytes(64))
    write_edb(root, spec, edb_tables(EDGES_V2))
    result = run_all(spec, root)["path"]
    assert result.mode == "rebuilt" and "earlier deltalog" in result.rebuilt_because
    assert not old.exists()
    assert tables_right(spec, root, EDGES_V2)


def _checked_whole(path) -> dict[str, bool]:
    """For each segment of the saved state: is it checked whole when opened now?"""
    state = load_state(path)
    reader = state.open()
    return {name: reader._map(name)[1] for name in state.segments}


def test_a_large_segment_is_checked_whole_once_until_its_file_changes(
    tmp_path, small_segments, monkeypatch
):
    """Arrays and sorted runs checked whole by one run carry a stamp (inode, change time)
    in the manifest; later runs do not read them whole again while the file is unchanged;
    every ``RECHECK_RUNS`` runs they do, and a write to the file, even
    of the same size, makes the next open check it and a damage rebuild."""
    monkeypatch.setattr(deltalog.pipelines.state_store, "STAMP_AGE_NS", 0)
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    write_edb(root, spec, edb_tables(EDGES_V3))
    run_all(spec, root)  # checks the first run's segments, stamps them
    path = state_path(root, spec.name, spec.stratum_of("path"))
    state = load_state(path)
    stamped = [n for n, meta in state.segments.items() if meta[3] is not None]
    arrays = [n for n in stamped if not state.segments[n][2]
              and (path / n).stat().st_size >= deltalog.engine.state_codec.ARRAY_MIN
              and n != state.root]
    assert stamped and arrays
    monkeypatch.setattr(deltalog.pipelines.state_store, "RECHECK_RUNS", 10**9)
    checked = _checked_whole(path)
    assert not any(checked[n] for n in stamped)
    write_edb(root, spec, edb_tables(EDGES_V2))
    third = run_all(spec, root)["path"]
    assert third.mode == "incremental" and third.stats["state_bytes_read"] > 0
    monkeypatch.setattr(deltalog.pipelines.state_store, "RECHECK_RUNS", 1)  # every run is due
    assert all(_checked_whole(path).values())
    monkeypatch.setattr(deltalog.pipelines.state_store, "RECHECK_RUNS", 10**9)
    state = load_state(path)
    target = next(n for n in arrays if n in state.segments)
    blob = bytearray((path / target).read_bytes())
    blob[-1] ^= 0x01
    (path / target).write_bytes(bytes(blob))
    assert _checked_whole(path)[target]
    write_edb(root, spec, edb_tables(EDGES_V3))
    result = run_all(spec, root)["path"]
    assert result.mode == "rebuilt" and "checksum" in result.rebuilt_because
    assert tables_right(spec, root, EDGES_V3)


def test_an_array_of_no_bytes_is_saved_and_opened(tmp_path, monkeypatch):
    """An array with a dimension of 0 (the context of a sensitivity index's first level
    has no columns) is a segment of no bytes: it opens as itself, not as a checksum
    failure."""
    import numpy as np

    monkeypatch.setattr(deltalog.engine.state_codec, "ARRAY_MIN", 0)  # every array a segment
    from deltalog.pipelines.state_store import StratumState

    arrays = [np.zeros((5, 0), np.int64), np.zeros(0, np.int64), np.arange(4, dtype=np.int64)]
    state = StratumState(digest="test", seq=1, input_versions={}, edb_versions={},
                         written={}, table_versions={})
    save_state(tmp_path, state, lambda sink: state_codec.dumps(arrays, sink))
    loaded = load_state(tmp_path)
    assert loaded is not None
    reader = loaded.open()
    back = state_codec.loads(reader.read(loaded.root), reader)
    assert [a.shape for a in back] == [(5, 0), (0,), (4,)]
    assert back[2].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("what", ["manifest", "segment", "folder", "lock"])
def test_a_folder_or_file_in_the_wrong_place_is_rebuilt_or_named(tmp_path, small_segments,
                                                                  what):
    """The manifest or a segment made a folder, the state folder made a file: the next run
    rebuilds from the tables and says so (the damage removed by the save); the lock made a
    folder: DL314 naming it, nothing committed. Tables equal a recompute after."""
    import shutil

    from deltalog.engine.errors import DataError

    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    path = state_path(root, spec.name, spec.stratum_of("path"))
    write_edb(root, spec, edb_tables(EDGES_V3))
    if what == "manifest":
        (path / CURRENT).unlink()
        (path / CURRENT).mkdir()
    elif what == "segment":
        seg = next(f for f in _store_files(path) if f.name != CURRENT)
        seg.unlink()
        seg.mkdir()
        (seg / "x").write_text("x")
    elif what == "folder":
        shutil.rmtree(path)
        path.write_text("not a folder")
    else:
        lock = path.with_name(path.name + ".lock")
        lock.unlink(missing_ok=True)
        lock.mkdir()
        with pytest.raises(DataError) as err:
            run_all(spec, root)
        assert err.value.code == "DL314" and str(lock) in err.value.message
        lock.rmdir()
    result = run_all(spec, root)["path"]
    if what != "lock":
        assert result.mode == "rebuilt", result.notes
        assert "unreadable" in result.rebuilt_because, result.rebuilt_because
    assert tables_right(spec, root, EDGES_V3)
    assert run_all(spec, root)["path"].mode == "unchanged"  # the rebuilt state is good


def test_a_state_that_cannot_be_written_is_dl314_and_the_next_run_finishes(tmp_path,
                                                                           monkeypatch):
    """A full disk while a stratum's state is saved (after its tables' commits): DL314
    naming the state's folder, the previous state intact; the next run finishes the run
    from it."""
    import errno

    from deltalog.engine.errors import DataError

    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    path = state_path(root, spec.name, 0)
    write_edb(root, spec, edb_tables(EDGES_V3))

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(deltalog.pipelines.state_store.os, "fsync", full)
        with pytest.raises(DataError) as err:
            run_all(spec, root)
    assert err.value.code == "DL314" and str(path.parent) in err.value.message
    assert "No space left" in err.value.message
    results = run_all(spec, root)
    assert {r.mode for r in results.values()} == {"incremental"}
    notes = [n for r in results.values() for n in r.notes]
    assert any("finished interrupted run" in n for n in notes), notes
    assert tables_right(spec, root, EDGES_V3)
