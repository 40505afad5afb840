"""Row-level lineage of a pipeline's tables: why a row is there (a derivation tree of minimal
height down to EDB rows, each with the table version since which it is present), why a row
is not there, and what a change to the EDB would do to every IDB table.

``explain`` and ``why_not`` read the tables' current versions and ask ``deltalog.engine.explain``;
``what_if`` runs each stratum's maintenance on a copy of its saved engine state (caught up in
memory with any input versions the state has not consumed yet) and writes nothing: the
tables and the saved states stay as they were. Nothing is stored for lineage between runs.

The history of an IDB table comes from its commits, which record the EDB versions each run
consumed: ``show`` reads the table as of given EDB versions (Delta time travel), ``diff``
compares two table versions (change data feed) with the EDB changes between the two runs'
inputs and, per row, the changed EDB rows its minimal derivation uses. ``run_sample`` gives a
run's materialization a small markdown sample of its change, from the engine it holds.
"""

import difflib
import itertools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.errors import (
    BAD_VALUE,
    DATA,
    SYNTAX_UNEXPECTED,
    UNDECLARED,
    AnalysisError,
    DataError,
    DeltalogSyntaxError,
    Loc,
)
from deltalog.engine.evaluate import Database, evaluate
from deltalog.engine.explain import Derivation, Explainer, render
from deltalog.engine.runtime import IncrementalEngine
from deltalog.engine.runtime import diff as rows_diff
from deltalog.engine.storage import Delta
from deltalog.engine.syntax.ast import Const
from deltalog.engine.syntax.parser import parse_program
from deltalog.engine.values import Row, Value, format_fact
from deltalog.pipelines import delta_io
from deltalog.pipelines.commits import (
    EDB_VERSIONS,
    INPUT_VERSIONS,
    MODE,
    SEQ,
    deltalog_commits,
    versions_of,
)
from deltalog.pipelines.inputs import InputReader, require_table
from deltalog.pipelines.spec import PipelineSpec
from deltalog.pipelines.state_store import load_state, state_path
from deltalog.pipelines.stratum_program import stratum_digest, stratum_program
from deltalog.schemas.relation import arrow_to_rows


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
        names = [c.name for c in spec.program.schemas[pred].columns]  # (only those are read)
        relations[pred] = arrow_to_rows(delta_io.read_arrow(uri, versions[pred]).select(names))
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
        shown, uri = format_fact(pred, row)[:-1], spec.table_uri(root, pred)
        if not explainer.holds(pred, row):
            raise DataError(f"{shown} is not in the table of '{pred}' at version "
                            f"{versions[pred]} (ask why not with --why-not)", uri, BAD_VALUE)
        from deltalog.pipelines.recompute import table_edb_versions

        _, consumed = table_edb_versions(root, spec, pred)
        moved = {e: versions[e] for e, v in consumed.items() if versions.get(e, v) != v}
        if moved:
            raise DataError(
                f"{shown} is in the table of '{pred}' at version {versions[pred]}, which "
                f"stands for the inputs at {_versions_text(consumed)}; they are now at "
                f"{_versions_text(moved)}, from which it does not follow: run the pipeline "
                "and ask again",
                uri, BAD_VALUE)
        raise DataError(f"{shown} is in the table of '{pred}' at version {versions[pred]} "
                        "but follows from no input row (written by something else?)",
                        uri, BAD_VALUE)
    functional = frozenset(n for n, s in prog.schemas.items() if s.functional)
    lines: list[str] = []
    for i, tree in enumerate(trees):
        if len(trees) > 1:
            lines.append(f"derivation {i + 1} (height {tree.height}):")
        lines.extend(render(tree, functional, _since(root, spec, tree.facts()).note))
    return lines


