#!/usr/bin/env bash
# The default test run (what `make test` and CI run). pytest's exit code 5 (no tests
# collected) is a failure here, never a silent pass.
set -uo pipefail
cd "$(dirname "$0")/.."
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
# Two workers (one per core); a test file runs whole in one worker (its module fixtures
# made once). TEST_WORKERS=0 runs in this process.
.venv/bin/python -m pytest -m "not slow and not bench" -n "${TEST_WORKERS:-2}" --dist loadfile "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit "$rc"
