"""Containments the rules guarantee: ``p ⊆ q`` whatever the data, for complement iteration
(Veldhuizen 2014, §3.1.2), which is only sound where the negated relation is a subset.

What is recognized: ``s ⊆ t`` when ``s`` is derived (no program facts) and every rule
defining ``s`` has, besides anything else, a positive body atom with exactly the head's
arguments (the same terms in the same positions: ``s(x, y) :- t(x, y), ...``) over a
relation ``t`` with the same column types, or over some ``t'`` already known to be
contained in ``t`` (transitively, also through recursion). Rules with aggregates never
qualify. Everything else (projections, renamings, column permutations, containments that
hold only because of the data) is not recognized.
"""

from engine.analysis.program import AnalyzedProgram
from engine.syntax.ast import Atom


def supersets(prog: AnalyzedProgram) -> dict[str, frozenset[str]]:
    """For every relation ``p``, the relations ``q`` with ``p ⊆ q`` in every model of the
    program (``p`` itself included).

    The greatest solution of ``sup(p) = {p} ∪ ⋂ over p's rules r of ⋃ over r's atoms
    a(head args) of sup(a)`` (a relation without rules has ``{p}``). It is sound by
    induction on the derivation of a fact: the rule that derives ``p(c)`` holds ``a(c)``,
    derived earlier, and ``a(c)`` is in every relation of ``sup(a)``.
    """
    schemas = prog.schemas
    rules: dict[str, list[list[Atom]]] = {}
    for rule in prog.program.rules:
        head = rule.head
        same = [] if rule.aggregate is not None else [
            item for item in rule.body
            if isinstance(item, Atom) and item.args == head.args and item.pred in schemas
            and _types(prog, item.pred) == _types(prog, head.pred)
        ]
        rules.setdefault(head.pred, []).append(same)
    names = frozenset(schemas)
    sup: dict[str, frozenset[str]] = {
        p: names if p in rules and not prog.facts.get(p) else frozenset((p,)) for p in names
    }
    changed = True
    while changed:
        changed = False
        for p, bodies in rules.items():
            if sup[p] == {p}:
                continue
            new = names
            for atoms in bodies:
                new = new & frozenset().union(*(sup[a.pred] for a in atoms))
            new = new | {p}
            if new != sup[p]:
                sup[p] = new
                changed = True
    return sup


def _types(prog: AnalyzedProgram, pred: str) -> tuple[str, ...]:
    return tuple(c.type for c in prog.schemas[pred].columns)