def _versions_text(versions: Mapping[str, int]) -> str:
    return ", ".join(f"{p} version {v}" for p, v in sorted(versions.items()))


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
    input versions in memory, maintains the change; what catching up changed in a
    stratum's relations reaches the strata above first (their input tables, the lower
    strata's, are behind as well). Nothing is written anywhere."""
    prog = spec.program
    change: dict[str, Delta] = {}
    for text, weight in [*((t, -1) for t in delete), *((t, 1) for t in insert)]:
        pred, row = parse_fact(prog, text)
        if pred not in prog.edb:
            raise DataError(
                f"'{pred}' is derived: what-if changes EDB facts only", "<argument>", BAD_VALUE
            )
        # Sets, not counts: the facts of ``delete`` go, then those of ``insert`` are there
        # (a fact named twice is one change; one in both lists is there after).
        change.setdefault(pred, {})[row] = weight
    out: dict[str, Delta] = {}
    # What the lower strata's engines changed in catching up with the inputs' current
    # versions, which their tables (the inputs of the strata above) do not hold yet.
    behind: dict[str, Delta] = {}
    for index in range(len(prog.strata)):
        engine, caught_up, loaded = _current_engine(root, spec, index, state_root)
        lower = {p: _effective(engine, p, d) for p, d in behind.items() if p in engine.prog.edb}
        if any(lower.values()):
            caught_up = _compose(caught_up, engine.apply({p: d for p, d in lower.items() if d}))
        if loaded:
            caught_up = _compose(caught_up, _against_tables(root, spec, index, engine))
        behind.update(caught_up)
        inputs = {p: d for p, d in {**change, **out}.items() if p in engine.prog.edb and d}
        effective = {p: _effective(engine, p, d) for p, d in inputs.items()}
        result = engine.apply({p: d for p, d in effective.items() if d}) if inputs else {}
        for pred in prog.strata[index].preds:
            out[pred] = dict(result.get(pred, {}))
    return {pred: delta for pred, delta in out.items() if delta}


def _compose(first: Mapping[str, Delta], then: Mapping[str, Delta]) -> dict[str, Delta]:
    """One change: ``first``, then ``then`` (set changes; a row inserted then deleted is
    no change)."""
    out = {p: dict(d) for p, d in first.items()}
    for pred, delta in then.items():
        held = out.setdefault(pred, {})
        for row, w in delta.items():
            if held.get(row, 0) == -w:
                del held[row]
            else:
                held[row] = w
    return out


def _against_tables(root: str | Path, spec: PipelineSpec, index: int,
                    engine: IncrementalEngine) -> dict[str, Delta]:
    """An engine loaded from the tables (no saved state): how its relations differ from
    its own tables (which the strata above read)."""
    out = {}
    for pred in spec.program.strata[index].preds:
        uri = spec.table_uri(root, pred)
        held = arrow_to_rows(delta_io.read_arrow(uri)) if delta_io.exists(uri) else set()
        out[pred] = rows_diff(held, engine.relation(pred))
    return out


def _effective(engine: IncrementalEngine, pred: str, delta: Delta) -> Delta:
    """The part of ``delta`` that changes the relation (a present row inserted, or an
    absent one deleted, changes nothing)."""
    return {
        r: w for r, w in delta.items() if (w > 0) != engine.contains(pred, r)
    }


def _current_engine(
    root: str | Path, spec: PipelineSpec, index: int, state_root: str | Path | None
) -> tuple[IncrementalEngine, dict[str, Delta], bool]:
    """Stratum ``index``'s engine at its input tables' current versions, in memory only,
    the change to its relations that catching up made, and whether it was loaded from the
    tables (no saved state: no change is known)."""
    reader = InputReader(root, spec, index)
    inputs, _ = reader.snapshot()
    state = load_state(state_path(root, spec.name, index, state_root))
    if state is not None and state.digest != stratum_digest(spec.program, index):
        state = None  # saved by another program: the tables are the truth
    if state is not None:
        try:
            source = state.open()
            engine = IncrementalEngine.loads(source.read(state.root), source)
        except Exception:  # an unreadable state: the tables are the truth
            state = None
    if state is None:
        given = {pred: reader.read_columns(pred, v) for pred, v in inputs.items()}
        return IncrementalEngine(stratum_program(spec.program, index), given), {}, True
    if dict(inputs) != state.input_versions:
        return engine, dict(engine.apply(reader.changes(state.input_versions, inputs))), False
    return engine, {}, False


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


# -- the history of an IDB table: show as of EDB versions, diff between table versions ----


@dataclass(frozen=True)
class TableRun:
    """One run of an IDB table's stratum, as the stratum's tables recorded it: the run
    number, the version of the table holding that run's result (the table's newest
    deltalog commit up to the run: a run that did not change the table did not commit to
    it), whether this run committed to it, and the input and EDB versions it consumed."""

    seq: int
    version: int
    committed: bool
    edb_versions: dict[str, int]
    input_versions: dict[str, int]
    mode: str


