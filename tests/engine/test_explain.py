"""Derivation trees (``deltalog.engine.explain``) against two oracles written apart from it: a
checker that re-evaluates every rule instance of a tree in the current relations, and
minimal heights from a Bellman-Ford iteration over the naive evaluator's rule instances.
On random programs (recursion, mutual recursion, negation, aggregates) and data: every
fact that holds has a valid tree of minimal height, alternatives are valid too, and every
absent fact gets a why-not per rule."""

import math

from hypothesis import given, note, settings
from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.explain import Derivation, Explainer, render
from deltalog.engine.naive import _match, _solve, evaluate_naive
from deltalog.engine.semantics import compare, eval_expr
from deltalog.engine.syntax.ast import Atom, Compare, Negation, Var
from tests.engine.dbsp.recursive_programs import recursive_programs
from tests.engine.programs import DOMAIN, EDB_ARITY

# Dense inputs over the tiny domain, so that facts have several derivations of different
# heights (sparse ones leave most IDB relations empty).
dense_data = st.fixed_dictionaries({
    name: st.sets(st.tuples(*([DOMAIN] * arity)), min_size=3 * arity, max_size=8 * arity)
    for name, arity in EDB_ARITY.items()
})


def _relations(prog, data):
    rels = {name: set(rows) for name, rows in data.items() if name in prog.schemas}
    rels.update({name: set(rows) for name, rows in evaluate_naive(prog, data).items()})
    for name in prog.schemas:
        rels.setdefault(name, set())
    return rels


def _valid(prog, rels, node: Derivation) -> bool:
    """``node`` is a derivation in ``rels``: its fact holds, an input fact is an input,
    and a rule node is an instance of its rule whose positive facts are its children."""
    if node.row not in rels[node.pred]:
        return False
    if node.rule is None:
        return node.pred in prog.edb or node.row in prog.facts.get(node.pred, ())
    rule = node.rule
    env = _match(rule.head, node.row, {}) if rule.aggregate is None else _match(
        Atom(rule.head.pred, rule.head.args[:-1]), node.row[:-1], {}
    )
    if env is None:
        return False
    kids = {(c.pred, c.row) for c in node.children}
    if rule.aggregate is not None:  # the children are exactly the group's facts
        group = {
            (a.pred, tuple(e[x.name] if isinstance(x, Var) else x.value for x in a.args))
            for e in _solve(list(rule.body), dict(env), rels)
            for a in rule.body if isinstance(a, Atom)
        }
        return group == kids and all(_valid(prog, rels, c) for c in node.children)
    only_kids = {p: {r for q, r in kids if q == p} for p, _ in kids}
    for e in _solve([i for i in rule.body if isinstance(i, Atom)], dict(env), only_kids):
        if _holds_rest(rule, e, rels):
            return all(_valid(prog, rels, c) for c in node.children)
    return False


def _holds_rest(rule, env, rels) -> bool:
    for item in rule.body:
        if isinstance(item, Negation):
            if any(_match(item.atom, r, env) is not None for r in rels[item.atom.pred]):
                return False
        elif isinstance(item, Compare):
            if not item.vars <= env.keys():
                if item.op != "=":
                    return False
                solved = next(_solve([item], dict(env), rels), None)
                if solved is None:
                    return False
                env.update(solved)
                continue
            left, right = eval_expr(item.left, env), eval_expr(item.right, env)
            if left is None or right is None or not compare(item.op, left, right):
                return False
    return True


def _min_heights(prog, rels) -> dict:
    """Minimal derivation height of every fact: inputs 0, then relax every rule instance
    (naive evaluation over the final relations) until nothing gets lower."""
    h = {}
    for name in prog.schemas:
        for row in rels[name]:
            leaf = name in prog.edb or row in prog.facts.get(name, ())
            h[(name, row)] = 0 if leaf else math.inf
    changed = True
    while changed:
        changed = False
        for rule in prog.program.rules:
            schema = prog.schemas[rule.head.pred]
            groups: dict = {}
            for env in _solve(list(rule.body), {}, rels):
                kids = [
                    (a.pred, tuple(env[x.name] if isinstance(x, Var) else x.value for x in a.args))
                    for a in rule.body if isinstance(a, Atom)
                ]
                if rule.aggregate is None:
                    head = tuple(
                        env[a.name] if isinstance(a, Var) else a.value for a in rule.head.args
                    )
                    head = tuple(float(v) if c.type == "float" else v
                                 for v, c in zip(head, schema.columns, strict=True))
                    cand = 1 + max((h.get(k, math.inf) for k in kids), default=0)
                    if cand < h.get((rule.head.pred, head), math.inf):
                        h[(rule.head.pred, head)] = cand
                        changed = True
                else:
                    key = tuple(env[a.name] if isinstance(a, Var) else a.value
                                for a in rule.head.args[:-1])
                    groups.setdefault(key, []).extend(kids)
            for key, kids in groups.items():
                for row in rels[rule.head.pred]:
                    if row[:-1] == key:
                        cand = 1 + max((h.get(k, math.inf) for k in kids), default=0)
                        if cand < h[(rule.head.pred, row)]:
                            h[(rule.head.pred, row)] = cand
                            changed = True
    return h


