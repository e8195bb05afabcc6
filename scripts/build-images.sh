#!/usr/bin/env bash
# Build Alchemist's images (worker, notebook, hub) with whichever builder is here:
# Docker, podman or buildah. Tags are the chart's defaults (alchemist/<name>:<version>,
# the version of alchemist/__init__.py), under --registry if given.
#
#   scripts/build-images.sh                      # CUDA images (GPU nodes), all three
#   scripts/build-images.sh --variant cpu        # CPU images (no CUDA, gloo only)
#   scripts/build-images.sh --variant cpu --base debootstrap worker
#   scripts/build-images.sh --registry registry.example.com/team   # then push those tags
#
# Options:
#   --variant cuda|cpu   cuda (default): the Dockerfiles' CUDA bases, Horovod with NCCL.
#                        cpu: a Debian base, torch's CPU wheel, Horovod with gloo.
#   --base IMAGE         the base of every image (cpu default: debian:bookworm-slim).
#                        "debootstrap" makes a Debian bookworm base here, with no image
#                        registry (debootstrap from this machine's apt mirror), once.
#   --builder NAME       docker, podman or buildah (default: the first that works;
#                        ALCHEMIST_IMAGE_BUILDER sets it too).
#   --registry PREFIX    tag as PREFIX/alchemist/<name>:<version>.
#   --version TAG        the tag (default: Alchemist's version).
#
# Python packages: every image installs its images/<name>/requirements.txt with
# `-c requirements.lock`, the pins of the venv CI tests. For the CPU variant on a
# machine whose .venv is Python 3.11 (Debian bookworm's), the wheels are gathered here
# first into build/images/wheels (pip download, with this machine's pip settings, and
# the Horovod wheel scripts/setup.d/50-horovod.sh built) and the builds use no index.
# Layers are cached by the builder (--layers), the wheels and the debootstrap base on
# disk: a second build of unchanged sources takes seconds. Local certificate authorities
# (/usr/local/share/ca-certificates) reach the build steps that download, not the images.
set -euo pipefail
cd "$(dirname "$0")/.."

variant=cuda base="" builder="${ALCHEMIST_IMAGE_BUILDER:-}" registry="" version="" images=()
while [ $# -gt 0 ]; do
    case "$1" in
        --variant) variant="$2"; shift 2 ;;
        --base) base="$2"; shift 2 ;;
        --builder) builder="$2"; shift 2 ;;
        --registry) registry="${2%/}/"; shift 2 ;;
        --version) version="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        worker|notebook|hub) images+=("$1"); shift ;;
        *) echo "build-images: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$variant" in cuda|cpu) ;; *) echo "build-images: --variant is cuda or cpu, not '$variant'" >&2; exit 2 ;; esac
[ "${#images[@]}" -gt 0 ] || images=(worker notebook hub)
version="${version:-$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' alchemist/__init__.py)}"
[ "$variant" = cpu ] && [ -z "$base" ] && base=debian:bookworm-slim

say() { echo "build-images: $*"; }

# -- the builder --------------------------------------------------------------------
if [ -z "$builder" ]; then
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then builder=docker
    elif command -v podman >/dev/null 2>&1 && podman info >/dev/null 2>&1; then builder=podman
    elif command -v buildah >/dev/null 2>&1; then builder=buildah
    else
        echo "build-images: no image builder: install Docker, podman or buildah" \
            "(scripts/setup.sh installs buildah on Debian and Ubuntu)" >&2
        exit 3
    fi
fi
case "$builder" in
    # chroot isolation: runs where podman's runtimes (crun, runc) are refused (a CI
    # container); the RUN steps need no more than a chroot. Docker format: OCI images
    # have no SHELL, and the Dockerfiles need bash with pipefail.
    buildah) build=(buildah build --layers --force-rm --isolation chroot --format docker) ;;
    podman) build=(podman build --layers --force-rm --isolation chroot --format docker) ;;
    docker) export DOCKER_BUILDKIT=1; build=(docker build) ;;
    *) echo "build-images: --builder is docker, podman or buildah, not '$builder'" >&2; exit 2 ;;
esac
have_image() {
    case "$builder" in
        docker) docker image inspect "$1" >/dev/null 2>&1 ;;
        *) "$builder" image exists "$1" 2>/dev/null || "$builder" images -q "$1" 2>/dev/null | grep -q . ;;
    esac
}
image_size() {
    case "$builder" in
        docker) docker image inspect -f '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1 / 1e6}' ;;
        *) "$builder" images --format '{{.Size}}' "$1" | head -n1 ;;
    esac
}

