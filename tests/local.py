"""Small helpers the tests share: a free TCP port on 127.0.0.1 (for the servers the tests
start), importing a scaffolded project's module afresh, and writing a pipeline folder."""

import importlib
import socket
import sys
from pathlib import Path
from types import ModuleType

import pytest

from deltalog.pipelines.spec import PipelineSpec, load_pipeline


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def import_fresh(project: Path, module: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``module`` imported from ``project`` (put first on sys.path), its package's modules
    imported before forgotten first; both undone after the test."""
    monkeypatch.syspath_prepend(str(project))
    top = module.split(".")[0]
    for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        monkeypatch.delitem(sys.modules, name)
    return importlib.import_module(module)


def write_pipeline(tmp_path: Path, name: str, program: str, binding: str) -> PipelineSpec:
    """A pipeline folder ``tmp_path/name`` as a data team writes one (``program.dl`` and
    ``pipeline.toml``), loaded."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "program.dl").write_text(program, encoding="utf-8")
    (folder / "pipeline.toml").write_text(binding, encoding="utf-8")
    return load_pipeline(folder)
