"""``python -m dagster_project.demo``: the Debian pipeline end to end on a fresh local warehouse.

Builds the EDB Delta tables from snapshot 1, materializes every asset with its Spark checks
through Dagster (in process), applies snapshot 2, materializes again, and prints what each
run did. Exit status 1 when a check or a step fails; expected errors are one line on stderr.
"""

import argparse
import contextlib
import logging
import os
import shutil
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import DeltalogError

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WAREHOUSE = REPO_ROOT / "warehouse"
MARKER = ".deltalog-demo"  # only a folder with this marker is wiped
# Dagster's console log: failures are summarized in one line each by the demo itself.
QUIET_LOGGERS = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass
class RunSummary:
    """What one Dagster run did, per table and per check."""

    seconds: float = 0.0
    success: bool = True
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def _quiet() -> None:
    """Dagster and Spark log to WARNING; library warnings off (the report is the output)."""
    warnings.filterwarnings("ignore")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    for name in ("dagster", "py4j", "pyspark"):
        logging.getLogger(name).setLevel(logging.WARNING)


@contextlib.contextmanager
def _silenced_stderr() -> Iterator[None]:
    """Redirect fd 2 (the JVM's start-up banner goes there, not through Python)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _start_spark() -> None:
    from pipelines.spark.session import make_spark_session

    with _silenced_stderr():
        make_spark_session("deltalog-demo").sparkContext.setLogLevel("ERROR")


def _fresh_warehouse(root: Path, spec: Any) -> None:
    """Wipe the pipeline's tables and saved state under ``root`` (a demo warehouse only:
    other pipelines' tables stay, so `make ui` shows every demo that ran)."""
    from pipelines.state_store import state_dir

    if root.exists() and not (root / MARKER).exists() and any(root.iterdir()):
        raise DeltalogError(
            f"{root} exists and was not made by the demo (no {MARKER}); "
            "remove it or pass --warehouse",
            "demo",
        )
    tops = {Path(rel).parts[0] for rel in [*spec.edb_tables.values(), *spec.idb_tables.values()]}
    for folder in [*(root / top for top in sorted(tops)), state_dir(root, spec.name)]:
        if folder.exists():
            shutil.rmtree(folder)
    root.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text("made by python -m dagster_project.demo; wiped by the next run\n")


def _run(defs: Any, with_checks: bool) -> RunSummary:
    import dagster as dg

    start = time.perf_counter()
    result = dg.materialize(
        [*defs.assets, *(defs.asset_checks if with_checks else ())],
        resources=defs.resources,
        run_config=QUIET_LOGGERS,
        raise_on_error=False,
    )
    summary = RunSummary(seconds=time.perf_counter() - start, success=result.success)
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        summary.metadata[mat.asset_key.path[-1]] = {k: v.value for k, v in mat.metadata.items()}
    for check in result.get_asset_check_evaluations():
        name = f"{check.asset_key.to_user_string()}:{check.check_name}"
        summary.checks[name] = bool(check.passed)
        if not check.passed:
            meta = {k: v.value for k, v in check.metadata.items()}
            detail = (
                f"missing {meta['missing_in_engine']}, extra {meta['extra_in_engine']}"
                if "missing_in_engine" in meta
                else check.description
            )
            summary.failures.append(f"check {name} failed: {detail}")
    for event in result.get_step_failure_events():
        error = event.step_failure_data.error
        lines = [ln.strip() for ln in (error.message if error else "").splitlines()]
        message = next((ln for ln in lines if ln), "unknown error")[:300]
        summary.failures.append(f"step {event.step_key} failed: {message}")
    return summary


def _subset_loader(sections: frozenset[str] | None) -> Any:
    """The Debian snapshot loader, restricted to packages of ``sections`` when given (and to
    the depends/provides rows of those packages). Only ever explicit (--sections)."""
    import pyarrow.compute as pc

    from examples.debian.snapshot import load_snapshot

    def load(version: int) -> dict[str, Any]:
        tables = load_snapshot(version)
        if sections is None:
            return tables
        package = tables["package"]
        package = package.filter(pc.is_in(package["section"], value_set=_strings(sections)))
        names = package["name"].combine_chunks()
        return {
            "package": package,
            "depends": tables["depends"].filter(pc.is_in(tables["depends"]["pkg"], names)),
            "provides": tables["provides"].filter(pc.is_in(tables["provides"]["pkg"], names)),
            "vulnerable": tables["vulnerable"],
        }

    return load


