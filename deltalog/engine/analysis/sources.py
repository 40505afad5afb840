"""Every relation a program reads comes from somewhere: a rule, a fact, a declaration or the
inputs a command provides. An undeclared predicate with none of these is almost always a
misspelling (``egde(y, z)``), and reading it as an empty relation would give a wrong answer
with exit code 0; it is DL206 at its first use, with the closest name the program knows."""

import difflib
from collections.abc import Set as AbstractSet

from deltalog.engine.analysis.common import collect_uses, location
from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.errors import UNDECLARED, AnalysisError


def closest_name(name: str, known: AbstractSet[str]) -> str | None:
    """The known name most like ``name`` (a likely misspelling of it), if any is close."""
    hits = difflib.get_close_matches(name, sorted(known - {name}), n=1, cutoff=0.6)
    return hits[0] if hits else None


def check_sources(prog: AnalyzedProgram, provided: AbstractSet[str], inputs: str) -> None:
    """Raise DL206 for the first EDB predicate that is undeclared, has no fact in the
    program and is not in ``provided`` (the relations the command reads); ``inputs`` says
    where the command looked, with ``{pred}`` for the predicate's name (e.g. "no file
    {pred}.csv in facts/")."""
    for pred in prog.edb:
        if prog.schemas[pred].declared or pred in prog.facts or pred in provided:
            continue
        use = next(a for a, role in collect_uses(prog.program) if a.pred == pred and role == "body")
        sourced = {p for p, sch in prog.schemas.items()
                   if p in prog.idb or sch.declared or p in prog.facts or p in provided}
        near = closest_name(pred, sourced | set(provided))
        hint = (f"did you mean '{near}'?" if near is not None
                else f"declare it (.decl {pred}(...)) to read it as an empty relation")
        raise AnalysisError(
            f"'{pred}' is read here but nothing defines it: no rule, no fact, no declaration, "
            f"{inputs.format(pred=pred)}; {hint}",
            location(use.loc, prog.program.file),
            UNDECLARED,
        )
