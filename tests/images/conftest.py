"""The images, built once per run by scripts/build-images.sh (CPU variant, a Debian base
made with debootstrap: no image registry is reachable here), for the tests of this
folder. Where no builder exists the whole folder skips with one line. The build's
summary (each image's size and build time) is printed at the end of the run."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.builders import REPO, find_builder

_summary: list[str] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if find_builder() is None:
        skip = pytest.mark.skip(
            reason="no image builder (buildah, podman or a Docker engine): scripts/setup.sh"
            " installs buildah"
        )
        for item in items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def builder() -> str:
    found = find_builder()
    assert found is not None  # collection skipped the folder otherwise
    return found


@pytest.fixture(scope="session")
def images(builder: str) -> Iterator[str]:
    """Build the three CPU images under the chart's tags; the build's log is kept in
    test-output/images-build.log."""
    log = REPO / "test-output" / "images-build.log"
    log.parent.mkdir(exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.run(
            ["bash", "scripts/build-images.sh", "--variant", "cpu", "--base", "debootstrap"],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "ALCHEMIST_IMAGE_BUILDER": builder},
            timeout=3000,
        )
    text = log.read_text(errors="replace")
    if proc.returncode != 0:
        pytest.fail(f"scripts/build-images.sh failed ({proc.returncode}):\n{text[-6000:]}")
    _summary.extend(line for line in text.splitlines() if line.startswith("build-images: built"))
    yield builder


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _summary:
        terminalreporter.section("images")
        for line in _summary:
            terminalreporter.write_line(line)


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    """A folder standing in for the shared volume (bound on /mnt by the job's driver)."""
    root = tmp_path / "mnt"
    (root / "alchemist").mkdir(parents=True)
    return root
