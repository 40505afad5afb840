"""Seed 000's worked examples, exactly: the sensitivity sets of A(x), B(x), the
maintenance example and its change oracle, tree surgery on A(x,y,z), interval trees, the
max-scan of maxsales, and the float total of {2^500, -1}."""

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.ivm.aggregates import ExactSum, GroupAggregates
from deltalog.engine.ivm.rule import RuleMaintainer, WorkCounters
from deltalog.engine.ivm.scan_tree import IntervalTree, ScanTree
from deltalog.engine.ivm.surgery import tree_surgery
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.runtime import IncrementalEngine
from deltalog.engine.sentinels import BOTTOM, TOP
from deltalog.engine.storage import RelationStore, VersionedRelation

UNARY = """
.decl A(x: int)
.decl B(x: int)
J(x) :- A(x), B(x).
"""


def _intervals(m: RuleMaintainer, atom: int) -> list[tuple[object, object]]:
    index = m.indices[("atom", atom, 0)]
    return sorted(((lo, hi) for _, lo, hi, _ in index.intervals()),
                  key=lambda t: (t[0] is not BOTTOM, t[0] if t[0] is not BOTTOM else 0,
                                 t[1] is TOP, t[1] if t[1] is not TOP else 0))


def _unary_join() -> tuple[RelationStore, RuleMaintainer, dict]:
    prog = load_program(UNARY)
    store = RelationStore({"A": 1, "B": 1, "J": 1})
    store["A"].commit({(v,): 1 for v in (0, 2, 4, 5, 6)})
    store["B"].commit({(v,): 1 for v in (1, 2, 6, 7)})
    store.settle()
    # The paper's system would not index so simple a query (§4.2); the example does.
    m = RuleMaintainer(prog.program.rules[0], store, index_every_atom=True, paper_trace=True)
    units = m.initialize(store, JoinStats(), WorkCounters())
    return store, m, units


def test_sensitivity_sets_of_the_unary_join():
    _, m, units = _unary_join()
    assert sorted(units) == [(2,), (6,)]
    assert _intervals(m, 0) == [(BOTTOM, 0), (1, 2), (2, 4), (6, 6), (6, TOP)]
    assert _intervals(m, 1) == [(BOTTOM, 1), (2, 2), (4, 6)]


def test_maintenance_of_the_unary_join():
    store, m, _ = _unary_join()
    store["A"].commit({(5,): -1, (8,): 1})
    store["B"].commit({(2,): -1, (3,): 1})
    counters = WorkCounters()
    old, new = m.maintain(store, {"A", "B"}, JoinStats(), counters)
    # A: erase 5 -> nothing, insert 8 -> [6, +inf]; B: erase 2 -> [2, 2], insert 3 -> nothing.
    assert counters.intervals_matched == 2
    assert m.last_oracle is not None
    assert [(lo, hi) for lo, hi, _ in m.last_oracle.segments] == [(2, 2), (6, TOP)]
    assert sorted(set(old) - set(new)) == [(2,)]  # the result delta: erase 2
    assert sorted(set(new) - set(old)) == []
    # Matched intervals are gone; new ones were recorded while evaluating the new version.
    assert (6, TOP) not in _intervals(m, 0)
    assert (2, 2) not in _intervals(m, 1)


def test_the_engine_reports_the_same_delta():
    prog = load_program(UNARY)
    engine = IncrementalEngine(prog, {"A": [(v,) for v in (0, 2, 4, 5, 6)],
                                      "B": [(v,) for v in (1, 2, 6, 7)]}, "sensitivity")
    out = engine.apply({"A": {(5,): -1, (8,): 1}, "B": {(2,): -1, (3,): 1}})
    assert out == {"J": {(2,): -1}}


def test_tree_surgery_of_the_paper():
    rel = VersionedRelation("A", 3, [(0, 30, 80), (0, 30, 81), (1, 35, 60), (1, 35, 61),
                                     (3, 40, 90), (3, 50, 91), (3, 50, 92)])
    delta = rel.commit({(0, 30, 81): -1, (3, 40, 90): -1, (3, 50, 92): -1, (4, 60, 71): 1})
    ops = tree_surgery(delta.items(), rel.previous(), rel.current())
    assert [str(op) for op in ops] == [
        "ERASE 0–30–81",
        "ERASE 3–40–90",
        "ERASE 3–40",
        "ERASE 3–50–92",
        "INSERT 4",
        "INSERT 4–60",
        "INSERT 4–60–71",
    ]


def test_interval_tree_of_section_3_2():
    tree = IntervalTree()
    tree.add_many([((), 2, 10, "a"), ((), 3, 7, "b"), ((), 5, 15, "c"), ((), 6, 9, "d")])
    assert sorted(hi for _, hi, _ in tree.stab((), 10, remove=False)) == [10, 15]
    # Figure 2: the intervals that contain 80.
    figure = [(1, 9), (11, 100), (14, 30), (25, 40), (33, 45), (49, 82), (51, 60),
              (63, 70), (72, 87), (77, 96), (84, 99), (90, 95)]
    tree = IntervalTree()
    tree.add_many([((), lo, hi, None) for lo, hi in figure])
    found = sorted((lo, hi) for lo, hi, _ in tree.stab((), 80))
    assert found == [(11, 100), (49, 82), (72, 87), (77, 96)]
    assert len(tree) == len(figure) - 4  # matched intervals are removed (§4.1)
    assert tree.stab((), 80) == []


def test_max_scan_of_maxsales():
    sales = {(1, 1): 1500.0, (1, 2): 2300.0, (2, 1): 2900.0, (2, 2): 3500.0,
             (2, 3): 7024.0, (2, 4): 9000.0, (3, 1): 100.0, (3, 2): 12000.0}
    tree = ScanTree(max, [(k, v, None) for k, v in sales.items()])
    assert tree.scan((2,), (2, TOP)) == 9000.0
    agg = GroupAggregates("max", True)
    for (region, store), tot in sales.items():
        agg.update((region,), (region, store, tot), tot, 1)
    assert agg.result((2,)) == 9000.0
    agg.update((2,), (2, 4, 9000.0), 9000.0, -1)  # erase the maximum: the scan finds the next
    assert agg.result((2,)) == 7024.0


def test_float_total_of_2_pow_500_and_minus_one():
    acc = ExactSum()
    acc.add(2.0**500, 1)
    acc.add(-1.0, 1)
    assert acc.value() == 2.0**500  # the correctly rounded value of 2^500 - 1
    acc.add(2.0**500, -1)
    assert acc.value() == -1.0  # erasing 2^500 leaves exactly -1, no drift
