"""A saved state file is data: a corrupted one (bytes flipped anywhere, truncated) is told
by its checksum and rebuilt from the tables, a crafted one (valid checksum, an engine part
that names code to run) is refused without running anything; either way the run says so in
its notes and the tables equal a recompute."""

import os
import pickle

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import state_codec
from engine.runtime import IncrementalEngine
from pipelines.state_store import load_state, save_state, state_path
from pipelines.warehouse import write_edb
from tests.dagster_project.tiny import (
    EDGES_V1,
    edb_tables,
    make_pipeline,
    run_all,
    tables_right,
)

EDGES_V2 = [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7)]


class _RunsCode:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _names(engine: bytes, module: str, name: str) -> bytes:
    """An engine part like ``engine`` (a state of the current format) whose object names
    ``module.name`` instead of the engine class."""
    obj = msgpack.ExtType(state_codec._OBJ, msgpack.packb([module, name, msgpack.packb(None)]))
    fmt = IncrementalEngine.STATE_FORMAT
    assert state_codec.loads(engine)[0] == fmt
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


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(damages=st.lists(_damage, min_size=1, max_size=3), change=st.booleans())
def test_damaged_state_is_rebuilt_ortables_right(tmp_path_factory, damages, change):
    """Whatever bytes of a saved state are flipped, cut or swapped, the next run either
    rebuilds (and says why) or maintains correctly: the tables equal a recompute."""
    tmp_path = tmp_path_factory.mktemp("damaged")
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    path = state_path(root, spec.name, spec.stratum_of("path"))
    original = path.read_bytes()
    blob = bytearray(original)
    for damage in damages:
        if blob:
            blob = _apply(blob, damage)
    path.write_bytes(bytes(blob))
    edges = EDGES_V2 if change else EDGES_V1
    if change:
        write_edb(root, spec, edb_tables(edges))
    result = run_all(spec, root)["path"]
    if bytes(blob) != original:  # any damage is told: rebuilt, and the notes say why
        assert result.mode == "rebuilt" and "unreadable" in result.rebuilt_because
    else:  # a swap of equal bytes: the state is intact
        assert result.mode == ("incremental" if change else "unchanged")
    assert tables_right(spec, root, edges)


def test_a_flipped_byte_is_told_by_the_checksum(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    path = state_path(root, spec.name, spec.stratum_of("path"))
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0x10
    path.write_bytes(bytes(blob))
    assert load_state(path) is None
    write_edb(root, spec, edb_tables(EDGES_V2))
    results = run_all(spec, root)
    assert results["path"].mode == "rebuilt"
    assert "checksum" in results["path"].rebuilt_because
    assert tables_right(spec, root, EDGES_V2)
    assert run_all(spec, root)["path"].mode == "unchanged"  # the rebuilt state is good


def test_crafted_state_runs_no_code(tmp_path):
    spec, root = make_pipeline(tmp_path)
    run_all(spec, root)
    index = spec.stratum_of("path")
    path = state_path(root, spec.name, index)
    state = load_state(path)
    assert state is not None
    marker = tmp_path / "ran"
    for hostile, why in (
        (pickle.dumps((1, _RunsCode(str(marker)))), "cannot be read"),  # a pickle is no state
        (_names(state.engine, "os", "system"), "UnsafeState"),  # a state naming os.system
    ):
        state.engine = hostile
        save_state(path, state)  # a valid checksum: only the engine part is hostile
        results = run_all(spec, root)
        assert not marker.exists()
        assert results["path"].mode == "rebuilt"
        assert "cannot be read" in results["path"].rebuilt_because
        assert why in results["path"].rebuilt_because
        state = load_state(path)
        assert state is not None
    assert tables_right(spec, root, EDGES_V1)
