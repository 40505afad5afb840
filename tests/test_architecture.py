"""The layers hold: imports go down engine < schemas < pipelines (and examples) <
dagster_project, never up; no two modules import each other, directly or around a loop;
the engine imports no orchestration, cluster or storage library.

Every import counts, also those inside functions and under ``TYPE_CHECKING``: a lazy import
is still an arrow. Every module of ours is imported by its name in the ``deltalog``
package, never as a top-level ``engine``, ``pipelines``, ... (names other projects use)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "deltalog"
LAYERS = {"engine": 0, "schemas": 1, "pipelines": 2, "examples": 2, "dagster_project": 3}
# Libraries the pure engine must not import (I/O, orchestration, clusters).
NOT_IN_ENGINE = ("dagster", "pyspark", "deltalake", "pyarrow", "duckdb")


def _modules() -> dict[str, Path]:
    out = {}
    for package in LAYERS:
        for path in sorted((PACKAGE / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path) -> set[str]:
    """Every module name ``module`` imports (absolute names, as written or resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in _imports(module, path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _layer(module: str) -> int:
    return LAYERS[module.split(".")[1]]


def test_the_scan_sees_the_packages_and_their_imports():
    graph = _graph()
    assert {m.split(".")[1] for m in graph} >= {"engine", "schemas", "pipelines", "dagster_project"}
    assert "deltalog.engine.runtime" in graph["deltalog.pipelines.run"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_imports_go_down_the_layers():
    upward = [
        f"{m} -> {t}" for m, targets in _graph().items() for t in targets if _layer(t) > _layer(m)
    ]
    assert upward == []


def test_the_engine_is_pure():
    impure = []
    for module, path in _modules().items():
        if module.split(".")[1] != "engine":
            continue
        for name in _imports(module, path):
            if name.split(".")[0] in NOT_IN_ENGINE:
                impure.append(f"{module} imports {name}")
    assert impure == []


def test_our_modules_are_imported_by_their_deltalog_names():
    """No file imports ``engine.x`` (or another of our packages) as a top-level name: it
    would load a second copy of the module beside ``deltalog.engine.x``."""
    ours = tuple(LAYERS)
    files = [*PACKAGE.rglob("*.py"), *(REPO / "tests").rglob("*.py"),
             *(REPO / "bench").rglob("*.py"), *(REPO / "scripts").rglob("*.py")]
    bare = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            bare += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] in ours]
    assert bare == []
