"""The parser: every construct of the surface syntax, normalization, and DL1xx errors."""

import pytest

from deltalog.engine.errors import DeltalogSyntaxError
from deltalog.engine.syntax import (
    Aggregate,
    Atom,
    BinOp,
    Compare,
    Const,
    Negation,
    Var,
    parse_program,
)


def test_declarations_relational_and_functional():
    prog = parse_program(
        ".decl edge(src: int, dst: int)\n.decl price[item: string] = amount: float\n"
    )
    edge, price = prog.decls
    assert (edge.name, [c.name for c in edge.columns], edge.functional) == (
        "edge", ["src", "dst"], False,
    )
    assert [c.type for c in price.columns] == ["string", "float"] and price.functional


def test_facts_with_all_constant_kinds():
    prog = parse_program('p(1, -2, 3.5, "a\\"b\\n", 1e3).')
    (fact,) = prog.facts
    assert [a.value for a in fact.args] == [1, -2, 3.5, 'a"b\n', 1000.0]


def test_a_rule_is_located_at_its_head_whatever_its_body_holds():
    """A rule's place (what the run's notes and errors name) is where it starts, also
    when its body holds a comparison or an assignment (each has its own place)."""
    prog = parse_program("p(x) :- q(x, y), x < y.\n  p(x) :- q(x, y), z = y + 1, !r(z).\n")
    (line1, col1), (line2, col2) = [(r.loc.line, r.loc.col) for r in prog.rules]
    assert (line1, col1, line2, col2) == (1, 1, 2, 3)
    cmp = prog.rules[0].body[1]
    assert isinstance(cmp, Compare) and (cmp.loc.line, cmp.loc.col) == (1, 18)


def test_rule_both_arrows_negation_forms_and_comparisons():
    prog = parse_program("p(x) :- q(x, y), !r(x), not s(y), x < y.\np(x) <- q(x, _).")
    r1, r2 = prog.rules
    assert isinstance(r1.body[1], Negation) and isinstance(r1.body[2], Negation)
    assert r1.body[3] == Compare("<", Var("x"), Var("y"))
    # the wildcard became a fresh variable
    assert isinstance(r2.body[0], Atom) and r2.body[0].args[1].name.startswith("_")


def test_disjunction_splits_into_rules():
    prog = parse_program("t(x) :- (a(x) ; b(x)), c(x).")
    assert [[str(i) for i in r.body] for r in prog.rules] == [["a(x)", "c(x)"], ["b(x)", "c(x)"]]


def test_expressions_in_atoms_are_lifted():
    prog = parse_program("q(x + 1) :- e(x).")
    (rule,) = prog.rules
    fresh = rule.head.args[0]
    assert isinstance(fresh, Var) and fresh.name.startswith("_")
    assert rule.body[-1] == Compare("=", fresh, BinOp("+", Var("x"), Const(1)))


def test_aggregate_and_functional_atoms():
    prog = parse_program("d[x] = n <- agg<<n = count()>> e(x, y).\nf[k] = v :- g[k] = v.")
    agg_rule, fun_rule = prog.rules
    assert agg_rule.aggregate == Aggregate(Var("n"), "count", None)
    assert agg_rule.head.functional and fun_rule.body[0].functional


def test_comments():
    prog = parse_program("// a\n# b\n/* c\n d */ p(1).")
    assert len(prog.facts) == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("p(x) :- q(x)", "f.dl:1:13: error DL101: unexpected end of input"),
        ("p(x) :- q(x), .", "f.dl:1:15: error DL101: unexpected '.'"),
        ("p(x) :- q(x) & r(x).", "f.dl:1:14: error DL102: unexpected character '&'"),
        (".decl p(a: blob)", "f.dl:1:12: error DL101: unknown type 'blob'"),
        ("\n\n  p(x) :- q(x), r(x)) .", "f.dl:3:21: error DL101: unexpected ')'"),
        ("d[x] = n <- agg<<n = avg(y)>> e(x, y).", "f.dl:1:22: error DL101: unknown aggregate"),
        ('p("abc) :- q.', "f.dl:1:3: error DL102: unexpected character"),
    ],
)
def test_syntax_errors_carry_file_line_column_and_code(text, expected):
    with pytest.raises(DeltalogSyntaxError) as info:
        parse_program(text, "f.dl")
    assert str(info.value).startswith(expected)
