"""``deltalog init DIR``: a team's own project, ready for ``dagster dev``.

It writes ``DIR/pyproject.toml`` (the project, its dependency on deltalog, a
``[tool.deltalog]`` table naming ``pipelines/`` and ``warehouse/``, and ``[tool.dg]`` so that
Dagster's ``dg`` tool knows the project), one example pipeline
(``pipelines/example/``: the reachability closure of one EDB table ``edge``, with a CSV seed),
and a Python package ``<pkg>`` with ``definitions.py`` (``build_definitions`` on the project)
and ``seed.py`` (writes the seed into the warehouse as the Delta table of ``edge``).
A ``DIR`` that exists and holds anything is refused (DL403): nothing is overwritten.
"""

import re
from pathlib import Path

from deltalog.engine.errors import NOT_EMPTY, DeltalogError

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=68", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "Datalog pipelines over Delta Lake tables, with deltalog and Dagster"
requires-python = ">=3.11"
dependencies = [
    "deltalog",  # install it first from its repository: pip install /path/to/deltalog
]

[tool.setuptools.packages.find]
include = ["{pkg}*"]

# deltalog: folders holding pipeline folders (<name>/program.dl + pipeline.toml), and the
# warehouse root (a folder or a URI such as s3://bucket/wh), both relative to this file.
# $DELTALOG_PIPELINES and $DELTALOG_WAREHOUSE win over them.
[tool.deltalog]
pipelines = ["pipelines"]
warehouse = "warehouse"

# Dagster's dg tool (dg list defs, dg dev): the package whose definitions.py holds `defs`.
[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "{pkg}"
'''

README = '''\
# {dist}

Datalog pipelines over Delta Lake tables (deltalog), orchestrated by Dagster.

```bash
pip install -e .                      # deltalog must be installed in this environment
python -m {pkg}.seed                  # write pipelines/example/data/edge.csv as the EDB table
dagster dev -m {pkg}.definitions      # the UI: materialize the `example` asset group
```

A pipeline is a folder under `pipelines/` with `program.dl` and `pipeline.toml`; every
folder there becomes an asset group. A pipeline with an error shows as one asset named
after its folder whose description is the error; the others keep working.
'''

GITIGNORE = "warehouse/\n.dagster_home/\n__pycache__/\n*.egg-info/\n"

PROGRAM = '''\
// Who reaches whom: the transitive closure of the EDB table `edge`.
.decl edge(src: string, dst: string)

reaches(x, y) :- edge(x, y).
reaches(x, z) :- reaches(x, y), edge(y, z).
'''

BINDING = '''\
# EDB predicates: the Delta tables the pipeline reads (written by you, e.g. by seed.py);
# IDB predicates: the Delta tables it writes. Paths are relative to the warehouse root.
[edb]
edge = "example/edb/edge"

[idb]
reaches = "example/idb/reaches"
'''

SEED_CSV = "src,dst\na,b\nb,c\nc,d\nx,y\n"

INIT = '"""{dist}: deltalog pipelines, orchestrated by Dagster."""\n'

DEFINITIONS = '''\
"""Dagster definitions of this project's deltalog pipelines: every pipeline folder of the
[tool.deltalog] table in pyproject.toml. Run ``dagster dev -m {pkg}.definitions``."""

from pathlib import Path

from deltalog.dagster_project.build import build_definitions

PROJECT = Path(__file__).resolve().parents[1]

defs = build_definitions(project=PROJECT)
'''

SEED = '''\
"""Write the example pipeline's EDB table from its CSV seed: ``python -m {pkg}.seed``.

The table of `edge` becomes equal to pipelines/example/data/edge.csv (a new Delta version
when it changed). Edit the CSV and run it again, then materialize the `example` assets.
"""

import sys
from pathlib import Path

from deltalog.dagster_project.defs.resources import default_warehouse_root
from deltalog.engine.errors import DeltalogError
from deltalog.pipelines.facts import read_csv_relation
from deltalog.pipelines.spec import load_pipeline
from deltalog.pipelines.warehouse import write_edb
from deltalog.schemas.relation import rows_to_arrow

PROJECT = Path(__file__).resolve().parents[1]
PIPELINE = PROJECT / "pipelines" / "example"


def main() -> int:
    try:
        spec = load_pipeline(PIPELINE)
        schema = spec.program.schemas["edge"]
        rows = read_csv_relation(PIPELINE / "data" / "edge.csv", schema)
        root = default_warehouse_root(PROJECT)
        for w in write_edb(root, spec, {{"edge": rows_to_arrow(schema, rows)}}):
            print(f"{{w.pred}}: {{spec.table_uri(root, w.pred)}} version {{w.table_version}}, "
                  f"{{w.rows}} rows (+{{w.inserted}} -{{w.deleted}})")
    except DeltalogError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


class NotEmptyError(DeltalogError):
    """``deltalog init`` into a folder that exists and holds something."""

    code = NOT_EMPTY


def package_name(directory: Path) -> str:
    """The Python package of a project in ``directory``: its name as an identifier."""
    name = re.sub(r"\W+", "_", directory.resolve().name.lower(), flags=re.ASCII).strip("_")
    if not name or name[0].isdigit():
        name = f"project_{name}".rstrip("_")
    return name


def project_files(dist: str, pkg: str) -> dict[str, str]:
    """Every file ``init`` writes: relative path -> text."""
    fill = {"dist": dist, "pkg": pkg}
    return {
        "pyproject.toml": PYPROJECT.format(**fill),
        "README.md": README.format(**fill),
        ".gitignore": GITIGNORE,
        "pipelines/example/program.dl": PROGRAM,
        "pipelines/example/pipeline.toml": BINDING,
        "pipelines/example/data/edge.csv": SEED_CSV,
        f"{pkg}/__init__.py": INIT.format(**fill),
        f"{pkg}/definitions.py": DEFINITIONS.format(**fill),
        f"{pkg}/seed.py": SEED.format(**fill),
    }


def init_project(directory: str | Path, package: str | None = None) -> list[Path]:
    """Scaffold a project in ``directory`` (created if missing); the files written."""
    target = Path(directory)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        what = "a file" if not target.is_dir() else "a folder that is not empty"
        raise NotEmptyError(f"{what}; deltalog init writes a project only into a new or "
                            "empty folder (it overwrites nothing)", str(target))
    pkg = package or package_name(target)
    if not pkg.isidentifier():
        raise DeltalogError(f"package name {pkg!r} is not a Python identifier", str(target))
    dist = re.sub(r"[^A-Za-z0-9._-]+", "-", target.resolve().name).strip("-.") or pkg
    written = []
    for rel, text in project_files(dist, pkg).items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
