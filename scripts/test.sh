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
# One pytest process per test folder (a folder that holds test files: tests/ mirrors the
# package, so tests/backends and tests/backends/local are two): the parts use different
# event loops (JupyterHub, jupyter_server, kubernetes-asyncio, Playwright's sync API,
# IPython) and must not share one interpreter's global asyncio state. Extra arguments
# go to every run.
mkdir -p test-output
failed=()
run_folder() {  # run_folder DIR [pytest args...]: one folder's own tests; 5 = none collected
    local dir="$1" status=0
    shift
    local name="${dir#tests/}"
    name="${name//\//-}"
    .venv/bin/python -m pytest "$dir"/test_*.py --durations=10 \
        --junitxml="test-output/junit-$name.xml" "$@" || status=$?
    if [ "$status" = 5 ]; then status=0; fi  # a folder whose tests all need a real cluster
    return "$status"
}
mapfile -t folders < <(find tests -name 'test_*.py' -not -path '*/__pycache__/*' -printf '%h\n' | sort -u)
# The image builds (tests/images: minutes of buildah, mostly waiting on unpacking and
# pip inside the image) run alongside the other folders, not after them; their output
# is printed when they end.
images_pid=""
if [ -d tests/images ]; then
    echo "== pytest tests/images/ (alongside the others; output in test-output/pytest-images.log)"
    run_folder tests/images "$@" > test-output/pytest-images.log 2>&1 &
    images_pid=$!
fi
for dir in "${folders[@]}"; do
    [ "$dir" = "tests/images" ] && continue
    echo "== pytest $dir/"
    run_folder "$dir" "$@" || failed+=("$dir")
done
if [ -n "$images_pid" ]; then
    status=0
    wait "$images_pid" || status=$?
    echo "== pytest tests/images/"
    cat test-output/pytest-images.log
    if [ "$status" != 0 ]; then failed+=("tests/images"); fi
fi
if [ "${#failed[@]}" -gt 0 ]; then
    echo "== FAILED: ${failed[*]}"
    exit 1
fi
echo "== all test folders passed"
