"""The fuzz cases of the CLI and how each is judged (shared by the quick tests in the default
run and the long run of ``make fuzz``).

Three kinds of input: programs from the grammar (random stratified programs with
recursion, negation, comparisons, arithmetic and aggregates, over CSV facts, plus a
transaction script); the same programs with bytes flipped, inserted, deleted or swapped
(in the program, the CSV or the script); and raw bytes as the program. Each case runs
``deltalog eval`` and ``deltalog run`` in this process. A case fails when anything escapes
the CLI (a traceback), when a failed run's stderr is not one ``... error DLnnn: ...`` line,
or when a run that succeeds prints other facts than the naive evaluator (the oracle)
computes from the same input.
"""

import contextlib
import io
import re
import signal
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.naive import evaluate_naive
from deltalog.engine.values import format_relations
from deltalog.pipelines.cli import main
from deltalog.pipelines.facts import load_facts_dir
from tests.engine.dbsp.recursive_programs import recursive_programs
from tests.engine.programs import DOMAIN, EDB_ARITY

ERROR_LINE = re.compile(r"^(?:.+: )?error DL\d{3}: \S")
MAX_ITERATIONS = "200"


@dataclass
class Case:
    program: bytes
    facts: dict[str, bytes]
    script: bytes


@dataclass
class Outcome:
    kind: str  # "ok" (both commands ran, and agree with the oracle) or "error" (a DL error)
    detail: str = ""


class Traceback(AssertionError):
    """Something escaped the CLI: what a user would see as a traceback."""


class WrongAnswer(AssertionError):
    """A command succeeded with other facts than the oracle's."""


class TooSlow(Exception):
    """A case past the time bound (``SECONDS``): reported apart, with its program."""


SECONDS = 20


@contextlib.contextmanager
def _bounded(case: "Case") -> Iterator[None]:
    """Raise ``TooSlow`` when the case runs past ``SECONDS`` (SIGALRM; main thread only)."""

    def expire(signum: int, frame: object) -> None:
        raise TooSlow(f"past {SECONDS} s\n{_show(case)}")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _csv(name: str, rows) -> bytes:
    cols = ["a", "b"][: EDB_ARITY[name]]
    header = ",".join(cols)
    return ("\n".join([header, *(",".join(map(str, r)) for r in sorted(rows))]) + "\n").encode()


_facts = st.fixed_dictionaries({
    name: st.sets(st.tuples(*([DOMAIN] * arity)), max_size=10).map(
        lambda rows, n=name: _csv(n, rows)
    )
    for name, arity in EDB_ARITY.items()
})


@st.composite
def _script(draw) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 3))):
        for _ in range(draw(st.integers(1, 4))):
            name = draw(st.sampled_from(sorted(EDB_ARITY)))
            row = ", ".join(str(draw(DOMAIN)) for _ in range(EDB_ARITY[name]))
            lines.append(f"{draw(st.sampled_from(['insert', 'delete']))} {name}({row}).")
        lines.append("commit.")
    lines.append("dump.")
    return ("\n".join(lines) + "\n").encode()


grammar_cases = st.builds(
    Case, recursive_programs().map(str.encode), _facts, _script()
)

_INTERESTING = b"()[],.:-!<>=+*/%_\"'\n\t 0123456789eExyzp\x00\xff\xc3\xa9agg<<>>;"


@st.composite
def _mutated(draw, blob: bytes) -> bytes:
    data = bytearray(blob)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "swap", "repeat"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=3)) if draw(st.booleans()) else (
                bytes([draw(st.sampled_from(_INTERESTING))])
            )
        elif kind == "delete" and data:
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == "swap" and len(data) > 1:
            other = draw(st.integers(0, len(data) - 1))
            data[at], data[other] = data[other], data[at]
        elif kind == "repeat" and data:
            end = min(len(data), at + draw(st.integers(1, 12)))
            data[at:at] = data[at:end] * draw(st.integers(2, 50))
    return bytes(data)


@st.composite
def _mutate_case(draw, case: Case) -> Case:
    part = draw(st.sampled_from(["program", "program", "facts", "script"]))
    if part == "program":
        return Case(draw(_mutated(case.program)), case.facts, case.script)
    if part == "script":
        return Case(case.program, case.facts, draw(_mutated(case.script)))
    name = draw(st.sampled_from(sorted(case.facts)))
    return Case(case.program, {**case.facts, name: draw(_mutated(case.facts[name]))},
                case.script)


