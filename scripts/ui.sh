#!/usr/bin/env bash
# The Dagster UI on http://127.0.0.1:3000 (override with DAGSTER_PORT), with the daemon (sensors,
# schedules, automation conditions), on the persistent instance in .dagster_home: the one
# `make demo` records its runs in, so the UI opens with the demo's runs, materializations, check
# results and metadata plots (its dagster.yaml turns off telemetry and the welcome dialog).
# dagster is exec'd through a tiny Python wrapper that restores the default SIGINT handler: a
# background job from a non-interactive shell inherits SIGINT as ignored, and dagster dev would
# then ignore Ctrl-C and SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
export DAGSTER_HOME="$PWD/.dagster_home"
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
PORT=${DAGSTER_PORT:-3000}
exec .venv/bin/python -c '
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])
' .venv/bin/dagster dev -h 127.0.0.1 -p "$PORT" -m deltalog.dagster_project.definitions
