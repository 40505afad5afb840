"""The ``deltalog`` command line: ``eval`` prints every IDB relation as sorted fact lines;
``run`` applies a transaction script (insert/delete/commit/dump); ``explain``,
``what-if``, ``show`` (a table as of EDB versions) and ``diff`` (between two table versions)
answer lineage questions on a pipeline's tables; ``init`` scaffolds a project of your own
(``deltalog.pipelines.scaffold``). Errors print
``FILE:LINE:COL: error DLnnn: message`` on stderr and exit 1, never a traceback."""

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.analysis.sources import check_sources
from deltalog.engine.errors import FUNCTIONAL_CONFLICT, DataError, DeltalogError, Loc
from deltalog.engine.evaluate import evaluate
from deltalog.engine.runtime import STRATEGIES, Delta, make_engine
from deltalog.engine.script import parse_script
from deltalog.engine.source import decode_source
from deltalog.engine.values import Row, format_relations
from deltalog.pipelines import lineage
from deltalog.pipelines.facts import load_facts_dir
from deltalog.pipelines.malloc import tune_malloc
from deltalog.pipelines.scaffold import init_project
from deltalog.pipelines.spec import PipelineSpec, default_warehouse, load_pipeline


def _looked(args: argparse.Namespace) -> str:
    """Where eval and run looked for an EDB relation's rows, for DL206."""
    if args.facts:
        return f"no file {{pred}}.csv in {args.facts}"
    return "no --facts directory"


def _cmd_eval(args: argparse.Namespace) -> int:
    path = Path(args.program)
    prog = load_program(decode_source(path.read_bytes(), str(path)), str(path))
    inputs = load_facts_dir(Path(args.facts), prog) if args.facts else {}
    check_sources(prog, set(inputs), _looked(args))
    with _at_rule(prog):
        result = evaluate(prog, inputs, max_iterations=args.max_iterations)
    functional = [n for n, s in prog.schemas.items() if s.functional]
    out = format_relations(result, functional)
    if out:
        sys.stdout.write("\n".join(out) + "\n")
    return 0


def _print_relation(prog: AnalyzedProgram, name: str, rows: frozenset[Row]) -> None:
    lines = format_relations({name: rows}, [name] if prog.schemas[name].functional else [])
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")


@contextmanager
def _at_rule(prog: AnalyzedProgram) -> Iterator[None]:
    """A second value for a key of a predicate one rule derives: said where that rule is."""
    try:
        yield
    except DataError as err:
        if err.code == FUNCTIONAL_CONFLICT and isinstance(err.where, str):
            rules = [r for r in prog.program.rules if r.head.pred == err.where]
            if len(rules) == 1 and rules[0].loc is not None:
                err.where = rules[0].loc
        raise


def _cmd_run(args: argparse.Namespace) -> int:
    path = Path(args.program)
    prog = load_program(decode_source(path.read_bytes(), str(path)), str(path))
    script_path = Path(args.script)
    script = decode_source(script_path.read_bytes(), str(script_path))
    ops = parse_script(script, str(script_path), prog)
    inputs = load_facts_dir(Path(args.facts), prog) if args.facts else {}
    scripted = {op.pred for op in ops if op.pred is not None}
    check_sources(prog, set(inputs) | scripted, _looked(args) + " and no insert in the script")
    with _at_rule(prog):
        engine = make_engine(prog, inputs, args.strategy)
    pending: dict[str, dict[Row, bool]] = {}
    written: dict[tuple[str, Row], Loc | None] = {}  # where the script inserted a row
    commits = 0
    for op in ops:
        if op.kind in ("insert", "delete"):
            assert op.pred is not None and op.row is not None
            pending.setdefault(op.pred, {})[op.row] = op.kind == "insert"
            written[(op.pred, op.row)] = op.loc
        elif op.kind == "commit":
            deltas: dict[str, Delta] = {}
            for pred, final in pending.items():
                delta = {
                    row: (1 if present else -1)
                    for row, present in final.items()
                    if present != engine.contains(pred, row)
                }
                if delta:
                    deltas[pred] = delta
            try:
                with _at_rule(prog):
                    engine.apply(deltas)
            except DataError as err:  # a row of the script at fault: where it was written
                at = [loc for p in deltas if p == err.where for r in err.rows
                      if deltas[p].get(r, 0) > 0 and (loc := written.get((p, r))) is not None]
                if at:  # (of two rows the script wrote, the later)
                    err.where = max(at, key=lambda loc: (loc.line, loc.col))
                raise
            pending = {}
            commits += 1
            if args.stats:
                record = {"commit": commits, "strategy": engine.strategy}
                record.update(engine.last_stats.as_dict())
                print(json.dumps(record), file=sys.stderr)
        elif op.pred is not None:
            _print_relation(prog, op.pred, engine.relation(op.pred))
        else:
            for name in prog.idb:
                _print_relation(prog, name, engine.relation(name))
    if pending:
        n = sum(len(v) for v in pending.values())
        print(f"deltalog: note: {n} change(s) after the last commit were not applied",
              file=sys.stderr)
    return 0


def _pipeline(args: argparse.Namespace) -> tuple[PipelineSpec, str]:
    spec = load_pipeline(args.pipeline)  # (its project's warehouse, from any folder)
    return spec, args.warehouse or default_warehouse(spec.directory)


def _cmd_explain(args: argparse.Namespace) -> int:
    spec, root = _pipeline(args)
    if args.why_not:
        lines = lineage.why_not(root, spec, args.fact)
    else:
        lines = lineage.explain(root, spec, args.fact, args.all)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _cmd_what_if(args: argparse.Namespace) -> int:
    spec, root = _pipeline(args)
    change = lineage.what_if(root, spec, args.delete, args.insert, _state_root(args))
    lines = lineage.format_change(spec.program, change)
    sys.stdout.write("\n".join(lines) + "\n" if lines else "no IDB row would change\n")
    return 0


