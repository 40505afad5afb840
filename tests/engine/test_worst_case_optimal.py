"""Worst-case optimality shown by work counters, not clocks (Veldhuizen 2014, §1.2).

Instance family for the triangle query ``t(x, y, z) :- e(x, y), e(y, z), e(z, x)``: a star
around node 0 (m edges each way) plus a complete digraph on k = sqrt(m) other nodes, so
N = |e| ~ 3m. A pairwise plan materializes e(x, y) ⋈ e(y, z) first, which holds m^2 pairs
through node 0: it grows like N^2. The output has ~k^3 = N^1.5 triangles, and leapfrog
triejoin's iterator operations grow like N^1.5 too (the AGM bound for triangles).
"""

import math

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.evaluate import evaluate
from deltalog.engine.join.trie import JoinStats

TRIANGLES = ".decl e(a: int, b: int)\nt(x, y, z) :- e(x, y), e(y, z), e(z, x)."


def instance(m: int) -> set[tuple[int, int]]:
    k = math.isqrt(m)
    star = {(0, i) for i in range(1, m + 1)} | {(i, 0) for i in range(1, m + 1)}
    base = m + 1
    clique = {(base + a, base + b) for a in range(k) for b in range(k) if a != b}
    return star | clique


def pairwise_intermediate(edges: set[tuple[int, int]]) -> int:
    """|e(x, y) ⋈ e(y, z)|: sum over y of in-degree times out-degree."""
    indeg: dict[int, int] = {}
    outdeg: dict[int, int] = {}
    for a, b in edges:
        outdeg[a] = outdeg.get(a, 0) + 1
        indeg[b] = indeg.get(b, 0) + 1
    return sum(indeg[y] * outdeg.get(y, 0) for y in indeg)


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(ys) against log(xs)."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx
    )


def test_lftj_work_grows_like_n_to_1_5_while_pairwise_grows_like_n_squared():
    prog = load_program(TRIANGLES, "triangles.dl")
    sizes, lftj_ops, pairwise = [], [], []
    for m in (400, 1600, 6400):
        edges = instance(m)
        stats = JoinStats()
        result = evaluate(prog, {"e": edges}, stats=stats)
        k = math.isqrt(m)
        assert len(result["t"]) == k * (k - 1) * (k - 2)  # only the clique has triangles
        sizes.append(len(edges))
        lftj_ops.append(stats.operations)
        pairwise.append(pairwise_intermediate(edges))
    lftj_exp = slope(sizes, lftj_ops)
    pair_exp = slope(sizes, pairwise)
    assert 1.3 <= lftj_exp <= 1.7, (sizes, lftj_ops, lftj_exp)
    assert pair_exp >= 1.9, (sizes, pairwise, pair_exp)
    # and in absolute terms the pairwise intermediate dwarfs LFTJ's work at the largest size
    assert pairwise[-1] > 20 * lftj_ops[-1]


def test_wildcards_are_joined_last_with_one_witness():
    """Found by the CLI fuzzer: a body with 40 ``e(_, w)`` atoms. Wildcards ordered before
    the head's variables made the join enumerate every combination of their values (over a
    minute here); ordered last, each needs one witness."""
    from deltalog.engine.analysis.analyze import load_program
    from deltalog.engine.evaluate import evaluate
    from deltalog.engine.join.trie import JoinStats

    wild = ", ".join(["e(_,w)"] * 40)
    prog = load_program(
        ".decl e(a: int, b: int)\n.decl f(a: int, b: int)\n"
        f"p(y, y) :- f(x, w), {wild}, e(_, _), e(y, w), w <= w, t = y + -1, t >= 0, "
        "t <= 4, !e(_, x).\n"
    )
    data = {"e": {(0, 1), (0, 2), (2, 1), (2, 3), (3, 3), (4, 2)},
            "f": {(0, 2), (0, 4), (3, 1), (3, 2), (4, 2)}}
    stats = JoinStats()
    assert evaluate(prog, data, stats=stats)["p"] == {(4, 4)}
    assert stats.operations < 5_000


def test_wildcards_go_after_a_head_variable_not_connected_to_them():
    """Found by the 30-minute fuzz: ``p1(y, y) :- f(_, w), ... (26 times), e(4, w), u(y).``
    y shares no atom with w, so the wildcards (connected to w) were bound before it and
    every combination of theirs was joined with u (3^26); now they follow y, in the plans
    of every strategy, and the answers stay the recompute's."""
    from deltalog.engine.analysis.analyze import load_program
    from deltalog.engine.dbsp.stratum import seeded_order
    from deltalog.engine.join.plan import choose_order, prepare
    from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine

    wild = "f(_, w), e(_, w), f(w, _), e(w, _)"
    prog = load_program(".decl e(a: int, b: int)\n.decl f(a: int, b: int)\n.decl u(a: int)\n"
                        f"p1(y, y) :- {wild}, e(4, w), u(y).\n")
    prep = prepare(prog.program.rules[0])
    orders = [((), choose_order(prep, {a.index: 4 for a in prep.atoms}))]
    orders += [(a.vars, seeded_order(prep, a.vars)) for a in prep.atoms]  # DBSP: the seed first
    for seed, order in orders:
        wildcards = [i for i, v in enumerate(order) if v.startswith("_") and v not in seed]
        assert len(wildcards) >= 3 and order.index("y") < min(wildcards), order
    data = {"e": {(0, 1), (4, 4), (2, 4), (4, 0)}, "u": {(1,), (2,), (3,)},
            "f": {(0, 4), (2, 4), (3, 4), (3, 2), (4, 1)}}
    change = {"f": {(0, 4): -1, (2, 4): -1, (3, 4): -1}, "u": {(4,): 1}}
    for strategy in ("sensitivity", "dbsp"):
        engine, rec = IncrementalEngine(prog, data, strategy), RecomputeEngine(prog, data)
        assert engine.relation("p1") == rec.relation("p1") == {(1, 1), (2, 2), (3, 3)}
        assert engine.apply(change) == rec.apply(change)
        assert engine.relation("p1") == frozenset()


def test_an_atom_repeated_up_to_its_wildcards_is_joined_once():
    """Found by the fuzz: 19 copies of ``e(4, _)``. The same condition under set semantics,
    kept once; before, DBSP's counting join enumerated every combination of their witnesses
    (3^19) and the others joined them one at a time."""
    from deltalog.engine.analysis.analyze import load_program
    from deltalog.engine.join.plan import prepare
    from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine

    copies = ", ".join(["e(4, _)"] * 19)
    prog = load_program(".decl e(a: int, b: int)\n.decl f(a: int, b: int)\n"
                        f"p(x, x) :- f(4, _), {copies}, e(x, x), e(x, _), f(x, y), f(x, y).\n")
    prep = prepare(prog.program.rules[0])
    assert [a.pred for a in prep.atoms] == ["f", "e", "e", "e", "f"]
    data = {"e": {(0, 0), (4, 1), (4, 2), (4, 3), (1, 1)}, "f": {(4, 1), (1, 2), (0, 5)}}
    change = {"e": {(4, 1): -1, (4, 2): -1}, "f": {(0, 6): 1}}
    for strategy in ("sensitivity", "dbsp"):
        engine, rec = IncrementalEngine(prog, data, strategy), RecomputeEngine(prog, data)
        assert engine.relation("p") == rec.relation("p") == {(0, 0), (1, 1)}
        assert engine.apply(change) == rec.apply(change)
        assert engine.relation("p") == rec.relation("p")
