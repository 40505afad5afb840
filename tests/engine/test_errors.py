"""Error codes have one home and one meaning: every code is registered once in
``deltalog/engine/errors.py``, no other module spells a code out, and the README's table lists
exactly the registered codes."""

import re
from pathlib import Path

import pytest

from deltalog.engine import errors

REPO = Path(__file__).resolve().parents[2]
CODE = re.compile(r"[\"']DL\d{3}[\"']")
PACKAGES = ("engine", "schemas", "pipelines", "examples", "dagster_project")


def test_each_code_is_registered_once():
    assert len(errors.CODES) == len(set(errors.CODES))
    with pytest.raises(ValueError, match="twice"):
        errors._code("DL101", "again")
    constants = {v for k, v in vars(errors).items() if k.isupper() and isinstance(v, str)}
    assert constants - {"DL000"} <= set(errors.CODES)


def test_no_module_spells_a_code_out():
    spelled = []
    for package in PACKAGES:
        for path in sorted((REPO / "deltalog" / package).rglob("*.py")):
            if path == REPO / "deltalog" / "engine" / "errors.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if CODE.search(line):
                    spelled.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert spelled == []


def test_the_readme_lists_exactly_the_registered_codes():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    table = text.split("### Error codes", 1)[1].split("\n#", 1)[0]
    listed = dict(re.findall(r"^\| (DL\d{3}) \| (.+?) \|$", table, re.M))
    assert listed == errors.CODES
