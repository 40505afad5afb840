"""The partition planner (engine/partition.py), checked by simulation: every stratum of
random programs is evaluated partition by partition under the plan the planner chose
(each partition from its own rows and the broadcast ones, or each hypercube cell from the
rows routed to it), and the union of what the partitions keep equals the whole
evaluation. Plus the plans of the textbook cases and the reasons given for "single"."""

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.naive import evaluate_naive
from deltalog.engine.partition import (
    Partitioning,
    Route,
    key_hash,
    plan_partitioning,
    split_stratum,
)
from deltalog.pipelines.stratum_program import stratum_program
from tests.engine.dbsp.recursive_programs import programs_with_facts, recursive_programs
from tests.engine.programs import edb_data, programs

P = 4


def _simulate(prog, index: int, plan: Partitioning, inputs) -> dict[str, set]:
    """Every partition of the split stratum evaluated from the rows its routes send it
    (no filter on what it derives): the union, asserting no fact is derived twice."""
    sub = stratum_program(prog, index)
    split = split_stratum(sub, plan, P)
    out: dict[str, set] = defaultdict(set)
    for k in range(split.parts):
        local = {name: {row for row in inputs[r.source] if k in r.targets(row, split.parts)}
                 for name, r in split.routes.items()}
        res = evaluate_naive(split.program, local, preds=prog.strata[index].preds)
        for p in prog.strata[index].preds:
            assert not out[p] & set(res[p]), (plan.describe(), p, "derived in two partitions")
            out[p] |= set(res[p])
    return out


def _check_every_stratum(text: str, data, huge: bool = False) -> list[str]:
    """Plan every stratum (with ``huge``, no input may be broadcast) and simulate it."""
    prog = load_program(text)
    whole = evaluate_naive(prog, data)
    kinds = []
    sizes = dict.fromkeys(prog.schemas, 10**9) if huge else None
    for index, stratum in enumerate(prog.strata):
        plan = plan_partitioning(prog, stratum, sizes, parts=P)
        kinds.append(plan.kind)
        if plan.kind == "single":
            assert plan.reason, stratum
            continue
        # (as a pipeline's partitions get them: an input's table rows, an upstream
        # relation's table, which holds what its stratum derived and stated)
        inputs = {p: set(data.get(p, ())) if p in prog.edb else set(whole[p])
                  for p in prog.schemas if p not in stratum.preds}
        got = _simulate(prog, index, plan, inputs)
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


@settings(max_examples=150, deadline=None)
@given(text=programs_with_facts(flags=False, heads=False), data=edb_data(), huge=st.booleans())
def test_partitioned_evaluation_with_facts_of_an_input_equals_the_whole(text, data, huge):
    """Facts stated for an input (which its table may hold too): a stratum that reads it
    stays in one process (its partitions would read the input's table only), and the
    strata above agree; each partition's rows are what a pipeline's partitions get."""
    _check_every_stratum(text, data, huge)


def test_facts_stated_for_an_input_keep_its_stratum_in_one_process():
    plan = _plan("e(1, 2).\ntc(x, y) :- e(x, y).\ntc(x, z) :- tc(x, y), e(y, z).\n", "tc")
    assert plan.kind == "single" and "states facts of e, an input" in plan.reason
    tri = _plan("e(1, 2).\ntri(x, y, z) :- e(x, y), e(y, z), e(z, x).\n", "tri")
    assert tri.kind == "single"
    upstream = _plan("p(1, 2).\np(x, y) :- e(x, y).\nq(x, z) :- p(x, y), e(y, z).\n", "q")
    assert upstream.kind == "key"  # (p's table holds its stated facts)


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
    got = _simulate(prog, 0, plan, {k: set(v) for k, v in GRAPH.items()})
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
    assert plan.describe() == ("partitioned by key (tc by column 1; broadcast: e; local "
                               "copies: e by column 1)")


def test_the_base_rule_of_a_closure_reads_a_local_copy_so_no_partition_repeats_another():
    prog = load_program(DECLS + "tc(x, y) :- e(x, y).\ntc(x, z) :- tc(x, y), e(y, z).\n")
    plan = plan_partitioning(prog, prog.strata[0], parts=P)
    split = split_stratum(stratum_program(prog, 0), plan, P)
    assert [str(r) for r in split.program.program.rules] == [
        "tc(x, y) :- e@0(x, y).", "tc(x, z) :- tc(x, y), e(y, z)."]
    assert split.routes == {"e": Route("e"), "e@0": Route("e", column=0)}
    edge = (3, 5)
    assert split.routes["e@0"].targets(edge, P) == [key_hash(3) % P]
    assert split.routes["e"].targets(edge, P) == list(range(P))


def test_key_hash_is_the_same_in_every_process_and_whole_floats_meet_their_ints():
    import subprocess
    import sys

    values = [0, -1, 2**62, "ice_cream", "", 1.5, -0.25]
    here = [key_hash(v) for v in values]
    code = ("from deltalog.engine.partition import key_hash; "
            f"print([key_hash(v) for v in {values!r}])")
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "random"}).stdout
    assert there.strip() == str(here)
    assert key_hash(3.0) == key_hash(3) and key_hash("3") != key_hash(3)
    assert len({key_hash(v) % 8 for v in range(100)}) == 8
