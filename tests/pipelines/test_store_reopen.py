"""A store closed and reopened, and compacted at any point, answers as an engine that never
closed: random programs (recursive and not, negation, aggregates, complements) on every
strategy, under random batches of changes; between commits the engine is saved to a real
store folder (``deltalog.pipelines.state_store``: files, manifest, array pages through
``/proc/self/pagemap``) and opened again from it, or saved with every threshold at zero
so that each sorted run, paged dict, interval index, array and input patch is compacted.

The thresholds that decide what is kept in segments are tiny here (pages of two rows,
paged from two rows, arrays from 16 bytes), so that small relations take the paths that
large ones take in production."""

import shutil
import tempfile
from pathlib import Path

from hypothesis import event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from deltalog.engine import segments, state_codec, storage
from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.dbsp import columnar
from deltalog.engine.evaluate import evaluate
from deltalog.engine.ivm import interval_index
from deltalog.engine.ivm import stratum as ivm_stratum
from deltalog.engine.runtime import IncrementalEngine
from deltalog.pipelines import state_store
from deltalog.pipelines.state_store import Reader, StratumState, load_state, save_state
from tests.engine.programs import as_deltas, edb_changes, edb_data, programs

# (module, name, tiny value): what decides whether a part of the state is a segment.
TINY = [
    (segments, "PAGE_ROWS", 2),
    (segments, "PAGED_MIN", 2),
    (storage, "PAGED_MIN", 2),
    (ivm_stratum, "PAGED_MIN", 2),
    (interval_index, "PAGED_MIN", 2),
    (interval_index, "PAGE", 2),
    (state_codec, "ARRAY_MIN", 16),
    (columnar, "CODES_MIN", 2),
]
# What decides when changes are merged into a new base: zero compacts at every save.
COMPACTION = [
    (segments, "COMPACT_SHARE", 0.0),
    (segments, "COMPACT_CHAIN", 1),
    (interval_index, "COMPACT_SHARE", 0.0),
    (interval_index, "COMPACT_CHAIN", 1),
    (state_store, "ARRAY_SHARE", 0.0),
    (state_store, "ARRAY_CHAIN", 1),
    (columnar, "PATCH_MAX", 0),
]


def _set(pairs: list[tuple[object, str, object]]) -> list[tuple[object, str, object]]:
    """Set each (module, name) to its value; returns what to set back."""
    old = [(m, n, getattr(m, n)) for m, n, _ in pairs]
    for m, n, v in pairs:
        setattr(m, n, v)
    return old


class ReopenedAgainstNeverClosed(RuleBasedStateMachine):
    @initialize(
        recursive=st.booleans(),
        data=st.data(),
        edb=edb_data(),
        strategy=st.sampled_from(["auto", "sensitivity", "dbsp"]),
        columnar_kernel=st.booleans(),
    )
    def load(self, recursive, data, edb, strategy, columnar_kernel):
        text = data.draw(programs(recursion=recursive, complements=not recursive))
        if recursive and strategy == "sensitivity":
            strategy = "auto"  # sensitivity indices maintain non-recursive strata only
        note(f"{strategy} columnar={columnar_kernel}\n{text}")
        self.restore = _set(TINY)
        self.folder = Path(tempfile.mkdtemp(prefix="deltalog-reopen-"))
        self.prog = load_program(text)
        self.edb = edb
        self.live = IncrementalEngine(self.prog, edb, strategy, columnar=columnar_kernel)
        self.twin = IncrementalEngine(self.prog, edb, strategy, columnar=columnar_kernel)
        self.reader: Reader | None = None
        self.seq = 0
        self.saves = 0

    def _reopen(self) -> None:
        self.seq += 1
        state = StratumState(digest="test", seq=self.seq, input_versions={}, edb_versions={},
                             written={}, table_versions={})
        save_state(self.folder, state, self.live.dumps, self.reader)
        self.saves += 1
        loaded = load_state(self.folder)
        assert loaded is not None and loaded.seq == self.seq
        event(f"segments besides the root: {min(len(loaded.segments) - 1, 3)}")
        kept = self.reader is not None and bool(set(self.reader.segments) & set(loaded.segments))
        event(f"segments kept from the last save: {kept}")
        self.reader = loaded.open()
        self.live = IncrementalEngine.loads(self.reader.read(loaded.root), self.reader)

    @rule(batch=edb_changes())
    def commit(self, batch):
        deltas = as_deltas(batch)
        note(f"apply {deltas}")
        got = self.live.apply(deltas)
        assert got == self.twin.apply(deltas)

    @rule()
    def reopen(self):
        note("reopen")
        self._reopen()

    @rule()
    def compact_and_reopen(self):
        note("compact and reopen")
        old = _set(COMPACTION)
        try:
            self._reopen()
        finally:
            _set(old)

    @invariant()
    def same_answers(self):
        if not hasattr(self, "live"):
            return
        for p in self.prog.idb:
            assert self.live.relation(p) == self.twin.relation(p), p

    def teardown(self):
        if hasattr(self, "restore"):
            _set(self.restore)
        if hasattr(self, "live"):
            # and both equal a recompute from the EDB the engines hold now
            edb = {name: self.twin.relation(name) for name in self.prog.edb}
            expected = evaluate(self.prog, edb)
            for p in self.prog.idb:
                assert self.live.relation(p) == expected[p], p
            shutil.rmtree(self.folder, ignore_errors=True)


TestReopenedAgainstNeverClosed = ReopenedAgainstNeverClosed.TestCase
TestReopenedAgainstNeverClosed.settings = settings(
    max_examples=60, stateful_step_count=10, deadline=None
)
