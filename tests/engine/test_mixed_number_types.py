"""A variable joining an int column and a float column is a float (the analysis types it
so, ``ColumnTypes.join``): it holds a float whatever binds it first, an atom of either
column or an assignment, so ``x / 2`` is a float division in every evaluator and after
any history of commits. An int variable compared (``=``) with a float stays an int.

Every evaluator is checked: the naive one (the oracle), evaluation from scratch (the
columnar core, which reads such a rule through ``uncast``, and the tuple evaluator), and
each maintenance strategy
(with and without the columnar kernels), after loading and after every commit. Facts are
compared as text, so that ``2`` and ``2.0`` (equal in Python) differ."""

from hypothesis import assume, given, note
from hypothesis import strategies as st

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.errors import AnalysisError
from deltalog.engine.evaluate import Evaluator, evaluate
from deltalog.engine.explain import Explainer, render
from deltalog.engine.join.trie import JoinStats
from deltalog.engine.naive import evaluate_naive
from deltalog.engine.runtime import IncrementalEngine, RecomputeEngine
from deltalog.engine.values import Row, format_fact


def _facts(relations) -> set[str]:
    return {format_fact(p, r) for p, rows in relations.items() for r in rows}


def _engines(prog, data):
    """Every maintenance strategy on ``prog`` loaded with ``data``: sensitivity only
    without recursion; the incremental ones with the columnar kernels and without."""
    recursive = any(s.recursive for s in prog.strata)
    engines = {"recompute": RecomputeEngine(prog, data)}
    for strategy in ("auto", "dbsp", *(() if recursive else ("sensitivity",))):
        for columnar in (True, False):
            engines[f"{strategy}{'' if columnar else '/tuples'}"] = IncrementalEngine(
                prog, data, strategy, columnar)
    return engines


def _apply(data: dict[str, set[Row]], deltas) -> None:
    for pred, delta in deltas.items():
        for row, w in delta.items():
            (data[pred].add if w > 0 else data[pred].discard)(row)


def _every_evaluator_agrees(text: str, data: dict[str, set[Row]], commits=(), want=None):
    """Every evaluator of ``text`` over ``data``, then after each of ``commits``: the
    naive evaluator's facts (and ``want[i]``, after load and after commit i, when given)."""
    prog = load_program(text, "mixed.dl")
    data = {p: set(data.get(p, ())) for p in prog.edb}
    engines = _engines(prog, data)
    wants = list(want) if want is not None else None
    for i in range(len(commits) + 1):
        if i:
            _apply(data, commits[i - 1])
            for engine in engines.values():
                engine.apply(commits[i - 1])
        expected = _facts(evaluate_naive(prog, data))
        if wants is not None:
            assert expected == wants[i], ("naive", i)
        stats = JoinStats()
        assert _facts(evaluate(prog, data, stats=stats)) == expected, ("eval", i)
        assert stats.core == "columnar", (stats.core, i)  # (``uncast``: no fallback)
        assert _facts(Evaluator(prog).run(data)) == expected, ("tuples", i)
        for name, engine in engines.items():
            got = _facts({p: engine.relation(p) for p in prog.idb})
            assert got == expected, (name, i)


# -- the three forms found, each on every evaluator ----------------------------------

DIVIDE = """
.decl a(x: int)
.decl b(x: float)
p(t) :- b(x), a(x), t = x / 2.
"""


def test_a_variable_of_an_int_and_a_float_column_divides_as_a_float():
    # Loaded at once, then the history that gave dbsp p(2.0): insert, commit, insert,
    # commit; then delete, commit, and insert again, commit.
    _every_evaluator_agrees(DIVIDE, {"a": {(1,)}, "b": {(1.0,)}}, [
        {"a": {(5,): 1}, "b": {(5.0,): 1}},
        {"a": {(1,): -1}},
        {"a": {(1,): 1}},
    ], want=[{"p(0.5)."}, {"p(0.5).", "p(2.5)."}, {"p(2.5)."}, {"p(0.5).", "p(2.5)."}])


def test_a_derivation_shows_the_float_and_the_int_fact():
    prog = load_program(DIVIDE, "d.dl")
    data = {"a": {(1,), (5,)}, "b": {(1.0,), (5.0,)}}
    relations = {**data, **{p: set(rows) for p, rows in evaluate(prog, data).items()}}
    tree = Explainer(prog, relations).explain("p", (2.5,))
    assert tree is not None
    assert render(tree) == ["p(2.5)   [rule d.dl:4:1]",
                            "   · t = (x / 2) with t = 2.5, x = 5.0",
                            "├─ b(5.0)   [edb fact]",
                            "└─ a(5)   [edb fact]"]


