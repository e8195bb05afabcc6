#!/usr/bin/env bash
# Browser tests (pytest -m browser): the system Chromium driven by Playwright.
# Idempotent: does nothing when chromium, chromium-driver and playwright are there.
# No `playwright install`: the tests launch /usr/bin/chromium.
set -euo pipefail

PY="$PWD/.venv/bin/python"

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver
fi

if ! "$PY" -c "import playwright" >/dev/null 2>&1; then
    "$PY" -m pip install -q playwright
fi

# The monitor widget's charts (bqplot; its lab extension comes with the wheel).
if ! "$PY" -c "import bqplot" >/dev/null 2>&1; then
    "$PY" -m pip install -q bqplot
fi
