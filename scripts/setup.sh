#!/usr/bin/env bash
# Set up everything deltalog needs on a fresh Debian machine: Java 17 (apt-get, when missing
# and we are root), a virtual environment in .venv, and the project with its dev extras.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PYTHON=$candidate; break; fi
  done
fi
if [ -z "$PYTHON" ] || ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "deltalog needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)." >&2
  exit 1
fi

java_major() {
  java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1
}
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing Java 17 (openjdk-17-jre-headless) with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "Spark needs Java 17. Install it first, for example:" >&2
    echo "  sudo apt-get install -y openjdk-17-jre-headless" >&2
    exit 1
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with $PYTHON"
  "$PYTHON" -m venv .venv
fi
echo "== installing deltalog and its dependencies into .venv"
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null
.venv/bin/python -m pip install --quiet -e '.[dev]'
echo "== compiling the engine's kernels (numba; cached beside the modules)"
.venv/bin/python -c "from deltalog.engine.runtime import warm; warm()"
echo "== setup done"