def _strings(values: frozenset[str]) -> Any:
    import pyarrow as pa

    return pa.array(sorted(values), type=pa.string())


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        parts = [
            c.ljust(w) if i == 0 or not c[:1].replace("-", "").isdigit() else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  " + "  ".join(parts).rstrip())
        if n == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _loader(pipeline: str, subset: frozenset[str] | None) -> Any:
    if pipeline == "debian":
        return _subset_loader(subset)
    from examples.wordnet.snapshot import snapshot_loader

    return snapshot_loader(None if subset is None else sorted(subset))


SUBSET_OF = {"debian": "packages of sections", "wordnet": "synsets (and ancestors) of lexnames"}


def run_demo(
    root: Path,
    with_checks: bool = True,
    sections: frozenset[str] | None = None,
    pipeline: str = "debian",
) -> int:
    """The whole demo of ``pipeline``; ``sections`` restricts the data (Debian sections,
    or WordNet lexicographer files such as noun.animal). Returns the exit status."""
    _quiet()
    from dagster_project.definitions import build_definitions
    from pipelines.spec import load_pipeline
    from pipelines.warehouse import apply_snapshot, build_warehouse

    spec = load_pipeline(pipeline)
    print(f"deltalog demo: pipeline '{spec.name}', warehouse {root}", flush=True)
    if sections is not None:
        print(f"  SUBSET: only {SUBSET_OF[pipeline]} {', '.join(sorted(sections))}", flush=True)
    load = _loader(pipeline, sections)
    steps: list[tuple[str, float]] = []

    def timed(label: str, fn: Any, *args: Any) -> Any:
        print(f"  {label} ...", flush=True)
        start = time.perf_counter()
        out = fn(*args)
        steps.append((label, time.perf_counter() - start))
        return out

    _fresh_warehouse(root, spec)
    if with_checks:
        timed("start Spark", _start_spark)
    built = timed("build EDB tables (snapshot 1)", build_warehouse, root, spec, 1, load)
    edb1 = {w.pred: w for w in built}
    defs = build_definitions([spec], root=root)
    what = "all assets + checks" if with_checks else "all assets"
    run1 = timed(f"materialize {what} (run 1)", _run, defs, with_checks)
    applied = timed("apply snapshot 2 to the EDB", apply_snapshot, root, spec, 2, load)
    edb2 = {w.pred: w for w in applied}
    run2 = timed(f"materialize {what} (run 2)", _run, defs, with_checks)

    print()
    print(_table(["step", "seconds"], [(label, f"{s:.1f}") for label, s in steps]))
    rows = []
    for pred in sorted(spec.edb_tables):
        a, b = edb1[pred], edb2[pred]
        rows.append((pred, "edb", a.rows, b.rows, b.inserted, b.deleted, b.table_version, "", ""))
    for stratum in spec.program.strata:
        for pred in stratum.preds:
            m1, m2 = run1.metadata.get(pred, {}), run2.metadata.get(pred, {})
            rows.append(
                (
                    pred,
                    "idb*" if stratum.recursive else "idb",
                    m1.get("dagster/row_count", "-"),
                    m2.get("dagster/row_count", "-"),
                    m2.get("inserted", "-"),
                    m2.get("deleted", "-"),
                    m2.get("table_version", "-"),
                    m2.get("mode", "-"),
                    f"{m2['seconds']:.1f}" if "seconds" in m2 else "-",
                )
            )
    print()
    print(
        _table(
            [
                "table", "kind", "rows v1", "rows v2", "+rows", "-rows", "delta ver", "run 2",
                "run 2 s",
            ],
            rows,
        )
    )
    print(
        "  (idb* = recursive stratum; +rows/-rows: change written by the second run; run 2:\n"
        "   incremental = maintained from the engine state saved by run 1)"
    )
    checks = [*run1.checks.values(), *run2.checks.values()]
    passed = sum(checks)
    print()
    if with_checks:
        print(
            f"checks passed (input checks and Spark recompute): {passed}/{len(checks)} "
            f"(run 1: {sum(run1.checks.values())}/{len(run1.checks)}, "
            f"run 2: {sum(run2.checks.values())}/{len(run2.checks)})"
        )
    for line in [*run1.failures, *run2.failures]:
        print(f"error: {line}", file=sys.stderr)
    ok = run1.success and run2.success and passed == len(checks)
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dagster_project.demo",
        description="Build a fresh local warehouse and run a pipeline twice (snapshot 1, "
        "then its real change set as snapshot 2).",
    )
    parser.add_argument(
        "--pipeline",
        choices=sorted(SUBSET_OF),
        default="debian",
        help="which example pipeline (default: debian)",
    )
    parser.add_argument(
        "--warehouse",
        type=Path,
        default=DEFAULT_WAREHOUSE,
        help=f"warehouse folder, wiped first (default: {DEFAULT_WAREHOUSE})",
    )
    parser.add_argument(
        "--no-checks", action="store_true", help="skip the Spark recompute checks (no JVM)"
    )
    parser.add_argument(
        "--sections",
        metavar="A,B,...",
        help="run on a subset: the packages of these Debian sections (e.g. admin,libs), or "
        "for wordnet the synsets of these lexicographer files (e.g. noun.animal,noun.food)",
    )
    args = parser.parse_args(argv)
    sections = None
    if args.sections:
        sections = frozenset(s.strip() for s in args.sections.split(",") if s.strip())
    try:
        return run_demo(args.warehouse.resolve(), not args.no_checks, sections, args.pipeline)
    except DeltalogError as err:
        print(str(err), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
