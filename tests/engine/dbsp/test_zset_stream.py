"""The paper's examples (Budiu et al. 2023, §2-§7) and the algebra laws of Z-sets, streams and the
incremental operators, each checked against its definition D∘Q∘I."""

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from tests.engine.dbsp.reference.operators import (
    aggregate_delta,
    antijoin,
    antijoin_delta,
    distinct_delta,
    exact_total,
    join,
    join_delta,
)
from tests.engine.dbsp.reference.stream import (
    Stream,
    delay,
    delta0,
    differentiate,
    fixpoint,
    incremental,
    integral,
    integrate,
    lift,
    lift_stream_op,
    nested,
)
from tests.engine.dbsp.reference.zset import ZSet

ID = Stream([0, 1, 2, 3, 4])
zsets = st.dictionaries(st.integers(0, 4), st.integers(-3, 3)).map(ZSet)
pairs = st.dictionaries(st.tuples(st.integers(0, 3), st.integers(0, 3)),
                        st.integers(-2, 2)).map(ZSet)


def zstream(elems: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(elems, min_size=1, max_size=5).map(lambda vs: Stream(vs, ZSet()))


# -- the paper's examples ------------------------------------------------------------------

def test_paper_stream_examples():
    assert lift(lambda x: 2 * x)(ID) == Stream([0, 2, 4, 6, 8])
    assert delay(ID) == Stream([0, 0, 1, 2, 3])
    assert differentiate(ID) == Stream([0, 1, 1, 1, 1])
    assert integrate(ID) == Stream([0, 1, 3, 6, 10])
    assert delta0(5, 0, 5) == Stream([5, 0, 0, 0, 0])
    assert integral(delta0(5, 0, 5)) == 5  # ∫ ∘ δ0 = id


def test_paper_zset_examples():
    r = ZSet({"joe": 1, "anne": -1})
    assert r["joe"] == 1 and r["anne"] == -1 and r["bob"] == 0
    assert not r.is_set() and not r.is_positive()
    assert r.distinct() == ZSet({"joe": 1})
    assert r.count() == 0
    # §7.3: grouping by first letter, then count per group.
    groups: dict = {}
    out = aggregate_delta(groups, r.as_dict(), lambda s: s[0], lambda s: s,
                          lambda vals: sum(vals.values()))
    assert out == ZSet({("j", 1): 1, ("a", -1): 1})


def test_zeros_are_dropped():
    assert ZSet({1: 0, 2: 1}) == ZSet({2: 1})
    assert ZSet({1: 2}) + ZSet({1: -2}) == ZSet()
    assert len(ZSet({1: 1}) - ZSet({1: 1})) == 0


# -- algebra laws --------------------------------------------------------------------------

@given(zsets, zsets, zsets)
def test_zsets_form_an_abelian_group(a, b, c):
    assert a + b == b + a
    assert (a + b) + c == a + (b + c)
    assert a + ZSet() == a
    assert a + (-a) == ZSet()
    assert a * 3 == a + a + a


@given(zstream(zsets))
def test_differentiation_inverts_integration(s):
    assert differentiate(integrate(s)) == s
    assert integrate(differentiate(s)) == s


@given(zstream(zsets))
def test_linear_operators_are_their_own_incremental_version(s):
    def q(x: Stream) -> Stream:
        return lift(lambda z: z.filter(lambda k: k % 2 == 0).map(lambda k: k // 2))(x)
    assert incremental(q)(s) == q(s)


@given(zstream(zsets))
def test_incremental_distinct_is_h(s):
    expected = incremental(lift(ZSet.distinct))(s)
    integ = integrate(delay(s))
    got = Stream([distinct_delta(integ[t].as_dict(), s[t].as_dict()) for t in range(len(s))],
                 ZSet())
    assert got == expected


@given(zstream(pairs), zstream(pairs))
def test_bilinear_join_formula(a, b):
    def j(x: ZSet, y: ZSet) -> ZSet:
        return join(x, y, lambda r: r[1], lambda r: r[0], lambda r, q: (r[0], q[1]))

    n = max(len(a), len(b))
    a = Stream([a[t] for t in range(n)], ZSet())
    b = Stream([b[t] for t in range(n)], ZSet())
    ia, ib = integrate(a), integrate(b)
    expected = differentiate(Stream([j(ia[t], ib[t]) for t in range(n)], ZSet()))
    got = [join_delta(ia[t - 1] if t else ZSet(), ib[t - 1] if t else ZSet(), a[t], b[t],
                      lambda r: r[1], lambda r: r[0], lambda r, q: (r[0], q[1]))
           for t in range(n)]
    assert Stream(got, ZSet()) == expected


sets = st.frozensets(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=8)


@given(st.lists(st.tuples(sets, sets), min_size=1, max_size=4))
def test_antijoin_delta_matches_recompute(versions):
    """Stratified negation: successive set versions of a and b; the delta of a ▷ b."""
    def k(r):
        return r[0]

    prev_a, prev_b = ZSet(), ZSet()
    for va, vb in versions:
        a, b = ZSet.from_set(va), ZSet.from_set(vb)
        got = antijoin_delta(prev_a, prev_b, a - prev_a, b - prev_b, k, k)
        assert got == antijoin(a, b, k, k) - antijoin(prev_a, prev_b, k, k)
        prev_a, prev_b = a, b


@given(st.lists(st.dictionaries(st.tuples(st.integers(0, 2), st.integers(0, 5)),
                                st.sampled_from([1, -1]), max_size=6), max_size=5))
def test_aggregate_delta_revisits_changed_groups_only(changes):
    groups: dict = {}
    current: dict = {}
    out = ZSet()
    for ch in changes:
        # Keep the input a set: only insert absent rows, only erase present ones.
        d = {r: w for r, w in ch.items() if (w > 0) != (r in current)}
        out = out + aggregate_delta(groups, d, lambda r: r[0], lambda r: r[1],
                                    lambda vals: max(vals))
        for r, w in d.items():
            if w > 0:
                current[r] = 1
            else:
                del current[r]
        expected: dict = {}
        for g, v in current:
            expected[g] = max(expected.get(g, v), v)
        assert out == ZSet.from_set(expected.items())


def test_exact_total_is_correctly_rounded():
    vals = {1e16: 1, 1.0: 1, -1e16: 1, 0.1: 3}
    exact = Fraction(1) + 3 * Fraction(0.1)
    assert exact_total(vals) == float(exact)
    assert exact_total({0.1: 10}) == 1.0


# -- recursion with nested time (§5.1, §6) -------------------------------------------------

def _closure_step(edges: ZSet):
    def step(r: ZSet) -> ZSet:
        joined = join(r, edges, lambda p: p[1], lambda e: e[0], lambda p, e: (p[0], e[1]))
        return (edges + joined).distinct()
    return step


def _tc(edges: set) -> set:
    out = set(edges)
    while True:
        new = {(a, d) for a, b in out for c, d in edges if b == c} - out
        if not new:
            return out
        out |= new


@given(st.lists(st.dictionaries(st.tuples(st.integers(0, 3), st.integers(0, 3)),
                                st.sampled_from([1, -1]), max_size=4), min_size=1, max_size=4))
def test_nested_time_closure_equals_recompute(changes):
    """Outer time: changes to the edges; inner time: the fixed-point iteration. Row t0 of
    the nested stream is D(o) of the fixed point for the integrated input at t0; the ∫ of
    each row, differentiated over outer time, is the change of the closure."""
    edges: set = set()
    inputs = []
    for ch in changes:
        d = {e: w for e, w in ch.items() if (w > 0) != (e in edges)}
        edges = (edges | {e for e, w in d.items() if w > 0}) - {e for e, w in d.items() if w < 0}
        inputs.append(ZSet(d))
    outer = Stream(inputs, ZSet())
    rows = [fixpoint(_closure_step(i), ZSet()) for i in integrate(outer)]
    inner = nested(rows, ZSet())
    outputs = Stream([integral(row) for row in inner], ZSet())
    changes_out = differentiate(outputs)
    total = ZSet()
    for t in range(len(outer)):
        total = total + changes_out[t]
    assert total == ZSet.from_set(_tc(edges))
    # ↑I integrates along inner time: the last value of each row is the fixed point.
    inner_integrated = lift_stream_op(integrate)(inner)
    assert all(row[len(row) - 1] == integral(r) for row, r in zip(inner_integrated, inner,
                                                                  strict=True))
