"""``python -m deltalog.dagster_project.demo``: a pipeline end to end on a fresh local warehouse,
recorded
in the persistent Dagster instance that ``make ui`` serves.

Builds the EDB Delta tables from snapshot 1, runs the pipeline's own jobs in process on the
instance in ``.dagster_home/`` (``<pipeline>_update``: observe the EDB tables, their blocking
input checks, every IDB asset; then ``<pipeline>_recompute_checks``: the Spark recompute
checks), applies snapshot 2 and runs both jobs again. It prints one line per asset as the runs
go (rows changed, the engine's seconds, the Spark check's seconds) and a report that keeps
engine time and check time apart. The UI afterwards shows these runs, materializations,
check results and metadata plots. Exit status 1 when a check or a step fails; expected errors
are one line on stderr.
"""

import argparse
import contextlib
import logging
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltalog.engine.errors import DeltalogError

if TYPE_CHECKING:
    import dagster as dg

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WAREHOUSE = REPO_ROOT / "warehouse"
DEFAULT_HOME = REPO_ROOT / ".dagster_home"  # scripts/ui.sh serves the same instance
MARKER = ".deltalog-demo"  # only a folder with this marker is wiped
# Written into a Dagster home that has no dagster.yaml yet (the repository's has the same).
INSTANCE_SETTINGS = """\
# Dagster instance settings (DAGSTER_HOME): run history, event logs and schedules are kept in
# SQLite files next to this file. No telemetry; no welcome dialog in the UI.
telemetry:
  enabled: false
nux:
  enabled: false
"""
# Dagster's console log: failures are summarized in one line each by the demo itself.
QUIET_LOGGERS = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
PROGRESS_LOGGER = "deltalog_progress"
DAGSTER_UI = "http://127.0.0.1:3000"


@dataclass
class RunSummary:
    """What the runs of one round (the update job, then the check job) did, per table and per
    check, gathered from their events as they arrive."""

    seconds: dict[str, float] = field(default_factory=dict)  # job name -> wall seconds
    success: bool = True
    observed: dict[str, dict[str, Any]] = field(default_factory=dict)  # EDB pred -> metadata
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)  # IDB pred -> metadata
    checks: dict[str, bool] = field(default_factory=dict)  # "asset:check" -> passed
    check_seconds: dict[str, float] = field(default_factory=dict)  # IDB pred -> Spark seconds
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
    from deltalog.pipelines.spark.session import make_spark_session

    with _silenced_stderr():
        make_spark_session("deltalog-demo").sparkContext.setLogLevel("ERROR")


def _fresh_warehouse(root: Path, spec: Any) -> None:
    """Wipe the pipeline's tables and saved state under ``root`` (a demo warehouse only:
    other pipelines' tables stay, so `make ui` shows every demo that ran)."""
    from deltalog.pipelines.state_store import state_dir

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
    (root / MARKER).write_text(
        "made by python -m deltalog.dagster_project.demo; wiped by the next run\n"
    )


def open_instance(home: Path) -> "dg.DagsterInstance":
    """The persistent Dagster instance in ``home`` (``make ui`` serves ``.dagster_home``); a
    home without a ``dagster.yaml`` gets one that turns off telemetry and the welcome dialog."""
    import dagster as dg

    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(INSTANCE_SETTINGS, encoding="utf-8")
    return dg.DagsterInstance.from_config(str(home))


def _values(metadata: Any) -> dict[str, Any]:
    return {k: getattr(v, "value", v) for k, v in metadata.items()}


def _number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


