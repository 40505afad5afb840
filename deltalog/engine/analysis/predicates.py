"""Analysis pass 1: declarations, arities and functional form of every predicate."""

from deltalog.engine.analysis.common import collect_uses, location
from deltalog.engine.errors import (
    ARITY_MISMATCH,
    DUPLICATE_DECL,
    FUNCTIONAL_MISMATCH,
    INPUT_LIMIT,
    AnalysisError,
)
from deltalog.engine.syntax.ast import Atom, Decl, Program

# The most columns a relation has (an input limit, DL105): the join's tries index a
# relation by one column per level, up to this depth (``deltalog.engine.join.trie``).
MAX_ARITY = 64


def _too_wide(name: str, arity: int) -> str:
    return (f"'{name}' has {arity} columns, more than {MAX_ARITY} (the limit): split it into "
            "relations that share a key")


def predicates(program: Program) -> dict[str, Decl]:
    """The declarations by name; raises DL205 (declared twice), DL203 (another arity),
    DL207 (functional form mismatch), DL105 (more than ``MAX_ARITY`` columns) at the first
    offending place."""
    decls: dict[str, Decl] = {}
    for d in program.decls:
        if d.arity > MAX_ARITY:
            raise AnalysisError(_too_wide(d.name, d.arity), location(d.loc, program.file),
                                INPUT_LIMIT)
        if d.name in decls:
            first = decls[d.name].loc
            raise AnalysisError(
                f"'{d.name}' is declared twice (first at {first})",
                location(d.loc, program.file),
                DUPLICATE_DECL,
            )
        names = [c.name for c in d.columns]
        if len(set(names)) != len(names):
            raise AnalysisError(
                f"'{d.name}' declares a column name twice", location(d.loc, program.file),
                DUPLICATE_DECL,
            )
        decls[d.name] = d
    seen: dict[str, Atom] = {}
    for atom, _ in collect_uses(program):
        ref: Decl | Atom | None = decls.get(atom.pred) or seen.get(atom.pred)
        if ref is None and len(atom.args) > MAX_ARITY:
            raise AnalysisError(_too_wide(atom.pred, len(atom.args)),
                                location(atom.loc, program.file), INPUT_LIMIT)
        if ref is None:
            seen[atom.pred] = atom
            continue
        arity = ref.arity if isinstance(ref, Decl) else len(ref.args)
        if len(atom.args) != arity:
            raise AnalysisError(
                f"'{atom.pred}' has arity {arity} but is used here with {len(atom.args)} "
                "arguments",
                location(atom.loc, program.file),
                ARITY_MISMATCH,
            )
        if atom.functional != ref.functional:
            form = "functional (F[keys] = value)" if ref.functional else "a relation (R(args))"
            raise AnalysisError(
                f"'{atom.pred}' is {form} but is used here in the other form",
                location(atom.loc, program.file),
                FUNCTIONAL_MISMATCH,
            )
    return decls