def _runs_of(
    root: str | Path, spec: PipelineSpec, pred: str, state_root: str | Path | None = None
) -> list[TableRun]:
    """Every run of ``pred``'s stratum that one of the stratum's tables recorded, or that
    the stratum's saved state remembers (its last runs, committed or not), oldest first."""
    idb_table(root, spec, pred)
    index = spec.stratum_of(pred)
    recorded: dict[int, dict[str, Any]] = {}
    own: list[tuple[int, int]] = []  # (seq, version) of pred's own deltalog commits
    for p in spec.program.strata[index].preds:
        uri = spec.table_uri(root, p)
        if not delta_io.exists(uri):
            continue
        for info in deltalog_commits(uri):
            if SEQ not in info:
                continue
            seq = int(info[SEQ])
            recorded.setdefault(seq, info)
            if p == pred:
                own.append((seq, int(info["version"])))
    own.sort()
    out: list[TableRun] = []
    for seq in sorted(recorded):
        mine = [(s, v) for s, v in own if s <= seq]
        if not mine:
            continue  # the table was not written yet
        info = recorded[seq]
        out.append(TableRun(
            seq, mine[-1][1], mine[-1][0] == seq, versions_of(info[EDB_VERSIONS]),
            versions_of(info.get(INPUT_VERSIONS, "{}")),
            "rebuild" if info.get(MODE) == "rebuild" else "",
        ))
    state = load_state(state_path(root, spec.name, index, state_root))
    if state is not None:  # runs that committed to none of the stratum's tables
        for seq, edbs, inputs, versions in state.history:
            if seq not in recorded and int(versions.get(pred, -1)) >= 0:
                out.append(TableRun(int(seq), int(versions[pred]), False,
                                    {str(k): int(v) for k, v in edbs.items()},
                                    {str(k): int(v) for k, v in inputs.items()}, ""))
        out.sort(key=lambda r: r.seq)
    return out


def idb_table(root: str | Path, spec: PipelineSpec, pred: str) -> str:
    """The table of IDB ``pred``: DL206 when the pipeline derives no ``pred``, DL304 when
    it was not written yet."""
    if pred not in spec.idb_tables:
        known = sorted(spec.idb_tables)
        close = difflib.get_close_matches(pred, known, 1)
        hint = f"did you mean '{close[0]}'?" if close else f"its IDB tables: {', '.join(known)}"
        raise AnalysisError(
            f"pipeline '{spec.name}' derives no table '{pred}' ({hint})", spec.name, UNDECLARED
        )
    uri = spec.table_uri(root, pred)
    require_table(uri, pred, spec, "IDB")
    return uri


def _run_at(runs: list[TableRun], version: int) -> TableRun | None:
    """The run whose result the table holds at ``version`` (its newest commit up to it)."""
    mine = [r for r in runs if r.committed and r.version <= version]
    return mine[-1] if mine else None


def parse_versions(spec: PipelineSpec, pred: str, text: str) -> dict[str, int]:
    """``--as-of-edb``: ``table=N,table=N`` (EDB tables ``pred`` depends on; tables left
    out may be at any version), or one ``N``: every EDB table ``pred`` depends on at
    version N."""
    closure = spec.edb_closure(pred)
    text = text.strip()
    if text.isdigit():
        return dict.fromkeys(closure, int(text))
    out: dict[str, int] = {}
    for part in text.split(","):
        name, eq, number = (s.strip() for s in part.partition("="))
        if not eq or not number.isdigit():
            raise DataError(
                f"--as-of-edb {text!r}: expected table=VERSION[,table=VERSION...] or one "
                "VERSION", "<argument>", BAD_VALUE,
            )
        if name not in closure:
            what = (f"'{pred}' does not depend on EDB table '{name}'"
                    if name in spec.edb_tables else f"no EDB table '{name}'")
            raise AnalysisError(
                f"--as-of-edb: {what}; '{pred}' reads {', '.join(closure) or 'no EDB table'}",
                "<argument>", UNDECLARED,
            )
        out[name] = int(number)
    return out


def _show_versions(versions: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(versions.items()))


def _rows(uri: str, version: int, schema_names: list[str]) -> set[Row]:
    return arrow_to_rows(delta_io.read_arrow(uri, version).select(schema_names))


def _columns(spec: PipelineSpec, pred: str) -> list[str]:
    return [c.name for c in spec.program.schemas[pred].columns]


