"""The demo command on the second pipeline (a WordNet subset, no Spark): it prints a line per
asset as the runs go, records its runs in the persistent Dagster instance it is given (what
`make ui` then serves), and a second demo on the same instance starts the pipeline's asset
history afresh; a demo run wipes only its own pipeline's tables in a shared demo warehouse."""

import dagster as dg
import pytest

from deltalog.dagster_project.defs import asset_key
from deltalog.dagster_project.defs.edb import INPUT_CHECK
from deltalog.dagster_project.demo import MARKER, _fresh_warehouse, run_demo
from deltalog.pipelines.spec import load_pipeline
from deltalog.pipelines.state_store import state_dir

pytestmark = pytest.mark.dagster


def _demo(tmp_path) -> int:
    return run_demo(
        tmp_path / "warehouse",
        with_checks=False,
        sections=frozenset({"noun.food"}),
        pipeline="wordnet",
        home=tmp_path / "dagster_home",
    )


def test_wordnet_demo_runs_the_change_incrementally(tmp_path, capsys):
    spec = load_pipeline("wordnet")
    code = _demo(tmp_path)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "pipeline 'wordnet'" in out and "SUBSET" in out
    report = out[out.index("table ") :]
    idb_lines = [ln for ln in report.splitlines() if " idb" in ln]
    assert idb_lines and all("incremental" in ln or "unchanged" in ln for ln in idb_lines)
    assert any("incremental" in ln for ln in idb_lines)
    # progress: per run, one line per EDB observation and per IDB materialization, with
    # the rows it changed and the engine's seconds
    progress = out[: out.index("table ")]
    for pred in spec.idb_tables:
        lines = [ln for ln in progress.splitlines() if ln.split()[:1] == [f"wordnet/{pred}"]]
        assert len(lines) == 2 and all(" rows  engine " in ln for ln in lines), pred
    for pred in spec.edb_tables:
        words = [ln.split()[:2] for ln in progress.splitlines()]
        assert words.count([f"wordnet/{pred}", "observed"]) == 2, pred

    # The runs are in the persistent instance, as `make ui` reads it: two update runs, two
    # materializations per IDB asset (full, then incremental) with their metadata, and the
    # input checks' evaluations.
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        runs = instance.get_runs()
        assert sorted((r.job_name, r.tags.get("deltalog/demo")) for r in runs) == [
            ("wordnet_update", "run 1"),
            ("wordnet_update", "run 2"),
        ]
        assert all(r.is_success for r in runs)
        key = asset_key(spec, "ancestor")
        records = instance.fetch_materializations(key, limit=10).records
        modes = [r.asset_materialization.metadata["mode"].value for r in records]
        assert modes == ["incremental", "full"]
        checks = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(asset_key(spec, "hypernym"), INPUT_CHECK), limit=10
        )
        assert len(checks) == 2

    # A second demo on the same instance: the tables were rebuilt, so the pipeline's asset
    # history starts again (the input check reads the new table whole), and it succeeds.
    assert _demo(tmp_path) == 0, capsys.readouterr().out
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert len(instance.get_runs()) == 4
        records = instance.fetch_materializations(asset_key(spec, "ancestor"), limit=10).records
        assert len(records) == 2
        history = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(asset_key(spec, "hypernym"), INPUT_CHECK), limit=10
        )
        checked = [
            r.event.dagster_event.event_specific_data.metadata["checked"].value
            for r in history
            if r.event is not None and r.event.dagster_event is not None
        ]
        assert checked[-1] == "whole table" and len(checked) == 2


def test_a_demo_wipes_only_its_own_pipeline(tmp_path):
    root = tmp_path / "warehouse"
    debian, wordnet = load_pipeline("debian"), load_pipeline("wordnet")
    root.mkdir()
    (root / MARKER).write_text("demo\n")
    for spec in (debian, wordnet):
        (root / spec.name / "edb").mkdir(parents=True)
        state_dir(root, spec.name).mkdir(parents=True)
    _fresh_warehouse(root, wordnet)
    assert (root / "debian" / "edb").exists() and state_dir(root, "debian").exists()
    assert not (root / "wordnet").exists() and not state_dir(root, "wordnet").exists()
