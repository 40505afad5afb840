"""Hostile CLI input ends in FILE:LINE:COL: error DLnnn, never a traceback: deep expression
nesting (DL105 past the documented depth, fine below it in eval and run), CSV fields past
the size limit (DL105), non-finite floats in CSV (DL301) and out-of-range literals (DL103),
and a program that derives without end bounded by --max-iterations (DL312)."""


import pytest

from deltalog.pipelines.cli import main
from deltalog.pipelines.facts import MAX_FIELD


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return rc, out.out, out.err


@pytest.fixture
def chain(tmp_path):
    def make(n: int):
        prog = tmp_path / f"chain{n}.dl"
        prog.write_text(".decl q(y: int)\np(x) :- q(y), x = y" + " + 1" * n + ".\n")
        facts = tmp_path / "facts"
        facts.mkdir(exist_ok=True)
        (facts / "q.csv").write_text("y\n1\n")
        script = tmp_path / "s.txt"
        script.write_text("insert q(5).\ncommit.\ndump p.\n")
        return prog, facts, script
    return make


def test_a_deep_chain_is_dl105_at_its_place(capsys, chain):
    prog, facts, _ = chain(1000)
    rc, _, err = _run(capsys, "eval", prog, "--facts", facts)
    assert rc == 1 and f"{prog}:2:" in err and "error DL105" in err


def test_a_chain_below_the_limit_runs_in_eval_and_run(capsys, chain):
    prog, facts, script = chain(150)
    assert _run(capsys, "eval", prog, "--facts", facts) == (0, "p(151).\n", "")
    rc, out, _ = _run(capsys, "run", prog, "--facts", facts, "--script", script)
    assert rc == 0 and "p(155)." in out


def test_csv_fields_past_the_limit_and_non_finite_floats(capsys, tmp_path):
    prog = tmp_path / "p.dl"
    prog.write_text(".decl s(x: string)\n.decl w(x: float)\na(x) :- s(x).\nb(x) :- w(x).\n")
    facts = tmp_path / "f"
    facts.mkdir()
    (facts / "s.csv").write_text("x\n" + "a" * 200_000 + "\n")  # over csv's default 128 KiB
    (facts / "w.csv").write_text("x\n1.5\n")
    rc, out, _ = _run(capsys, "eval", prog, "--facts", facts)
    assert rc == 0 and "b(1.5)." in out
    (facts / "s.csv").write_text("x\n" + "a" * (MAX_FIELD + 1) + "\n")
    rc, _, err = _run(capsys, "eval", prog, "--facts", facts)
    assert rc == 1 and f"{facts / 's.csv'}:2:1: error DL105" in err
    (facts / "s.csv").write_text("x\nok\n")
    script = tmp_path / "s.txt"
    script.write_text("insert w(2.5).\ncommit.\ndump.\n")
    for bad in ("nan", "inf", "-inf", "Infinity", "NaN"):
        (facts / "w.csv").write_text(f"x\n1.0\n{bad}\n")
        for command in (["eval"], ["run", "--script", script]):
            rc, _, err = _run(capsys, command[0], prog, "--facts", facts, *command[1:])
            assert rc == 1 and f"{facts / 'w.csv'}:3:1: error DL301" in err, (bad, command)


@pytest.mark.parametrize("literal", ["1e400", "99999999999999999999", "9" * 6000])
def test_literals_out_of_range_are_dl103(capsys, tmp_path, literal):
    prog = tmp_path / "p.dl"
    prog.write_text(f".decl q(y: float)\np(x) :- q(y), x = y * {literal}.\n")
    rc, _, err = _run(capsys, "eval", prog)
    assert rc == 1 and f"{prog}:2:23: error DL103" in err


def test_a_program_without_end_is_bounded_by_max_iterations(capsys, tmp_path):
    prog = tmp_path / "p.dl"
    prog.write_text(".decl s(x: int)\nn(x) :- s(x).\nn(y) :- n(x), y = x + 1.\n")
    facts = tmp_path / "f"
    facts.mkdir()
    (facts / "s.csv").write_text("x\n0\n")
    rc, _, err = _run(capsys, "eval", prog, "--facts", facts, "--max-iterations", "500")
    assert rc == 1 and "error DL312" in err and "500 iterations" in err
    prog.write_text(".decl s(x: int)\nn(x) :- s(x).\nn(y) :- n(x), y = x + 1, y < 50.\n")
    rc, out, _ = _run(capsys, "eval", prog, "--facts", facts, "--max-iterations", "500")
    assert rc == 0 and out.count("n(") == 50


def test_a_body_of_5000_atoms_is_dl105_not_a_recursion_error(capsys, tmp_path):
    prog = tmp_path / "p.dl"
    body = ", ".join(f"e(x{i}, x{i + 1})" for i in range(5000))
    prog.write_text(f".decl e(a: int, b: int)\ne(1, 1).\np(x0) :- {body}.\n")
    rc, _, err = _run(capsys, "eval", prog)
    assert rc == 1 and f"{prog}:3:1: error DL105" in err and "5001 variables" in err


@pytest.mark.parametrize("strategy", ["sensitivity", "dbsp", "recompute"])
def test_a_rule_at_the_variable_limit_runs_in_eval_and_run(capsys, tmp_path, strategy):
    # 255 atoms (256 variables): the joins bind one variable per level of recursion
    prog = tmp_path / "p.dl"
    body = ", ".join(f"e(x{i}, x{i + 1})" for i in range(255))
    prog.write_text(f".decl e(a: int, b: int)\np(x0) :- {body}.\n")
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "e.csv").write_text("a,b\n1,1\n2,3\n3,4\n")
    script = tmp_path / "s.txt"
    script.write_text("delete e(1, 1).\ncommit.\ninsert e(1, 1).\ninsert e(4, 4).\n"
                      "commit.\ndump.\n")
    rc, out, _ = _run(capsys, "eval", prog, "--facts", facts)
    assert rc == 0 and out == "p(1).\n"
    rc, out, _ = _run(capsys, "run", prog, "--facts", facts, "--script", script,
                      "--strategy", strategy)
    assert rc == 0 and out.splitlines()[-4:] == ["p(1).", "p(2).", "p(3).", "p(4)."]
