"""The ``deltalog`` command line: ``deltalog eval PROGRAM.dl [--facts DIR]`` prints every
IDB relation as sorted fact lines. Errors print ``FILE:LINE:COL: error DLnnn: message`` on
stderr and exit 1, never a traceback."""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from engine.errors import DeltalogError
from engine.evaluate import evaluate, load_program
from engine.values import format_relations
from pipelines.facts import load_facts_dir


def _cmd_eval(args: argparse.Namespace) -> int:
    path = Path(args.program)
    text = path.read_text(encoding="utf-8")
    prog = load_program(text, str(path))
    inputs = load_facts_dir(Path(args.facts), prog) if args.facts else {}
    result = evaluate(prog, inputs)
    functional = [n for n, s in prog.schemas.items() if s.functional]
    out = format_relations(result, functional)
    if out:
        sys.stdout.write("\n".join(out) + "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deltalog", description="Incremental Datalog views over Delta Lake tables."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("eval", help="evaluate a program and print every IDB relation")
    ev.add_argument("program", help="the program (.dl)")
    ev.add_argument("--facts", metavar="DIR", help="directory of <predicate>.csv files")
    ev.set_defaults(func=_cmd_eval)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
