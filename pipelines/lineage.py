"""Row-level lineage of a pipeline's tables: why a row is there (a derivation tree of minimal
height down to EDB rows, each with the table version since which it is present), why a row
is not there, and what a change to the EDB would do to every IDB table.

``explain`` and ``why_not`` read the tables' current versions and ask ``engine.explain``;
``what_if`` runs each stratum's maintenance on a copy of its saved engine state (caught up in
memory with any input versions the state has not consumed yet) and writes nothing: the
tables and the saved states stay as they were. Nothing is stored for lineage between runs.
"""

from collections.abc import Iterable, Mapping
from pathlib import Path

from engine.analysis.program import AnalyzedProgram
from engine.errors import (
    BAD_VALUE,
    SYNTAX_UNEXPECTED,
    UNDECLARED,
    AnalysisError,
    DataError,
    DeltalogSyntaxError,
    Loc,
)
from engine.explain import Derivation, Explainer, render
from engine.runtime import IncrementalEngine
from engine.storage import Delta, add_into
from engine.syntax.ast import Const
from engine.syntax.parser import parse_program
from engine.values import Row, Value, format_fact
from pipelines import delta_io
from pipelines.inputs import InputReader, require_table
from pipelines.spec import PipelineSpec
from pipelines.state_store import load_state, state_path
from pipelines.stratum_program import stratum_program
from schemas.relation import arrow_to_rows


def parse_fact(prog: AnalyzedProgram, text: str, where: str = "<argument>") -> tuple[str, Row]:
    """``pred(v1, ...)`` or ``pred[k] = v`` (the final ``.`` optional) as (pred, row), its
    values checked against the declaration; errors name ``where`` (``WHERE:1:COL``)."""
    text = text.strip()
    parsed = parse_program(text if text.endswith(".") else text + ".", where)
    if len(parsed.facts) != 1 or parsed.rules or parsed.decls:
        raise DeltalogSyntaxError("expected one ground fact, such as p(1, \"a\")",
                                  Loc(where, 1, 1), SYNTAX_UNEXPECTED)
    fact = parsed.facts[0]
    loc = fact.loc or Loc(where, 1, 1)
    schema = prog.schemas.get(fact.pred)
    if schema is None:
        raise AnalysisError(f"no predicate named '{fact.pred}' in the program", loc, UNDECLARED)
    if fact.functional != schema.functional or len(fact.args) != schema.arity:
        form = f"{fact.pred}[keys] = value" if schema.functional else f"{fact.pred}(...)"
        raise DataError(
            f"'{fact.pred}' has {schema.arity} columns and is written {form}", loc, BAD_VALUE
        )
    row: list[Value] = []
    for arg, col in zip(fact.args, schema.columns, strict=True):
        value = arg.value if isinstance(arg, Const) else None
        ok = (
            isinstance(value, str) if col.type == "string"
            else isinstance(value, int | float) and not isinstance(value, bool)
            and (col.type == "float" or isinstance(value, int))
        )
        if not ok:
            raise DataError(
                f"column '{col.name}' of '{fact.pred}' is {col.type}, not {arg}", loc, BAD_VALUE
            )
        assert value is not None
        row.append(float(value) if col.type == "float" else value)
    return fact.pred, tuple(row)


def current_relations(
    root: str | Path, spec: PipelineSpec
) -> tuple[dict[str, set[Row]], dict[str, int]]:
    """Every EDB and IDB table of ``spec`` at its latest version, and those versions."""
    relations: dict[str, set[Row]] = {}
    versions: dict[str, int] = {}
    for pred in [*spec.edb_tables, *spec.idb_tables]:
        uri = spec.table_uri(root, pred)
        require_table(uri, pred, spec, "EDB" if pred in spec.edb_tables else "IDB")
        versions[pred] = delta_io.table_version(uri)
        relations[pred] = arrow_to_rows(delta_io.read_arrow(uri, versions[pred]))
    return relations, versions


def explain(
    root: str | Path, spec: PipelineSpec, fact: str, alternatives: int = 1
) -> list[str]:
    """Lines showing up to ``alternatives`` derivations of ``fact`` (the first of minimal
    height), each EDB row with its table and the version since which it is present."""
    prog = spec.program
    pred, row = parse_fact(prog, fact)
    relations, versions = current_relations(root, spec)
    explainer = Explainer(prog, relations)
    trees = explainer.alternatives(pred, row, max(1, alternatives))
    if not trees:
        raise DataError(
            f"{format_fact(pred, row)[:-1]} is not in the table of '{pred}' at version "
            f"{versions[pred]} (ask why not with --why-not)",
            spec.table_uri(root, pred),
            BAD_VALUE,
        )
    functional = frozenset(n for n, s in prog.schemas.items() if s.functional)
    lines: list[str] = []
    for i, tree in enumerate(trees):
        if len(trees) > 1:
            lines.append(f"derivation {i + 1} (height {tree.height}):")
        lines.extend(render(tree, functional, _since(root, spec, tree.facts()).note))
    return lines


