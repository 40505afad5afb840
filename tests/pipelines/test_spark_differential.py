"""The Spark backend against the engine over the whole language: every golden program that
analyzes (at its program facts and at every commit of its script), the random programs of
the engine's property tests, and the random recursive programs of the DBSP tests.

Spark jobs cost a fraction of a second each however small the data, so the cases run in
batches: each program's predicates are renamed apart (``k3_edge``) and a batch of programs
becomes ONE program, recomputed by one ``recompute`` call and collected in one job. A
mismatch names the case with its program text and data. The default run checks a
representative sample; the ``slow`` sweep checks many more programs.
"""

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from deltalog.engine.analysis.analyze import analyze, load_program
from deltalog.engine.analysis.program import AnalyzedProgram
from deltalog.engine.errors import DeltalogError
from deltalog.engine.evaluate import evaluate
from deltalog.engine.naive import evaluate_naive
from deltalog.engine.script import parse_script
from deltalog.engine.syntax.ast import Atom, Negation, Program, Rule
from deltalog.engine.syntax.parser import parse_program
from deltalog.engine.values import Row
from deltalog.pipelines.facts import load_facts_dir
from deltalog.pipelines.spark.compiler import recompute
from deltalog.pipelines.spark.session import to_spark
from tests.engine.dbsp.recursive_programs import recursive_programs
from tests.engine.programs import edb_data, programs
from tests.pipelines.spark_rows import collect_all

pytestmark = pytest.mark.spark

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@dataclasses.dataclass
class Case:
    name: str
    text: str
    prog: AnalyzedProgram
    inputs: dict[str, set[Row]]


# ---------------------------------------------------------------------------------------
# Batching: rename each program's predicates apart and concatenate the programs.


def _rename_atom(atom: Atom, prefix: str) -> Atom:
    return dataclasses.replace(atom, pred=prefix + atom.pred)


def _rename_rule(rule: Rule, prefix: str) -> Rule:
    body = tuple(
        dataclasses.replace(it, atom=_rename_atom(it.atom, prefix))
        if isinstance(it, Negation)
        else _rename_atom(it, prefix)
        if isinstance(it, Atom)
        else it
        for it in rule.body
    )
    return dataclasses.replace(rule, head=_rename_atom(rule.head, prefix), body=body)


def merge(programs: Sequence[tuple[str, Program]]) -> Program:
    """One program holding every ``(prefix, program)`` with its predicates prefixed."""
    decls, rules, facts = [], [], []
    for prefix, p in programs:
        decls += [dataclasses.replace(d, name=prefix + d.name) for d in p.decls]
        rules += [_rename_rule(r, prefix) for r in p.rules]
        facts += [_rename_atom(f, prefix) for f in p.facts]
    return Program(tuple(decls), tuple(rules), tuple(facts), "<batch>")


def typed(rows: Iterable[Row]) -> set[tuple[tuple[str, Any], ...]]:
    """Rows with each value's type: 1 and 1.0 are different values of different columns."""
    return {tuple((type(v).__name__, v) for v in row) for row in rows}


def check_batch(spark: SparkSession, cases: Sequence[Case]) -> None:
    """Recompute every case on Spark in one program; each IDB relation must equal the
    engine's ``evaluate`` (which the engine's own tests hold equal to the naive evaluator)."""
    expected: dict[str, frozenset[Row]] = {}
    batch: dict[str, Case] = {}  # prefix -> case
    for k, case in enumerate(cases):
        try:
            result = evaluate(case.prog, case.inputs)
        except DeltalogError as err:
            # A data error of one case would stop the whole batch: check it alone.
            check_error_alone(spark, case, err)
            continue
        prefix = f"k{k}_"
        batch[prefix] = case
        for name, rows in result.items():
            expected[prefix + name] = rows
    merged = analyze(merge([(prefix, c.prog.program) for prefix, c in batch.items()]))
    edb = {
        prefix + name: to_spark(spark, merged.schemas[prefix + name], rows)
        for prefix, case in batch.items()
        for name, rows in case.inputs.items()
    }
    got = collect_all(recompute(spark, merged, edb))
    assert set(got) == set(expected)
    bad = []
    for name, rows in sorted(got.items()):
        if len(rows) != len(set(rows)) or typed(rows) != typed(expected[name]):
            prefix, pred = name.split("_", 1)
            case = batch[prefix + "_"]
            bad.append(
                f"{case.name}: '{pred}' differs\n  spark only: "
                f"{sorted(set(rows) - expected[name], key=repr)}\n  engine only: "
                f"{sorted(expected[name] - set(rows), key=repr)}\n  duplicates: "
                f"{len(rows) - len(set(rows))}\n--- program\n{case.text}\n--- inputs\n"
                f"{ {k: sorted(v) for k, v in case.inputs.items()} }"
            )
    assert not bad, "\n\n".join(bad)


