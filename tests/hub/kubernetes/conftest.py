"""Fixtures of the KubeSpawner tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hub.kubernetes.spawning import write_kubeconfig
from tests.support.chart import find_helm


@pytest.fixture(scope="session")
def helm() -> str:
    path = find_helm()
    if path is None:
        pytest.skip("helm is not installed: run `bash scripts/setup.d/30-helm.sh`")
    return path


@pytest.fixture
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = write_kubeconfig(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(path))
    yield path
