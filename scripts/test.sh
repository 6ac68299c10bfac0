#!/usr/bin/env bash
# Set up everything the tests need (system packages, Docker daemon, venv with JAX + TF, the compat venvs) and run the
# whole suite, including the quick benchmark. CI runs exactly this (see .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
if [ "$(id -u)" = 0 ] && [ -x scripts/start-dockerd.sh ]; then
  bash scripts/start-dockerd.sh || echo "test: the Docker daemon did not start; container tests will be skipped" >&2
fi
# The framework versions CI tests for real (oldest, middle and newest jaxlib, TF 2.16, PyTorch/XLA), one venv each,
# cached outside the clone: a warm run only checks their markers. A failed build fails those tests, not the whole suite.
.venv/bin/python scripts/compat.py venvs --ends || echo "test: building the compat venvs failed (see above); their tests will fail" >&2
# The suite writes stores, dumps and images as it goes (a passing test's tmp_path is deleted as it ends): say how much
# room it starts with, so that a run that fills a shared disk says so at its top.
free_gb=$(df -P -B1G "${TMPDIR:-/tmp}" | awk 'NR==2 {print $4}')
echo "test: ${free_gb} GB free under ${TMPDIR:-/tmp}"
[ "${free_gb:-0}" -ge 4 ] || echo "test: warning: under 4 GB free under ${TMPDIR:-/tmp}; tests that write stores may fail with 'No space left on device'" >&2
# Coverage of the library, measured in the suite's process; the whole suite must not fall below the floor in
# .ci/coverage-floor, which only rises (tests/test_tooling.py checks its history). Each run's figures land in
# .cache/coverage/coverage.json.
coverage=(--cov --cov-report=term:skip-covered --cov-report=json:.cache/coverage/coverage.json)
[ "$#" = 0 ] && coverage+=(--cov-fail-under="$(cat .ci/coverage-floor)")
exec .venv/bin/python -m pytest -p no:cacheprovider -q --durations=15 "${coverage[@]}" "$@"
