"""The demo command on the second pipeline (a WordNet subset, no Spark), and that a demo run
wipes only its own pipeline's tables in a shared demo warehouse."""

import pytest

from dagster_project.demo import MARKER, _fresh_warehouse, run_demo
from pipelines.spec import load_pipeline
from pipelines.state_store import state_dir

pytestmark = pytest.mark.dagster


def test_wordnet_demo_runs_the_change_incrementally(tmp_path, capsys):
    root = tmp_path / "warehouse"
    code = run_demo(root, with_checks=False, sections=frozenset({"noun.food"}), pipeline="wordnet")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "pipeline 'wordnet'" in out and "SUBSET" in out
    report = out[out.index("table ") :]
    idb_lines = [ln for ln in report.splitlines() if " idb" in ln]
    assert idb_lines and all("incremental" in ln or "unchanged" in ln for ln in idb_lines)
    assert any("incremental" in ln for ln in idb_lines)


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
