"""The Dagster UI in a real headless chromium: runs recorded on a persistent instance (as
``make demo`` records them) are what the served UI shows; the IDB asset's checks page
shows its Spark recompute check as passed. Slow (Spark, a webserver, a browser); needs
Debian's chromium (``make screenshot`` installs it): ``make test-slow``."""

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest

from deltalog.dagster_project.build import build_definitions
from tests.dagster_project.tiny import make_pipeline
from tests.local import free_port

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from screenshot_pages import HAS_TEXT, NO_SPINNER, chromium  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.dagster, pytest.mark.spark]


def test_the_served_instance_shows_the_recorded_runs_and_a_passed_check(tmp_path):
    binary = shutil.which("chromium")
    if binary is None:
        pytest.fail("this test needs Debian's chromium (apt-get install chromium, or run "
                    "make screenshot once, which installs it)")
    spec, root = make_pipeline(tmp_path)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / ".dagster_home" / "dagster.yaml", home / "dagster.yaml")
    defs = build_definitions([spec], root=root)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for job in (f"{spec.name}_update", f"{spec.name}_recompute_checks"):
            assert defs.resolve_job_def(job).execute_in_process(instance=instance).success
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DAGSTER_HOME": str(home), "DELTALOG_PIPELINES": str(tmp_path),
           "DELTALOG_WAREHOUSE": str(root)}
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-webserver")), "-h", "127.0.0.1", "-p",
         str(port), "-m", "deltalog.dagster_project.definitions"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{base}/server_info", timeout=2)
                break
            except OSError:
                assert server.poll() is None, "the webserver exited"
                time.sleep(0.5)
        with chromium(binary, tmp_path / "profile") as page:
            page.open(f"{base}/assets/{spec.name}/path?view=checks", 1600, 1000)
            page.wait_for(f"{HAS_TEXT}('matches_spark_recompute') && {NO_SPINNER}",
                          "the asset's checks")
            text = page.js("document.body.innerText")
            assert "matches_spark_recompute" in text
            assert "Evaluation result\nPassed" in text, text[:2000]
            page.open(f"{base}/runs", 1600, 1000)
            page.wait_for(f"{HAS_TEXT}('{spec.name}_recompute_checks') && {NO_SPINNER}",
                          "the runs")
            assert f"{spec.name}_update" in page.js("document.body.innerText")
    finally:
        server.terminate()
        server.wait(timeout=30)
