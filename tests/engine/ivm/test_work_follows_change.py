"""The work of maintaining a single-tuple change does not grow with the data size
(Veldhuizen 2014, §1.1: it follows the trace edit distance), while recompute's does. Counters,
not clocks: iterator operations and oracle regions."""

import pytest

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine

PROGRAM = """
.decl a(x: int, y: int)
.decl b(y: int, z: int)
.decl c(z: int)
r(x, z) :- a(x, y), b(y, z), c(z).
s(x) :- a(x, y), !c(y).
"""


def _data(n: int) -> dict[str, set[tuple[int, ...]]]:
    """Degree 4 everywhere, so a single change meets a constant number of results."""
    a = {(i, (i * 7 + k * 3) % n) for i in range(n // 4) for k in range(4)}
    b = {(j, (j * 13 + k * 5) % n) for j in range(n // 4) for k in range(4)}
    c = {(z,) for z in range(0, n, 3)}
    return {"a": a, "b": b, "c": c}


CHANGES = [
    {"a": {(1, 2): 1}},
    {"b": {(2, 11): 1}},
    {"c": {(11,): 1}},
    {"c": {(11,): -1}},
    {"a": {(1, 2): -1}},
    {"b": {(2, 11): -1}},
]


def _work(engine, change) -> int:
    engine.apply(change)
    w = engine.last_stats.work
    return w.get("iterator_ops", 0) + w.get("oracle_regions", 0)


@pytest.fixture(scope="module")
def measured():
    prog = load_program(PROGRAM)
    out = {}
    for n in (1_000, 10_000, 100_000):
        data = _data(n)
        inc = IncrementalEngine(prog, data, "sensitivity")
        out[n] = [_work(inc, ch) for ch in CHANGES]
    small = _data(1_000)
    large = _data(100_000)
    rec_small = RecomputeEngine(prog, small)
    rec_large = RecomputeEngine(prog, large)
    out["recompute"] = (_work(rec_small, CHANGES[0]), _work(rec_large, CHANGES[0]))
    return out


def test_maintenance_work_stays_flat_from_1e3_to_1e5(measured):
    for k, change in enumerate(CHANGES):
        works = [measured[n][k] for n in (1_000, 10_000, 100_000)]
        assert max(works) <= 3 * min(works) + 20, (change, works)


def test_recompute_work_grows_with_the_data(measured):
    small, large = measured["recompute"]
    assert large >= 50 * small


def test_maintenance_is_far_below_recompute(measured):
    _, large = measured["recompute"]
    assert max(measured[100_000]) * 1000 < large


def test_repeated_commits_do_not_grow_an_index_recorded_on_tuples():
    """A commit re-records every operation inside its oracle, a negation's probes among
    them, most of which the index holds already: in an engine that is never saved (a
    save folds them), an index recorded on the tuple join keeps each interval once past
    a share of its size, so the same change done and undone again and again does not grow
    it by every commit."""
    prog = load_program("""
.decl e(a: int, b: int)
.decl bad(a: int)
q(x) :- e(x, y), !bad(y), !bad(x).
""")
    e = {((i * 7) % 300, (i * 13 + 5) % 300) for i in range(2_000)}
    bad = {(i,) for i in range(0, 300, 7)}
    engine = IncrementalEngine(prog, {"e": e, "bad": bad}, "sensitivity", columnar=False)
    (maintainer,) = [h.maintainer for _, s in engine.strata for h in s.heads]
    assert maintainer.recorded_by == "tuples"

    def size() -> int:
        return sum(len(index) for index in maintainer.indices.values())

    change = {"e": {next(iter(sorted(e))): -1, (1, 2): 1}, "bad": {(3,): 1}}
    undo = {p: {r: -w for r, w in d.items()} for p, d in change.items()}
    before = size()
    added = 0
    for _ in range(1_000):
        engine.apply(change)
        added += engine.last_stats.work["intervals_added"]
        engine.apply(undo)
        added += engine.last_stats.work["intervals_added"]
    assert added > 10_000  # (what the index would hold more, kept as recorded)
    assert size() < before + 4_096 + 200
    assert engine.relation("q") == RecomputeEngine(prog, {"e": e, "bad": bad}).relation("q")