def test_the_same_from_empty_tables_and_in_the_other_atom_order():
    for text in (DIVIDE, DIVIDE.replace("b(x), a(x)", "a(x), b(x)")):
        _every_evaluator_agrees(text, {}, [
            {"a": {(1,): 1}, "b": {(1.0,): 1}},
            {"a": {(5,): 1}, "b": {(5.0,): 1}},
            {"a": {(1,): -1}},
            {"a": {(1,): 1}},
        ], want=[set(), {"p(0.5)."}, {"p(0.5).", "p(2.5)."}, {"p(2.5)."},
                 {"p(0.5).", "p(2.5)."}])


def test_an_int_variable_compared_with_a_float_stays_an_int():
    text = """
    .decl w(z: int, a: float)
    .decl u(y: int)
    p(z) :- w(z, _), u(y), w(y, a), a = z.
    """
    _every_evaluator_agrees(text, {"w": {(2, 2.0), (1, 2.0)}, "u": {(1,)}}, [
        {"w": {(2, 2.0): -1}},
        {"w": {(2, 2.0): 1}},
        {"u": {(1,): -1, (2,): 1}},
        {"u": {(2,): -1}, "w": {(3, 2.5): 1, (0, 2.5): 1}},
    ], want=[{"p(2)."}, set(), {"p(2)."}, {"p(2)."}, set()])


RECURSIVE = """
.decl e(x: int, y: int)
.decl b(x: float)
r(x, y) :- e(x, y).
r(x, z) :- r(x, y), e(y, z).
k(x, t) :- r(x, x), b(x), t = x / 2.
"""


def test_a_recursive_int_relation_joined_with_a_float_column():
    _every_evaluator_agrees(RECURSIVE, {"e": {(5, 5)}, "b": {(5.0,)}}, [],
                            want=[{"r(5, 5).", "k(5.0, 2.5)."}])
    _every_evaluator_agrees(RECURSIVE, {}, [
        {"e": {(1, 1): 1}, "b": {(1.0,): 1}},
        {"e": {(5, 5): 1}, "b": {(5.0,): 1}},
        {"e": {(1, 1): -1, (1, 2): 1, (2, 1): 1}},
        {"e": {(5, 5): -1}},
    ], want=[set(),
             {"r(1, 1).", "k(1.0, 0.5)."},
             {"r(1, 1).", "k(1.0, 0.5).", "r(5, 5).", "k(5.0, 2.5)."},
             {"r(1, 1).", "r(1, 2).", "r(2, 1).", "r(2, 2).", "k(1.0, 0.5).", "r(5, 5).",
              "k(5.0, 2.5)."},
             {"r(1, 1).", "r(1, 2).", "r(2, 1).", "r(2, 2).", "k(1.0, 0.5)."}])


def test_the_analysis_records_which_variables_a_binding_converts():
    prog = load_program(DIVIDE)
    assert prog.program.rules[0].casts == (("x", "float"),)
    assert prog.strata[0].rules[0] is prog.program.rules[0]
    prog = load_program(".decl w(z: int, a: float)\np(z) :- w(z, a), a = z.")
    assert prog.program.rules[0].casts == (("a", "float"), ("z", "int"))
    plain = load_program(".decl a(x: int)\n.decl b(x: float)\np(x) :- a(x), q(y), y = x.\n"
                         "q(y) :- b(y).")
    assert [r.casts for r in plain.program.rules] == [(("x", "int"), ("y", "float")), ()]


def test_a_binding_takes_the_number_in_the_variables_type():
    from deltalog.engine.semantics import bind_as

    assert bind_as(5, "float") == 5.0 and isinstance(bind_as(5, "float"), float)
    assert bind_as(-0.0, "float") == 0.0 and str(bind_as(-0.0, "float")) == "0.0"
    assert bind_as(2.0, "int") == 2 and isinstance(bind_as(2.0, "int"), int)
    assert bind_as(2.5, "int") is None  # no int equals it
    assert bind_as(2**53 + 1, "float") is None  # no float equals it
    assert bind_as(10**400, "float") is None
    assert bind_as(2**60, "float") == 2.0**60


def test_a_float_variable_assigned_from_an_int_expression_is_a_float():
    # y: a float (b's column), bound by `y = x` from an int or by b: y / 2 is 2.5 either
    # way; and an int past 2**53 has no float equal to it: no binding, as `=` would not.
    text = """
    .decl a(x: int)
    .decl b(y: float)
    p(x, h) :- a(x), y = x, b(y), h = y / 2.
    q(x, h) :- a(x), y = x + 0, !b(y), h = y / 2.
    """
    _every_evaluator_agrees(text, {"a": {(5,), (4,), (2**53 + 1,)}, "b": {(5.0,)}}, [
        {"b": {(4.0,): 1, (5.0,): -1}},
    ], want=[{"p(5, 2.5).", "q(4, 2.0)."}, {"p(4, 2.0).", "q(5, 2.5)."}])


