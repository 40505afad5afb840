"""A Hypothesis state machine base for differential tests: engines fed the same random
commits as a recompute, each commit's outcome (the IDB deltas, or the code of the data
error it raises) the same from every one, the relations equal after every step, the
first engine saved to memory segments and opened again on the way. A data error ends
the run (the engines are broken after one)."""

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from hypothesis import event, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from deltalog.engine.errors import DataError
from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine
from deltalog.engine.segments import MemorySegments

# The row strategies of the inputs the commits change (a subclass's ``ROWS``).
Rows = Mapping[str, st.SearchStrategy[tuple[Any, ...]]]


def outcome(make: Callable[[], Any]) -> Any:
    """What ``make()`` gives, or the code of the data error it raises."""
    try:
        return make()
    except DataError as err:
        return err.code


def _commit_picks(rows: Rows) -> st.SearchStrategy[list[tuple[str, bool]]]:
    return st.lists(st.tuples(st.sampled_from(sorted(rows)), st.booleans()),
                    min_size=1, max_size=5)


class AgainstRecompute(RuleBasedStateMachine):
    """Subclasses set ``ROWS`` and, in their ``@initialize`` rule, call ``start``."""

    ROWS: Rows = MappingProxyType({})
    failed = False
    engines: list[Any]
    preds: list[str]

    def start(self, preds: list[str], rec: Callable[[], Any],
              *engines: Callable[[], Any]) -> bool:
        """Load the recompute and the ``engines`` (makers; the first is the one saved and
        opened again), compared on ``preds``; False when the load is a data error (the
        same from every one), which ends the run."""
        got = [outcome(make) for make in (rec, *engines)]
        if any(isinstance(g, str) for g in got):
            assert all(g == got[0] for g in got), got
            event("the load is a data error")
            self.failed = True
            return False
        self.rec, self.engines, self.preds = got[0], got[1:], preds
        self.store = MemorySegments()
        return True

    def start_both_ways(self, preds: list[str], prog: Any, data: Any, strategy: str) -> bool:
        """``start`` with a recompute and ``strategy`` with the compiled core on (the
        engine saved and opened again) and off (its Python-object maintainers)."""
        return self.start(preds, lambda: RecomputeEngine(prog, data),
                          lambda: IncrementalEngine(prog, data, strategy),
                          lambda: IncrementalEngine(prog, data, strategy, columnar=False))

    @precondition(lambda self: not self.failed and hasattr(self, "rec"))
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        picks = data.draw(_commit_picks(self.ROWS))
        deltas: dict[str, dict[tuple[Any, ...], int]] = {}
        for pred, insert in picks:
            held = sorted(self.rec.relation(pred), key=repr)
            # (a deletion takes a row that is there, most often)
            row = data.draw(self.ROWS[pred] if insert or not held else st.sampled_from(held))
            if insert != self.rec.contains(pred, row) and row not in deltas.get(pred, {}):
                deltas.setdefault(pred, {})[row] = 1 if insert else -1
        note(repr(deltas))
        want = outcome(lambda: self.rec.apply(deltas))
        for eng in self.engines:
            assert outcome(lambda eng=eng: eng.apply(deltas)) == want
        self.failed = isinstance(want, str)
        event("a commit is a data error" if self.failed else "a commit agreed")

    @precondition(lambda self: self.failed)
    @rule()
    def stopped(self) -> None:
        """(after an error: the engines are broken, nothing to do)"""

    @precondition(lambda self: not self.failed and hasattr(self, "rec"))
    @rule()
    def round_trip_through_segments(self) -> None:
        self.engines[0] = IncrementalEngine.loads(self.engines[0].dumps(self.store),
                                                  self.store)

    @invariant()
    def equal(self) -> None:
        if self.failed or not hasattr(self, "rec"):
            return
        for p in self.preds:
            want = self.rec.relation(p)
            assert all(eng.relation(p) == want for eng in self.engines), p