def show(
    root: str | Path,
    spec: PipelineSpec,
    pred: str,
    as_of_edb: str | None = None,
    recompute: bool = False,
    state_root: str | Path | None = None,
) -> tuple[frozenset[Row], str]:
    """The rows of IDB ``pred``'s table, and a note saying where they come from: its
    current version; with ``as_of_edb`` (``parse_versions``), the table version holding
    the newest run that consumed those EDB versions (Delta time travel). When no run
    consumed them: DL300 naming the recorded versions nearest to them, or with
    ``recompute`` the program evaluated on the EDB tables read at those versions."""
    uri = idb_table(root, spec, pred)
    names = _columns(spec, pred)
    runs = _runs_of(root, spec, pred, state_root)
    if as_of_edb is None:
        version = delta_io.table_version(uri)
        run = _run_at(runs, version)
        made = f" (run {run.seq}, EDB {_show_versions(run.edb_versions)})" if run else ""
        return frozenset(_rows(uri, version, names)), f"{uri} version {version}{made}"
    wanted = parse_versions(spec, pred, as_of_edb)
    matches = [r for r in runs if all(r.edb_versions.get(t) == v for t, v in wanted.items())]
    if matches:
        run = matches[-1]
        return frozenset(_rows(uri, run.version, names)), (
            f"{uri} version {run.version}, the result of run {run.seq}, which consumed EDB "
            f"{_show_versions(run.edb_versions)}"
        )
    if recompute:
        versions = _edb_versions_for_recompute(root, spec, pred, wanted)
        return _recompute(root, spec, pred, versions), (
            f"recomputed from EDB {_show_versions(versions)} (no run consumed these "
            f"versions; {uri} holds no result of them)"
        )
    raise DataError(
        f"no run of '{pred}' consumed EDB {_show_versions(wanted)}; "
        + _nearest(runs, wanted)
        + " (or add --recompute to evaluate the program on the EDB tables at those versions)",
        uri,
        DATA,
    )


def _nearest(runs: list[TableRun], wanted: Mapping[str, int], count: int = 3) -> str:
    if not runs:
        return "the table records no run"
    def distance(r: TableRun) -> int:
        return sum(abs(r.edb_versions.get(t, 0) - v) for t, v in wanted.items())
    near = sorted(runs, key=lambda r: (distance(r), -r.seq))[:count]
    shown = "; ".join(
        f"{_show_versions(r.edb_versions)} (table version {r.version})"
        for r in sorted(near, key=lambda r: r.seq)
    )
    return f"recorded nearest: {shown}"


def _edb_versions_for_recompute(
    root: str | Path, spec: PipelineSpec, pred: str, wanted: Mapping[str, int]
) -> dict[str, int]:
    closure = spec.edb_closure(pred)
    missing = [t for t in closure if t not in wanted]
    if missing:
        raise DataError(
            f"--recompute needs a version of every EDB table '{pred}' depends on; missing: "
            f"{', '.join(missing)}", "<argument>", BAD_VALUE,
        )
    for table, version in wanted.items():
        latest = delta_io.table_version(spec.table_uri(root, table))
        if not 0 <= version <= latest:
            raise DataError(
                f"EDB table '{table}' has versions 0 to {latest}, not {version}",
                spec.table_uri(root, table), BAD_VALUE,
            )
    return dict(wanted)


def _recompute(
    root: str | Path, spec: PipelineSpec, pred: str, versions: Mapping[str, int]
) -> frozenset[Row]:
    """``pred`` evaluated on the EDB tables read at ``versions`` (Delta time travel)."""
    inputs = {
        t: _rows(spec.table_uri(root, t), v, _columns(spec, t)) for t, v in versions.items()
    }
    inputs.update({t: set() for t in spec.program.edb if t not in inputs})
    return evaluate(spec.program, inputs, preds=[pred])[pred]


def history(
    root: str | Path, spec: PipelineSpec, pred: str, state_root: str | Path | None = None
) -> list[str]:
    """One line per run recorded in ``pred``'s stratum: the table version holding its
    result, the run, and the EDB versions it consumed."""
    idb_table(root, spec, pred)
    lines = []
    for run in _runs_of(root, spec, pred, state_root):
        how = "committed" if run.committed else "no change to this table"
        mode = f", {run.mode}" if run.mode else ""
        lines.append(
            f"version {run.version}  run {run.seq} ({how}{mode})  EDB "
            f"{_show_versions(run.edb_versions)}"
        )
    return lines


