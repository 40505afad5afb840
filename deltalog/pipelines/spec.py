"""A pipeline: a Datalog program plus the binding of its relations to Delta tables.

A pipeline lives in a folder ``<name>/`` with ``program.dl`` and ``pipeline.toml``, found in
one of the search folders (``pipeline_folders``: ``$DELTALOG_PIPELINES``, else the
``pipelines`` of the ``[tool.deltalog]`` table of the nearest ``pyproject.toml`` that has one,
else the bundled ``examples/``);
the binding is checked against the analyzed program here, once, so that the Dagster factories
and the materialization code can trust it.
"""

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from deltalog.engine.analysis.analyze import load_program
from deltalog.engine.analysis.program import AnalyzedProgram, Stratum
from deltalog.engine.analysis.sources import closest_name
from deltalog.engine.errors import BAD_BINDING, BAD_PROJECT, DeltalogError
from deltalog.engine.source import decode_source
from deltalog.pipelines.expectations import Suite, load_suite

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
PIPELINES_ENV = "DELTALOG_PIPELINES"  # folders holding pipeline folders, os.pathsep-separated
PROGRAM_FILE = "program.dl"
BINDING_FILE = "pipeline.toml"
PROJECT_FILE = "pyproject.toml"
PROJECT_KEYS = ("pipelines", "warehouse")  # the keys of [tool.deltalog]


class BindingError(DeltalogError):
    """``pipeline.toml`` does not match the program, or is not valid TOML."""

    code = BAD_BINDING


class ProjectError(DeltalogError):
    """The ``[tool.deltalog]`` table of a ``pyproject.toml`` is not valid."""

    code = BAD_PROJECT


@dataclass(frozen=True)
class ProjectConfig:
    """The ``[tool.deltalog]`` table of a user's ``pyproject.toml``, its paths resolved
    against the folder of that file::

        [tool.deltalog]
        pipelines = ["pipelines"]     # folders holding pipeline folders
        warehouse = "warehouse"       # the warehouse root: a folder, or a URI (s3://...)
    """

    pyproject: Path
    pipelines: tuple[Path, ...] = ()
    warehouse: str | None = None


def _parse_project(pyproject: Path, table: object) -> ProjectConfig:
    where = f"{pyproject} [tool.deltalog]"
    if not isinstance(table, dict):
        raise ProjectError("tool.deltalog must be a table", where)
    unknown = sorted(set(table) - set(PROJECT_KEYS))
    if unknown:
        raise ProjectError(f"unknown key(s) {', '.join(unknown)}; expected "
                           f"{', '.join(PROJECT_KEYS)}", where)
    base = pyproject.parent
    folders = table.get("pipelines", [])
    if not isinstance(folders, list) or not all(isinstance(f, str) and f for f in folders):
        raise ProjectError('pipelines must be a list of folder paths, e.g. ["pipelines"]', where)
    resolved = tuple((base / f).resolve() for f in folders)
    for given, folder in zip(folders, resolved, strict=True):
        if not folder.is_dir():
            raise ProjectError(f"pipelines folder {given!r} does not exist ({folder})", where)
    warehouse = table.get("warehouse")
    if warehouse is not None and (not isinstance(warehouse, str) or not warehouse.strip()):
        raise ProjectError("warehouse must be a non-empty folder path or URI", where)
    if warehouse is not None and "://" not in warehouse:
        warehouse = str((base / warehouse).resolve())
    return ProjectConfig(pyproject, resolved, warehouse)


