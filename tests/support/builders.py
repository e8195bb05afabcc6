"""Build Alchemist's images with scripts/build-images.sh and run commands inside them,
with whichever builder this machine has (buildah, podman or a Docker engine)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
VALUES = yaml.safe_load((REPO / "helm" / "alchemist" / "values.yaml").read_text())


#: Where the chart's values name each image: (section, key).
_CHART_IMAGES = {
    "worker": ("singleuser", "workerImage"),
    "notebook": ("singleuser", "image"),
    "hub": ("hub", "image"),
}


def chart_tag(name: str) -> str:
    """The tag the chart's values give image ``name`` (worker, notebook, hub)."""
    section, key = _CHART_IMAGES[name]
    image = VALUES[section][key]
    return f"{image['repository']}:{image['tag']}"


def find_builder() -> str | None:
    """The builder build-images.sh would pick, or None: the reason to skip."""
    chosen = os.environ.get("ALCHEMIST_IMAGE_BUILDER")
    if chosen:
        return chosen
    if shutil.which("docker") and _answers(["docker", "info"]):
        return "docker"
    if shutil.which("podman") and _answers(["podman", "info"]):
        return "podman"
    if shutil.which("buildah"):
        return "buildah"
    return None


def _answers(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class Image:
    """Runs commands in an image, as a pod's container would: its own root file system
    (a fresh container each :meth:`argv`), a user, volumes, env and working folder.

    buildah and podman run with chroot isolation (what works here); every container
    shares the host's network, as pods of one job reach each other at 127.0.0.1 in the
    stand-in kubelet. Call :meth:`close` to remove the containers.
    """

    def __init__(self, builder: str, tag: str) -> None:
        self.builder = builder
        self.tag = tag if builder == "docker" else f"localhost/{tag}"
        self.containers: list[str] = []

    def argv(
        self,
        command: Sequence[str],
        *,
        user: str | None = None,
        volumes: Mapping[str, str] = {},
        env: Mapping[str, str] = {},
        workdir: str | None = None,
    ) -> list[str]:
        """The host command that runs ``command`` in a new container of the image."""
        opts: list[str] = []
        if user:
            opts += ["--user", user]
        for host, inside in volumes.items():
            opts += ["--volume", f"{host}:{inside}"]
        for key, value in env.items():
            opts += ["--env", f"{key}={value}"]
        if workdir:
            opts += ["--workingdir" if self.builder == "buildah" else "--workdir", workdir]
        if self.builder == "docker":
            return ["docker", "run", "--rm", "--network", "host", *opts, self.tag, *command]
        if self.builder == "podman":
            return ["podman", "run", "--rm", "--network", "host", "--isolation", "chroot",
                    *opts, self.tag, *command]  # fmt: skip
        made = subprocess.run(
            ["buildah", "from", "--pull-never", self.tag],
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        container = made.stdout.strip().splitlines()[-1]
        self.containers.append(container)
        return ["buildah", "run", "--isolation", "chroot", *opts, container, "--", *command]

    def run(
        self, command: Sequence[str], timeout: float = 300, **kwargs: object
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` in the image to its end; output captured."""
        return subprocess.run(
            self.argv(command, **kwargs),  # type: ignore[arg-type]
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def close(self) -> None:
        for container in self.containers:
            subprocess.run(["buildah", "rm", container], capture_output=True, timeout=120)
        self.containers.clear()
