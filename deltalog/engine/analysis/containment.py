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

import weakref

from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.syntax.ast import Atom


def supersets(prog: AnalyzedProgram) -> dict[str, frozenset[str]]:
    """For every relation ``p``, the relations ``q`` with ``p ⊆ q`` in every model of the
    program (``p`` itself included).

    The greatest solution of ``sup(p) = {p} ∪ ⋂ over p's rules r of ⋃ over r's atoms
    a(head args) of sup(a)`` (a relation without rules has ``{p}``). It is sound by
    induction on the derivation of a fact: the rule that derives ``p(c)`` holds ``a(c)``,
    derived earlier, and ``a(c)`` is in every relation of ``sup(a)``.

    Computed once per program (every stratum of the incremental engine asks) by a worklist
    from the top (every relation) down, in time about linear in the program when few
    relations are contained in others: thousands of rules take milliseconds.
    """
    cached = _CACHE.get(id(prog))
    if cached is not None and cached[0]() is prog:
        return cached[1]
    result = _supersets(prog)
    key = id(prog)
    _CACHE[key] = (weakref.ref(prog, lambda _ref: _CACHE.pop(key, None)), result)
    return result


# id(program) -> (a weak reference to it, its supersets); an analyzed program is not hashable.
_CACHE: dict[int, tuple[weakref.ref[AnalyzedProgram], dict[str, frozenset[str]]]] = {}


def _supersets(prog: AnalyzedProgram) -> dict[str, frozenset[str]]:
    schemas = prog.schemas
    types = {p: tuple(c.type for c in s.columns) for p, s in schemas.items()}
    rules: dict[str, list[list[str]]] = {}
    for rule in prog.program.rules:
        head = rule.head
        same = [] if rule.aggregate is not None else [
            item.pred for item in rule.body
            if isinstance(item, Atom) and item.args == head.args and item.pred in schemas
            and types[item.pred] == types[head.pred]
        ]
        rules.setdefault(head.pred, []).append(same)
    # sup[p] is None for the top (every relation: nothing known against it yet).
    sup: dict[str, frozenset[str] | None] = {
        p: None if p in rules and not prog.facts.get(p) else frozenset((p,)) for p in schemas
    }
    readers: dict[str, set[str]] = {}  # a relation -> the heads of rules whose atoms it is
    for p, bodies in rules.items():
        for atoms in bodies:
            for a in atoms:
                readers.setdefault(a, set()).add(p)
    work = [p for p in rules if sup[p] is None]
    queued = set(work)
    while work:
        p = work.pop()
        queued.discard(p)
        new: frozenset[str] | None = None  # the intersection over p's rules, from the top
        for atoms in rules[p]:
            union: set[str] = set()
            for a in atoms:
                sa = sup[a]
                if sa is None:
                    break
                union |= sa
            else:  # no atom at the top: this rule bounds sup(p) by the union
                new = frozenset(union) if new is None else new & union
        if new is not None:
            new = new | {p}
        if new != sup[p]:
            sup[p] = new
            for q in readers.get(p, ()):
                if q not in queued and sup[q] != {q}:
                    queued.add(q)
                    work.append(q)
    names = frozenset(schemas)
    return {p: names if s is None else s for p, s in sup.items()}