def _relations_at(
    root: str | Path, spec: PipelineSpec, pred: str, version: int,
    memo: dict[tuple[str, int], dict[str, set[Row]]] | None = None,
    state_root: str | Path | None = None,
) -> dict[str, set[Row]]:
    """Every relation ``pred``'s rows at ``version`` were computed from: its stratum's
    tables at the run that wrote that version, and that run's inputs at the versions it
    recorded (upstream IDB tables in turn at theirs)."""
    memo = {} if memo is None else memo
    key = (pred, version)
    if key in memo:
        return memo[key]
    runs = _runs_of(root, spec, pred, state_root)
    run = _run_at(runs, version)
    out: dict[str, set[Row]] = {}
    if run is None:
        memo[key] = out
        return out
    for p in spec.program.strata[spec.stratum_of(pred)].preds:
        if p == pred:
            out[p] = _rows(spec.table_uri(root, p), version, _columns(spec, p))
        else:
            mine = [r for r in _runs_of(root, spec, p, state_root) if r.seq <= run.seq]
            if mine:
                out[p] = _rows(spec.table_uri(root, p), mine[-1].version, _columns(spec, p))
    for p, v in run.input_versions.items():
        if p in spec.edb_tables:
            out[p] = _rows(spec.table_uri(root, p), v, _columns(spec, p))
        elif p in spec.idb_tables:
            upstream = _relations_at(root, spec, p, v, memo, state_root)
            out.update({q: rows for q, rows in upstream.items() if q not in out})
    memo[key] = out
    return out


def diff(
    root: str | Path, spec: PipelineSpec, pred: str, start: int, end: int, limit: int = 50,
    state_root: str | Path | None = None,
) -> list[str]:
    """The rows IDB ``pred``'s table gained (+) and lost (-) from table version ``start``
    to ``end`` (its change data feed, net per row), the EDB changes between the versions
    the two runs consumed, and for each row (up to ``limit``) the changed EDB rows its
    derivation uses: a minimal derivation at ``end`` for a row added, at ``start`` for a
    row removed."""
    uri = idb_table(root, spec, pred)
    latest = delta_io.table_version(uri)
    if not 0 <= start < end <= latest:
        raise DataError(
            f"diff needs table versions FROM < TO between 0 and {latest} (the table's "
            f"versions), not {start} and {end}", uri, BAD_VALUE,
        )
    names = _columns(spec, pred)
    change = delta_io.changes(uri, start, end, names)
    runs = _runs_of(root, spec, pred, state_root)
    before, after = _run_at(runs, start), _run_at(runs, end)
    functional = frozenset(n for n, s in spec.program.schemas.items() if s.functional)
    lines = [f"{pred}: table version {start} -> {end}"]
    edb_change: dict[str, Delta] = {}
    if after is None:
        lines.append(f"EDB changes: no run recorded up to version {end}")
    elif before is None:
        lines.append(
            f"EDB changes: no run recorded up to version {start}; version {end} is run "
            f"{after.seq}, which consumed EDB {_show_versions(after.edb_versions)}"
        )
    else:
        moved = {t: (before.edb_versions.get(t), v) for t, v in after.edb_versions.items()}
        lines[0] += f" (run {before.seq} -> {after.seq}), EDB " + ", ".join(
            f"{t} {a} -> {b}" if a != b else f"{t} {b}" for t, (a, b) in sorted(moved.items())
        )
        for t, (a, b) in sorted(moved.items()):
            if a is not None and a != b:
                edb_change[t] = delta_io.changes(
                    spec.table_uri(root, t), min(a, b), max(a, b), _columns(spec, t)
                )
                if a > b:
                    edb_change[t] = {r: -w for r, w in edb_change[t].items()}
        total = sum(len(d) for d in edb_change.values())
        lines.append(f"EDB changes ({total}):")
        shown = _change_lines(spec, edb_change, limit)
        lines.extend(f"  {line}" for line in shown)
        if total > len(shown):
            lines.append(f"  ... {total - len(shown)} more (--limit)")
    added = sorted((r for r, w in change.items() if w > 0), key=repr)
    removed = sorted((r for r, w in change.items() if w < 0), key=repr)
    lines.append(f"{pred}: {len(added)} added, {len(removed)} removed")
    explainers: dict[int, Explainer] = {}
    listed = [("+", r, end) for r in added] + [("-", r, start) for r in removed]
    for sign, row, version in listed[:limit]:
        text = f"{sign} {format_fact(pred, row, pred in functional)[:-1]}"
        if edb_change:
            if version not in explainers:
                explainers[version] = Explainer(
                    spec.program, _relations_at(root, spec, pred, version, None, state_root)
                )
            text += "   " + _uses(explainers[version], pred, row, edb_change, sign, functional)
        lines.append(text)
    if len(listed) > limit:
        lines.append(f"... {len(listed) - limit} more (--limit)")
    return lines


