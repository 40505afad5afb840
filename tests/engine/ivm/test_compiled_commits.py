"""Commits on the compiled join (``deltalog.engine.ivm.kernels``, ``ivm.compiled.CommitJoin``):
a relation's index as sorted code arrays in two versions (``columnar.versions.CodedIndex``)
agrees with sets through commits, folds and settles; the flat change oracle
(``kernels.build_oracle``) is the tuple ``ChangeOracle`` flattened, and holds the points
the regions hold; an engine whose rules commit on the compiled join maintains exactly what
an engine committing on the tuple join maintains and what a recompute gives, folding
never or at every commit, saved and reopened (with and without the coded indexes in the
state); a value with no code sends a rule back to the tuple join, still right; and a
commit's work follows the change."""

import random
from itertools import pairwise, product
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from deltalog.engine import storage
from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.columnar import kernels as ckernels
from deltalog.engine.columnar import versions
from deltalog.engine.columnar.encoding import NotColumnar, float_codes, float_values
from deltalog.engine.columnar.versions import CodedIndex, code_rows, coded_index
from deltalog.engine.evaluate import evaluate
from deltalog.engine.ivm import interval_index
from deltalog.engine.ivm.compiled import CommitJoin, Regions
from deltalog.engine.ivm.kernels import absent_depths, build_oracle
from deltalog.engine.ivm.oracle import ChangeOracle, OracleNode
from deltalog.engine.ivm.stratum import SensitivityStratum
from deltalog.engine.ivm.surgery import surgery_at, tree_surgery
from deltalog.engine.runtime import IncrementalEngine
from deltalog.engine.segments import MemorySegments
from deltalog.engine.sentinels import BOTTOM, TOP
from tests.engine.programs import (
    draw_change,
    edb_data,
    head_or_aggregate,
    positive_body,
    programs,
)

BOT, KTOP = int(ckernels.BOT), int(ckernels.TOP)

# -- helpers ---------------------------------------------------------------------------

# Values of each column type: the loads draw from the first few, commits from all (so
# rows arrive between, below and above the loaded ones). Floats: negative ones, -0.0
# (the same row as 0.0), infinities.
VALUES: dict[str, list[Any]] = {
    "int": [-2, -1, 0, 1, 2, 3, 4, 5],
    "float": [-2.5, -1.0, -0.0, 0.5, 1.0, 2.75, float("inf"), float("-inf")],
}
LOADED = 5


def _codes(values: list[Any], typ: str) -> list[int]:
    if typ == "float":
        return [int(c) for c in float_codes(np.array(values, np.float64))]
    return [int(v) for v in values]


def _coded_set(rows: set[tuple[Any, ...]], types: tuple[str, ...]) -> list[tuple[int, ...]]:
    """The codes of ``rows`` (computed column by column here), sorted."""
    if not rows or not types:  # (no columns: the row (), or none)
        return [()] * len(rows)
    cols = list(zip(*rows, strict=True))
    coded = [_codes(list(c), t) for c, t in zip(cols, types, strict=True)]
    return sorted(zip(*coded, strict=True))


def _decoded(arr: np.ndarray, types: tuple[str, ...]) -> set[tuple[Any, ...]]:
    cols = [float_values(np.ascontiguousarray(arr[:, j])).tolist() if t == "float"
            else arr[:, j].tolist() for j, t in enumerate(types)]
    if not types:
        return {()} if len(arr) else set()
    return set(zip(*cols, strict=True)) if len(arr) else set()


def _as_tuples(arr: np.ndarray) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in r) for r in arr]


def _check_array(arr: np.ndarray, k: int) -> list[tuple[int, ...]]:
    assert arr.dtype == np.int64 and arr.ndim == 2 and arr.shape[1] == k
    rows = _as_tuples(arr)
    assert all(a < b for a, b in pairwise(rows)), "rows not sorted and distinct"
    return rows


def _check_version(index: CodedIndex, old: bool, want: set[tuple[Any, ...]]) -> None:
    """One version of ``index`` holds ``want``: its three arrays sorted and distinct,
    minus within base, plus outside it."""
    k = len(index.types)
    base, minus, plus = (_check_array(a, k) for a in index.version(old))
    assert set(minus) <= set(base), "minus holds a row base lacks"
    assert not set(plus) & set(base), "plus holds a row of base"
    got = _check_array(index.rows(old), k)
    assert got == _coded_set(want, index.types), f"old={old}"
    assert _decoded(index.rows(old), index.types) == want
    if not old:
        assert len(index) == len(want)


