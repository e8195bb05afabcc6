#!/usr/bin/env bash
# configurable-http-proxy (the embedded hub's proxy) into .cache/node/, from npm.
# Idempotent: does nothing when the pinned version is already installed.
set -euo pipefail

CHP_VERSION="${CHP_VERSION:-5.3.0}"
PREFIX="${ALCHEMIST_NODE_PREFIX:-$PWD/.cache/node}"
BIN="$PREFIX/node_modules/.bin/configurable-http-proxy"

if ! command -v npm >/dev/null 2>&1; then
    echo "10-hub: npm not found: install Node.js 18+ (apt-get install -y nodejs npm)" >&2
    exit 1
fi

if [ -x "$BIN" ] && [ "$("$BIN" --version 2>/dev/null)" = "$CHP_VERSION" ]; then
    echo "10-hub: configurable-http-proxy $CHP_VERSION already in $PREFIX"
else
    mkdir -p "$PREFIX"
    npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error \
        "configurable-http-proxy@$CHP_VERSION"
    echo "10-hub: configurable-http-proxy $("$BIN" --version) installed in $PREFIX"
fi

# A hub run as root starts each user's server as that user's own account, with this
# repository's Python. Where the interpreter lives under a directory others may not
# enter (a pyenv under /root, mode 0700), give others the right to traverse (o+x, not
# to list) each such directory, so those servers can start.
if [ "$(id -u)" = 0 ] && [ -x "$PWD/.venv/bin/python" ]; then
    real="$(readlink -f "$PWD/.venv/bin/python")"
    dir="$(dirname "$real")"
    while [ "$dir" != "/" ]; do
        if [ "$(( 0$(stat -c %a "$dir") & 1 ))" = 0 ]; then
            chmod o+x "$dir"
            echo "10-hub: chmod o+x $dir (so hub users' servers can run $real)"
        fi
        dir="$(dirname "$dir")"
    done
fi