def _uses(
    explainer: Explainer, pred: str, row: Row, edb_change: Mapping[str, Delta], sign: str,
    functional: frozenset[str], most: int = 5,
) -> str:
    """The changed EDB rows (inserted for an added row, deleted for a removed one) among
    the leaves of a minimal derivation of ``pred(row)``."""
    tree = explainer.explain(pred, row)
    if tree is None:
        return "(no derivation found)"
    weight = 1 if sign == "+" else -1
    used = sorted({
        (n.pred, n.row) for n in tree.facts()
        if n.rule is None and edb_change.get(n.pred, {}).get(n.row) == weight
    }, key=repr)
    if not used:
        negations = list(dict.fromkeys(
            c for n in tree.facts() for c in n.conditions if c.startswith("not ")
        ))
        if negations:
            return f"(no changed EDB row among its leaves; it holds through {negations[0]})"
        return "(no changed EDB row among its leaves: an aggregate's group changed)"
    shown = [f"{sign} {format_fact(p, r, p in functional)[:-1]}" for p, r in used[:most]]
    more = f", +{len(used) - most} more" if len(used) > most else ""
    return f"uses {', '.join(shown)}{more}"


def _change_lines(spec: PipelineSpec, change: Mapping[str, Delta], limit: int) -> list[str]:
    return format_change(spec.program, change)[:limit]


# -- a sample of a run's change for the asset's materialization metadata -----------------

SAMPLE_ROWS = 3  # rows added (with a derivation tree) and removed (listed) per table
SAMPLE_BYTES = 4096  # the markdown per table, at most
TREE_LINES = 12  # lines of one derivation tree, at most
# Rows the sample may sort to draw its trees. The joins read the engine's relations as they
# are and take each sorted index from the engine's own store when its maintainer keeps one
# (most inputs of non-recursive strata); an index it does not keep is sorted here, about
# 1 us a row, which past this budget would be a large share of an incremental run
# (bench.explain; sorting a 50k-row relation of the Debian demo took 46 ms of a 183 ms run).
TREE_MAX_ROWS = 25_000
# Facts the sample's trees may hold in all (before they are cut for display); once past,
# the remaining rows are listed without trees. An aggregate's row rests on its whole group,
# so one tree can hold thousands of facts and cost O(group) to find (libc6's count in the
# Debian demo: 8,461 members, about 40 ms).
TREE_MAX_WORK = 2_000


class _TooLarge(Exception):
    pass


class _StoreIndexes(Database):
    """The engine's relations without a copy; a join index from the engine's store when it
    keeps one for that column order, else sorted here while ``budget`` rows last."""

    def __init__(self, engine: IncrementalEngine, budget: int):
        names = list(engine.prog.schemas)
        super().__init__({n: engine.store[n].rows for n in names})  # type: ignore[misc]
        self._engine, self.budget = engine, budget
        self._names = {id(engine.store[n].rows): n for n in names}

    def index(self, rows: set[Row], perm: tuple[int, ...]) -> list[Row]:
        name = self._names.get(id(rows))
        if name is not None:
            # the store's maintained indexes kept in memory (a SortedList is a sorted
            # sequence, as the joins need); read, never built here. One kept on disk
            # (an engine opened from a saved state) would have to be read whole.
            kept = self._engine.store[name].kept_index(perm)
            if kept is not None:
                return kept  # type: ignore[no-any-return]
        if (id(rows), perm) not in self._indexes:
            if len(rows) > self.budget:
                raise _TooLarge(f"`{name}` ({len(rows):,} rows)")
            self.budget -= len(rows)
        return super().index(rows, perm)


