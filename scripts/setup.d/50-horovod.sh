#!/usr/bin/env bash
# Build Horovod 0.28.1 for the venv's torch once, cache the wheel, install it from the cache.
#
# Horovod 0.28.1 (the latest release) forces C++14 in its CMake files, but torch >= 2.1
# needs C++17 (upstream issues horovod/horovod#3996 and #3941; the fix, PR #3998, was never
# released). We patch the two `set(CMAKE_CXX_STANDARD 14)` lines to 17 in the sdist and
# build with gloo only (no MPI, no TensorFlow, no MXNet).
#
# Idempotent: fast when horovod is importable or a cached wheel for this torch exists.
# A failed build prints a warning and exits 0 so the rest of the setup continues; the
# horovod tests then skip themselves and `--algorithm horovod` says how to install it.
#
# Run from the repository root (scripts/setup.sh does), with the venv at .venv.
set -u

HOROVOD_VERSION=0.28.1
PY="${PY:-$PWD/.venv/bin/python}"
PIP=("$PY" -m pip)

# Horovod's build and runtime needs, at the lock's versions, whether the wheel below is
# built or comes from the cache: the venv holds the same packages either way (the lock
# pins them for the worker image's build too; tests/helm/test_images.py checks).
"${PIP[@]}" install -q --disable-pip-version-check -c requirements.lock \
    cloudpickle psutil pyyaml packaging wheel \
    || echo "50-horovod: WARNING: could not install Horovod's build requirements" >&2

if "$PY" -c "import horovod.torch" >/dev/null 2>&1; then
    echo "50-horovod: horovod $("$PY" -c 'import horovod; print(horovod.__version__)') already installed"
    exit 0
fi

TORCH_VERSION="$("$PY" -c 'import torch; print(torch.__version__.replace("+", "_"))' 2>/dev/null)"
if [ -z "$TORCH_VERSION" ]; then
    echo "50-horovod: WARNING: torch is not importable from $PY; skipping the Horovod build" >&2
    exit 0
fi
# The extension is built against torch's C++ ABI: one cached wheel per torch version.
CACHE="${HOME}/.cache/alchemist/wheels/horovod-${HOROVOD_VERSION}-torch-${TORCH_VERSION}"
mkdir -p "$CACHE"

warn() {
    echo "50-horovod: WARNING: $1" >&2
    echo "50-horovod: WARNING: Horovod is not installed; the horovod algorithm and its tests are skipped." >&2
    echo "50-horovod: WARNING: see the build log above, fix it, and rerun scripts/setup.d/50-horovod.sh" >&2
    exit 0
}

wheel="$(ls "$CACHE"/horovod-"${HOROVOD_VERSION}"-*.whl 2>/dev/null | head -n1)"
if [ -z "$wheel" ]; then
    command -v cmake >/dev/null || warn "cmake is missing (apt-get install -y cmake)"
    command -v g++ >/dev/null || warn "g++ is missing (apt-get install -y g++)"
    echo "50-horovod: building Horovod ${HOROVOD_VERSION} for torch ${TORCH_VERSION} (about 2 minutes, once)"
    build="$(mktemp -d)"
    trap 'rm -rf "$build"' EXIT
    "${PIP[@]}" download -q --no-deps --no-binary :all: -d "$build" "horovod==${HOROVOD_VERSION}" \
        || warn "could not download the Horovod ${HOROVOD_VERSION} source"
    tar -xzf "$build/horovod-${HOROVOD_VERSION}.tar.gz" -C "$build" || warn "could not unpack the sdist"
    src="$build/horovod-${HOROVOD_VERSION}"
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
        "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    grep -q 'set(CMAKE_CXX_STANDARD 17)' "$src/horovod/torch/CMakeLists.txt" \
        || warn "the C++17 patch did not apply (has the sdist changed?)"
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 MAKEFLAGS="${MAKEFLAGS:--j2}" \
        "${PIP[@]}" wheel -q --no-build-isolation --no-deps -w "$build/wheel" "$src" \
        || warn "the Horovod build failed"
    cp "$build"/wheel/horovod-*.whl "$CACHE"/ || warn "the build produced no wheel"
    wheel="$(ls "$CACHE"/horovod-"${HOROVOD_VERSION}"-*.whl | head -n1)"
fi

"${PIP[@]}" install -q "$wheel" || warn "could not install $wheel"
"$PY" -c "import horovod.torch" || warn "horovod.torch does not import after installing $wheel"
echo "50-horovod: installed Horovod ${HOROVOD_VERSION} from $wheel"
