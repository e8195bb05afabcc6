#!/usr/bin/env bash
# Set up everything Alchemist needs on this machine, idempotently:
#   .venv/                 Python 3.11 virtualenv with torch 2.13.0 (CPU wheel) and
#                          Alchemist installed editable with its dev extras, every
#                          package at its requirements.lock version
#   scripts/setup.d/*.sh   the rest, each idempotent: configurable-http-proxy (npm),
#                          Chromium for browser tests (apt), Helm and hadolint, Horovod
#                          (built once, wheel cached), the prebuilt JupyterLab extension
# With --hub (what scripts/start.sh runs): only what the hub and a job need, the .venv,
# configurable-http-proxy and the panel (setup.d/10-hub.sh, 60-labextension.sh); the
# browser, Helm, the image tools and the Horovod build are for the tests.
# Run from anywhere; fast when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

steps=(scripts/setup.d/*.sh)
if [ "${1:-}" = "--hub" ]; then
    steps=(scripts/setup.d/10-hub.sh scripts/setup.d/60-labextension.sh)
elif [ -n "${1:-}" ]; then
    echo "setup: unknown argument ${1} (scripts/setup.sh [--hub])" >&2
    exit 2
fi

PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1; then PYTHON="$candidate"; break; fi
    done
fi
[ -n "$PYTHON" ] || { echo "setup: Python 3.10+ is needed (python3.11 recommended)" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $PYTHON"
    "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check)

# torch must be named with its exact version: a bare `torch` requirement pulls a
# multi-GB CUDA build; 2.13.0 is the CPU wheel kept on these machines.
stamp=.venv/.alchemist-installed
# requirements.lock pins every package (scripts/lock.sh writes it); the images install
# with the same pins.
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements.lock -nt "$stamp" ]; then
    echo "setup: installing torch==2.13.0 (CPU) and Alchemist with its dev extras"
    # pip's own exit status counts (pipefail); only grep's "no line left" is forgiven.
    "${PIP[@]}" install -q -c requirements.lock torch==2.13.0 numpy 2>&1 | { grep -v "^WARNING: Location" || true; }
    # Older setups copied install.json into the build output; the wheel adds its own copy
    # there (pyproject's shared-data), and two files at one path fail the build.
    rm -f alchemist/labextension/install.json
    # Before 0.1 the distribution was named `alchemist` (a name taken on the public index
    # by another project); a venv that still has it drops it for jupyter-alchemist.
    if "${PIP[@]}" show -q alchemist >/dev/null 2>&1; then
        "${PIP[@]}" uninstall -q -y alchemist
    fi
    # The wheel build's jupyter-builder hook would build the panel here too; in this
    # editable checkout scripts/setup.d/60-labextension.sh builds and links it instead.
    SKIP_JUPYTER_BUILDER=1 "${PIP[@]}" install -q -c requirements.lock torch==2.13.0 -e ".[dev]" 2>&1 \
        | { grep -v "^WARNING: Location" || true; }
    .venv/bin/python -c "import alchemist, torch; assert torch.__version__.startswith('2.13.0')"
    [ -x .venv/bin/alchemist-hub ] || { echo "setup: the editable install failed" >&2; exit 1; }
    touch "$stamp"
else
    echo "setup: .venv is up to date"
fi

for step in "${steps[@]}"; do
    bash "$step"
done
echo "setup: done"
