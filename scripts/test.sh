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
echo "== layers (import-linter; the contract is in pyproject.toml)"
.venv/bin/lint-imports --no-cache
echo "== pytest"
# One pytest process per test folder: the parts use different event loops (JupyterHub,
# jupyter_server, kubernetes-asyncio, Playwright's sync API, IPython) and must not
# share one interpreter's global asyncio state. Extra arguments go to every run.
mkdir -p test-output
failed=()
run_folder() {  # run_folder NAME [pytest args...]: one folder's pytest; 5 = none collected
    local name="$1" status=0
    shift
    .venv/bin/python -m pytest "tests/$name/" --durations=10 \
        --junitxml="test-output/junit-$name.xml" "$@" || status=$?
    if [ "$status" = 5 ]; then status=0; fi  # a folder whose tests all need a real cluster
    return "$status"
}
# The image builds (tests/images: minutes of buildah, mostly waiting on unpacking and
# pip inside the image) run alongside the other folders, not after them; their output
# is printed when they end.
images_pid=""
if [ -d tests/images ]; then
    echo "== pytest tests/images/ (alongside the others; output in test-output/pytest-images.log)"
    run_folder images "$@" > test-output/pytest-images.log 2>&1 &
    images_pid=$!
fi
for dir in tests/*/; do
    name="$(basename "$dir")"
    [ "$name" = "__pycache__" ] || [ "$name" = "images" ] && continue
    echo "== pytest $dir"
    run_folder "$name" "$@" || failed+=("$name")
done
if [ -n "$images_pid" ]; then
    status=0
    wait "$images_pid" || status=$?
    echo "== pytest tests/images/"
    cat test-output/pytest-images.log
    if [ "$status" != 0 ]; then failed+=("images"); fi
fi
if [ "${#failed[@]}" -gt 0 ]; then
    echo "== FAILED: ${failed[*]}"
    exit 1
fi
echo "== all test folders passed"
