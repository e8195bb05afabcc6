#!/usr/bin/env bash
# Rewrite requirements.lock, the one list of exact Python package versions that the
# venv (scripts/setup.sh) and the three images (images/*/Dockerfile) install with
# `pip install -c requirements.lock`: what .venv holds now, every package, pinned.
#
# Run after changing a dependency in pyproject.toml or images/*/requirements.txt:
#   rm .venv/.alchemist-installed && bash scripts/setup.sh   # installs without the old pins
#   bash scripts/lock.sh                                     # writes the new ones
# To move to a newer release of a package, `.venv/bin/pip install -U NAME` first.
# Every pin must also install on the CPU images' Python, Debian bookworm's 3.11.2
# (soupsieve 4 asks for 3.11.5: it stays at 2.10); tests/images builds them and fails
# on a pin that does not.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "lock: no .venv: run scripts/setup.sh first" >&2; exit 1; }
{
    cat <<'HEADER'
# The exact version of every Python package Alchemist installs: a pip constraints file.
# scripts/setup.sh installs the venv with `-c requirements.lock` (what CI tests), and
# each image installs its images/<name>/requirements.txt with the same `-c`, so an image
# and the venv cannot drift (tests/helm/test_images.py checks the venv against it).
# Written by scripts/lock.sh from a venv on linux/x86_64, Python 3.11; edit it by
# rerunning that script. torch is written without its local label (+cpu): the same pin
# is the CPU wheel here and the CUDA build in the CUDA images, whose nvidia-* packages
# (torch's CUDA dependencies, absent from a CPU venv) are the ones torch itself pins.
HEADER
    # `pip list --format=freeze`, not `pip freeze`: a package installed from a wheel file
    # (Horovod, built by scripts/setup.d/50-horovod.sh) is written name==version too.
    .venv/bin/python -m pip list --format=freeze --exclude-editable --disable-pip-version-check \
        | grep -v -i -E '^(pip|alchemist|jupyter-alchemist|jupyter_alchemist)==' \
        | sed -E 's/^(torch==[^+]+)\+.*$/\1/' \
        | LC_ALL=C sort -f
} > requirements.lock.new
mv requirements.lock.new requirements.lock
echo "lock: requirements.lock pins $(grep -c '==' requirements.lock) packages"
