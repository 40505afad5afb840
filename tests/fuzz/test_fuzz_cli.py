"""The CLI under fuzzing (quick: a few hundred cases; ``make fuzz`` runs the same cases for
30 minutes): grammar-generated programs, their byte-level mutations and raw bytes end in
right answers or one DL error line, never a traceback (``tests/fuzz/fuzz_cases.py``)."""

import re

from hypothesis import HealthCheck, assume, given, settings

from tests.fuzz.fuzz_cases import (
    Outcome,
    TooSlow,
    any_case,
    byte_cases,
    grammar_cases,
    mutated_cases,
)
from tests.fuzz.fuzz_cases import check as check_case


def check(case) -> Outcome:
    """``check_case``; a case past the time bound is set aside here (a mutation can ask for
    a cross product of dozens of atoms: ``make fuzz`` reports such cases with their text)."""
    try:
        return check_case(case)
    except TooSlow:
        assume(False)
        raise

QUICK = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@QUICK
@given(grammar_cases)
def test_generated_programs_are_right(case):
    assert check(case).kind == "ok"


@QUICK
@given(mutated_cases)
def test_mutated_programs_facts_and_scripts(case):
    check(case)


# The grammar's comments: a program of nothing else is an empty program, which is valid.
COMMENTS = re.compile(rb"//[^\n]*|#[^\n]*|/\*(?:.|\n)*?\*/")


@QUICK
@given(byte_cases)
def test_raw_bytes(case):
    assert check(case).kind == "error" or COMMENTS.sub(b"", case.program).strip() == b""


def test_a_program_of_comments_only_is_empty_and_valid():
    assert COMMENTS.sub(b"", b"# a\n// b\n/* c\n d */ ").strip() == b""
    assert COMMENTS.sub(b"", b"p(1). # a").strip() == b"p(1)."


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_case)
def test_any_case(case):
    check(case)
