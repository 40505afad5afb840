"""Golden programs: ``<case>/program.dl`` (+ optional ``facts/``, and ``script.txt`` for a
transaction script run with ``deltalog run``) go through the CLI and are
compared with ``expected.txt`` (stdout) or ``expected_error.txt`` (stderr, exit 1).

Regenerate with ``DELTALOG_UPDATE_GOLDENS=1 make test`` and review the diff."""

import os
from pathlib import Path

import pytest

from deltalog.pipelines.cli import main

HERE = Path(__file__).parent
CASES = sorted(p.parent.name for p in HERE.glob("*/program.dl"))
UPDATE = os.environ.get("DELTALOG_UPDATE_GOLDENS") == "1"


SCRIPT_CASES = [c for c in CASES if (HERE / c / "script.txt").exists()]


def _recursive(folder: Path) -> bool:
    from deltalog.engine.analysis.analyze import load_program

    prog = load_program((folder / "program.dl").read_text())
    return any(s.recursive for s in prog.strata)


@pytest.mark.parametrize("strategy", ["sensitivity", "dbsp", "recompute"])
@pytest.mark.parametrize("case", SCRIPT_CASES)
def test_golden_script_every_strategy(case, strategy, capsys, monkeypatch):
    """differential: every strategy prints the same dumps as the default (auto) one; the
    sensitivity strategy refuses recursive programs with a clear error."""
    folder = HERE / case
    monkeypatch.chdir(folder)
    argv = ["run", "program.dl", "--script", "script.txt", "--strategy", strategy]
    if (folder / "facts").is_dir():
        argv += ["--facts", "facts"]
    rc = main(argv)
    out, err = capsys.readouterr()
    if strategy == "sensitivity" and _recursive(folder):
        assert rc == 1 and out == "" and "error DL901" in err and "recursive" in err
        return
    assert rc == 0 and err == ""
    assert out == (folder / "expected.txt").read_text()


@pytest.mark.parametrize("case", CASES)
def test_golden(case, capsys, monkeypatch):
    folder = HERE / case
    monkeypatch.chdir(folder)  # paths in error messages are relative to the case folder
    argv = ["eval", "program.dl"]
    if (folder / "script.txt").exists():
        argv = ["run", "program.dl", "--script", "script.txt"]
    if (folder / "facts").is_dir():
        argv += ["--facts", "facts"]
    rc = main(argv)
    out, err = capsys.readouterr()
    expected_out = folder / "expected.txt"
    expected_err = folder / "expected_error.txt"
    if UPDATE:
        (expected_err if rc else expected_out).write_text(err if rc else out)
        (expected_out if rc else expected_err).unlink(missing_ok=True)
    if expected_err.exists():
        assert rc == 1 and out == ""
        assert err == expected_err.read_text()
    else:
        assert rc == 0 and err == ""
        assert out == expected_out.read_text()


def test_there_are_goldens():
    assert len(CASES) >= 15