def check_error_alone(spark: SparkSession, case: Case, err: DeltalogError) -> None:
    edb = {n: to_spark(spark, case.prog.schemas[n], rows) for n, rows in case.inputs.items()}
    with pytest.raises(DeltalogError) as spark_err:
        collect_all(recompute(spark, case.prog, edb))
    assert spark_err.value.code == err.code, case.name
    assert str(spark_err.value) == str(err), case.name


# ---------------------------------------------------------------------------------------
# The cases.


def golden_cases() -> list[Case]:
    """Every golden program that analyzes: at its program facts (+ facts/ folder), and at
    the EDB of every commit of its script."""
    out = []
    for folder in sorted(p.parent for p in GOLDEN.glob("*/program.dl")):
        text = (folder / "program.dl").read_text()
        try:
            prog = load_program(text, "program.dl")
        except DeltalogError:
            continue
        inputs: dict[str, set[Row]] = {}
        if (folder / "facts").is_dir():
            inputs = {k: set(v) for k, v in load_facts_dir(folder / "facts", prog).items()}
        out.append(Case(folder.name, text, prog, {k: set(v) for k, v in inputs.items()}))
        script = folder / "script.txt"
        if not script.exists():
            continue
        state = {k: set(v) for k, v in inputs.items()}
        pending: dict[tuple[str, Row], bool] = {}
        commits = 0
        for op in parse_script(script.read_text(), "script.txt", prog):
            if op.kind in ("insert", "delete"):
                assert op.pred is not None and op.row is not None
                pending[(op.pred, op.row)] = op.kind == "insert"
            elif op.kind == "commit":
                for (pred, row), present in pending.items():
                    rows = state.setdefault(pred, set())
                    if present:
                        rows.add(row)
                    else:
                        rows.discard(row)
                pending = {}
                commits += 1
                snapshot = {k: set(v) for k, v in state.items()}
                out.append(Case(f"{folder.name}@commit{commits}", text, prog, snapshot))
    return out


def sample(strategy: st.SearchStrategy[Any], n: int, seed: int) -> list[Any]:
    """``n`` examples of ``strategy``, the same on every run (no Spark inside Hypothesis:
    the examples are collected first and checked in batches)."""
    out: list[Any] = []

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy, st.just(seed))
    def collect(example: Any, _seed: int) -> None:
        out.append(example)

    collect()
    return out


def random_cases(strategy: st.SearchStrategy[str], n: int, seed: int, tag: str) -> list[Case]:
    cases = []
    for i, (text, data) in enumerate(sample(st.tuples(strategy, edb_data()), n, seed)):
        prog = load_program(text, "random.dl")
        cases.append(Case(f"{tag}{i}", text, prog, {k: set(v) for k, v in data.items()}))
    return cases


def chunks(cases: Sequence[Case], size: int) -> Iterable[Sequence[Case]]:
    for i in range(0, len(cases), size):
        yield cases[i : i + size]


# ---------------------------------------------------------------------------------------
# Tests.


def test_merged_programs_keep_their_meaning() -> None:
    """The batching itself: a merged program evaluates each part as the part alone."""
    cases = golden_cases()
    merged = analyze(merge([(f"k{k}_", c.prog.program) for k, c in enumerate(cases)]))
    edb = {f"k{k}_{n}": rows for k, c in enumerate(cases) for n, rows in c.inputs.items()}
    together = evaluate_naive(merged, edb)
    for k, case in enumerate(cases):
        alone = evaluate_naive(case.prog, case.inputs)
        assert {n: together[f"k{k}_{n}"] for n in alone} == alone, case.name