# -- random programs: an int column and a float column joined -------------------------

VALUES = (0, 1, 2, 3, 5, -3)
DECLS = """.decl a(x: int, y: int)
.decl b(x: float, y: float)
.decl c(x: int)
.decl d(x: float)
"""
ARITY = {"a": 2, "b": 2, "c": 1, "d": 1}
FLOATS = {"b", "d"}


def _row(draw, pred: str, hot: list[int]) -> Row:
    """A row of ``pred``, its values mostly among ``hot`` (so that the int and the float
    relations share values and the joins match), floats as floats (0 as 0.0 or -0.0)."""
    values = [draw(st.sampled_from(hot if draw(st.integers(0, 3)) else VALUES))
              for _ in range(ARITY[pred])]
    if pred in FLOATS:
        return tuple(float(v) if v else draw(st.sampled_from([0.0, -0.0])) for v in values)
    return tuple(values)


@st.composite
def _history(draw) -> tuple[dict[str, set[Row]], list[dict[str, dict[Row, int]]]]:
    """The inputs loaded, and one to five commits of inserts and deletes."""
    hot = draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=3, unique=True))
    data = {p: {_row(draw, p, hot) for _ in range(draw(st.integers(0, 6)))} for p in ARITY}
    commits = []
    for _ in range(draw(st.integers(1, 5))):
        deltas: dict[str, dict[Row, int]] = {}
        for _ in range(draw(st.integers(1, 4))):
            pred = draw(st.sampled_from(sorted(ARITY)))
            deltas.setdefault(pred, {})[_row(draw, pred, hot)] = draw(st.sampled_from([1, -1]))
        commits.append(deltas)
    return data, commits


def _atom(draw, pred: str, arity: int, names: list[str], bound: list[str],
          must: str = "") -> str:
    """An atom of ``pred`` over ``names`` (appended to ``bound``), ``_`` and now and then a
    constant; with ``must``, that variable in one of its columns."""
    args = []
    at = draw(st.integers(0, arity - 1)) if must else -1
    for i in range(arity):
        kind = "must" if i == at else draw(st.sampled_from(["var"] * 4 + ["wild", "const"]))
        if kind == "wild":
            args.append("_")
        elif kind == "const":  # an int constant fits either column
            args.append(str(draw(st.sampled_from(VALUES[:5]))))
        else:
            v = must if kind == "must" else draw(st.sampled_from(names))
            bound.append(v)
            args.append(v)
    return f"{pred}({', '.join(args)})"


EXPRS = ["{x} / 2", "{x} % 2", "{x} * 3 - {y}", "{x} / {y}", "{y} - {x} / 2", "{x} + 0",
         "{x}", "{x} / 2 + {y} / 2"]
CHECKS = ["{x} < {y}", "{x} = {y}", "{x} != 2", "{t} > 1", "{x} / 2 = {y}", "{t} = {y}",
          "{x} = 2.0", "{t} < {x}"]


@st.composite
def _mixed_rule(draw, head: str, available: dict[str, int], negatable: list[str]) -> str:
    """A rule for ``head`` (two columns, one the computed t) whose variable x joins an int
    and a float column (``a`` or ``c``, and ``b`` or ``d``, or p), with arithmetic on x,
    now and then a comparison, a third atom or a negation; the body in any order."""
    ints = [p for p in available if p not in FLOATS and p != head]
    floats = [p for p in available if p in FLOATS or p == "p"]
    bound = ["x"]
    body = [_atom(draw, pred, available[pred], ["x", "y"], bound, must="x")
            for pred in (draw(st.sampled_from(ints)), draw(st.sampled_from(floats)))]
    if not draw(st.integers(0, 3)):
        pred = draw(st.sampled_from(sorted(available)))
        body.append(_atom(draw, pred, available[pred], ["x", "y", "z"], bound))
    names = sorted(set(bound))
    body.append("t = " + draw(st.sampled_from(EXPRS)).format(
        x="x", y=draw(st.sampled_from(names))))
    names.append("t")
    if not draw(st.integers(0, 2)):
        x, y = draw(st.permutations(names))[:2]
        body.append(draw(st.sampled_from(CHECKS)).format(x=x, y=y, t="t"))
    if negatable and not draw(st.integers(0, 3)):
        pred = draw(st.sampled_from(negatable))
        args = [draw(st.sampled_from([*names, "_"])) for _ in range(available[pred])]
        body.append(f"!{pred}({', '.join(args)})")
    head_args = draw(st.permutations([draw(st.sampled_from(names[:-1])), "t"]))
    return f"{head}({', '.join(head_args)}) :- {', '.join(draw(st.permutations(body)))}."


