#!/usr/bin/env bash
# The README's screenshots of the Dagster UI (docs/img/dagster-*.png), taken in a real headless
# chromium. A docs tool, not part of the quick start or of the tests: when chromium is missing it
# is installed from Debian with apt-get, non-interactively (needs root).
#
# Everything runs in a temporary folder, removed at the end: a DAGSTER_HOME (a copy of
# .dagster_home/dagster.yaml, plus `nux: enabled: false` so no welcome dialog covers the page)
# and a DELTALOG_WAREHOUSE. scripts/screenshot_data.py builds the Debian and WordNet EDB tables
# step by step and materializes every asset through that instance after each step (run history
# with metadata to plot; the last Debian run evaluates the checks). Then the UI is served on
# 127.0.0.1 on a free port and scripts/screenshot_pages.py drives chromium over the DevTools pipe
# (it waits for each page's content and clicks the metadata "Plots" toggle, which no URL selects).
#
# The UI is dagster-webserver, the UI process of `dagster dev` without the daemon: the daemon
# would start the pipelines' sensors (running by default) and add runs of its own between the
# recorded history and the screenshots. Like scripts/ui.sh it is exec'd through a wrapper that
# restores the default SIGINT handler (a background job of a non-interactive shell inherits
# SIGINT as ignored), and a trap stops it with SIGTERM. About 5-10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${SCREENSHOT_DIR:-$PWD/docs/img}

if ! command -v chromium >/dev/null; then
    echo "screenshot: installing chromium with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi

TMP=$(mktemp -d /tmp/deltalog-screenshot.XXXXXX)
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 40); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.5
        done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export DAGSTER_HOME=$TMP/dagster_home
export DELTALOG_WAREHOUSE=$TMP/warehouse
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
mkdir -p "$DAGSTER_HOME" "$OUT"
cp .dagster_home/dagster.yaml "$DAGSTER_HOME/"
printf 'nux:\n  enabled: false\n' >>"$DAGSTER_HOME/dagster.yaml"

echo "screenshot: materializing the pipelines in $TMP"
.venv/bin/python scripts/screenshot_data.py

PORT=$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
BASE=http://127.0.0.1:$PORT
echo "screenshot: starting the Dagster UI on $BASE"
.venv/bin/python -c '
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])
' .venv/bin/dagster-webserver -h 127.0.0.1 -p "$PORT" -m deltalog.dagster_project.definitions \
    >"$TMP/webserver.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 120); do
    curl -fs "$BASE/server_info" >/dev/null 2>&1 && break
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        cat "$TMP/webserver.log" >&2
        exit 1
    fi
    sleep 1
done
curl -fs "$BASE/server_info" >/dev/null || { echo "screenshot: the UI did not start" >&2; exit 1; }

.venv/bin/python scripts/screenshot_pages.py "$BASE" "$OUT" --profile "$TMP/chromium" \
    --pipeline debian --asset reaches
