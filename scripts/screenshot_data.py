"""Run history for the README screenshots (``scripts/screenshot.sh``): builds the EDB tables of
the Debian and WordNet pipelines in ``$DELTALOG_WAREHOUSE`` and materializes every asset through
the persistent Dagster instance of ``$DAGSTER_HOME`` after each EDB change, so that the UI has
materializations with metadata to plot.

Each pipeline's EDB (the quick demo's subset) goes through its real snapshots 1, 2, 1, 2: a full
load, then the real change of snapshot 2 applied, reverted and applied again (three incremental
runs). The last Debian run also evaluates the asset checks (the Spark recompute checks take a
few minutes); WordNet runs without checks.

Growing the EDB by a whole section instead (admin, then + utils, then + libs) would show changes
of very different sizes, but an incremental run whose change is larger than the data it
starts from is far slower than a full load (adding libs: rdepends_count 160 s instead of 0.8 s,
reaches more than 9 minutes instead of 18 s), so the history sticks to the real snapshots.
"""

import os
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# pipeline -> [(EDB snapshot, subset)], one materialization after each step.
DEBIAN = ("admin", "libs", "utils")
WORDNET = ("noun.animal", "noun.food", "noun.plant", "verb.consumption")
STEPS: dict[str, list[tuple[int, tuple[str, ...]]]] = {
    "debian": [(1, DEBIAN), (2, DEBIAN), (1, DEBIAN), (2, DEBIAN)],
    "wordnet": [(1, WORDNET), (2, WORDNET), (1, WORDNET), (2, WORDNET)],
}
CHECKS = {"debian"}  # pipelines whose last run evaluates the asset checks


def _load(pipeline: str, version: int, subset: tuple[str, ...]) -> Any:
    if pipeline == "debian":
        from deltalog.dagster_project.demo import _subset_loader

        return _subset_loader(frozenset(subset))(version)
    from deltalog.examples.wordnet.snapshot import snapshot_loader

    return snapshot_loader(subset)(version)


def main() -> int:
    for name in ("DAGSTER_HOME", "DELTALOG_WAREHOUSE"):
        if not os.environ.get(name):
            print(f"screenshot_data: set {name} (scripts/screenshot.sh does)", file=sys.stderr)
            return 2
    from deltalog.dagster_project.demo import QUIET_LOGGERS, _quiet, _start_spark

    _quiet()
    import dagster as dg

    from deltalog.dagster_project.definitions import build_definitions
    from deltalog.pipelines.spec import load_pipeline
    from deltalog.pipelines.warehouse import write_edb

    root = Path(os.environ["DELTALOG_WAREHOUSE"])
    root.mkdir(parents=True, exist_ok=True)
    instance = dg.DagsterInstance.get()
    _start_spark()
    ok = True
    for name, steps in STEPS.items():
        spec = load_pipeline(name)
        defs = build_definitions([spec], root=root)
        for n, (version, subset) in enumerate(steps, start=1):
            checks_now = name in CHECKS and n == len(steps)
            start = time.perf_counter()
            write_edb(root, spec, _load(name, version, subset), {"deltalog.snapshot": str(version)})
            selection: list[Any] = [*(defs.assets or ())]
            if checks_now:
                selection += defs.asset_checks or ()
            result = dg.materialize(
                selection,
                # the EDB tables are observable sources: observed (and input-checked) too
                selection=dg.AssetSelection.all(include_sources=True),
                resources=defs.resources,
                instance=instance,
                run_config=QUIET_LOGGERS,
                tags={"deltalog/edb_snapshot": str(version), "deltalog/subset": ",".join(subset)},
                raise_on_error=False,
            )
            checks = result.get_asset_check_evaluations()
            passed = sum(bool(c.passed) for c in checks)
            print(
                f"  {name} run {n}/{len(steps)}: snapshot {version} of {', '.join(subset)}: "
                f"{'ok' if result.success else 'FAILED'}"
                + (f", checks passed {passed}/{len(checks)}" if checks_now else "")
                + f" ({time.perf_counter() - start:.1f} s)",
                flush=True,
            )
            ok = ok and result.success and passed == len(checks)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
