"""Hypothesis strategies for random recursive programs: linear and non-linear
self-recursion (from ``tests.engine.programs``), mutual recursion between two predicates,
and a stratum above the recursion with negation or an aggregate over it."""

import re

from hypothesis import strategies as st

from tests.engine.programs import (
    DOMAIN,
    EDB_ARITY,
    EDB_DECLS,
    FLAG_DECL,
    programs,
    rule_text,
)


@st.composite
def mutual_programs(draw, flags: bool = False, arithmetic: bool = True):
    """``a`` and ``b`` defined in terms of each other (one SCC), then ``c`` over them with
    negation or an aggregate (with ``flags``, rules read the switch ``on()``; without
    ``arithmetic``, none computes)."""
    arities = {"a": draw(st.integers(1, 2)), "b": draw(st.integers(1, 2))}
    rules: list[str] = []
    for head in ("a", "b"):
        rules.append(draw(rule_text(head, arities[head], dict(EDB_ARITY), dict(EDB_ARITY),
                                    False, flags, arithmetic)))
    both = {**EDB_ARITY, **arities}
    for head in ("a", "b"):
        other = "b" if head == "a" else "a"
        body = draw(rule_text(head, arities[head], both, dict(EDB_ARITY), False, flags,
                              arithmetic).filter(lambda r, o=other: f"{o}(" in r.split(":-")[1]))
        rules.append(body)
    if draw(st.booleans()):
        rules.append(draw(rule_text("a", arities["a"], both, dict(EDB_ARITY), False, flags,
                                    arithmetic)))
    c_arity = draw(st.integers(1, 2))
    rules.append(draw(rule_text("c", c_arity, both, both, c_arity == 2, flags, arithmetic)))
    return EDB_DECLS + (FLAG_DECL if flags else "") + "\n".join(rules) + "\n"


_ARITH = re.compile(r"\b([ts]) = (\w+) \+ (-?\d+)")


def _bounded(text: str) -> str:
    """Arithmetic inside recursion could derive ever larger numbers (no fixed point):
    keep every computed value inside the tiny domain."""
    return _ARITH.sub(r"\1 = \2 + \3, \1 >= 0, \1 <= 4", text)


def recursive_programs(flags: bool = False, arithmetic: bool = True):
    return st.one_of(programs(recursion=True, aggregates=True, flags=flags,
                              arithmetic=arithmetic),
                     mutual_programs(flags, arithmetic)).map(_bounded)


def chains_beside(n: int) -> set[tuple[int, int]]:
    """A 4-node chain 0-1-2-3 beside ``n`` unrelated 3-node chains: a change to the first
    has the same depth whatever n (for work-follows-the-change tests)."""
    edges = {(0, 1), (1, 2), (2, 3)}
    for i in range(n):
        b = 10 + 3 * i
        edges |= {(b, b + 1), (b + 1, b + 2)}
    return edges


@st.composite
def programs_with_facts(draw, flags: bool = True, heads: bool = True):
    """A random program (with ``flags``, switches among its inputs) with facts stated in
    it: for e, which the input has too now and then (a row both the input and the
    program state stays when the input deletes it), with ``heads`` for its derived
    predicates, and for the switch."""
    text = draw(recursive_programs(flags=flags) | programs(recursion=False, complements=True,
                                                           flags=flags))
    facts = []
    for pred, args in sorted(set(re.findall(r"^(\w+)\(([^)]*)\) :-", text, re.M))):
        arity = len([a for a in args.split(",") if a.strip()])
        for _ in range(draw(st.integers(0, 2)) if heads else 0):
            facts.append(f"{pred}({', '.join(str(draw(DOMAIN)) for _ in range(arity))}).")
    for _ in range(draw(st.integers(0, 2))):
        facts.append(f"e({draw(DOMAIN)}, {draw(DOMAIN)}).")
    if flags and draw(st.booleans()):
        facts.append("on().")
    return text + "\n".join(facts) + "\n"