def project_config(start: str | Path | None = None) -> ProjectConfig | None:
    """The ``[tool.deltalog]`` table of the nearest ``pyproject.toml`` that has one, looking
    in ``start`` (default: the current directory) and its parents, as ruff looks for
    ``[tool.ruff]``; None when there is none. A ``pyproject.toml`` on the way that is not
    valid TOML is a ``ProjectError``: it might be the one meant."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        pyproject = folder / PROJECT_FILE
        if not pyproject.is_file():
            continue
        try:
            data = tomllib.loads(decode_source(pyproject.read_bytes(), str(pyproject)))
        except tomllib.TOMLDecodeError as err:
            raise ProjectError(f"not valid TOML: {err}", str(pyproject)) from None
        tool = data.get("tool", {})
        if isinstance(tool, dict) and "deltalog" in tool:
            return _parse_project(pyproject, tool["deltalog"])
    return None


@dataclass(frozen=True)
class PipelineSpec:
    """A checked pipeline: every EDB predicate read from a table, every IDB written to one.

    Table paths are relative to a warehouse root (see ``table_uri``). EDB predicates whose
    facts are all in the program itself may stay unbound: they have no table.
    """

    name: str
    directory: Path
    program: AnalyzedProgram
    edb_tables: Mapping[str, str]
    idb_tables: Mapping[str, str]
    # EDB predicate -> the team's Great Expectations suite on its table (``[expectations]``)
    expectations: Mapping[str, Suite] = field(default_factory=dict)

    def table_uri(self, root: str | Path, pred: str) -> str:
        """Where the table of ``pred`` lives under the warehouse ``root``: a local path, or
        a URI when the warehouse is one (``s3://bucket/wh`` gives ``s3://bucket/wh/rel``).
        An input bound to a URI or an absolute path is read there (``is_located``)."""
        rel = self.edb_tables.get(pred) or self.idb_tables.get(pred)
        if rel is None:
            raise KeyError(f"pipeline '{self.name}' binds no table to '{pred}'")
        if is_located(rel):
            return rel
        if "://" in str(root):
            return f"{str(root).rstrip('/')}/{PurePosixPath(rel)}"
        return str(Path(root) / rel)

    def stratum_of(self, pred: str) -> int:
        """Index (in evaluation order) of the stratum that defines IDB ``pred``."""
        for i, stratum in enumerate(self.program.strata):
            if pred in stratum.preds:
                return i
        raise KeyError(f"'{pred}' is not an IDB predicate of pipeline '{self.name}'")

    def upstream(self, stratum: Stratum) -> tuple[str, ...]:
        """Bound predicates that the rules of ``stratum`` read, outside the stratum itself."""
        return self.upstream_of(stratum.preds, exclude=stratum.preds)

    def upstream_of(self, preds: tuple[str, ...], exclude: tuple[str, ...] = ()) -> tuple[str, ...]:
        """Bound predicates that the rules of ``preds`` read, minus ``exclude``."""
        body = set().union(*(self.program.dependencies.get(p, frozenset()) for p in preds))
        bound = set(self.edb_tables) | set(self.idb_tables)
        return tuple(sorted((body - set(exclude)) & bound))

    def edb_closure(self, pred: str) -> tuple[str, ...]:
        """Bound EDB predicates that ``pred`` depends on, directly or through other IDBs."""
        seen: set[str] = set()
        todo = [pred]
        while todo:
            for dep in self.program.dependencies.get(todo.pop(), frozenset()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return tuple(sorted(seen & set(self.edb_tables)))


def pipeline_folders(start: str | Path | None = None) -> list[Path]:
    """The folders searched for pipelines, the first of: ``$DELTALOG_PIPELINES`` (several
    separated by ``os.pathsep``); the ``pipelines`` of ``[tool.deltalog]`` in the nearest
    ``pyproject.toml`` that has that table, looking from ``start`` (default: the current
    directory) upward; the bundled ``examples/``."""
    configured = os.environ.get(PIPELINES_ENV, "")
    folders = [Path(p) for p in configured.split(os.pathsep) if p]
    if folders:
        return folders
    project = project_config(start)
    if project is not None and project.pipelines:
        return list(project.pipelines)
    return [EXAMPLES_DIR]


def configured_warehouse(start: str | Path | None = None) -> str | None:
    """The ``warehouse`` of ``[tool.deltalog]`` (see ``project_config``), None without one.
    ``$DELTALOG_WAREHOUSE`` wins over it: its readers check the variable first."""
    project = project_config(start)
    return project.warehouse if project is not None else None


WAREHOUSE_ENV = "DELTALOG_WAREHOUSE"
# (deltalog/pipelines/spec.py: the repository is three folders up)
REPO_WAREHOUSE = Path(__file__).resolve().parents[2] / "warehouse"


def default_warehouse(start: str | Path | None = None) -> str:
    """Where the warehouse is when nobody says (the ``warehouse`` resource's default and
    the commands' ``--warehouse``): ``$DELTALOG_WAREHOUSE``, else the ``warehouse`` of
    ``[tool.deltalog]`` in the nearest ``pyproject.toml`` that has that table (looking
    from ``start``, default the current directory, upward); else, for a ``start`` outside
    this repository (a team's own pipelines), ``warehouse/`` beside the nearest
    ``pyproject.toml`` above it (its project; ``start`` itself without one); else
    ``warehouse/`` in this repository (the bundled examples')."""
    found = os.environ.get(WAREHOUSE_ENV) or configured_warehouse(start)
    if found:
        return found
    if start is not None:
        here = Path(start).resolve()
        if not here.is_relative_to(REPO_WAREHOUSE.parent):
            project = next((f for f in (here, *here.parents) if (f / PROJECT_FILE).is_file()),
                           here)
            return str(project / "warehouse")
    return str(REPO_WAREHOUSE)


def _resolve(name_or_dir: str | Path) -> Path:
    path = Path(name_or_dir)
    if path.is_dir():
        return path.resolve()
    if isinstance(name_or_dir, str) and "/" not in name_or_dir:
        for base in pipeline_folders():
            if (base / name_or_dir).is_dir():
                return (base / name_or_dir).resolve()
    looked = ", ".join(str(p) for p in pipeline_folders())
    raise BindingError(f"no pipeline folder '{name_or_dir}' (looked in {looked})")


def _section(data: Mapping[str, object], key: str, where: str,
             inside: str = "the warehouse") -> dict[str, str]:
    section = data.get(key, {})
    if not isinstance(section, dict):
        raise BindingError(f'[{key}] must be a table of predicate = "path" entries', where)
    for pred, path in section.items():
        if not isinstance(path, str) or not path.strip():
            raise BindingError(f"[{key}] {pred} must be a non-empty string path", where)
        p = PurePosixPath(path)
        if key == "edb" and _URI.fullmatch(path):
            continue  # (an input table of the team's lake, read where it is)
        if key == "edb" and p.is_absolute() and ".." not in p.parts and "\\" not in path:
            continue
        schemed = bool(re.match(r"[a-z][a-z0-9+.-]*:", path, re.IGNORECASE))
        if p.is_absolute() or ".." in p.parts or "\\" in path or schemed:
            why = (" (output tables are written under the warehouse: their runs' state "
                   "and locks are the warehouse's; an [edb] table may be a URI or an "
                   "absolute path)" if key == "idb" and is_located(path) else
                   " or a URI such as s3://bucket/path" if key == "edb" else "")
            raise BindingError(
                f'[{key}] {pred} = "{path}" must be a relative path inside {inside}{why}',
                where,
            )
    return dict(section)


# A table URI of a store delta-rs reads (s3://bucket/path, az://..., file:///path).
_URI = re.compile(r"[a-z][a-z0-9+.-]*://[^\s\\]+", re.IGNORECASE)


def is_located(path: str) -> bool:
    """Whether a table path of ``pipeline.toml`` names its own place (an input table's
    URI such as ``s3://bucket/bronze/edge``, or an absolute path), not a place under the
    warehouse."""
    return "://" in path or PurePosixPath(path).is_absolute()


def check_binding(
    prog: AnalyzedProgram, edb: Mapping[str, str], idb: Mapping[str, str], where: str
) -> None:
    """Raise ``BindingError`` unless the binding and the program agree exactly."""
    problems: list[str] = []
    for pred in sorted(edb):
        if pred in prog.idb:
            problems.append(f"'{pred}' is derived by rules (IDB): move it to [idb]")
        elif pred not in prog.schemas:
            problems.append(f"[edb] binds '{pred}', which the program does not use")
    for pred in sorted(idb):
        if pred in prog.edb:
            problems.append(f"'{pred}' is a base relation (EDB): move it to [edb]")
        elif pred not in prog.schemas:
            problems.append(f"[idb] binds '{pred}', which the program does not define")
    for pred in prog.edb:
        if pred not in edb and pred not in prog.facts:
            near = closest_name(pred, set(edb) | set(prog.idb)) if not prog.schemas[
                pred].declared else None
            hint = f" (or is '{pred}' a misspelling of '{near}'?)" if near else ""
            problems.append(f"EDB predicate '{pred}' has no table: add it to [edb]{hint}")
    for pred in prog.idb:
        if pred not in idb:
            problems.append(f"IDB predicate '{pred}' has no output table: add it to [idb]")
    for pred in (*edb, *idb):
        if pred in prog.schemas and prog.schemas[pred].arity == 0:
            problems.append(f"'{pred}' has no columns and cannot be stored as a table")
    paths: dict[str, str] = {}
    for pred, path in (*edb.items(), *idb.items()):
        key = str(PurePosixPath(path))
        if key in paths:
            problems.append(f"'{pred}' and '{paths[key]}' are bound to the same table {path}")
        paths[key] = pred
    if problems:
        raise BindingError("; ".join(problems), where)


def load_pipeline(name_or_dir: str | Path) -> PipelineSpec:
    """The pipeline in ``pipelines/<name>/`` (or in the folder given), checked.

    Raises ``DeltalogError``: DL1xx/DL2xx for the program, DL401 for ``pipeline.toml``.
    """
    directory = _resolve(name_or_dir)
    program_path = directory / PROGRAM_FILE
    binding_path = directory / BINDING_FILE
    for path in (program_path, binding_path):
        if not path.is_file():
            raise BindingError(f"missing {path.name} in pipeline folder {directory}")
    program_file = str(program_path)
    prog = load_program(decode_source(program_path.read_bytes(), program_file), program_file)
    where = str(binding_path)
    try:
        data = tomllib.loads(decode_source(binding_path.read_bytes(), str(binding_path)))
    except tomllib.TOMLDecodeError as err:
        raise BindingError(f"not valid TOML: {err}", where) from None
    unknown = sorted(set(data) - {"name", "edb", "idb", "expectations"})
    if unknown:
        raise BindingError(f"unknown section(s) {', '.join(unknown)}; expected [edb], [idb], "
                           "[expectations]", where)
    name = data.get("name", directory.name)
    if not isinstance(name, str) or not name.isidentifier():
        raise BindingError(f"pipeline name {name!r} must be an identifier", where)
    edb = _section(data, "edb", where)
    idb = _section(data, "idb", where)
    check_binding(prog, edb, idb, where)
    suites = {}
    for pred, rel in _section(data, "expectations", where, "the pipeline folder").items():
        if pred not in edb:
            raise BindingError(f"[expectations] names '{pred}', which [edb] does not bind: "
                               "expectations are on EDB tables", where)
        try:
            suites[pred] = load_suite(directory / rel, prog.schemas[pred])
        except ValueError as err:
            raise BindingError(f"[expectations] {pred} = {rel!r}: {err}", where) from None
    return PipelineSpec(name, directory, prog, edb, idb, suites)


def discover_pipelines(bases: Sequence[str | Path] | None = None) -> list[Path]:
    """Pipeline folders: every sub-folder with a ``pipeline.toml`` of the search folders
    (``bases``, default ``pipeline_folders()``); a search folder that has a ``pipeline.toml``
    itself is that one pipeline folder."""
    out: list[Path] = []
    for base in bases if bases is not None else pipeline_folders():
        if (Path(base) / BINDING_FILE).is_file():
            out.append(Path(base))
        else:
            out.extend(sorted(p.parent for p in Path(base).glob(f"*/{BINDING_FILE}")))
    return out
