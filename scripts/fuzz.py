"""The long fuzz run (``make fuzz``): the CLI fuzz cases of ``tests/fuzz/fuzz_cases.py`` for
``FUZZ_MINUTES`` minutes (default 30), in rounds of Hypothesis runs with fresh random seeds;
prints how many cases ran, how many ended in a DL error, and every traceback or wrong
answer found (each shrunk by Hypothesis to a small case). Exits 1 when it found any.

The rounds run in worker processes, ``BATCH`` rounds each: a process that has run
thousands of cases holds memory the cases left behind in native code (about 35 KB a case),
which a fresh process gives back.

    FUZZ_MINUTES=30 .venv/bin/python scripts/fuzz.py
"""

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROUND = 200  # cases per Hypothesis run
BATCH = 25  # rounds per worker process


def _rounds(rounds: int, deadline: float) -> dict[str, Any]:
    """(worker) Up to ``rounds`` rounds, until ``deadline`` (time.time()); what they found."""
    from hypothesis import HealthCheck, given, settings

    from tests.fuzz.fuzz_cases import TooSlow, Traceback, WrongAnswer, any_case, check

    counts: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    slow_cases: list[str] = []

    @settings(max_examples=ROUND, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(any_case)
    def one_round(case):  # type: ignore[no-untyped-def]
        counts["cases"] += 1
        try:
            outcome = check(case)
        except TooSlow as slow:
            counts["slow"] += 1
            slow_cases.append(str(slow))
            return
        counts[outcome.kind] += 1
        if outcome.kind == "error":
            errors[outcome.detail.split("error ", 1)[-1][:5]] += 1

    done = 0
    while done < rounds and time.time() < deadline:
        done += 1
        try:
            one_round()
        except Exception as found:  # every failure is counted and printed
            # Hypothesis raises an ExceptionGroup when a round found several distinct
            # failures: each counts.
            group = found.exceptions if isinstance(found, ExceptionGroup) else (found,)
            for one in group:
                kind = ("tracebacks" if isinstance(one, Traceback) else
                        "wrong answers" if isinstance(one, WrongAnswer) else "harness errors")
                counts[kind] += 1
                failures.append(f"{type(one).__name__}: {one}")
    return {"rounds": done, "counts": counts, "errors": errors, "failures": failures,
            "slow": slow_cases}


def main() -> int:
    from tests.fuzz.fuzz_cases import SECONDS

    minutes = float(os.environ.get("FUZZ_MINUTES", "30"))
    deadline = time.time() + minutes * 60
    counts: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    slow_cases: list[str] = []
    rounds = 0
    while time.time() < deadline:
        worker = subprocess.run(
            [sys.executable, __file__, "--worker", str(BATCH), str(deadline)],
            capture_output=True, text=True, check=False)
        if worker.returncode != 0:
            counts["harness errors"] += 1
            failures.append(f"worker exited {worker.returncode}: {worker.stderr[-2000:]}")
            break
        found = json.loads(worker.stdout.splitlines()[-1])
        rounds += found["rounds"]
        counts.update(found["counts"])
        errors.update(found["errors"])
        failures += found["failures"]
        slow_cases += found["slow"]
        print(f"round {rounds}: {counts['cases']} cases, {counts['ok']} right answers, "
              f"{counts['error']} DL errors, {counts['tracebacks']} tracebacks, "
              f"{counts['wrong answers']} wrong answers, {counts['slow']} past {SECONDS} s"
              + (f", {counts['harness errors']} harness errors" if counts["harness errors"]
                 else ""),
              flush=True)
    print()
    print(f"fuzz: {minutes:g} minutes, {counts['cases']} cases (shrinking included): "
          f"{counts['ok']} ran and matched the naive evaluator, {counts['error']} ended in "
          f"a DL error, {counts['tracebacks']} tracebacks, {counts['wrong answers']} wrong "
          "answers")
    print("DL errors by code: " + ", ".join(f"{c} {n}" for c, n in sorted(errors.items())))
    print(f"{counts['slow']} cases past the {SECONDS} s bound per case (not counted above):")
    for slow in slow_cases[:10]:
        print(slow)
    for failure in failures:
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        print(json.dumps(_rounds(int(sys.argv[2]), float(sys.argv[3]))))
        sys.exit(0)
    sys.exit(main())
