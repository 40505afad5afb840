"""One stratum of a program as a program of its own: the stratum's rules, with every
predicate they read from outside the stratum declared as EDB.

A pipeline maintains each stratum in its own Dagster asset, so each keeps an engine whose
inputs are the tables it reads (EDB tables and upstream IDB tables). Built from the analyzed
AST (no re-parse), with declarations taken from the full program's schemas so that column
names, types and functional-ness are the same as in the tables.
"""

import hashlib

from deltalog.engine.analysis.analyze import analyze
from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.syntax.ast import Decl, Program


def stratum_program(prog: AnalyzedProgram, index: int) -> AnalyzedProgram:
    """The rules of stratum ``index`` of ``prog``; their outside body predicates are EDB.

    Facts of the stratum's predicates and of the program's own EDB predicates are kept
    (facts of upstream IDB predicates arrive with their tables)."""
    stratum = prog.strata[index]
    used = set(stratum.preds)
    for pred in stratum.preds:
        used |= prog.dependencies.get(pred, frozenset())
    decls = tuple(
        Decl(s.name, s.columns, s.functional) for name, s in sorted(prog.schemas.items())
        if name in used
    )
    keep_facts = set(stratum.preds) | (used & set(prog.edb))
    facts = tuple(f for f in prog.program.facts if f.pred in keep_facts)
    program = Program(decls, stratum.rules, facts, prog.program.file)
    return analyze(program)


def stratum_digest(prog: AnalyzedProgram, index: int) -> str:
    """A fingerprint of what a stratum computes (its rules and the schemas they touch): a
    saved engine state is only valid for the same fingerprint. A rule's ``Rule.casts``
    (variables a binding converts) are part of it: a state saved before a rule had them
    holds values computed with the number its first binder gave, and is rebuilt."""
    sub = stratum_program(prog, index)
    parts = [
        *(f"{r} casts {r.casts}" if r.casts else str(r) for r in sub.program.rules),
        *(repr(sub.schemas[n]) for n in sorted(sub.schemas)),
        *sorted(str(f) for f in sub.program.facts),
    ]
    text = "\n".join(parts)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