# -- a base made here (no image registry) -------------------------------------------
if [ "$base" = debootstrap ]; then
    base="alchemist/base:bookworm"
    if ! have_image "$base" && ! have_image "localhost/$base"; then
        command -v debootstrap >/dev/null 2>&1 \
            || { echo "build-images: --base debootstrap needs debootstrap (apt-get install debootstrap)" >&2; exit 3; }
        # The mirror this machine's apt uses (deb822 sources or sources.list), or DEBIAN_MIRROR.
        mirror="${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)}"
        mirror="${mirror:-$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)}"
        [ -n "$mirror" ] || { echo "build-images: no Debian mirror found in /etc/apt: set DEBIAN_MIRROR" >&2; exit 3; }
        say "making the base $base with debootstrap (about a minute, once)"
        rootfs="$(mktemp -d)"
        trap 'rm -rf "$rootfs"' EXIT
        debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$mirror" \
            >"$rootfs.log" 2>&1 || { tail -n 20 "$rootfs.log" >&2; exit 1; }
        rm -f "$rootfs.log"
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        case "$builder" in
            buildah)
                ctr="$(buildah from scratch)"
                cp -a "$rootfs"/. "$(buildah mount "$ctr")"/
                buildah umount "$ctr" >/dev/null
                buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
                    --cmd /bin/bash "$ctr"
                buildah commit --quiet "$ctr" "$base" >/dev/null
                buildah rm "$ctr" >/dev/null ;;
            *) tar -C "$rootfs" -c . | "$builder" import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null ;;
        esac
        rm -rf "$rootfs"
        trap - EXIT
    fi
fi

# -- the wheels ---------------------------------------------------------------------
wheels=build/images/wheels
mkdir -p "$wheels"
pip_flags=""
py_tag="$(.venv/bin/python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null || true)"
if [ "$variant" = cpu ] && [ "$py_tag" = 3.11 ]; then
    stamp="$wheels/.gathered"
    if [ ! -f "$stamp" ] || [ requirements.lock -nt "$stamp" ] || [ -n "$(find images -name requirements.txt -newer "$stamp")" ]; then
        say "gathering wheels into $wheels (pip download, pins of requirements.lock)"
        # The wheel build's own requirements (pyproject's build-system) too: the images
        # build Alchemist's wheel with no index.
        build_reqs="$(.venv/bin/python -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')"
        gather() {
            # shellcheck disable=SC2086  # build_reqs is a list of requirements
            .venv/bin/python -m pip download --disable-pip-version-check -q -d "$wheels" "$@" \
                -r images/worker/requirements.txt -r images/notebook/requirements.txt \
                -r images/hub/requirements.txt $build_reqs -c requirements.lock 2>&1 \
                | { grep -v '^WARNING: Location' || true; }
        }
        # What is already here first (seconds); the index only for what is missing.
        gather --no-index --find-links "$wheels" >/dev/null 2>&1 || gather
        horovod="$(ls "$HOME"/.cache/alchemist/wheels/horovod-0.28.1-torch-*/horovod-0.28.1-*.whl 2>/dev/null | head -n1 || true)"
        if [ -n "$horovod" ]; then cp "$horovod" "$wheels/"
        else say "no Horovod wheel from scripts/setup.d/50-horovod.sh: the worker image builds it (minutes)"; fi
        touch "$stamp"
    fi
    pip_flags="--no-index"
elif [ "$variant" = cpu ]; then
    say "the .venv is not Python 3.11: the CPU images install from the package index"
fi

# A machine whose downloads pass a TLS-inspecting proxy trusts its certificate in
# /usr/local/share/ca-certificates: the build steps that download get this machine's
# bundle (in the wheels folder, bind-mounted, so it stays out of the images).
rm -f "$wheels/ca-bundle.pem"
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1 && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$wheels/ca-bundle.pem"
fi

# -- the builds ---------------------------------------------------------------------
tag() { echo "${registry}alchemist/$1:${version}"; }
args=(--build-arg "PIP_INSTALL_FLAGS=$pip_flags")
if [ "$variant" = cpu ]; then
    args+=(--build-arg CUDA_VERSION= --build-arg HOROVOD_GPU_OPERATIONS=)
fi
if [ -n "$base" ]; then
    args+=(--build-arg "BASE=$base" --build-arg "BUILD_BASE=$base" --build-arg "LAB_BASE=$base")
fi
want() { local i; for i in "${images[@]}"; do [ "$i" = "$1" ] && return 0; done; return 1; }
built=()
for name in worker notebook hub; do
    want "$name" || continue
    extra=()
    [ "$name" = notebook ] && extra=(--build-arg "WORKER_IMAGE=$(tag worker)")
    if [ "$name" = notebook ] && ! have_image "$(tag worker)" && ! have_image "localhost/$(tag worker)"; then
        echo "build-images: the notebook image builds on $(tag worker): build the worker first" >&2
        exit 1
    fi
    ignore=()
    [ "$builder" != docker ] && ignore=(--ignorefile "images/$name/Dockerfile.dockerignore")
    say "building $(tag "$name") ($variant, with $builder)"
    start=$SECONDS
    "${build[@]}" "${ignore[@]}" -f "images/$name/Dockerfile" "${args[@]}" "${extra[@]}" \
        -t "$(tag "$name")" .
    built+=("$(tag "$name") $(image_size "$(tag "$name")") in $((SECONDS - start)) s")
done
for line in "${built[@]}"; do say "built $line"; done
