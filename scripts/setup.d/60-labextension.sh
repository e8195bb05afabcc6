#!/usr/bin/env bash
# The JupyterLab side panel: build extensions/lab/ into alchemist/labextension/ (a
# prebuilt extension, git-ignored) and make this venv's Jupyter load it and the
# REST API's server extension (the wheel build runs the same build through
# pyproject's jupyter-builder hook).
# Idempotent and fast when done: it rebuilds only when a source is newer than the build.
set -euo pipefail

ROOT="$PWD"
VENV="$ROOT/.venv"
LAB="$ROOT/extensions/lab"
OUT="$ROOT/alchemist/labextension"
NAME="alchemist-jupyterlab"
export PATH="$VENV/bin:$PATH"

if ! command -v node >/dev/null 2>&1; then
    echo "60-labextension: node not found: install Node.js 18+ (apt-get install -y nodejs npm)" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/jlpm" ] || [ ! -x "$VENV/bin/jupyter-builder" ]; then
    echo "60-labextension: jlpm or jupyter-builder missing: pip install jupyterlab jupyter-builder into .venv" >&2
    exit 1
fi

# Node dependencies: again only when package.json or yarn.lock changed since the last install.
state="$LAB/node_modules/.yarn-state.yml"
if [ ! -f "$state" ] || [ "$LAB/package.json" -nt "$state" ] || [ "$LAB/yarn.lock" -nt "$state" ]; then
    echo "60-labextension: installing node dependencies (jlpm install)"
    (cd "$LAB" && jlpm install)
    touch "$state"
fi

# Build when the output is missing or any source is newer than it.
stamp="$OUT/package.json"
newer=""
if [ -f "$stamp" ]; then
    newer="$(find "$LAB/src" "$LAB/style" "$LAB/schema" "$LAB/package.json" "$LAB/tsconfig.json" \
        "$LAB/yarn.lock" -newer "$stamp" -print -quit)"
fi
if [ ! -f "$stamp" ] || [ -n "$newer" ]; then
    echo "60-labextension: building the lab extension into alchemist/labextension"
    (cd "$LAB" && jlpm build)
    touch "$stamp"
else
    echo "60-labextension: alchemist/labextension is up to date"
fi

# Make this venv's JupyterLab load the panel. A wheel install puts the build output and
# install.json into share/jupyter/labextensions/ through its shared-data; this editable
# checkout instead gets a directory there whose entries link to the build output (so a
# rebuild shows without reinstalling) plus a copy of install.json (kept out of the build
# output, which the wheel ships as it is).
dest="$VENV/share/jupyter/labextensions/$NAME"
[ -L "$dest" ] && rm -f "$dest"  # an older setup linked the whole directory
mkdir -p "$dest"
rm -f "$OUT/install.json"        # an older setup copied it into the build output
for entry in "$OUT"/*; do
    link="$dest/$(basename "$entry")"
    if [ "$(readlink "$link" 2>/dev/null)" != "$entry" ]; then
        rm -rf "$link"
        ln -s "$entry" "$link"
    fi
done
cp -f "$LAB/install.json" "$dest/install.json"
confd="$VENV/etc/jupyter/jupyter_server_config.d"
mkdir -p "$confd"
if ! cmp -s "$ROOT/jupyter-config/jupyter_server_config.d/alchemist.json" "$confd/alchemist.json"; then
    cp "$ROOT/jupyter-config/jupyter_server_config.d/alchemist.json" "$confd/alchemist.json"
fi
echo "60-labextension: panel $NAME and server extension alchemist.server enabled in .venv"