# Hand-written cases for what the random programs do not generate: heads with arithmetic
# and constants, disjunction, nullary predicates, strings, exact comparisons between ints
# and floats beyond 2**53, aggregates over a recursive predicate of a lower stratum.
LANGUAGE: dict[str, tuple[str, dict[str, set[Row]]]] = {
    "heads": (
        """.decl q(x: int, s: string)
        h1(x + 1, "k", 2.5) :- q(x, _).
        h2(x * 2) :- q(x, s), s = "a".
        h3(x) :- q(x, "a") ; q(x, "b").
        h4() :- q(_, _).
        h5(1, "c") :- q(_, _).
        h6(x) :- q(x, s), q(x, s2), s < s2.
        h7(s) :- q(_, s), s >= "b".
        h8(x, x) :- q(x, _), !q(x, "c").
        """,
        {"q": {(1, "a"), (2, "b"), (3, "c"), (1, "b"), (4, "")}},
    ),
    "int_vs_float": (
        """.decl i(x: int)
        .decl f(y: float)
        .decl both(x: int, y: float)
        lt(x, y) :- i(x), f(y), x < y.
        gt(x, y) :- i(x), f(y), x > y.
        le(x, y) :- i(x), f(y), y <= x.
        eq(x, y) :- i(x), f(y), x = y.
        ne(x, y) :- i(x), f(y), x != y.
        j(x) :- i(x), f(x).
        same(x) :- both(x, x).
        k(x) :- f(x), i(x).
        nj(x) :- i(x), !f(x).
        c(y) :- f(y), y = 9007199254740993.
        """,
        {
            "i": {(2**53 + 1,), (2**53,), (3,), (-1,), (2**63 - 1,)},
            "f": {(float(2**53),), (3.0,), (0.5,), (2.0**63,), (-1.5,)},
            "both": {(2**53 + 1, float(2**53)), (7, 7.0), (8, 8.5)},
        },
    ),
    "aggregate_over_recursion": (
        """.decl e(a: int, b: int)
        tc(x, y) :- e(x, y).
        tc(x, z) :- tc(x, y), e(y, z).
        reach[x] = n <- agg<<n = count()>> tc(x, _).
        far[x] = m <- agg<<m = max(y)>> tc(x, y).
        near[x] = m <- agg<<m = min(y)>> tc(x, y).
        s[x] = m <- agg<<m = sum(y)>> tc(x, y).
        tot[] = m <- agg<<m = total(y)>> tc(_, y).
        unreached(x) :- e(x, _), !tc(_, x).
        big(x) :- reach[x] = n, n > 2.
        """,
        {"e": {(0, 1), (1, 2), (2, 0), (3, 4)}},
    ),
    "nullary_recursion": (
        """.decl e(a: int, b: int)
        .decl start()
        go() :- start().
        r(x) :- go(), e(0, x).
        r(y) :- r(x), e(x, y).
        cyc() :- r(x), e(x, x).
        stop() :- !go().
        """,
        {"e": {(0, 1), (1, 2), (2, 2)}, "start": {()}},
    ),
    "float_totals": (
        """.decl v(g: string, x: float)
        tot[g] = t <- agg<<t = total(x)>> v(g, x).
        fsum[g] = t <- agg<<t = sum(x)>> v(g, x).
        """,
        {
            "v": {
                ("huge", 2.0**500),
                ("huge", -1.0),
                ("cancel", 1e100),
                ("cancel", 1.0),
                ("cancel", -1e100),
                *(("tenths", i / 10 + 0.1) for i in range(10)),
            }
        },
    ),
    "functional_and_wildcards": (
        """.decl price[item: string] = p: float
        .decl sold(item: string, n: int)
        revenue[i] = r :- price[i] = p, sold(i, n), r = p * n.
        unsold(i) :- price[i] = _, !sold(i, _).
        anything() :- sold(_, _), price[_] = _.
        """,
        {"price": {("a", 1.5), ("b", 2.0)}, "sold": {("a", 2)}},
    ),
    # DL302 (checked alone, the message must be the engine's): non-recursive and recursive.
    "conflict": (
        """.decl sold(item: string, n: int)
        best[i] = n :- sold(i, n).
        """,
        {"sold": {("a", 1), ("a", 2), ("b", 1)}},
    ),
    "recursive_conflict": (
        """.decl e(a: int, b: int)
        d[x] = y :- e(x, y), x = 0.
        d[y] = z :- d[x] = y, e(y, z).
        """,
        {"e": {(0, 1), (1, 2), (2, 3), (2, 4)}},
    ),
}


def language_cases() -> list[Case]:
    return [
        Case(name, text, load_program(text, f"{name}.dl"), data)
        for name, (text, data) in LANGUAGE.items()
    ]


def test_default_sample(spark: SparkSession) -> None:
    """One batch for the default run: the language cases above, a few golden programs (one
    recursive) and a few random programs (one recursive). The ``slow`` tests below cover
    every golden program at every commit and hundreds of random programs."""
    golden = [c for c in golden_cases() if c.name in DEFAULT_GOLDEN]
    assert len(golden) == len(DEFAULT_GOLDEN)
    check_batch(
        spark,
        language_cases()
        + golden
        + random_cases(programs(recursion=False), 8, 1, "random")
        + random_cases(recursive_programs(), 1, 2, "recursive"),
    )


DEFAULT_GOLDEN = ("lecture_movies", "seed000_calories", "seed000_maxsales", "lecture_tc")


@pytest.mark.slow
def test_golden_programs_at_every_commit(spark: SparkSession) -> None:
    cases = golden_cases()
    assert len(cases) >= 20
    for batch in chunks(cases, 12):
        check_batch(spark, batch)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_random_programs_sweep(spark: SparkSession, seed: int) -> None:
    for batch in chunks(random_cases(programs(), 200, 100 + seed, "random"), 40):
        check_batch(spark, batch)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_random_recursive_programs_sweep(spark: SparkSession, seed: int) -> None:
    for batch in chunks(random_cases(recursive_programs(), 120, 200 + seed, "recursive"), 30):
        check_batch(spark, batch)


def test_parse_and_merge_smoke() -> None:
    p = parse_program(".decl e(a: int)\nq(x) :- e(x), !r(x).\nr(1).")
    merged = merge([("a_", p), ("b_", p)])
    assert {d.name for d in merged.decls} == {"a_e", "b_e"}
    assert {r.head.pred for r in merged.rules} == {"a_q", "b_q"}
