#!/usr/bin/env bash
# Lint, then the whole test suite. Called by `make test` (and so by .ci/run) inside the venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${VIRTUAL_ENV:?activate .venv first (make test does)}"
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
echo "== ruff"
ruff check .
ruff format --check .
echo "== pytest"
set +e
python -m pytest "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then echo "pytest collected no tests: failing"; exit 1; fi
exit $rc
