#!/usr/bin/env bash
# Set everything up, then run the whole test suite as CI does: lint, types, the Python
# tests (real processes, a real JupyterHub/JupyterLab in headless Chromium, Helm) and
# the lab extension's TypeScript tests. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
mkdir -p test-output
.venv/bin/python -m pytest --durations=25 --junitxml=test-output/junit.xml "$@"
