"""Analysis of a parsed program: the passes, in order, and the analyzed program.

    predicates  declarations, arities, functional form       (DL203, DL205, DL207)
    safety      range restriction, aggregates                (DL201, DL208)
    typecheck   column types from declarations and constants (DL204), and the
                variables of each rule a binding must convert (``Rule.casts``)
    stratify    strata in evaluation order                   (DL202)

then the schemas of undeclared predicates (typed by inference) and the program's facts.
"""

from collections import defaultdict

from deltalog.engine.analysis.common import collect_uses, is_fresh
from deltalog.engine.analysis.predicates import predicates
from deltalog.engine.analysis.program import AnalyzedProgram, RelationSchema
from deltalog.engine.analysis.safety import safety
from deltalog.engine.analysis.stratify import stratify
from deltalog.engine.analysis.typecheck import typecheck, with_casts
from deltalog.engine.semantics import coerce
from deltalog.engine.syntax.ast import Atom, Column, Program, Var
from deltalog.engine.syntax.parser import parse_program
from deltalog.engine.values import Row


def _column_names(program: Program, pred: str, arity: int) -> list[str]:
    """Column names of an undeclared predicate: the head variables of its first rule whose
    head holds distinct variables the user wrote (``reaches(p, q) :- ...`` names them p,
    q), else ``c0, c1, ...`` (an EDB predicate, or heads with constants or repeats)."""
    for rule in program.rules:
        if rule.head.pred != pred:
            continue
        names = [a.name for a in rule.head.args if isinstance(a, Var) and not is_fresh(a.name)]
        if len(names) == arity and len(set(names)) == arity:
            return names
    return [f"c{i}" for i in range(arity)]


def analyze(program: Program) -> AnalyzedProgram:
    """Run every pass; raise ``AnalysisError`` (DL2xx) with the location of the first error."""
    decls = predicates(program)
    safety(program)
    types = typecheck(program, decls)
    program = with_casts(program, types)
    idb = {r.head.pred for r in program.rules}
    preds: dict[str, Atom] = {}
    for atom, _ in collect_uses(program):
        preds.setdefault(atom.pred, atom)
    schemas: dict[str, RelationSchema] = {}
    for name in sorted(set(preds) | set(decls)):
        if name in decls:
            d = decls[name]
            schemas[name] = RelationSchema(name, d.columns, d.functional, True)
            continue
        atom = preds[name]
        names = _column_names(program, name, len(atom.args))
        cols = tuple(
            Column(names[i], types.col(name, i) or "string") for i in range(len(atom.args))
        )
        schemas[name] = RelationSchema(name, cols, atom.functional, False)
    strata, deps = stratify(program, idb)
    facts: dict[str, set[Row]] = defaultdict(set)
    for f in program.facts:
        schema = schemas[f.pred]
        facts[f.pred].add(
            tuple(
                coerce(a.value, c.type)  # type: ignore[union-attr]
                for a, c in zip(f.args, schema.columns, strict=True)
            )
        )
    edb = tuple(sorted(set(schemas) - idb))
    return AnalyzedProgram(
        program=program,
        schemas=schemas,
        edb=edb,
        idb=tuple(sorted(idb)),
        strata=tuple(strata),
        dependencies=deps,
        facts={k: frozenset(v) for k, v in facts.items()},
    )


def load_program(text: str, file: str = "<program>") -> AnalyzedProgram:
    """Parse and analyze; raises ``DeltalogError`` (DL1xx/DL2xx) on a bad program."""
    return analyze(parse_program(text, file))
