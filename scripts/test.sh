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
# One pytest process per test folder: the parts use different event loops (JupyterHub,
# jupyter_server, kubernetes-asyncio, Playwright's sync API, IPython) and must not
# share one interpreter's global asyncio state. Extra arguments go to every run.
mkdir -p test-output
failed=()
for dir in tests/*/; do
    name="$(basename "$dir")"
    [ "$name" = "__pycache__" ] && continue
    echo "== pytest $dir"
    status=0
    .venv/bin/python -m pytest "$dir" --durations=10 \
        --junitxml="test-output/junit-$name.xml" "$@" || status=$?
    # 5 = no tests collected (a folder whose tests all need a real cluster, say).
    if [ "$status" != 0 ] && [ "$status" != 5 ]; then failed+=("$name"); fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "== FAILED: ${failed[*]}"
    exit 1
fi
echo "== all test folders passed"
