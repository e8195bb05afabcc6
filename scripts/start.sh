#!/usr/bin/env bash
# Set up what the hub needs (scripts/setup.sh --hub: the .venv, the proxy, the panel;
# the test command sets up the rest), then start the embedded Alchemist hub: JupyterHub on
# http://127.0.0.1:8000 with JupyterLab, Alchemist and the example notebooks for
# every user. The first start creates the admin account and prints its password once.
# Extra arguments go to JupyterHub (e.g. --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --hub
exec .venv/bin/python -m alchemist.hub.embedded start "$@"