class _Progress(logging.Handler):
    """Receives every Dagster event of a run (a Dagster logger's handler), records what the
    report needs in ``summary`` and prints one line per asset and per check as they come."""

    def __init__(self, summary: RunSummary, say: Callable[[str], None]):
        super().__init__(logging.DEBUG)
        self.summary, self.say = summary, say

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "dagster_meta", None)
        event = meta.get("dagster_event") if isinstance(meta, dict) else None
        if event is None:
            return
        try:
            self._event(event)
        except Exception as err:  # a report line must never break the run
            self.say(f"    (progress line not printed: {type(err).__name__}: {err})")

    def _event(self, event: Any) -> None:
        import dagster as dg

        if event.is_asset_observation:
            obs = event.asset_observation_data.asset_observation
            self._observed(obs.asset_key, _values(obs.metadata))
        elif event.is_step_materialization:
            mat = event.step_materialization_data.materialization
            meta = _values(mat.metadata)
            pred = mat.asset_key.path[-1]
            self.summary.metadata[pred] = meta
            self.say(
                f"    {mat.asset_key.to_user_string():28} {meta.get('mode', '-'):12}"
                f"+{_number(meta.get('inserted', 0))} -{_number(meta.get('deleted', 0))} rows  "
                f"engine {float(meta.get('engine_seconds', 0.0)):.3f} s  "
                f"(stratum run {float(meta.get('seconds', 0.0)):.3f} s)"
            )
        elif isinstance(event.event_specific_data, dg.AssetCheckEvaluation):
            check = event.event_specific_data
            key = f"{check.asset_key.to_user_string()}:{check.check_name}"
            meta = _values(check.metadata)
            self.summary.checks[key] = bool(check.passed)
            seconds = meta.get("spark_seconds")
            if isinstance(seconds, int | float):
                self.summary.check_seconds[check.asset_key.path[-1]] = float(seconds)
            timing = f"  Spark {seconds:.2f} s (its stratum)" if seconds is not None else ""
            self.say(
                f"    {check.asset_key.to_user_string():28} {check.check_name} "
                f"{'passed' if check.passed else 'FAILED'}{timing}"
            )
            if not check.passed:
                detail = (
                    f"missing {meta['missing_in_engine']}, extra {meta['extra_in_engine']}"
                    if "missing_in_engine" in meta
                    else check.description
                )
                self.summary.failures.append(f"check {key} failed: {detail}")
        elif event.is_step_failure:
            error = event.step_failure_data.error
            lines = [ln.strip() for ln in (error.message if error else "").splitlines()]
            message = next((ln for ln in lines if ln), "unknown error")[:300]
            self.summary.failures.append(f"step {event.step_key} failed: {message}")
            self.say(f"    step {event.step_key} FAILED: {message}")

    def _observed(self, key: Any, meta: dict[str, Any]) -> None:
        self.summary.observed[key.path[-1]] = meta
        self.say(
            f"    {key.to_user_string():28} {'observed':12}Delta version "
            f"{meta.get('delta_version', '-')}, {_number(meta.get('dagster/row_count', '-'))} rows"
        )


def _run(
    defs: Any,
    job_name: str,
    instance: "dg.DagsterInstance",
    summary: RunSummary,
    tags: dict[str, str],
) -> None:
    """Run job ``job_name`` of ``defs`` in process on ``instance`` (recorded there as any run
    is), printing progress through a Dagster logger; add what it did to ``summary``."""
    import dagster as dg

    handler = _Progress(summary, lambda line: print(line, flush=True))

    @dg.logger(config_schema=None, description="the demo's progress lines")
    def progress(_context: Any) -> logging.Logger:
        log = logging.getLogger(f"deltalog.demo.{job_name}")
        log.handlers, log.propagate = [handler], False
        log.setLevel(logging.DEBUG)
        return log

    job = defs.resolve_job_def(job_name).with_logger_defs({PROGRESS_LOGGER: progress})
    print(f"  {job_name} ...", flush=True)
    failures_before = len(summary.failures)
    start = time.perf_counter()
    result = job.execute_in_process(
        instance=instance,
        run_config={"loggers": {PROGRESS_LOGGER: {}}},
        tags=tags,
        raise_on_error=False,
    )
    summary.seconds[job_name] = time.perf_counter() - start
    summary.success = summary.success and result.success
    if not result.success and len(summary.failures) == failures_before:
        summary.failures.append(f"run {result.run_id} of {job_name} failed")


def _subset_loader(sections: frozenset[str] | None) -> Any:
    """The Debian snapshot loader, restricted to packages of ``sections`` when given (and to
    the depends/provides rows of those packages). Only ever explicit (--sections)."""
    import pyarrow.compute as pc

    from deltalog.examples.debian.snapshot import load_snapshot

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
    from deltalog.examples.wordnet.snapshot import snapshot_loader

    return snapshot_loader(None if subset is None else sorted(subset))


SUBSET_OF = {"debian": "packages of sections", "wordnet": "synsets (and ancestors) of lexnames"}


def _wipe_history(instance: "dg.DagsterInstance", spec: Any) -> None:
    """Forget the pipeline's asset history in the instance: its tables were just wiped, and a
    ``valid_input`` check would otherwise read the change since a version of the old table."""
    from deltalog.dagster_project.defs import asset_key

    keys = [asset_key(spec, p) for p in sorted({*spec.edb_tables, *spec.idb_tables})]
    instance.wipe_assets(keys)


def _shown_by(home: Path, root: Path) -> str:
    """The command that serves the instance in ``home`` (and the warehouse ``root``) in the UI."""
    if home.resolve() == DEFAULT_HOME.resolve() and root.resolve() == DEFAULT_WAREHOUSE.resolve():
        return "make ui"
    return (
        f"DAGSTER_HOME={home} DELTALOG_WAREHOUSE={root} "
        ".venv/bin/dagster dev -m deltalog.dagster_project.definitions"
    )


def _stratum_sum(spec: Any, values: dict[str, float]) -> float:
    """The sum over strata of a per-stratum figure every predicate of a stratum repeats."""
    return sum(
        next((values[p] for p in stratum.preds if p in values), 0.0)
        for stratum in spec.program.strata
    )


def _seconds(meta: dict[str, Any], key: str) -> str:
    return f"{float(meta[key]):.3f}" if key in meta else "-"


