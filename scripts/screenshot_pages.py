"""Screenshots of the Dagster UI in headless chromium (``scripts/screenshot.sh``).

``python scripts/screenshot_pages.py BASE_URL OUT_DIR [--chromium PATH] [--profile DIR]``

Drives one headless chromium over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
no port, no extra package): each page is loaded, the script waits until the page shows its
content (not a spinner), clicks what a reader would click (the metadata "Plots" toggle is
component state, not part of the URL, so ``chromium --screenshot URL`` cannot show it) and
saves a PNG. Exit status 1, with the page's text, when a page does not get ready in time.
"""

import argparse
import base64
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TIMEOUT = 90.0  # seconds for one page to show its content
SETTLE = 2.0  # seconds after the content is there (charts animate in)
LOCATION = "deltalog.dagster_project.definitions"  # the code location name (dagster dev -m ...)


class Chromium:
    """A headless chromium with one page, driven over the DevTools pipe (fds 3 and 4)."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def child_fds() -> None:  # runs in the child, before exec
            a = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [
                binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--no-first-run", "--window-size=1600,1000", f"--user-data-dir={profile}",
                "--remote-debugging-pipe", "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=child_fds,
            pass_fds=(3, 4),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call(
            "Target.attachToTarget", {"targetId": target, "flatten": True}
        )["sessionId"]

    def call(self, method: str, params: dict[str, Any] | None = None, page: bool = False) -> Any:
        """Send one command (to the page's session when ``page``) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if page:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def js(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            page=True,
        )
        return result.get("result", {}).get("value")

    def open(self, url: str, width: int, height: int, scale: float = 1.0) -> None:
        """Load ``url`` in a ``width`` x ``height`` CSS-pixel viewport; the PNG is ``scale``
        times that size (a scale below 1 shows more of a large page)."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": scale, "mobile": False},
            page=True,
        )
        self.call("Page.enable", page=True)
        self.call("Page.navigate", {"url": url}, page=True)

    def wait_for(self, condition: str, what: str) -> None:
        """Poll the JavaScript expression ``condition`` until it is true."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self.js(condition):
                time.sleep(SETTLE)
                return
            time.sleep(0.5)
        text = self.js("document.body ? document.body.innerText.slice(0, 2000) : ''")
        raise TimeoutError(f"page did not show {what} within {TIMEOUT:.0f} s; it shows:\n{text}")

    def save(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", {"format": "png"}, page=True)["data"]
        path.write_bytes(base64.b64decode(data))
        print(f"screenshot: {path} ({path.stat().st_size // 1024} KB)", flush=True)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


# JavaScript helpers run in the page.
HAS_TEXT = "(t => document.body && document.body.innerText.includes(t))"
NO_SPINNER = "!document.querySelector('[class*=\"spinner\" i], [class*=\"Spinner\"]')"
CLICK_BUTTON = """(label => {
  const b = [...document.querySelectorAll('button')].find(x => x.innerText.trim() === label);
  if (b) { b.click(); } return !!b; })"""
SCROLL_TO_HEADING = """(label => {
  const h = [...document.querySelectorAll('div, span')].find(
    x => x.children.length === 0 && x.innerText && x.innerText.trim() === label);
  if (h) { h.scrollIntoView({block: 'start'}); } return !!h; })"""
CHARTS = "document.querySelectorAll('canvas').length"


@contextlib.contextmanager
def chromium(binary: str, profile: Path) -> Iterator[Chromium]:
    browser = Chromium(binary, profile)
    try:
        yield browser
    finally:
        browser.close()


def take(base: str, out: Path, binary: str, profile: Path, pipeline: str, asset: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with chromium(binary, profile) as page:
        # (a) The pipeline's asset group as a lineage graph: EDB tables on the left, one node
        # per IDB predicate, edges from the rules. A larger viewport scaled down fits it all.
        page.open(f"{base}/locations/{LOCATION}/asset-groups/{pipeline}", 2200, 1375, 0.7273)
        page.wait_for(
            f"{HAS_TEXT}('{asset}') && {HAS_TEXT}('Materialized') && {NO_SPINNER}",
            "the lineage graph",
        )
        page.save(out / "dagster-lineage.png")

        # (b) One IDB asset's overview with its metadata as plots over the materializations.
        page.open(f"{base}/assets/{pipeline}/{asset}", 1600, 1600)
        page.wait_for(f"{HAS_TEXT}('Latest materialization') && {NO_SPINNER}", "the asset page")
        page.wait_for(f"{CLICK_BUTTON}('Plots')", "the metadata Table/Plots toggle")
        page.wait_for(f"{CHARTS} >= 4 && {NO_SPINNER}", "the metadata plots")
        page.js(f"{SCROLL_TO_HEADING}('Metadata')")
        time.sleep(SETTLE)
        page.save(out / "dagster-asset-plots.png")

        # (c) The asset's checks: the Spark recompute check with its evaluation metadata.
        page.open(f"{base}/assets/{pipeline}/{asset}?view=checks", 1600, 1000)
        page.wait_for(
            f"{HAS_TEXT}('matches_spark_recompute') && {CHARTS} >= 1 && {NO_SPINNER}",
            "the asset checks",
        )
        page.save(out / "dagster-asset-checks.png")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the UI's address, e.g. http://127.0.0.1:3000")
    parser.add_argument("out", type=Path, help="folder for the PNG files")
    parser.add_argument("--chromium", default="chromium")
    parser.add_argument("--profile", type=Path, required=True, help="a temporary folder")
    parser.add_argument("--pipeline", default="debian")
    parser.add_argument("--asset", default="reaches", help="the IDB asset to show")
    args = parser.parse_args()
    try:
        base = args.base.rstrip("/")
        take(base, args.out, args.chromium, args.profile, args.pipeline, args.asset)
    except (TimeoutError, RuntimeError) as err:
        print(f"screenshot: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