# A float variable (read by a negation of a float column) that only an int assignment
# binds: the columnar kernels convert the assigned column.
ASSIGNED = ["p(x, t) :- a(x, y), s = y + 0, !d(s), t = s / 2.",
            "p(s, t) :- c(y), s = y, !b(s, _), t = s / 2 + y / 2.",
            "p(x, t) :- c(x), s = 3, !d(s), t = x + s / 2.",
            "p(x, s) :- a(x, y), s = y * 2 + 1, !d(s), s / 2 > 1."]


@st.composite
def _mixed_programs(draw) -> str:
    """p over the inputs, and sometimes q over p and the inputs (p's columns are floats
    or ints, as its rules make them)."""
    rules = [draw(_mixed_rule("p", ARITY, ["c", "d"]) | st.sampled_from(ASSIGNED))]
    if draw(st.booleans()):
        rules.append(draw(_mixed_rule("p", ARITY, ["c", "d"])))
    if draw(st.booleans()):
        rules.append(draw(_mixed_rule("q", {**ARITY, "p": 2}, ["c", "d", "p"])))
    return DECLS + "\n".join(rules) + "\n"


STEPS = ["r(x, z) :- r(x, y), a(y, z).", "r(x, z) :- r(x, y), b(y, z).",
         "r(x, z) :- r(x, y), a(y, z), d(z).", "r(x, t) :- r(x, y), c(t), t = y / 2.",
         "r(x, z) :- r(x, y), b(y, z), c(z).", "r(x, t) :- r(x, y), d(t), t = y - 1.",
         "r(x, t) :- r(x, y), a(y, _), t = y / 2, c(t).",
         "r(x, z) :- r(x, y), a(y, z), s = z + 0, !d(s), s / 2 > 1."]
QUERIES = ["k(x, t) :- r(x, x), d(x), t = x / 2.", "k(y, t) :- r(_, y), c(y), t = y % 2.",
           "k(x, t) :- r(x, y), b(x, y), t = x - y / 2.",
           "k(x, t) :- r(x, y), a(y, x), t = x / 2, !d(t).",
           "k(x, t) :- d(x), r(x, y), y = x, t = y / 2.",
           "k(x, t) :- r(x, y), c(y), t = y / 2.",
           "k(x, t) :- r(x, y), s = y, !d(s), t = s / 2."]


@st.composite
def _recursive_programs(draw) -> str:
    """r, a closure over an int or a float relation whose steps join int and float
    columns (some computing, kept inside an input's values), and k over r and the
    inputs."""
    rules = [f"r(x, y) :- {draw(st.sampled_from(['a', 'b']))}(x, y)."]
    rules += draw(st.lists(st.sampled_from(STEPS), min_size=1, max_size=2, unique=True))
    rules += draw(st.lists(st.sampled_from(QUERIES), min_size=1, max_size=2, unique=True))
    return DECLS + "\n".join(rules) + "\n"


def _check(text: str, history) -> None:
    note(text)
    try:
        load_program(text, "mixed.dl")
    except AnalysisError:
        assume(False)
    data, commits = history
    _every_evaluator_agrees(text, data, commits)


@given(text=_mixed_programs(), history=_history())
def test_random_programs_joining_int_and_float_columns(text, history):
    _check(text, history)


@given(text=_recursive_programs(), history=_history())
def test_random_recursive_programs_joining_int_and_float_columns(text, history):
    _check(text, history)


def test_an_int_variable_equal_to_a_float_expression_and_negated():
    """``z = x / 2.0`` makes an int of z where the float is integral (none elsewhere), and
    ``!u(z)`` reads it: every strategy gives the recompute's answer at the load and after
    commits (the columnar DBSP kernel leaves such a rule to the tuple joins)."""
    prog = load_program(".decl u(a: int)\np(x) :- u(x), z = x / 2.0, !u(z).\n")
    start = {"u": {(2,), (4,)}}
    for strategy in ("auto", "sensitivity", "dbsp", "recompute"):
        engine = IncrementalEngine(prog, start, strategy)
        oracle = RecomputeEngine(prog, start)
        assert engine.relation("p") == oracle.relation("p") == {(2,)}, strategy
        for change in ({"u": {(6,): 1, (3,): 1}}, {"u": {(2,): -1}}, {"u": {(1,): 1}}):
            assert engine.apply(change) == oracle.apply(change), (strategy, change)
            assert engine.relation("p") == oracle.relation("p"), (strategy, change)