def run_sample(engine: IncrementalEngine,
               change: Mapping[str, Mapping[Row, int]]) -> dict[str, str]:
    """Per IDB table of ``engine``'s stratum that ``change`` (the run's IDB change) touched,
    markdown showing up to ``SAMPLE_ROWS`` added rows with a minimal derivation tree over
    the engine's relations after the run (the stratum's input rows as leaves) and up to
    ``SAMPLE_ROWS`` removed rows, at most ``SAMPLE_BYTES``. Reads nothing but the engine the
    run holds and its change: counting the change is O(change); the trees join the engine's
    relations through the indexes its store keeps, and sort at most ``TREE_MAX_ROWS`` rows
    for the others, else the rows are listed without trees (``deltalog explain`` draws one
    on demand for any table)."""
    started = time.perf_counter()
    prog = engine.prog
    functional = frozenset(n for n, s in prog.schemas.items() if s.functional)
    explainer = Explainer(prog, {})
    explainer.db = _StoreIndexes(engine, TREE_MAX_ROWS)  # the engine's rows, not a copy
    too_large = ""
    facts = 0  # in the trees drawn so far
    out: dict[str, str] = {}
    for pred in sorted(p for p in change if p in prog.idb and change[p]):
        delta = change[pred]
        n_added = sum(1 for w in delta.values() if w > 0)
        added = sorted(itertools.islice((r for r, w in delta.items() if w > 0), SAMPLE_ROWS),
                       key=repr)
        removed = sorted(itertools.islice((r for r, w in delta.items() if w < 0), SAMPLE_ROWS),
                         key=repr)
        parts = [f"+{n_added} / -{len(delta) - n_added} rows in this run; a sample:", ""]
        trees = 0
        for row in added:
            fact = format_fact(pred, row, pred in functional)[:-1]
            tree = None
            if not too_large and facts > TREE_MAX_WORK:
                too_large = f"the trees so far hold more than {TREE_MAX_WORK:,} facts"
            if not too_large:
                try:
                    tree = explainer.explain(pred, row)
                except _TooLarge as err:
                    too_large = f"a tree would sort {err}, which the engine keeps no index of"
            if too_large:
                parts.append(f"- added `{fact}`")
                continue
            facts += sum(1 for _ in tree.facts()) if tree else 0
            lines = (render(_pruned(tree, [TREE_LINES]), functional, _input_note(prog))
                     if tree else ["(no derivation)"])
            if len(lines) > TREE_LINES:
                lines = [*lines[:TREE_LINES], f"... {len(lines) - TREE_LINES} more lines"]
            parts.extend([f"- added `{fact}`:", "", "```", *lines, "```", ""])
            trees += 1
        parts.extend(f"- removed `{format_fact(pred, r, pred in functional)[:-1]}`"
                     for r in removed)
        parts.append("")
        if too_large and trees < len(added):
            parts.append(f"_No more trees: {too_large} (the sample sorts at most "
                         f"{TREE_MAX_ROWS:,} rows; its trees hold at most about "
                         f"{TREE_MAX_WORK:,} facts); `deltalog explain` draws one on demand._")
        else:
            parts.append("_Trees over the stratum's relations after the run, its inputs as "
                         "leaves; `deltalog explain` goes down to EDB rows, `deltalog diff` "
                         "gives the whole change._")
        out[pred] = _bounded("\n".join(parts))
    elapsed_ms = (time.perf_counter() - started) * 1000
    return {p: f"{text}\n\n_Sample computed in {elapsed_ms:.1f} ms._" for p, text in out.items()}


def _pruned(node: Derivation, budget: list[int]) -> Derivation:
    """A copy of ``node`` with at most ``budget[0]`` facts, depth first; a cut node says how
    many of its children are not shown (so rendering costs no more than what is shown)."""
    budget[0] -= 1
    kids = []
    for child in node.children:
        if budget[0] <= 0:
            break
        kids.append(_pruned(child, budget))
    cut = len(node.children) - len(kids)
    conditions = [*node.conditions, *([f"... {cut} more not shown"] if cut else [])]
    return Derivation(node.pred, node.row, node.rule, node.source, kids, conditions)


def _input_note(prog: AnalyzedProgram) -> Callable[[Derivation], str]:
    def note(node: Derivation) -> str:
        return "(stratum input)" if node.source == "edb" and node.pred in prog.edb else ""
    return note


def _bounded(text: str) -> str:
    data = text.encode()
    if len(data) <= SAMPLE_BYTES:
        return text
    cut = data[: SAMPLE_BYTES - 64].decode(errors="ignore")
    if cut.count("```") % 2:
        cut += "\n```"
    return cut + "\n\n_(cut at 4 KB)_"