def why_not(root: str | Path, spec: PipelineSpec, fact: str) -> list[str]:
    """Per rule that could derive ``fact``, the first body item no instance gets past."""
    pred, row = parse_fact(spec.program, fact)
    relations, _ = current_relations(root, spec)
    return Explainer(spec.program, relations).why_not(pred, row)


def what_if(
    root: str | Path,
    spec: PipelineSpec,
    delete: Iterable[str] = (),
    insert: Iterable[str] = (),
    state_root: str | Path | None = None,
) -> dict[str, Delta]:
    """What each IDB table would gain (+1) and lose (-1) if the EDB facts in ``delete``
    were deleted and those in ``insert`` inserted: each stratum's engine, loaded from its
    saved state (or from the tables when it has none) and caught up with the current
    input versions in memory, maintains the change. Nothing is written anywhere."""
    prog = spec.program
    change: dict[str, Delta] = {}
    for text, weight in [*((t, -1) for t in delete), *((t, 1) for t in insert)]:
        pred, row = parse_fact(prog, text)
        if pred not in prog.edb:
            raise DataError(
                f"'{pred}' is derived: what-if changes EDB facts only", "<argument>", BAD_VALUE
            )
        add_into(change.setdefault(pred, {}), row, weight)
    out: dict[str, Delta] = {}
    for index in range(len(prog.strata)):
        engine = _current_engine(root, spec, index, state_root)
        inputs = {p: d for p, d in {**change, **out}.items() if p in engine.prog.edb and d}
        effective = {p: _effective(engine, p, d) for p, d in inputs.items()}
        result = engine.apply({p: d for p, d in effective.items() if d}) if inputs else {}
        for pred in prog.strata[index].preds:
            out[pred] = dict(result.get(pred, {}))
    return {pred: delta for pred, delta in out.items() if delta}


def _effective(engine: IncrementalEngine, pred: str, delta: Delta) -> Delta:
    """The part of ``delta`` that changes the relation (a present row inserted, or an
    absent one deleted, changes nothing)."""
    return {
        r: w for r, w in delta.items() if (w > 0) != engine.contains(pred, r)
    }


def _current_engine(
    root: str | Path, spec: PipelineSpec, index: int, state_root: str | Path | None
) -> IncrementalEngine:
    """Stratum ``index``'s engine at the inputs' current versions, in memory only."""
    reader = InputReader(root, spec, index)
    inputs, _ = reader.snapshot()
    state = load_state(state_path(root, spec.name, index, state_root))
    if state is not None:
        try:
            engine = IncrementalEngine.loads(state.engine)
        except Exception:  # an unreadable state: the tables are the truth
            state = None
    if state is None:
        rows = {pred: reader.read(pred, v) for pred, v in inputs.items()}
        return IncrementalEngine(stratum_program(spec.program, index), rows)
    if dict(inputs) != state.input_versions:
        engine.apply(reader.changes(state.input_versions, inputs))
    return engine


class _Since(dict[tuple[str, Row], str]):
    def note(self, node: Derivation) -> str:
        return self.get((node.pred, node.row), "")


def _since(root: str | Path, spec: PipelineSpec, nodes: Iterable[Derivation]) -> _Since:
    """For the EDB rows among ``nodes``: "(table, since version N)", from the table's
    change data feed (the version of the insert that is still in force)."""
    wanted: dict[str, set[Row]] = {}
    for node in nodes:
        if node.rule is None and node.source == "edb":
            wanted.setdefault(node.pred, set()).add(node.row)
    out = _Since()
    for pred, rows in wanted.items():
        uri = spec.table_uri(root, pred)
        since = delta_io.versions_since(uri, rows)
        for row in rows:
            version = since.get(row)
            where = spec.edb_tables[pred]
            out[(pred, row)] = (
                f"({where}, since version {version})" if version is not None
                else f"({where}, since: not in the readable change feed)"
            )
    return out


def format_change(prog: AnalyzedProgram, change: Mapping[str, Delta]) -> list[str]:
    """``+ fact`` / ``- fact`` lines, tables in name order, rows sorted."""
    lines: list[str] = []
    for pred in sorted(change):
        functional = prog.schemas[pred].functional
        for row, w in sorted(change[pred].items(), key=lambda rw: (rw[1], repr(rw[0]))):
            lines.append(f"{'+' if w > 0 else '-'} {format_fact(pred, row, functional)[:-1]}")
    return lines
