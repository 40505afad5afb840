"""The partition planner (engine/partition.py), checked by simulation: every stratum of
random programs is evaluated partition by partition under the plan the planner chose
(each partition from its own rows and the broadcast ones, or each hypercube cell from the
rows routed to it), and the union of what the partitions keep equals the whole
evaluation. Plus the plans of the textbook cases and the reasons given for "single"."""

import itertools
from collections import defaultdict
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import analyze, load_program
from deltalog.engine.naive import evaluate_naive
from deltalog.engine.partition import Partitioning, plan_partitioning
from deltalog.engine.syntax.ast import Atom, Decl, Negation, Program, Var
from tests.engine.dbsp.recursive_programs import recursive_programs
from tests.engine.programs import edb_data, programs

P = 4


def _h(value: object, n: int) -> int:
    return hash(("partition", value)) % n


def _simulate(prog, stratum, plan: Partitioning, inputs) -> dict[str, set]:
    out: dict[str, set] = defaultdict(set)
    if plan.kind == "key":
        for i in range(P):
            local = {p: rows if p in plan.broadcast or p not in plan.columns
                     else {r for r in rows if _h(r[plan.columns[p]], P) == i}
                     for p, rows in inputs.items()}
            res = evaluate_naive(prog, local, preds=stratum.preds)
            for p in stratum.preds:
                out[p] |= {r for r in res[p] if _h(r[plan.columns[p]], P) == i}
        return out
    assert plan.kind == "hypercube"
    # every body atom reads its own copy of its relation (``#k`` names): the rows routed
    # for that atom, as a real hypercube would ship them
    rule = stratum.rules[0]
    atoms: list[Atom] = []
    body = []
    for k, item in enumerate(rule.body):
        if isinstance(item, Atom | Negation):
            atom = item.atom if isinstance(item, Negation) else item
            copy = replace(atom, pred=f"{atom.pred}__{k}")
            atoms.append(copy)
            body.append(Negation(copy) if isinstance(item, Negation) else copy)
        else:
            body.append(item)
    decls = tuple(Decl(a.pred, prog.schemas[a.pred.rsplit("__", 1)[0]].columns,
                       prog.schemas[a.pred.rsplit("__", 1)[0]].functional) for a in atoms)
    copied = analyze(Program(decls, (replace(rule, body=tuple(body)),), ()))
    dims = list(plan.shares)
    for cell in itertools.product(*(range(plan.shares[v]) for v in dims)):
        at = dict(zip(dims, cell, strict=True))
        local: dict[str, set] = {}
        for a in atoms:
            local[a.pred] = {row for row in inputs[a.pred.rsplit("__", 1)[0]]
                             if all(_h(row[j], plan.shares[arg.name]) == at[arg.name]
                                    for j, arg in enumerate(a.args)
                                    if isinstance(arg, Var) and arg.name in at)}
        res = evaluate_naive(copied, local, preds=stratum.preds)
        for p in stratum.preds:
            out[p] |= set(res[p])
    for p in stratum.preds:  # the program's own facts of the head, added by the driver
        out[p] |= set(prog.facts.get(p, ()))
    return out


def _check_every_stratum(text: str, data, huge: bool = False) -> list[str]:
    """Plan every stratum (with ``huge``, no input may be broadcast) and simulate it."""
    prog = load_program(text)
    whole = evaluate_naive(prog, data)
    kinds = []
    sizes = dict.fromkeys(prog.schemas, 10**9) if huge else None
    for stratum in prog.strata:
        plan = plan_partitioning(prog, stratum, sizes)
        kinds.append(plan.kind)
        if plan.kind == "single":
            assert plan.reason, stratum
            continue
        inputs = {p: set(whole[p]) if p in whole else set(data.get(p, ()))
                  for p in prog.schemas if p not in stratum.preds}
        got = _simulate(prog, stratum, plan, inputs)
        for p in stratum.preds:
            assert got[p] == set(whole[p]), (plan.describe(), p)
    return kinds


