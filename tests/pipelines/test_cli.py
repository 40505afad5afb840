"""The ``deltalog`` command: output format, CSV facts, and errors without tracebacks."""

import subprocess
import sys
from pathlib import Path

import pytest

from deltalog.pipelines.cli import main

PROGRAM = """
.decl e(src: int, dst: int)
.decl name(id: int, label: string)
.decl w(id: int, weight: float)
tc(x, y) :- e(x, y).
tc(x, z) :- tc(x, y), e(y, z).
deg[x] = n <- agg<<n = count()>> e(x, _).
label(l) :- name(_, l).
heavy(x, v) :- w(x, v), v > 1.5.
"""


def write(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_eval_prints_sorted_facts_in_the_one_format(tmp_path, capsys):
    write(tmp_path, {
        "p.dl": PROGRAM,
        "facts/e.csv": "src,dst\n2,3\n1,2\n",
        "facts/name.csv": 'id,label\n1,"a ""quoted"" one"\n2,plain\n',
        "facts/w.csv": "id,weight\n1,2.5\n2,1\n",
    })
    assert main(["eval", str(tmp_path / "p.dl"), "--facts", str(tmp_path / "facts")]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines() == [
        "deg[1] = 1.",
        "deg[2] = 1.",
        "heavy(1, 2.5).",
        'label("a \\"quoted\\" one").',
        'label("plain").',
        "tc(1, 2).",
        "tc(1, 3).",
        "tc(2, 3).",
    ]


def test_bad_csv_value_names_file_line_and_column(tmp_path, capsys):
    write(tmp_path, {"p.dl": PROGRAM, "facts/e.csv": "src,dst\n1,2\n3,x4\n"})
    assert main(["eval", str(tmp_path / "p.dl"), "--facts", str(tmp_path / "facts")]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == (
        f"{tmp_path / 'facts' / 'e.csv'}:3:3: error DL301: column 'dst': 'x4' is not a valid int"
    )



@pytest.mark.parametrize(("text", "where", "what"), [
    ('src,dst\n"1",zz\n', "2:5", "column 'dst': 'zz' is not a valid int"),
    ('src,dst\n1,2\n"3" , 4\n', "3:1", "not valid CSV"),
    ('src,dst\n7,"a,\nb"\n', "2:3", "column 'dst': 'a,\\nb' is not a valid int"),
    ('src,dst\n1,2\n3,"4\n5,6\n', "3:1", "not valid CSV"),
])
def test_quoted_csv_cells_name_their_own_column_and_an_open_quote_loses_no_row(
        tmp_path, capsys, text, where, what):
    """A cell's column counts the quotes and commas as written (a quoted cell spanning
    lines: where it starts); a quote left open, or text after a closing quote, is an
    error, not a cell that swallows the rows after it."""
    write(tmp_path, {"p.dl": PROGRAM, "facts/e.csv": text})
    assert main(["eval", str(tmp_path / "p.dl"), "--facts", str(tmp_path / "facts")]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"{tmp_path / 'facts' / 'e.csv'}:{where}: error "), err
    assert what in err, err

@pytest.mark.parametrize("cell", ["1_000", "\u0663", "0x10", "1e3", ""])
def test_an_int_cell_is_ascii_digits_only(tmp_path, capsys, cell):
    """Python's int() takes digit grouping and other scripts' digits; a CSV's int is
    written in ASCII digits with an optional sign, as every other reader of it reads it."""
    write(tmp_path, {"p.dl": PROGRAM, "facts/e.csv": f"src,dst\n+1,-2\n3,{cell}\n"})
    assert main(["eval", str(tmp_path / "p.dl"), "--facts", str(tmp_path / "facts")]) == 1
    assert f"e.csv:3:3: error DL301: column 'dst': {cell!r} is not a valid int" in \
        capsys.readouterr().err


@pytest.mark.parametrize(("cell", "ok"), [("2.5", True), ("-.5", True), ("1e-3", True),
                                          ("+4.", True), ("1_0.5", False), ("infinity", False),
                                          ("\u0663.5", False), ("1e", False)])
def test_a_float_cell_is_a_plain_decimal(tmp_path, capsys, cell, ok):
    program = ".decl w(x: float)\nout(x) :- w(x).\n"
    write(tmp_path, {"p.dl": program, "facts/w.csv": f"x\n{cell}\n"})
    code = main(["eval", str(tmp_path / "p.dl"), "--facts", str(tmp_path / "facts")])
    out, err = capsys.readouterr()
    assert code == (0 if ok else 1), err
    if ok:
        assert out == f"out({float(cell)!r}).\n"
    else:
        assert f"{cell!r} is not a valid float" in err


def test_header_must_match_declaration(tmp_path, capsys):
    write(tmp_path, {"p.dl": PROGRAM, "facts/e.csv": "a,b\n1,2\n"})
    assert main(["eval", str(tmp_path / "p.dl"), "--facts", str(tmp_path / "facts")]) == 1
    assert "error DL303: header a,b does not match" in capsys.readouterr().err


def test_csv_for_unknown_predicate_is_an_error(tmp_path, capsys):
    write(tmp_path, {"p.dl": PROGRAM, "facts/edges.csv": "src,dst\n1,2\n"})
    assert main(["eval", str(tmp_path / "p.dl"), "--facts", str(tmp_path / "facts")]) == 1
    assert "'edges.csv' names no predicate" in capsys.readouterr().err


def test_syntax_error_from_the_installed_command_has_no_traceback(tmp_path):
    write(tmp_path, {"bad.dl": "p(x) :- q(x)\nr(1)."})
    exe = Path(sys.executable).with_name("deltalog")
    proc = subprocess.run(
        [str(exe), "eval", str(tmp_path / "bad.dl")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1 and proc.stdout == ""
    expected = "error DL101: unexpected 'r', expected ',', '.', ';'"
    assert proc.stderr == f"{tmp_path / 'bad.dl'}:2:1: {expected}\n"
    assert "Traceback" not in proc.stderr


def test_missing_program_file(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "nope.dl")]) == 2
    assert "No such file" in capsys.readouterr().err


def test_run_applies_changes_at_commit_and_prints_stats(tmp_path, capsys):
    import json

    write(tmp_path, {
        "p.dl": ".decl e(a: int, b: int)\ntc(x, y) :- e(x, y).\ntc(x, z) :- tc(x, y), e(y, z).\n",
        "s.txt": "insert e(1, 2).\ninsert e(2, 3).\ndump tc.\ncommit.\ndump tc.\n"
                 "delete e(2, 3).\ncommit.\ndump.\n",
    })
    rc = main(["run", str(tmp_path / "p.dl"), "--script", str(tmp_path / "s.txt"), "--stats",
               "--strategy", "recompute"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert out.splitlines() == [
        "tc(1, 2).", "tc(1, 3).", "tc(2, 3).",  # after the first commit (nothing before)
        "tc(1, 2).",
    ]
    stats = [json.loads(line) for line in err.splitlines()]
    assert [s["commit"] for s in stats] == [1, 2]
    assert stats[0]["idb_inserted"] == 3 and stats[1]["idb_erased"] == 2
    assert all(s["strategy"] == "recompute" and s["iterator_ops"] > 0 for s in stats)


def test_run_sensitivity_strategy_reports_maintenance_work(tmp_path, capsys):
    import json

    write(tmp_path, {
        "p.dl": ".decl a(x: int, y: int)\n.decl b(y: int)\nr(x) :- a(x, y), b(y).\n",
        "s.txt": "insert a(1, 2).\ninsert a(3, 4).\ninsert b(2).\ncommit.\n"
                 "insert b(4).\ndelete b(2).\ncommit.\ndump.\n",
    })
    rc = main(["run", str(tmp_path / "p.dl"), "--script", str(tmp_path / "s.txt"), "--stats",
               "--strategy", "sensitivity"])
    out, err = capsys.readouterr()
    assert rc == 0 and out.splitlines() == ["r(3)."]
    stats = [json.loads(line) for line in err.splitlines()]
    assert [s["strategy"] for s in stats] == ["sensitivity", "sensitivity"]
    last = stats[-1]
    assert last["idb_inserted"] == 1 and last["idb_erased"] == 1
    for counter in ("iterator_ops", "oracle_regions", "surgeries"):
        assert last[counter] > 0, counter
    assert "intervals_matched" in last and "intervals_added" in last


def test_run_script_errors_point_at_the_script(tmp_path, capsys):
    write(tmp_path, {
        "p.dl": ".decl e(a: int, b: int)\ntc(x, y) :- e(x, y).\n",
        "s.txt": "insert e(1, 2).\n\ninsert tc(1, 2).\n",
    })
    rc = main(["run", str(tmp_path / "p.dl"), "--script", str(tmp_path / "s.txt")])
    assert rc == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{tmp_path / 's.txt'}:3:8: error DL206: 'tc' is derived by rules")



@pytest.mark.parametrize("strategy", ["auto", "recompute"])
def test_a_second_value_for_a_key_points_at_the_line_that_wrote_it(tmp_path, capsys,
                                                                     strategy):
    """DL302 for an input names where its second value was written: the CSV line, or the
    script's insert (against the CSV's value, or against an earlier insert)."""
    program = ".decl w[id: int] = weight: float\nheavy(x) :- w[x] = v, v > 1.5.\n"
    write(tmp_path, {"p.dl": program, "facts/w.csv": "id,weight\n1,2.5\n2,1\n1,3.0\n"})
    args = ["eval", str(tmp_path / "p.dl"), "--facts", str(tmp_path / "facts")]
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{tmp_path / 'facts' / 'w.csv'}:4:1: error DL302: "), err
    (tmp_path / "facts" / "w.csv").write_text("id,weight\n1,2.5\n")
    (tmp_path / "s.txt").write_text("insert w[2] = 1.0.\ncommit.\n\n  insert w[1] = 3.0.\n"
                                    "commit.\n")
    rc = main(["run", str(tmp_path / "p.dl"), "--facts", str(tmp_path / "facts"),
               "--script", str(tmp_path / "s.txt"), "--strategy", strategy])
    assert rc == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{tmp_path / 's.txt'}:4:10: error DL302: "), err
    assert "w[1] = 2.5" in err and "w[1] = 3.0" in err


@pytest.mark.parametrize("strategy", ["auto", "dbsp", "recompute"])
def test_a_second_value_derived_for_a_key_points_at_its_rule(tmp_path, capsys, strategy):
    program = (".decl v(k: int, x: float)\n"
               ".decl w[id: int] = weight: float\n"
               "w[k] = x :- v(k, x).\n")
    write(tmp_path, {"p.dl": program, "facts/v.csv": "k,x\n1,2.5\n",
                     "s.txt": "insert v(1, 3.0).\ncommit.\n"})
    facts = str(tmp_path / "facts")
    rc = main(["run", str(tmp_path / "p.dl"), "--facts", facts,
               "--script", str(tmp_path / "s.txt"), "--strategy", strategy])
    assert rc == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{tmp_path / 'p.dl'}:3:1: error DL302: "), err
    (tmp_path / "facts" / "v.csv").write_text("k,x\n1,2.5\n1,3.0\n")
    assert main(["eval", str(tmp_path / "p.dl"), "--facts", facts]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{tmp_path / 'p.dl'}:3:1: error DL302: "), err

@pytest.mark.parametrize("which", ["program", "script", "facts"])
def test_a_file_that_is_not_utf8_is_a_located_error(tmp_path, capsys, which):
    """Non-UTF-8 bytes in a program, script or CSV file end in FILE:LINE:COL: error DL104,
    never a traceback."""
    program = tmp_path / "p.dl"
    script = tmp_path / "s.txt"
    facts = tmp_path / "facts"
    facts.mkdir()
    program.write_bytes(b".decl e(a: int, b: string)\nq(x) :- e(x, _).\n")
    script.write_bytes(b'insert e(1, "a").\ncommit.\ndump.\n')
    (facts / "e.csv").write_bytes(b"a,b\n1,x\n")
    bad = {"program": program, "script": script, "facts": facts / "e.csv"}[which]
    bad.write_bytes(bad.read_bytes() + b"e(2, \"\xff\xfe\").\n")
    code = main(["run", str(program), "--script", str(script), "--facts", str(facts)])
    err = capsys.readouterr().err
    assert code != 0
    line = len(bad.read_bytes().split(b"\n")) - 1  # the appended last line
    assert err.startswith(f"{bad}:{line}:") and "error DL104" in err


MISSPELT = "reach(x, y) :- edge(x, y).\nreach(x, z) :- reach(x, y), egde(y, z).\n"


def test_a_misspelt_predicate_is_dl206_with_the_name_it_likely_meant(tmp_path, capsys):
    # read as an empty relation, it would give a wrong answer with exit code 0
    write(tmp_path, {"p.dl": MISSPELT, "facts/edge.csv": "a,b\n1,2\n2,3\n",
                     "s.txt": "insert edge(\"1\", \"2\").\ncommit.\ndump.\n"})
    facts = str(tmp_path / "facts")
    for argv in (["eval", str(tmp_path / "p.dl"), "--facts", facts],
                 ["run", str(tmp_path / "p.dl"), "--facts", facts,
                  "--script", str(tmp_path / "s.txt")]):
        assert main(argv) == 1
        _, err = capsys.readouterr()
        assert err.startswith(f"{tmp_path / 'p.dl'}:2:29: error DL206: 'egde' is read here")
        assert "no file egde.csv" in err and "did you mean 'edge'?" in err


def test_a_relation_with_no_source_is_dl206_unless_declared_or_given(tmp_path, capsys):
    write(tmp_path, {"p.dl": MISSPELT.replace("egde", "edge"),
                     "d.dl": ".decl edge(a: int, b: int)\n" + MISSPELT.replace("egde", "edge"),
                     "s.txt": "insert edge(\"1\", \"2\").\ncommit.\ndump.\n"})
    assert main(["eval", str(tmp_path / "p.dl")]) == 1
    assert "'edge' is read here" in capsys.readouterr().err
    # a declaration says "empty is meant"; a script that inserts into it is its source
    assert main(["eval", str(tmp_path / "d.dl")]) == 0
    assert main(["run", str(tmp_path / "p.dl"), "--script", str(tmp_path / "s.txt")]) == 0
    assert capsys.readouterr().out.splitlines() == ['reach("1", "2").']