@settings(max_examples=60, deadline=None)
@given(text=recursive_programs(), data=dense_data, pick=st.randoms(use_true_random=False))
def test_every_fact_has_a_valid_tree_of_minimal_height(text, data, pick):
    prog = load_program(text)
    rels = _relations(prog, data)
    heights = _min_heights(prog, rels)
    explainer = Explainer(prog, rels)
    facts = [(p, r) for p in sorted(prog.idb) for r in sorted(rels[p], key=repr)]
    for pred, row in pick.sample(facts, min(len(facts), 12)):
        tree = explainer.explain(pred, row)
        note(f"{pred}{row}\n" + "\n".join(render(tree) if tree else ["-"]))
        assert tree is not None
        assert _valid(prog, rels, tree)
        assert tree.height == heights[(pred, row)]
        for alt in explainer.alternatives(pred, row, 3):
            assert _valid(prog, rels, alt)


@settings(max_examples=40, deadline=None)
@given(text=recursive_programs(), data=dense_data)
def test_absent_facts_get_a_reason_per_rule(text, data):
    prog = load_program(text)
    rels = _relations(prog, data)
    explainer = Explainer(prog, rels)
    for pred in sorted(prog.idb):
        arity = prog.schemas[pred].arity
        for row in [tuple(range(arity)), tuple([9] * arity)]:
            if row in rels[pred]:
                continue
            assert explainer.explain(pred, row) is None
            reasons = explainer.why_not(pred, row)
            rules = [r for r in prog.program.rules if r.head.pred == pred]
            assert len(reasons) == len(rules) and all(reasons)


def test_a_closure_fact_is_explained_down_to_edges():
    prog = load_program(
        ".decl edge(a: int, b: int)\n.decl blocked(a: int)\n"
        "reach(x, y) :- edge(x, y), !blocked(y).\n"
        "reach(x, z) :- reach(x, y), edge(y, z), !blocked(z).\n",
        "p.dl",
    )
    data = {"edge": {(1, 2), (2, 3), (3, 4), (1, 3)}, "blocked": {(5,)}}
    rels = _relations(prog, data)
    tree = Explainer(prog, rels).explain("reach", (1, 4))
    assert tree is not None and tree.height == 2  # through (1, 3), not (1, 2), (2, 3)
    lines = render(tree)
    assert lines[0] == "reach(1, 4)   [rule p.dl:4:1]"
    assert "not blocked(4)" in "\n".join(lines) and "edge(3, 4)   [edb fact]" in "\n".join(lines)
    why = Explainer(prog, rels).why_not("reach", (4, 1))
    assert why == [
        "rule at p.dl:3:1: no instance of reach(4, 1) gets past edge(x, y)",
        "rule at p.dl:4:1: no instance of reach(4, 1) gets past reach(x, y)",
    ]


def test_a_fact_found_lower_inside_its_own_search_keeps_the_lower_derivation():
    """c(1)'s first child takes three steps, so a(1) is first asked at bound 3; its first
    rule goes through b(1), whose search finds a(1) at height 1 by a's second rule. The
    derivation through b(1) (height 3) must not replace that one: a(1) -> b(1) -> a(1)
    would be a derivation that reaches itself (a RecursionError when rendered)."""
    prog = load_program(".decl e(x: int)\n"
                        "x3(x) :- e(x).\nx2(x) :- x3(x).\nx1(x) :- x2(x).\n"
                        "c(x) :- x1(x), a(x).\n"
                        "a(x) :- b(x).\na(x) :- e(x).\nb(x) :- a(x).\n")
    rels = _relations(prog, {"e": {(1,)}})
    tree = Explainer(prog, rels).explain("c", (1,))
    assert tree is not None and _valid(prog, rels, tree)
    assert tree.height == 4
    (a,) = [k for k in tree.children if k.pred == "a"]
    assert a.height == 1 and [k.pred for k in a.children] == ["e"]


def test_strings_in_a_derivation_are_written_as_facts_write_them():
    """A negated atom's string and a rule's bindings show "n8" (escaped, double quotes), as
    the facts around them do, not Python's 'n8'."""
    prog = load_program('.decl t(a: string)\n.decl n(a: string)\nq(x) :- t(x), !n(x).\n',
                        "s.dl")
    rels = _relations(prog, {"t": {("n8",), ('say "hi"',)}, "n": {("b",)}})
    text = "\n".join(render(Explainer(prog, rels).explain("q", ("n8",))))
    assert 'not n("n8")' in text and 't("n8")' in text and "'" not in text
    text = "\n".join(render(Explainer(prog, rels).explain("q", ('say "hi"',))))
    assert 'not n("say \\"hi\\"")' in text