def _state_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state", metavar="DIR",
        help="saved engine states (default: $DELTALOG_STATE, else in the warehouse)")


def _state_root(args: argparse.Namespace) -> str | None:
    return args.state or os.environ.get("DELTALOG_STATE") or None


def _cmd_show(args: argparse.Namespace) -> int:
    spec, root = _pipeline(args)
    if args.history:
        lines = lineage.history(root, spec, args.pred, _state_root(args))
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        return 0
    rows, note = lineage.show(root, spec, args.pred, args.as_of_edb, args.recompute,
                              _state_root(args))
    _print_relation(spec.program, args.pred, rows)
    print(f"deltalog: note: {note}", file=sys.stderr)
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    spec, root = _pipeline(args)
    lines = lineage.diff(root, spec, args.pred, args.start, args.end, args.limit,
                         _state_root(args))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _cmd_init(args: argparse.Namespace) -> int:
    written = init_project(args.dir, args.package)
    for path in written:
        print(f"wrote {path}")
    return 0


def _pipeline_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pipeline", help="a pipeline folder, or its name under the pipelines")
    parser.add_argument("--warehouse", metavar="DIR",
                        help="warehouse root (default: $DELTALOG_WAREHOUSE, else the warehouse "
                        "of [tool.deltalog] in the nearest pyproject.toml, else warehouse/ "
                        "in the deltalog repository, as the Dagster resource's)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deltalog", description="Incremental Datalog views over Delta Lake tables."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("eval", help="evaluate a program and print every IDB relation")
    ev.add_argument("program", help="the program (.dl)")
    ev.add_argument("--facts", metavar="DIR", help="directory of <predicate>.csv files")
    ev.add_argument("--max-iterations", type=int, metavar="N",
                    help="stop with DL312 when a recursion still derives facts after N "
                    "rounds (arithmetic in recursion can derive without end; default: none)")
    ev.set_defaults(func=_cmd_eval)
    run = sub.add_parser("run", help="run a transaction script (insert/delete/commit/dump)")
    run.add_argument("program", help="the program (.dl)")
    run.add_argument("--script", required=True, help="the transaction script")
    run.add_argument("--facts", metavar="DIR", help="initial EDB: directory of <pred>.csv")
    run.add_argument("--strategy", default="auto", choices=STRATEGIES,
                     help="maintenance strategy: auto (default: sensitivity indices for "
                     "non-recursive strata, DBSP for recursive ones), sensitivity, dbsp, "
                     "or recompute (evaluate from scratch after every commit)")
    run.add_argument("--stats", action="store_true",
                     help="print one JSON line of work counters per commit on stderr")
    run.set_defaults(func=_cmd_run)
    ex = sub.add_parser("explain", help="why a row of a pipeline's table is there (or not)")
    _pipeline_args(ex)
    ex.add_argument("fact", help="the row as a fact, e.g. 'reaches(\"curl\", \"libssl3\")'")
    ex.add_argument("--all", type=int, default=1, metavar="N",
                    help="print up to N derivations (the first is of minimal height)")
    ex.add_argument("--why-not", action="store_true",
                    help="for an absent row: per rule, the first body item no instance passes")
    ex.set_defaults(func=_cmd_explain)
    wi = sub.add_parser("what-if", help="what every IDB table would gain and lose if EDB "
                        "facts changed (nothing is written)")
    _pipeline_args(wi)
    wi.add_argument("--delete", action="append", default=[], metavar="FACT")
    wi.add_argument("--insert", action="append", default=[], metavar="FACT")
    _state_arg(wi)
    wi.set_defaults(func=_cmd_what_if)
    sh = sub.add_parser("show", help="print an IDB table, now or as it was when the EDB "
                        "tables were at given versions")
    _pipeline_args(sh)
    sh.add_argument("pred", help="the IDB predicate")
    sh.add_argument("--as-of-edb", metavar="VERSIONS",
                    help="table=N[,table=N...] (tables left out: any version), or one N for "
                    "every EDB table the predicate reads: the table version holding the "
                    "newest run that consumed those EDB versions")
    sh.add_argument("--recompute", action="store_true",
                    help="when no run consumed those versions, evaluate the program on the "
                    "EDB tables read at them (every table the predicate reads must be named)")
    sh.add_argument("--history", action="store_true",
                    help="list the table versions, the runs and the EDB versions they consumed")
    _state_arg(sh)
    sh.set_defaults(func=_cmd_show)
    df = sub.add_parser("diff", help="rows an IDB table gained and lost between two of its "
                        "versions, with the EDB changes that caused them")
    _pipeline_args(df)
    df.add_argument("pred", help="the IDB predicate")
    df.add_argument("start", type=int, metavar="FROM", help="a version of the IDB table")
    df.add_argument("end", type=int, metavar="TO", help="a later version of the IDB table")
    df.add_argument("--limit", type=int, default=50, metavar="N",
                    help="list at most N rows of each part (default 50)")
    _state_arg(df)
    df.set_defaults(func=_cmd_diff)
    it = sub.add_parser("init", help="scaffold a project of your own: pyproject.toml with "
                        "[tool.deltalog], an example pipeline, Dagster definitions")
    it.add_argument("dir", metavar="DIR", help="a new or empty folder")
    it.add_argument("--package", metavar="NAME",
                    help="the Python package to create (default: DIR's name)")
    it.set_defaults(func=_cmd_init)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tune_malloc()
    try:
        return int(args.func(args))
    except DeltalogError as err:
        print(str(err), file=sys.stderr)
        return 1
    except OSError as err:
        print(f"deltalog: error: {err.strerror}: {err.filename}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
