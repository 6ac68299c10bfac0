#!/usr/bin/env bash
# Set up everything the tests need (system packages, Docker daemon, venv with JAX + TF) and run the
# whole suite, including the quick benchmark. CI runs exactly this (see .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
if [ "$(id -u)" = 0 ] && [ -x scripts/start-dockerd.sh ]; then
  bash scripts/start-dockerd.sh || echo "test: the Docker daemon did not start; container tests will be skipped" >&2
fi
exec .venv/bin/python -m pytest -p no:cacheprovider -q --durations=15 "$@"