def _effective(current: set[tuple[Any, ...]], changes: list[tuple[tuple[Any, ...], int]]
               ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """A commit's effective change, as ``VersionedRelation.commit`` computes it (the last
    weight of a row wins; inserting a present row or erasing an absent one is nothing)."""
    last: dict[tuple[Any, ...], int] = {}
    for row, w in changes:
        last[row] = w
    ins = [r for r, w in last.items() if w > 0 and r not in current]
    era = [r for r, w in last.items() if w < 0 and r in current]
    return ins, era


# Fold modes: the overlay never folded (tiny relations), folded at every commit, or
# folded past two rows (now and then).
FOLDS = {"never": (1 << 30, 5), "every": (0, 62), "sometimes": (2, 5)}


def _fold(monkeypatch: pytest.MonkeyPatch, fold: str) -> None:
    """Engines in fold mode ``fold``; in mode "every" the intervals a commit records grow
    up into a part past two (``interval_index.YOUNG_MAX``), in mode "never" they stay
    young (commits here record fewer than its 2,048)."""
    monkeypatch.setattr(versions, "FOLD_MIN", FOLDS[fold][0])
    monkeypatch.setattr(versions, "FOLD_SHARE", FOLDS[fold][1])
    if fold == "every":
        monkeypatch.setattr(interval_index, "YOUNG_MAX", 2)


# -- 1. CodedIndex against sets --------------------------------------------------------

TYPES = [("int", "int"), ("float", "float"), ("int", "float")]
# Commits also bring the least and greatest ints with codes (the range's ends less one).
INDEX_VALUES = {"int": [*VALUES["int"], -(2**63) + 1, 2**63 - 2], "float": VALUES["float"]}


@st.composite
def coded_index_runs(draw: Any) -> tuple[tuple[str, ...], set[Any], list[Any]]:
    types = draw(st.sampled_from(TYPES))
    cols = [st.sampled_from(INDEX_VALUES[t]) for t in types]
    loaded = [st.sampled_from(VALUES[t][:LOADED]) for t in types]
    start = draw(st.sets(st.tuples(*loaded), max_size=16))
    commits = draw(st.lists(st.tuples(
        st.lists(st.tuples(st.tuples(*cols), st.sampled_from([1, -1])), max_size=10),
        st.booleans()), min_size=1, max_size=10))
    return types, start, commits


@pytest.mark.parametrize("fold", sorted(FOLDS))
@given(run=coded_index_runs())
@settings(max_examples=120, deadline=None)
def test_coded_index_versions_follow_the_sets(fold, run):
    """After every commit the current version is the set, the previous one the set before
    the commit; after a settle both are the set; in both versions minus ⊆ base and
    plus ∩ base = ∅, every array sorted and distinct."""
    types, start, commits = run
    fold_min, share = FOLDS[fold]
    with mock.patch.object(versions, "FOLD_MIN", fold_min), \
            mock.patch.object(versions, "FOLD_SHARE", share):
        base = code_rows(sorted(start), types)
        assert base is not None
        index = CodedIndex(types, base)
        first_base = index.base
        current = set(start)
        _check_version(index, False, current)
        _check_version(index, True, current)
        for changes, settle in commits:
            ins, era = _effective(current, changes)
            before = set(current)
            current = (current - set(era)) | set(ins)
            assert index.commit(ins, era) is True
            note(f"commit +{ins} -{era}")
            _check_version(index, False, current)
            _check_version(index, True, before)
            if fold == "every":  # the overlay folded at once: base is the current version
                assert not len(index.minus) and not len(index.plus)
            if settle:
                index.settle()
                _check_version(index, True, current)
                _check_version(index, False, current)
        if fold == "never":
            assert index.base is first_base
        # a state saved settled reads back as the same versions
        index.settle()
        again = CodedIndex.__new__(CodedIndex)
        again.__setstate__(index.__getstate__())
        _check_version(again, False, current)
        _check_version(again, True, current)


@given(start=st.sets(st.tuples(
    st.sampled_from(VALUES["int"]), st.sampled_from(VALUES["int"])), max_size=10),
    ins=st.sets(st.tuples(st.sampled_from(VALUES["int"]), st.sampled_from(VALUES["int"])),
                max_size=5))
@settings(max_examples=40, deadline=None)
def test_coded_index_made_after_a_commit_presents_the_version_before(start, ins):
    """``coded_index`` (a state saved before coded indexes: made at the first commit from
    the sorted index and the commit's delta) gives the commit's two versions."""
    types = ("int", "int")
    ins = [r for r in ins if r not in start]
    era = sorted(start)[:2]
    now = (set(start) - set(era)) | set(ins)
    index = coded_index(types, sorted(now), ins, era)
    assert index is not None
    _check_version(index, False, now)
    _check_version(index, True, set(start))
    index.settle()
    _check_version(index, True, now)


def _nan_coded(code: int) -> float:
    """The float whose code is ``code`` (a NaN's bits, for the join's sentinels)."""
    bits = -1 if code == BOT else code
    value = float(np.array([bits], np.int64).view(np.float64)[0])
    assert int(float_codes(np.array([value]))[0]) == code
    return value


@pytest.mark.parametrize("types,row", [
    (("int", "int"), (2**70, 0)),
    (("int", "int"), (0, -(2**65))),
    (("int", "int"), (-(2**63), 1)),
    (("int", "int"), (1, 2**63 - 1)),
    (("float", "float"), (_nan_coded(BOT), 1.0)),
    (("int", "float"), (1, _nan_coded(KTOP))),
])
def test_a_value_with_no_code_makes_commit_say_false(types, row):
    index = CodedIndex(types, code_rows([], types))
    assert index.commit([row], []) is False
    index = CodedIndex(types, code_rows([], types))
    assert index.commit([], [row]) is False
    assert code_rows([row], types) is None
    assert coded_index(types, [row], [], []) is None
    # the ends of the range less one have codes
    edge = CodedIndex(("int", "int"), code_rows([], ("int", "int")))
    assert edge.commit([(-(2**63) + 1, 2**63 - 2)], []) is True
    assert _as_tuples(edge.rows()) == [(-(2**63) + 1, 2**63 - 2)]


@pytest.mark.parametrize("fold", sorted(FOLDS))
@settings(max_examples=60, deadline=None)
@given(run=coded_index_runs())
def test_surgery_found_on_the_coded_versions_is_the_tuple_surgery(fold, run):
    """Where a changed row's branches start, searched on the coded index's versions
    (``absent_depths``, what compiled commits stab with), gives the tree surgery the
    sorted versions give, commit after commit, with and without folds."""
    types, start, commits = run
    with mock.patch.object(versions, "FOLD_MIN", FOLDS[fold][0]), \
            mock.patch.object(versions, "FOLD_SHARE", FOLDS[fold][1]):
        rel = storage.VersionedRelation("r", len(types), start)
        index = coded_index(types, start, [], [])
        assert index is not None
        for changes, _ in commits:
            rows = sorted(rel.commit(dict(changes)).items())
            assert index.commit([r for r, w in rows if w > 0], [r for r, w in rows if w < 0])
            codes = code_rows([r for r, _ in rows], types)
            assert codes is not None
            depths = [int(absent_depths(*index.version(w > 0), codes[i : i + 1])[0])
                      for i, (_, w) in enumerate(rows)]
            event(f"surgeries: {min(len(rows), 3)}")
            assert surgery_at(rows, depths) == tree_surgery(
                rows, rel.previous(), rel.current())
            rel.settle()
            index.settle()


# -- 2. build_oracle against ChangeOracle ----------------------------------------------

ORACLE_DOMAIN = st.integers(0, 3)


@st.composite
def oracle_regions(draw: Any) -> tuple[int, list[tuple[tuple[int, ...], Any, Any]]]:
    """(e, regions): each region fixes 0..e levels to values of a tiny domain and gives an
    interval on the next (a point, a range, ends at −inf or +inf, or a whole subtree)."""
    e = draw(st.integers(0, 3))
    regions = []
    for _ in range(draw(st.integers(0, 12))):
        plen = draw(st.integers(0, e))
        prefix = tuple(draw(ORACLE_DOMAIN) for _ in range(plen))
        kind = draw(st.sampled_from(["point", "point", "range", "range", "subtree"]))
        if kind == "subtree":
            lo, hi = BOTTOM, TOP
        elif kind == "point":
            lo = hi = draw(ORACLE_DOMAIN)
        else:
            a, b = sorted((draw(ORACLE_DOMAIN), draw(ORACLE_DOMAIN)))
            lo = BOTTOM if draw(st.integers(0, 3)) == 0 else a
            hi = TOP if draw(st.integers(0, 3)) == 0 else b
        regions.append((prefix, lo, hi))
    return e, regions


def _end(v: Any) -> int:
    return BOT if v is BOTTOM else KTOP if v is TOP else int(v)


def _flat_of_tree(root: OracleNode, code: Any = _end) -> tuple[list[int], ...]:
    """The flat trie of ``root``: nodes breadth first, each one's segments in order, a
    child numbered when its segment is met; ends and values by ``code``."""
    nodes = [root]
    o_start: list[int] = []
    o_end: list[int] = []
    o_lo: list[int] = []
    o_hi: list[int] = []
    o_child: list[int] = []
    i = 0
    while i < len(nodes):
        o_start.append(len(o_lo))
        for lo, hi, child in nodes[i].segments:
            o_lo.append(code(lo))
            o_hi.append(code(hi))
            if child is None:
                o_child.append(-1)
            else:
                o_child.append(len(nodes))
                nodes.append(child)
        o_end.append(len(o_lo))
        i += 1
    return o_start, o_end, o_lo, o_hi, o_child


def _in_flat(flat: tuple[list[int], ...], point: tuple[int, ...]) -> bool:
    o_start, o_end, o_lo, o_hi, o_child = flat
    node = 0
    for v in point:
        hits = [s for s in range(o_start[node], o_end[node]) if o_lo[s] <= v <= o_hi[s]]
        assert len(hits) <= 1, "a point in two segments of a node"
        if not hits:
            return False
        if o_child[hits[0]] < 0:
            return True
        node = o_child[hits[0]]
    return False


def _in_tree(root: OracleNode, point: tuple[int, ...]) -> bool:
    node = root
    for v in point:
        seg = node.find(v)
        if seg is None:
            return False
        if seg[2] is None:
            return True
        node = seg[2]
    return False


def _in_regions(regions: list[tuple[tuple[int, ...], Any, Any]], point: tuple[int, ...]
                ) -> bool:
    return any(point[: len(p)] == p and lo <= point[len(p)] <= hi for p, lo, hi in regions)


def _build(e: int, regions: list[tuple[tuple[int, ...], Any, Any]]) -> tuple[list[int], ...]:
    n = len(regions)
    plen = np.array([len(p) for p, _, _ in regions], np.int64)
    vals = np.zeros((n, e), np.int64)
    for r, (p, _, _) in enumerate(regions):
        vals[r, : len(p)] = p
    lo = np.array([_end(lo) for _, lo, _ in regions], np.int64)
    hi = np.array([_end(hi) for _, _, hi in regions], np.int64)
    got = build_oracle(plen, vals, lo, hi)
    for a in got:
        assert a.dtype == np.int64
    return tuple(a.tolist() for a in got)


@given(case=oracle_regions())
@settings(max_examples=300, deadline=None)
def test_build_oracle_is_the_change_oracle_flattened(case):
    e, regions = case
    oracle = ChangeOracle()
    for prefix, lo, hi in regions:
        if lo is BOTTOM and hi is TOP and _by_subtree(prefix):
            oracle.add_subtree(prefix)
        else:
            oracle.add(prefix, lo, hi)
    root = oracle.finish()
    want = _flat_of_tree(root)
    got = _build(e, regions)
    assert got == want
    o_start, o_end, o_lo, o_hi, o_child = got
    for node in range(len(o_start)):  # a node's segments: sorted, disjoint
        segs = range(o_start[node], o_end[node])
        for s in segs:
            assert o_lo[s] <= o_hi[s]
            if o_child[s] >= 0:
                assert o_lo[s] == o_hi[s] and o_child[s] > node
        for s, t in pairwise(segs):
            assert o_hi[s] < o_lo[t]
    # the points the regions hold, one level past the deepest prefix
    for point in product(range(-1, 5), repeat=e + 1):
        inside = _in_regions(regions, point)
        assert _in_flat(got, point) == inside, point
        assert _in_tree(root, point) == inside, point


def _by_subtree(prefix: tuple[int, ...]) -> bool:
    """Half the whole-subtree regions go through ``add_subtree`` (the same region)."""
    return sum(prefix) % 2 == 0


@given(data=st.data(), typ=st.sampled_from(["int", "float"]), nlev=st.integers(1, 3))
@settings(max_examples=150, deadline=None)
def test_regions_widen_and_code_as_the_tuple_maintenance_does(data, typ, nlev):
    """``Regions`` (a commit's regions on codes, as values or as coded contexts) flattens
    to the ``ChangeOracle`` the tuple maintenance builds of the same regions, regions on
    the existential level or past it widened to the subtree of its prefix."""
    exist = data.draw(st.integers(0, nlev))
    vals = VALUES[typ][:4]
    value = st.sampled_from(vals)
    regions = Regions([typ] * nlev, exist)
    oracle = ChangeOracle()
    by_width: dict[int, list[tuple[Any, ...]]] = {}
    for _ in range(data.draw(st.integers(1, 10))):
        prefix = tuple(data.draw(value) for _ in range(data.draw(st.integers(0, nlev - 1))))
        lo, hi = sorted((data.draw(value), data.draw(value)))
        if data.draw(st.integers(0, 3)) == 0:
            lo = BOTTOM
        if data.draw(st.integers(0, 3)) == 0:
            hi = TOP
        if data.draw(st.booleans()):
            regions.values(prefix, lo, hi)
        else:
            by_width.setdefault(len(prefix), []).append((prefix, lo, hi))
        if len(prefix) >= exist:  # (RuleMaintainer.maintain's ``region``)
            oracle.add_subtree(prefix[:exist])
        else:
            oracle.add(prefix, lo, hi)
    for width, group in by_width.items():
        ctx = np.array([_codes(list(p), typ) if width else [] for p, _, _ in group],
                       np.int64).reshape(len(group), width)
        ends = [[BOT if v is BOTTOM else KTOP if v is TOP else _codes([v], typ)[0]
                 for v in side] for side in zip(*((lo, hi) for _, lo, hi in group),
                                                strict=True)]
        regions.coded(ctx, np.array(ends[0], np.int64), np.array(ends[1], np.int64))
    want = _flat_of_tree(oracle.finish(), lambda v: (
        _end(v) if v is BOTTOM or v is TOP else _codes([v], typ)[0]))
    assert tuple(a.tolist() for a in regions.flat()) == want


def test_build_oracle_cases():
    """A few by hand: a child value at an interval's high end and low end is inside it; no
    regions: a root with no segments."""
    assert _build(1, []) == ([0], [0], [], [], [])
    got = _build(1, [((), 0, 2), ((2,), 5, 5), ((0,), 1, 1), ((3,), 4, 4)])
    assert got == ([0, 2], [2, 3], [0, 3, 4], [2, 3, 4], [-1, 1, -1])
    assert _build(2, [((1, 1), BOTTOM, TOP), ((1,), BOTTOM, 0)]) == (
        [0, 1, 3], [1, 3, 4], [1, BOT, 1, BOT], [1, 0, 1, KTOP], [1, -1, 2, -1])


# -- 3. end to end: compiled commits against tuple commits and a recompute --------------

@st.composite
def compiled_programs(draw: Any) -> str:
    """1-3 IDB predicates over e, f, u of one column type (int or float) and the switch
    on() (no columns, read as on() or !on()), positive atoms
    with constants, repeated variables and wildcards, comparisons of two variables or of
    a variable and a constant, negations, a variable computed by arithmetic, complement
    atoms, now and then an aggregate; each predicate may read the earlier ones; in int
    programs, now and then
    h(x, w) of an int and a float column (w in the body only, compared with floats after
    the join). Rules the compiled join commits."""
    typ = draw(st.sampled_from(["int", "float"]))
    decls = (f".decl e(a: {typ}, b: {typ})\n.decl f(a: {typ}, b: {typ})\n"
             f".decl u(a: {typ})\n.decl h(a: int, b: float)\n.decl on()\n")
    arity = {"e": 2, "f": 2, "u": 1, "on": 0}  # (on(): a switch, of no columns)
    rules = []
    # part ⊆ e whatever the data: a body's e(x, y), !part(x, y) reads E \ P through one
    # complement atom
    sub = draw(st.integers(0, 2)) == 0
    if sub:
        cond = draw(st.sampled_from(["x < y", "f(y, _)", "!u(x)"]))
        rules.append(f"part(x, y) :- e(x, y), {cond}.")
    for i in range(draw(st.integers(1, 3))):
        head_arity = draw(st.integers(1, 3))
        for _ in range(draw(st.integers(1, 2))):
            body, bound = positive_body(draw, arity, lambda: repr(
                draw(st.sampled_from(VALUES[typ][:6]))))
            if sub and draw(st.booleans()):
                body = ["e(x, y)", "!part(x, y)", *body]
                bound += ["x", "y"]
            names = sorted(set(bound))
            if draw(st.integers(0, 3)) == 0:  # a variable computed on the join's output
                right = (draw(st.sampled_from(names)) if draw(st.booleans())
                         else repr(draw(st.sampled_from(VALUES[typ][1:6]))))
                body.append(f"t = {draw(st.sampled_from(names))} "
                            f"{draw(st.sampled_from(['+', '-', '*', '/']))} {right}")
                names.append("t")
            for _ in range(draw(st.integers(0, 2))):
                op = draw(st.sampled_from(["<", "<=", ">", ">=", "!=", "="]))
                right = (draw(st.sampled_from(names)) if draw(st.booleans())
                         else repr(draw(st.sampled_from(VALUES[typ][:6]))))
                body.append(f"{draw(st.sampled_from(names))} {op} {right}")
            for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
                # a negation of an input or an earlier predicate: bound variables,
                # constants, wildcards (with none bound it is probed once, before the join)
                pred = draw(st.sampled_from(sorted(arity)))
                args = [draw(st.sampled_from(
                    [*names, "_", repr(draw(st.sampled_from(VALUES[typ][:6])))]))
                    for _ in range(arity[pred])]
                body.append(f"!{pred}({', '.join(args)})")
            if typ == "int" and draw(st.integers(0, 2)) == 0:
                body.insert(draw(st.integers(0, len(body))),
                            f"h({draw(st.sampled_from(names))}, w)")
                if draw(st.booleans()):
                    body.append(f"w {draw(st.sampled_from(['<', '>=']))} "
                                f"{draw(st.sampled_from(VALUES['float'][:6]))!r}")
            text, aggregate = head_or_aggregate(draw, i, names, names, body, head_arity)
            rules.append(text)
            if aggregate:
                break
        if any(r.startswith(f"p{i}(") for r in rules):
            arity[f"p{i}"] = head_arity
    return decls + "\n".join(rules) + "\n"


def _column_values(prog: Any, name: str, hot: bool) -> Any:
    """A strategy for rows of EDB relation ``name``: of the loaded values, or (``hot``)
    mostly of three values (so commits meet each other) and now and then of any."""
    cols = []
    for c in prog.schemas[name].columns:
        vals = VALUES[c.type]
        cols.append(st.sampled_from(vals[1:4] * 4 + vals if hot else vals[:LOADED]))
    return st.tuples(*cols)


@st.composite
def engine_cases(draw: Any) -> tuple[str, dict[str, set[Any]]]:
    """(program, data): mostly programs the compiled join commits, sometimes the random
    programs of the engine's other tests (string columns: tuple commits)."""
    if draw(st.integers(0, 3)) == 0:
        return draw(programs(recursion=False)), draw(edb_data())
    text = draw(compiled_programs())
    prog = load_program(text)
    if draw(st.integers(0, 3)) == 0:  # from empty: the commits record every interval
        return text, {}
    return text, {name: draw(st.sets(_column_values(prog, name, False), max_size=14))
                  for name in sorted(prog.edb)}


def _maintainers(engine: IncrementalEngine) -> list[Any]:
    return [h.maintainer for _, m in engine.strata if isinstance(m, SensitivityStratum)
            for h in m.heads]


def _tuple_commits(engine: IncrementalEngine) -> IncrementalEngine:
    """``engine`` with every rule's commits on the tuple join (its first evaluation as
    recorded: the compiled join's arrays, where it recorded)."""
    for m in _maintainers(engine):
        m._commit = "tuples: test"
    return engine


def _recompute(prog: Any, engine: IncrementalEngine) -> dict[str, set[Any]]:
    return evaluate(prog, {name: engine.relation(name) for name in prog.edb})


def _check_coded(engine: IncrementalEngine) -> None:
    """Every coded index the engine keeps is its relation's rows, in both versions (a
    commit is settled)."""
    for rel in engine.store.relations.values():
        for perm, index in rel._coded.items():
            if index is None:
                continue
            want = {tuple(r[c] for c in perm) for r in rel.rows}
            _check_version(index, False, want)
            _check_version(index, True, want)


class CompiledAgainstTuples(RuleBasedStateMachine):
    """Two engines on the same data and commits: one committing on the compiled join where
    a rule allows it, one on the tuple join; both equal a recompute after every commit,
    and give the same deltas."""

    FOLD = "never"

    @initialize(case=engine_cases())
    def load(self, case):
        text, data = case
        note(text)
        note(f"data {data}")
        self.prog = load_program(text)
        self.compiled = IncrementalEngine(self.prog, data, "sensitivity")
        self.tuples = _tuple_commits(IncrementalEngine(self.prog, data, "sensitivity"))
        joins = sum(type(m.commit_join(self.prog)) is CommitJoin
                    for m in _maintainers(self.compiled))
        event(f"rules committing on the compiled join: {min(joins, 3)}")
        self.rows = {name: _column_values(self.prog, name, True) for name in self.prog.edb}
        self.compiled_commits = 0

    @rule(data=st.data())
    def commit(self, data):
        deltas = draw_change(data, self.rows, 6)
        note(f"apply {deltas}")
        before = {p: self.compiled.relation(p) for p in self.prog.idb}
        out = self.compiled.apply(deltas)
        for p in self.prog.idb:  # the deltas returned are what changed
            after = self.compiled.relation(p)
            assert {r for r, w in out.get(p, {}).items() if w > 0} == after - before[p], p
            assert {r for r, w in out.get(p, {}).items() if w < 0} == before[p] - after, p
        assert self.tuples.apply(deltas) == out
        assert self.tuples.last_stats.work.get("compiled_commits", 0) == 0
        self.compiled_commits += self.compiled.last_stats.work.get("compiled_commits", 0)

    @invariant()
    def equal_recompute(self):
        if not hasattr(self, "compiled"):
            return
        expected = _recompute(self.prog, self.compiled)
        for p in self.prog.idb:
            assert self.compiled.relation(p) == expected[p], ("compiled", p)
            assert self.tuples.relation(p) == expected[p], ("tuples", p)
        _check_coded(self.compiled)
        if self.FOLD == "every":
            for rel in self.compiled.store.relations.values():
                for index in rel._coded.values():
                    if index is not None:
                        assert not len(index.minus) and not len(index.plus)

    def teardown(self):
        if hasattr(self, "compiled"):
            event(f"compiled commits: {min(self.compiled_commits, 5)}")


@pytest.mark.parametrize("fold", ["never", "every"])
def test_compiled_commits_equal_tuple_commits_and_recompute(fold, monkeypatch):
    _fold(monkeypatch, fold)
    machine = type(f"CompiledAgainstTuples_{fold}", (CompiledAgainstTuples,), {"FOLD": fold})
    run_state_machine_as_test(machine, settings=settings(
        max_examples=120, stateful_step_count=12, deadline=None))


DECLS = ".decl e(a: int, b: int)\n.decl f(a: int, b: int)\n.decl g(a: float, b: float)\n"
TRIANGLE = "tri(x, y, z) :- e(x, y), e(y, z), e(x, z).\n"
SQUARE = "sq(a, b, c, d) :- e(a, b), e(b, c), e(c, d), e(d, a), a < b, a < c, a < d.\n"
FLOATS = "heavy(x, z) :- g(x, y), g(y, z), y > 0.5.\n"
# two negations: of bound variables, and of a prefix (f(z, _)), probed after its level
OPEN = "open(x, z) :- e(x, y), e(y, z), !e(x, z), !f(z, _), x != z.\n"


def _graph(seed: int, nodes: int, count: int) -> set[tuple[int, int]]:
    rng = random.Random(seed)
    edges: set[tuple[int, int]] = set()
    while len(edges) < count:
        a, b = rng.randrange(nodes), rng.randrange(nodes)
        if a != b:
            edges.add((a, b))
    return edges


@pytest.mark.parametrize("text,changes", [
    (TRIANGLE, {"e": {(1, 2): 1, (2, 3): 1, (1, 3): 1, (0, 1): -1}}),
    (SQUARE, {"e": {(1, 2): 1, (2, 3): 1, (3, 4): 1, (4, 1): 1, (5, 6): -1}}),
    (FLOATS, {"g": {(0.25, 1.5): 1, (1.5, -3.0): 1, (1.5, 0.25): -1}}),
    (OPEN, {"e": {(1, 2): 1, (2, 3): 1, (0, 1): -1}, "f": {(3, 0): 1, (5, 2): 1}}),
    (OPEN, {"f": {(3, 0): 1, (5, 2): -1, (6, 6): -1}}),
])
def test_the_compiled_join_commits_triangles_squares_and_floats(text, changes):
    """Each commit on the compiled join, undone after, and both equal a recompute."""
    prog = load_program(DECLS + text)
    data = {"e": _graph(3, 8, 30), "f": {(5, 2), (6, 6), (1, 7)},
            "g": {(x / 4, y / 4) for x, y in _graph(4, 8, 30)} | {(1.5, 0.25)}}
    engine = IncrementalEngine(prog, data, "sensitivity")
    engine.apply(changes)
    assert engine.last_stats.work["compiled_commits"] >= 1
    (m,) = _maintainers(engine)
    assert type(m._commit) is CommitJoin
    assert engine.relation(m.rule.head.pred) == _recompute(prog, engine)[m.rule.head.pred]
    undo = {n: {r: -w for r, w in d.items()} for n, d in changes.items()}
    engine.apply(undo)
    assert engine.last_stats.work["compiled_commits"] >= 1
    assert engine.relation(m.rule.head.pred) == _recompute(prog, engine)[m.rule.head.pred]
    _check_coded(engine)


def test_switches_and_unbound_negations_record_and_commit_on_the_compiled_join():
    """``on()``, of no columns, and negations with no variable bound (``!off()``,
    ``!f(1, _)``, probed once before the join): the load records on the compiled join
    (nothing while a switch says no), commits evaluate each version of the body where
    they hold, and a change to one (to f's rows that start with 1, for ``!f(1, _)``)
    re-evaluates the whole rule; each step equals a recompute."""
    prog = load_program(DECLS + ".decl on()\n.decl off()\n"
                        "hot(x, z) :- e(x, y), on(), e(y, z), x < z.\n"
                        "cold(x, z) :- e(x, y), e(y, z), !off(), !f(1, _), x > z.\n")
    engine = IncrementalEngine(prog, {"e": _graph(5, 8, 20), "on": set(), "off": set(),
                                      "f": {(2, 2)}}, "sensitivity")
    assert all(m.recorded_by == "compiled" for m in _maintainers(engine))
    assert not engine.relation("hot") and engine.relation("cold")
    for change in ({"on": {(): 1}}, {"e": {(1, 2): 1, (2, 3): 1}}, {"on": {(): -1}},
                   {"off": {(): 1}}, {"e": {(1, 2): -1, (3, 4): 1}, "off": {(): -1}},
                   {"on": {(): 1}, "e": {(4, 5): 1}}, {"f": {(1, 5): 1}},
                   {"f": {(3, 3): 1}, "e": {(5, 6): 1}}, {"f": {(1, 5): -1}}):
        engine.apply(change)
        assert engine.last_stats.work["compiled_commits"] >= 1, change
        want = _recompute(prog, engine)
        assert engine.relation("hot") == want["hot"], change
        assert engine.relation("cold") == want["cold"], change
    assert all(type(m._commit) is CommitJoin for m in _maintainers(engine))
    assert engine.relation("hot") and engine.relation("cold")
    _check_coded(engine)


# A variable computed by arithmetic (t), probed by a negation, compared after the join.
COMPUTED = ("r(x, t) :- e(x, y), t = y * 2 + x, !f(t, _), x < t.\n"
            "q(x, z) :- e(x, y), t = y + 1, !f(t, _), e(y, z).\n"  # (order x, y, t, z)
            "c(x, y) :- e(x, y), g(a, _), x < a.\n")


def test_a_variable_computed_on_the_joins_output_commits_on_the_compiled_join():
    """The oracle has no level for t: a change to f (the negation probes t) widens its
    region to the subtree of x and y above it; the comparison of an int and a float
    filters the join's output. Every commit is compiled and equals a recompute."""
    prog = load_program(DECLS + COMPUTED)
    engine = IncrementalEngine(prog, {"e": _graph(5, 8, 20), "f": {(4, 0), (9, 1)},
                                      "g": {(2.5, 0.0)}}, "sensitivity")
    assert engine.slow_paths() == []
    steps = [{"f": {(4, 0): -1}}, {"f": {(6, 2): 1, (9, 1): -1}}, {"e": {(1, 4): 1}},
             {"g": {(2.5, 0.0): -1, (5.5, 1.0): 1}}, {"e": {(1, 4): -1}, "f": {(7, 7): 1}},
             {"f": {(2, 0): 1, (5, 0): 1}}, {"f": {(2, 0): -1}}]
    compiled = []
    for k, batch in enumerate(steps):
        engine.apply(batch)
        compiled.append(engine.last_stats.work.get("compiled_commits", 0))
        want = _recompute(prog, engine)
        for p in prog.idb:
            assert engine.relation(p) == want[p], (k, p)
    assert min(compiled) >= 1, compiled  # (every step reaches some rule's intervals)
    assert engine.slow_paths() == []
    _check_coded(engine)


def test_a_result_beyond_64_bits_in_a_commit_finishes_it_on_the_tuple_join():
    """The load's products fit in 64 bits; a commit's does not: the regions its stabs
    found are re-evaluated on the tuple join (no interval lost), the rule commits there
    from then on, and the run's notes say why."""
    prog = load_program(DECLS + ".decl u(a: int)\n"
                        "s(x, v) :- e(x, y), v = y * 4611686018427387904, !u(x).\n")
    engine = IncrementalEngine(prog, {"e": {(0, 1), (1, 0), (2, 1)}}, "sensitivity")
    assert engine.slow_paths() == []
    for k, batch in enumerate([{"u": {(2,): 1}}, {"e": {(3, 2): 1}}, {"u": {(2,): -1}},
                               {"e": {(3, 2): -1, (3, 1): 1}}, {"u": {(3,): 1}}]):
        engine.apply(batch)
        want = _recompute(prog, engine)
        assert engine.relation("s") == want["s"], k
    assert engine.slow_paths() == [
        "s: rule at <program>:5:1 commits on the tuple join (an integer result beyond "
        "64 bits)"]


# Commits from empty relations: the load's intervals are (−inf, +inf), matched and
# dropped at the first commit, so each later commit is found by intervals an earlier
# commit's compiled join recorded.
SEQUENCES = [
    ("p[x] = n <- agg<<n = count()>> e(x, x), f(x, x).\n",
     [{"e": {(2, 2): 1}}, {"f": {(2, 2): 1}}, {"e": {(2, 2): -1}}, {"e": {(2, 2): 1}}]),
    (TRIANGLE, [{"e": {(1, 2): 1}}, {"e": {(2, 3): 1}}, {"e": {(1, 3): 1}},
                {"e": {(0, 2): 1, (0, 3): 1}}, {"e": {(2, 3): -1}}, {"e": {(2, 3): 1}}]),
    ("r(x, z) :- e(x, y), f(y, z), x < z.\n",
     [{"f": {(3, 5): 1}}, {"e": {(1, 3): 1, (6, 3): 1}}, {"f": {(3, 7): 1, (3, 5): -1}},
      {"e": {(1, 3): -1, (1, 4): 1}}, {"f": {(4, 0): 1, (4, 2): 1}}]),
    (SQUARE, [{"e": {(1, 2): 1, (2, 3): 1}}, {"e": {(3, 4): 1}}, {"e": {(4, 1): 1}},
              {"e": {(2, 3): -1, (2, 5): 1}}, {"e": {(5, 3): 1}}, {"e": {(2, 3): 1}}]),
    (FLOATS, [{"g": {(0.5, 1.0): 1}}, {"g": {(1.0, 2.5): 1}}, {"g": {(-1.0, 1.0): 1}},
              {"g": {(1.0, 2.5): -1, (1.0, 0.75): 1}}, {"g": {(0.75, 0.5): 1}}]),
    (OPEN, [{"e": {(1, 2): 1, (2, 3): 1}}, {"f": {(3, 9): 1}}, {"e": {(1, 3): 1}},
            {"e": {(1, 3): -1}, "f": {(3, 9): -1}}, {"f": {(3, 4): 1, (2, 2): 1}},
            {"f": {(3, 4): -1}}]),
]


@pytest.mark.parametrize("fold", ["never", "every"])
@pytest.mark.parametrize("text,steps", SEQUENCES)
def test_commits_from_empty_are_found_by_the_intervals_commits_recorded(text, steps, fold,
                                                                       monkeypatch):
    _fold(monkeypatch, fold)
    prog = load_program(DECLS + text)
    engine = IncrementalEngine(prog, {}, "sensitivity")
    compiled = 0
    for k, batch in enumerate(steps):
        engine.apply(batch)
        compiled += engine.last_stats.work["compiled_commits"]
        want = _recompute(prog, engine)
        for p in prog.idb:
            assert engine.relation(p) == want[p], (k, p)
    assert compiled >= len(steps) - 1
    assert all(type(m._commit) is CommitJoin for m in _maintainers(engine))


# -- 4. saved states -------------------------------------------------------------------

def _reopen(engine: IncrementalEngine, store: MemorySegments | None) -> IncrementalEngine:
    """``engine`` saved and opened again: to ``store`` (a segment store, the one it was
    opened from if it was), or whole."""
    if store is not None:
        return IncrementalEngine.loads(engine.dumps(store), store)
    return IncrementalEngine.loads(engine.dumps())


def _forget_coded(engine: IncrementalEngine) -> None:
    """Make ``engine``'s state one from before coded indexes existed."""
    for rel in engine.store.relations.values():
        del rel.__dict__["_coded"]


@pytest.mark.parametrize("segments", [False, True])
@pytest.mark.parametrize("forget", [False, True])
def test_a_saved_state_commits_on_the_compiled_join_after_reopening(segments, forget,
                                                                    monkeypatch):
    monkeypatch.setattr(storage, "PAGED_MIN", 16)  # relations and indexes paged
    prog = load_program(DECLS + TRIANGLE + SQUARE)
    engine = IncrementalEngine(prog, {"e": _graph(5, 12, 60)}, "sensitivity")
    engine.apply({"e": {(1, 2): 1, (2, 3): 1, (1, 3): 1}})
    assert engine.last_stats.work["compiled_commits"] >= 1
    if forget:
        _forget_coded(engine)
    store = MemorySegments() if segments else None
    engine = _reopen(engine, store)
    rel = engine.store["e"]
    assert bool(rel._coded) is not forget
    batches = [{"e": {(3, 4): 1, (1, 4): 1, (2, 4): 1, (4, 1): 1}},
               {"e": {(1, 2): -1, (2, 3): -1, (5, 6): 1}},
               {"e": {(1, 2): 1, (3, 4): -1}}]
    for k, batch in enumerate(batches):
        engine.apply(batch)
        assert engine.last_stats.work["compiled_commits"] >= 1, k
        assert all(type(m._commit) is CommitJoin for m in _maintainers(engine))
        want = _recompute(prog, engine)
        for p in prog.idb:
            assert engine.relation(p) == want[p], (k, p)
        assert rel._coded and all(i is not None for i in rel._coded.values())
        _check_coded(engine)
        if k == 0:
            engine = _reopen(engine, store)
            rel = engine.store["e"]


SHAPES = [
    TRIANGLE,
    "r(x, z) :- e(x, y), f(y, z), x < z.\n",
    "r(x) :- e(x, y), f(y, x), e(y, _).\n",
    "r(x, y) :- e(x, y), f(y, 2), y != x.\nq(y) :- r(x, y), e(y, x).\n",
    "c[x] = n <- agg<<n = count()>> e(x, y), f(y, z).\n",
]


@given(shape=st.sampled_from(SHAPES), data=edb_data(), steps=st.lists(st.lists(st.tuples(
    st.sampled_from(["e", "f"]), st.tuples(st.integers(0, 4), st.integers(0, 4)),
    st.sampled_from([1, -1])), min_size=1, max_size=5), min_size=2, max_size=5),
    cut=st.integers(0, 3), forget=st.booleans(), segments=st.booleans())
@settings(max_examples=60, deadline=None)
def test_saved_and_reopened_between_commits_equals_recompute(shape, data, steps, cut, forget,
                                                             segments):
    prog = load_program(DECLS + shape)
    engine = IncrementalEngine(prog, {n: data[n] for n in ("e", "f")}, "sensitivity")
    store = MemorySegments() if segments else None
    for k, batch in enumerate(steps):
        if k == cut:
            if forget:
                _forget_coded(engine)
            engine = _reopen(engine, store)
        deltas: dict[str, dict[Any, int]] = {}
        for name, row, w in batch:
            deltas.setdefault(name, {})[row] = w
        before = {n: engine.relation(n) for n in ("e", "f")}
        engine.apply(deltas)
        want = _recompute(prog, engine)
        for p in prog.idb:
            assert engine.relation(p) == want[p], (k, p, deltas)
        _check_coded(engine)
        changed = {n for n in ("e", "f") if engine.relation(n) != before[n]}
        for m in _maintainers(engine):  # (a rule is maintained when its input changed)
            if changed & m.inputs:
                assert type(m._commit) is CommitJoin, m.rule


# -- 5. a value with no code -----------------------------------------------------------

REFUSAL = DECLS + TRIANGLE + "pair(x, y) :- f(x, y), f(y, x).\n"


@pytest.mark.parametrize("big", [2**70, -(2**63), 2**63 - 1])
def test_a_value_with_no_code_sends_the_rule_back_to_the_tuple_join(big):
    prog = load_program(REFUSAL)
    data = {"e": _graph(6, 6, 14) | {(1, 2), (2, 3)}, "f": {(1, 2), (2, 1), (3, 4)}}
    engine = IncrementalEngine(prog, data, "sensitivity")
    engine.apply({"e": {(1, 3): 1}})
    assert engine.last_stats.work["compiled_commits"] >= 1
    by_head = {m.rule.head.pred: m for m in _maintainers(engine)}
    tri = by_head["tri"]
    perms = [perm for pred, perm in tri._commit.relations()]
    engine.apply({"e": {(big, 1): 1, (big, 2): 1, (2, big): 1, (1, big): 1, (1, 3): -1}})
    assert engine.last_stats.work["compiled_commits"] == 0
    rel = engine.store["e"]
    assert all(rel.coded_refused(perm) for perm in perms)
    assert [line for line in engine.slow_paths() if line.startswith("tri:")] == [
        f"tri: rule at {tri.rule.loc} commits on the tuple join (a value with no 64-bit "
        "code in e)"]
    assert {(big, 1, 2), (1, 2, big)} <= engine.relation("tri")
    assert engine.relation("tri") == _recompute(prog, engine)["tri"]
    for batch in ({"e": {(1, 3): 1, (3, 1): 1}}, {"e": {(big, 1): -1, (2, 3): -1}},
                  {"e": {(2, 3): 1, (3, big): 1}}):
        engine.apply(batch)
        assert engine.last_stats.work["compiled_commits"] == 0
        assert all(rel.coded_refused(perm) for perm in perms)
        assert engine.relation("tri") == _recompute(prog, engine)["tri"]
    # a rule over relations that keep their codes still commits on the compiled join
    engine.apply({"f": {(4, 3): 1}})
    assert engine.last_stats.work["compiled_commits"] == 1
    assert engine.relation("pair") == {(1, 2), (2, 1), (3, 4), (4, 3)}


def test_a_derived_value_with_no_code_refuses_the_derived_relations_index():
    prog = load_program(
        ".decl u(a: int)\nbig(t) :- u(x), t = x * 4611686018427387904.\n"
        "pair(x, y) :- big(x), big(y), x < y.\n")
    engine = IncrementalEngine(prog, {"u": {(0,), (1,)}}, "sensitivity")
    engine.apply({"u": {(-1,): 1}})
    assert engine.last_stats.work["compiled_commits"] >= 1
    engine.apply({"u": {(4,): 1}})  # big(2**64)
    assert engine.store["big"].coded_refused((0,))
    want = _recompute(prog, engine)
    assert engine.relation("pair") == want["pair"] and (2**62, 2**64) in want["pair"]
    engine.apply({"u": {(4,): -1, (2,): 1}})
    assert engine.last_stats.work["compiled_commits"] == 0
    assert engine.relation("pair") == _recompute(prog, engine)["pair"]


# -- 6. work follows the change --------------------------------------------------------

def _triangle_batch(nodes: int, count: int) -> tuple[int, int]:
    """(iterator operations of the load, of a 10-deletion + 10-insertion commit) of a
    compiled triangle engine over a random graph (the same degree at every size)."""
    prog = load_program(DECLS + TRIANGLE)
    edges = _graph(11, nodes, count)
    engine = IncrementalEngine(prog, {"e": edges}, "sensitivity")
    load_ops = engine.last_stats.work["iterator_ops"]
    rng = random.Random(12)
    erased = rng.sample(sorted(edges), 10)
    inserted: set[tuple[int, int]] = set()
    while len(inserted) < 10:
        edge = (rng.randrange(nodes), rng.randrange(nodes))
        if edge not in edges and edge[0] != edge[1]:
            inserted.add(edge)
    engine.apply({"e": {**dict.fromkeys(erased, -1), **dict.fromkeys(inserted, 1)}})
    work = engine.last_stats.work
    assert work["compiled_commits"] == 1
    now = (edges - set(erased)) | inserted
    assert engine.relation("tri") == evaluate(prog, {"e": now})["tri"]
    return load_ops, work["iterator_ops"]


def test_a_small_batch_on_a_compiled_triangle_engine_does_work_of_its_size():
    """Work follows the change: 20 changed edges of 2,000 cost a tenth of the load's
    iterator operations (each one a few neighbourhoods), and about as many of 20,000
    edges of the same degree, where the load costs ten times more."""
    load_small, small = _triangle_batch(300, 2_000)
    load_large, large = _triangle_batch(3_000, 20_000)
    assert small * 5 < load_small, (small, load_small)
    assert large * 50 < load_large, (large, load_large)
    assert large < 2 * small + 200, (small, large)


def _intervals(engine: IncrementalEngine) -> int:
    return sum(len(index) for m in _maintainers(engine) for index in m.indices.values())


@pytest.mark.parametrize("commits", ["compiled", "tuples"])
@pytest.mark.parametrize("text", [TRIANGLE, SQUARE])
def test_changes_made_again_and_again_do_not_grow_the_sensitivity_indices(text, commits):
    """A commit's join records every iterator operation inside its oracle, most of them
    intervals the index already holds: each is kept once (a part drops a repeat when it
    is made from the young intervals or merged), so the same changes made and undone
    over and over keep the indices at the size the first rounds left, where keeping
    every recording grew them by thousands of intervals a round."""
    prog = load_program(DECLS + text)
    edges = _graph(5, 200, 1_500)
    engine = IncrementalEngine(prog, {"e": edges}, "sensitivity")
    if commits == "tuples":
        _tuple_commits(engine)
    rng = random.Random(6)
    batches = []
    for _ in range(3):
        erased = rng.sample(sorted(edges), 10)
        inserted = {(rng.randrange(200), rng.randrange(200)) for _ in range(10)} - edges
        batches.append({**dict.fromkeys(erased, -1), **dict.fromkeys(inserted, 1)})
    sizes = []
    added = compiled = 0
    for round_ in range(6):
        for batch in batches:
            for change in (batch, {r: -w for r, w in batch.items()}):
                engine.apply({"e": change})
                added += engine.last_stats.work["intervals_added"]
                compiled += engine.last_stats.work["compiled_commits"]
        sizes.append(_intervals(engine))
        if round_ == 1:
            added = 0
    assert (compiled > 0) == (commits == "compiled")
    (head,) = prog.idb
    assert engine.relation(head) == evaluate(prog, {"e": edges})[head]
    # Four rounds after the second recorded thousands of intervals; the indices hold
    # about what they held then (a part keeps a repeat until it is merged: a bound).
    assert added > 5 * sizes[1] // 100, (added, sizes)
    assert sizes[-1] <= sizes[1] + added // 10, (added, sizes)


# -- 7. what commits off the compiled join says so ---------------------------------------

def test_the_engine_says_which_rules_commit_on_the_tuple_join():
    """``slow_paths`` (a run's notes) names each rule whose commits stay on the tuple join
    and why; a body longer than the kernels' tuple of atoms is one (it would compile the
    commit kernel again, for minutes), refused before any commit."""
    prog = load_program(DECLS + ".decl s(a: string)\n.decl ng(a: string, b: string)\n"
                        + TRIANGLE + "t(x, z) :- e(x, y), e(y, z), !f(1, 2).\n"
                        "u(x) :- s(x), s(x).\nw(x) :- s(x), !ng(\"a\", x).\n")
    engine = IncrementalEngine(prog, {"e": {(1, 2), (2, 3)}, "s": {("a",)}}, "sensitivity")
    # (t's negation, no variable bound, is compiled; so are u and w, over strings)
    assert engine.slow_paths() == []
    n = ckernels.ATOM_SLOTS + 1
    body = ", ".join(f"e(x{i}, x{i + 1})" for i in range(n))
    long = load_program(DECLS + f"p(x0) :- {body}.\n")
    (m,) = _maintainers(IncrementalEngine(long, {"e": {(1, 1)}}, "sensitivity",
                                          columnar=False))
    with pytest.raises(NotColumnar, match=f"a body of more than {n - 1} atoms"):
        CommitJoin(m.plan, m.indexed, long)


def test_a_save_writes_an_int_relation_in_order_from_its_coded_index():
    """A relation of ints whose coded index in its own column order is kept (a compiled
    commit reads it) is written as a sorted run from the codes (no sort of the set of
    Python tuples): the same rows in order, read back equal, maintained alike after."""
    rng = random.Random(5)
    edges = {(rng.randrange(900), rng.randrange(900)) for _ in range(6_000)}
    prog = load_program(".decl e(x: int, y: int)\ntri(x, y, z) :- e(x, y), e(y, z), e(x, z).")
    engine = IncrementalEngine(prog, {"e": edges}, "sensitivity")
    for k in range(3):  # an overlay on the coded index (and then a fold: 2,000 rows)
        change = {(rng.randrange(900), rng.randrange(900)): 1 for _ in range(700 * k + 5)}
        change.update(dict.fromkeys(rng.sample(sorted(edges), 5), -1))
        engine.apply({"e": change})
        edges = (edges | {r for r, w in change.items() if w > 0}) - {
            r for r, w in change.items() if w < 0}
    rel = engine.store["e"]
    ordered = rel._ordered()
    assert ordered is not None and ordered() == sorted(edges) == sorted(rel.rows)
    store = MemorySegments()
    with mock.patch("deltalog.engine.segments.sorted", create=True,
                    side_effect=AssertionError("the set sorted")):
        blob = engine.dumps(store)
    back = IncrementalEngine.loads(blob, store)
    assert set(back.store["e"].rows) == edges
    change = {(1, 2): 1, (2, 3): 1, (1, 3): 1}
    assert back.apply({"e": change}) == engine.apply({"e": change})
    assert back.relation("tri") == evaluate(prog, {"e": edges | set(change)})["tri"]


NEGATED_STRINGS = """\
.decl w(a: string, b: int)
.decl g[a: int] = b: string
.decl q(a: int)
p(n) :- q(n), !w(_, n).
pa(n) :- q(n), !w("a", n).
pc(n) :- q(n), !w("a", _).
pg(n) :- q(n), !g[n] = "x".
"""


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.tuples(
    st.sampled_from(["q", "w", "g"]), st.integers(0, 3), st.sampled_from(["a", "x", ""]),
    st.sampled_from([1, -1])), max_size=12))
