#!/usr/bin/env bash
# The GPU check (docs/gpu-check.md): on a machine with a CUDA GPU, one line per check
# (NCCL, GPU metrics, warm pool and device memory, the zygote's CUDA refusal, step
# throughput against a raw PyTorch loop, CUDA_VISIBLE_DEVICES from the queue), in at
# most 5 minutes. Exit status: 0 all passed, 1 a check failed, 3 no GPU or no torch.
#
#   bash scripts/gpu-check.sh          # with .venv's Python, else python3 (PYTHON= to choose)
#   bash scripts/gpu-check.sh --cpu    # the same plumbing on the CPU (what CI runs)
#
# It needs a torch with CUDA and Alchemist's dependencies in that Python; Alchemist
# itself is taken from this checkout when it is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
cpu=0
for arg in "$@"; do [ "$arg" = --cpu ] && cpu=1; done
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "gpu-check: $PY has no torch: install torch with CUDA (docs/gpu-check.md)" >&2
    exit 3
fi
if [ "$cpu" = 0 ] && ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu-check: no CUDA GPU is visible to torch $("$PY" -c 'import torch; print(torch.__version__)'):" \
        "run it on a GPU machine, or --cpu for the plumbing alone" >&2
    exit 3
fi
"$PY" -c "import alchemist" >/dev/null 2>&1 || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Its own jobs and warm pool, apart from the user's.
ALCHEMIST_HOME="$(mktemp -d)"
export ALCHEMIST_HOME ALCHEMIST_POOL_DIR="$ALCHEMIST_HOME/pools" ALCHEMIST_ADMISSION_DIR="$ALCHEMIST_HOME/admission"
trap '"$PY" -c "from alchemist.backends.local.pool import client; client.stop()" >/dev/null 2>&1 || true; rm -rf "$ALCHEMIST_HOME"' EXIT
status=0
timeout 300 "$PY" scripts/gpu_check.py "$@" || status=$?
[ "$status" = 124 ] && echo "gpu-check: FAIL the check ran past its 5 minutes"
exit "$status"