def run_demo(
    root: Path,
    with_checks: bool = True,
    sections: frozenset[str] | None = None,
    pipeline: str = "debian",
    home: Path = DEFAULT_HOME,
) -> int:
    """The whole demo of ``pipeline``, recorded in the Dagster instance in ``home``;
    ``sections`` restricts the data (Debian sections, or WordNet lexicographer files such as
    noun.animal). Returns the exit status."""
    _quiet()
    from deltalog.dagster_project.build import build_definitions
    from deltalog.dagster_project.defs.automation import checks_job_name, update_job_name
    from deltalog.pipelines.spec import load_pipeline
    from deltalog.pipelines.warehouse import apply_snapshot, build_warehouse

    spec = load_pipeline(pipeline)
    print(f"deltalog demo: pipeline '{spec.name}', warehouse {root}", flush=True)
    print(f"  Dagster instance {home} ({_shown_by(home, root)} shows these runs)", flush=True)
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
    with open_instance(home) as instance:
        _wipe_history(instance, spec)
        if with_checks:
            timed("start Spark", _start_spark)
        built = timed("build EDB tables (snapshot 1)", build_warehouse, root, spec, 1, load)
        edb1 = {w.pred: w for w in built}
        defs = build_definitions([spec], root=root)
        jobs = [update_job_name(spec), *([checks_job_name(spec)] if with_checks else [])]
        rounds: list[RunSummary] = []
        for n in (1, 2):
            if n == 2:
                applied = timed("apply snapshot 2 to the EDB", apply_snapshot, root, spec, 2, load)
                edb2 = {w.pred: w for w in applied}
            summary = RunSummary()
            print(f"  run {n}:", flush=True)
            for job in jobs:
                _run(defs, job, instance, summary, {"deltalog/demo": f"run {n}"})
                steps.append((f"run {n}: {job}", summary.seconds[job]))
            rounds.append(summary)
    run1, run2 = rounds

    print()
    print(_table(["step", "seconds"], [(label, f"{s:.1f}") for label, s in steps]))
    rows = []
    for pred in sorted(spec.edb_tables):
        a, b = edb1[pred], edb2[pred]
        rows.append(
            (pred, "edb", a.rows, b.rows, b.inserted, b.deleted, b.table_version, "", "", "", "")
        )
    for stratum in spec.program.strata:
        for pred in stratum.preds:
            m1, m2 = run1.metadata.get(pred, {}), run2.metadata.get(pred, {})
            check = run2.check_seconds.get(pred)
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
                    _seconds(m2, "engine_seconds"),
                    _seconds(m2, "seconds"),
                    f"{check:.2f}" if check is not None else "-",
                )
            )
    print()
    print(
        _table(
            [
                "table", "kind", "rows v1", "rows v2", "+rows", "-rows", "delta ver", "run 2",
                "engine s", "run s", "check s",
            ],
            rows,
        )
    )
    print(
        "  (idb* = recursive stratum; +rows/-rows: change written by the second run; run 2:\n"
        "   incremental = maintained from the engine state saved by run 1; engine s: the\n"
        "   engine's own time in run 2, run s: the whole stratum run (read the change, maintain,\n"
        "   commit, save the state), check s: the Spark recompute check after run 2; the last\n"
        "   three are per stratum, repeated for each of its predicates)"
    )
    print()
    times = []
    for label, key in (("engine", "engine_seconds"), ("stratum runs", "seconds")):
        per_round = [{p: float(m[key]) for p, m in r.metadata.items() if key in m} for r in rounds]
        times.append((label, *(f"{_stratum_sum(spec, v):.1f}" for v in per_round)))
    if with_checks:
        times.append(
            ("Spark checks", *(f"{_stratum_sum(spec, r.check_seconds):.1f}" for r in rounds))
        )
    print(_table(["seconds", "run 1", "run 2"], times))
    checks = [*run1.checks.values(), *run2.checks.values()]
    passed = sum(checks)
    print()
    kinds = "input checks and Spark recompute" if with_checks else "input checks"
    print(
        f"checks passed ({kinds}): {passed}/{len(checks)} "
        f"(run 1: {sum(run1.checks.values())}/{len(run1.checks)}, "
        f"run 2: {sum(run2.checks.values())}/{len(run2.checks)})"
    )
    print(f"{_shown_by(home, root)} shows these runs on {DAGSTER_UI}")
    for line in [*run1.failures, *run2.failures]:
        print(f"error: {line}", file=sys.stderr)
    ok = run1.success and run2.success and passed == len(checks)
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deltalog.dagster_project.demo",
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
        "--dagster-home",
        type=Path,
        default=DEFAULT_HOME,
        help=f"the Dagster instance that records the runs (default: {DEFAULT_HOME}, which "
        "make ui serves)",
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
        return run_demo(
            args.warehouse.resolve(),
            not args.no_checks,
            sections,
            args.pipeline,
            home=args.dagster_home.resolve(),
        )
    except DeltalogError as err:
        print(str(err), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
