#!/usr/bin/env bash
# Image builds (scripts/build-images.sh, tests/images): buildah, which builds and runs
# images without a daemon (chroot isolation, which works where podman's runtimes are
# refused), and debootstrap, which makes the Debian base of the CPU images here.
# Idempotent: does nothing when both are there. Where neither apt-get nor sudo is
# available it only says so: tests/images then skip themselves with one line.
set -euo pipefail

if command -v buildah >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
if ! command -v apt-get >/dev/null 2>&1 || { [ -n "$SUDO" ] && ! command -v sudo >/dev/null 2>&1; }; then
    echo "40-images: no apt-get (or sudo): install buildah and debootstrap to build the images here" >&2
    exit 0
fi
echo "40-images: installing buildah and debootstrap"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq buildah debootstrap