mutated_cases = grammar_cases.flatmap(_mutate_case)
byte_cases = st.builds(Case, st.binary(max_size=300), st.just({}), st.just(b"dump.\n"))
any_case = st.one_of(grammar_cases, mutated_cases, mutated_cases, byte_cases)


def _cli(argv: list[str], case: "Case | None" = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except SystemExit as exit_:  # argparse: a usage error, not a traceback
        return int(exit_.code or 0), out.getvalue(), err.getvalue()
    except TooSlow:
        raise
    except BaseException as exc:  # anything else is a traceback for the user
        shown = f"\n{_show(case)}" if case is not None else ""
        raise Traceback(f"{type(exc).__name__}: {exc} for {argv}{shown}") from exc
    return rc, out.getvalue(), err.getvalue()


def _judge_error(err: str, what: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    if not lines or not ERROR_LINE.match(lines[0]) or "Traceback" in err:
        raise Traceback(f"{what}: not a DL error line: {err[:500]!r}")


def check(case: Case) -> Outcome:
    """Run ``case`` through ``eval`` and ``run``; raise ``Traceback`` or ``WrongAnswer``
    (or ``TooSlow`` past the time bound)."""
    with _bounded(case):
        return _check(case)


def _check(case: Case) -> Outcome:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        prog_path = folder / "p.dl"
        prog_path.write_bytes(case.program)
        facts = folder / "facts"
        facts.mkdir()
        for name, blob in case.facts.items():
            (facts / f"{name}.csv").write_bytes(blob)
        script = folder / "s.txt"
        script.write_bytes(case.script)
        rc, out, err = _cli(["eval", str(prog_path), "--facts", str(facts),
                             "--max-iterations", MAX_ITERATIONS], case)
        if rc != 0:
            _judge_error(err, "eval")
            return Outcome("error", err.splitlines()[0])
        prog = load_program(case.program.decode(), str(prog_path))
        inputs = load_facts_dir(facts, prog)
        expected = evaluate_naive(prog, inputs)
        functional = [n for n, s in prog.schemas.items() if s.functional]
        want = format_relations(expected, functional)
        if out.splitlines() != want:
            raise WrongAnswer(f"eval printed {out!r}, the oracle {want!r}\n{_show(case)}")
        rc, out, err = _cli(["run", str(prog_path), "--facts", str(facts),
                             "--script", str(script)], case)
        if rc != 0:
            _judge_error(err, "run")
            return Outcome("error", err.splitlines()[0])
        want = _run_output(prog, inputs, case.script.decode())
        if out.splitlines() != want:
            raise WrongAnswer(f"run printed {out!r}, the oracle {want!r}\n{_show(case)}")
        return Outcome("ok")


def _show(case: Case) -> str:
    facts = {k: v.decode(errors="replace") for k, v in case.facts.items()}
    return (f"program:\n{case.program.decode(errors='replace')}\nfacts: {facts}\n"
            f"script:\n{case.script.decode(errors='replace')}")


def _run_output(prog, inputs, script: str) -> list[str]:
    """What ``deltalog run`` prints for ``script`` (which ran): at each dump, the relations
    the naive evaluator computes from the EDB after the commits before it."""
    from deltalog.engine.script import parse_script

    rels = {name: set(rows) for name, rows in inputs.items()}
    pending: dict[str, dict] = {}
    functional = [n for n, s in prog.schemas.items() if s.functional]
    lines: list[str] = []
    for op in parse_script(script, "s.txt", prog):
        if op.kind in ("insert", "delete"):
            pending.setdefault(op.pred, {})[op.row] = op.kind == "insert"
        elif op.kind == "commit":
            for pred, final in pending.items():
                rel = rels.setdefault(pred, set())
                for row, present in final.items():
                    (rel.add if present else rel.discard)(row)
            pending = {}
        else:
            current = {**{n: frozenset(r) for n, r in rels.items()},
                       **evaluate_naive(prog, rels)}
            for name in [op.pred] if op.pred is not None else list(prog.idb):
                lines.extend(format_relations({name: current.get(name, frozenset())},
                                              functional))
    return lines