@settings(max_examples=150, deadline=None)
@given(text=programs(), data=edb_data(), huge=st.booleans())
def test_partitioned_evaluation_of_random_programs_equals_the_whole(text, data, huge):
    _check_every_stratum(text, data, huge)


@settings(max_examples=100, deadline=None)
@given(text=recursive_programs(), data=edb_data(), huge=st.booleans())
def test_partitioned_recursion_equals_the_whole(text, data, huge):
    _check_every_stratum(text, data, huge)


DECLS = ".decl e(a: int, b: int)\n.decl u(a: int)\n"
GRAPH = {"e": {(i, (i * 7 + 3) % 11) for i in range(11)} | {(1, 2), (2, 3), (3, 1)},
         "u": {(1,), (4,), (7,)}}


def _plan(text: str, pred: str, sizes=None) -> Partitioning:
    prog = load_program(DECLS + text)
    stratum = next(s for s in prog.strata if pred in s.preds)
    return plan_partitioning(prog, stratum, sizes)


def test_left_linear_closure_partitions_by_its_source_and_broadcasts_the_edges():
    text = "tc(x, y) :- e(x, y).\ntc(x, z) :- tc(x, y), e(y, z).\n"
    plan = _plan(text, "tc")
    assert plan.kind == "key" and plan.columns == {"tc": 0} and plan.broadcast == {"e"}
    assert _check_every_stratum(DECLS + text, GRAPH) == ["key"]
    right = _plan("tc(x, z) :- e(x, z).\ntc(x, z) :- e(x, y), tc(y, z).\n", "tc")
    assert right.kind == "key" and right.columns == {"tc": 1} and right.broadcast == {"e"}
    # edges too large to copy everywhere: no key plan is left
    big = _plan(text, "tc", sizes={"e": 10**9})
    assert big.kind == "single" and "too large to broadcast" in big.reason


def test_a_join_on_one_variable_partitions_every_atom_and_broadcasts_nothing():
    text = "p(x, y, z) :- e(x, y), e(x, z), u(x).\n"
    plan = _plan(text, "p", sizes={"e": 10**9, "u": 10**9})
    assert plan.kind == "key" and not plan.broadcast
    assert plan.columns == {"p": 0, "e": 0, "u": 0}
    assert _check_every_stratum(DECLS + text, GRAPH) == ["key"]


def test_triangles_get_a_hypercube_and_non_linear_recursion_stays_single():
    text = "tri(x, y, z) :- e(x, y), e(y, z), e(x, z).\n"
    plan = _plan(text, "tri", sizes={"e": 10**9})
    assert plan.kind == "hypercube" and plan.shares == {"x": 2, "y": 2, "z": 2}
    prog = load_program(DECLS + text)
    whole = evaluate_naive(prog, GRAPH)
    got = _simulate(prog, prog.strata[0], plan, {k: set(v) for k, v in GRAPH.items()})
    assert got["tri"] == set(whole["tri"]) and whole["tri"]
    nonlinear = _plan("tc(x, y) :- e(x, y).\ntc(x, z) :- tc(x, y), tc(y, z).\n", "tc")
    assert nonlinear.kind == "single" and "non-linear recursion" in nonlinear.reason
    assert nonlinear.describe().startswith("single process: ")


def test_an_aggregate_partitions_on_its_group_key_only():
    plan = _plan("deg[x] = n <- agg<<n = count()>> e(x, _).\n", "deg")
    assert plan.kind == "key" and plan.columns["deg"] == 0
    total = _plan("all[] = n <- agg<<n = count()>> e(_, _).\n", "all")
    assert total.kind == "single"


def test_describe_names_the_plan():
    plan = _plan("tc(x, y) :- e(x, y).\ntc(x, z) :- tc(x, y), e(y, z).\n", "tc")
    assert plan.describe() == "partitioned by key (tc by column 1; broadcast: e)"