def test_negations_of_relations_with_string_columns_load_and_commit(steps):
    """A rule over int columns negating a relation with a string column (a wildcard, a
    string constant, a functional value): the load records on the compiled join (the
    load codes strings), its commits run on the tuple join (the compiled commit reads
    int and float indexes only); each commit equals a recompute."""
    prog = load_program(NEGATED_STRINGS)
    data: dict[str, set[tuple[Any, ...]]] = {"q": {(1,), (2,)}, "w": {("a", 1)},
                                             "g": {(1, "x")}}
    engine = IncrementalEngine(prog, {k: set(v) for k, v in data.items()}, "auto")
    for pred, n, s, w in steps:
        row: tuple[Any, ...] = (n,) if pred == "q" else (s, n) if pred == "w" else (n, s)
        if pred == "g" and w > 0:  # functional: one value per key
            old = {r for r in data["g"] if r[0] == n}
            change = {**{r: -1 for r in old if r != row}, **({row: 1} if row not in old else {})}
        elif (w > 0) == (row in data[pred]):
            continue
        else:
            change = {row: w}
        if not change:
            continue
        engine.apply({pred: change})
        for r, d in change.items():
            (data[pred].add if d > 0 else data[pred].discard)(r)
        assert engine.relation(pred) == data[pred]
        want = _recompute(prog, engine)
        for head in ("p", "pa", "pc", "pg"):
            assert engine.relation(head) == want[head], (head, steps)


def test_a_string_constant_assigned_in_a_compiled_commit_stays_a_string():
    """A rule of int atoms (or none) whose head takes a string constant by assignment: its
    commits on the compiled join give the string, not its code in the rule's dictionary
    (``p0(3, "")`` was ``p0(3, 0)`` after ``on()`` went)."""
    from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine

    prog = load_program(".decl on()\n.decl e(a: int, b: int)\n"
                        'p0(x, s) :- s = "", x = 3, !on().\n'
                        'p1(x, s) :- e(x, y), s = "b", y > 1, !on().\n')
    start = {"on": {()}, "e": {(1, 2), (2, 0)}}
    engine = IncrementalEngine(prog, start, "sensitivity")
    oracle = RecomputeEngine(prog, start)
    for change in ({"on": {(): -1}}, {"e": {(5, 7): 1}}, {"on": {(): 1}}, {"on": {(): -1}}):
        assert engine.apply(change) == oracle.apply(change), change
        for p in ("p0", "p1"):
            assert engine.relation(p) == oracle.relation(p), (p, change)
