"""The Backend contract (:mod:`alchemist.testing.conformance`), run against every backend.

- ``local``: the real thing (detached process groups under torchrun on this machine).
- ``kubernetes``: STAND-IN. No Kubernetes API server can run here, so the backend talks
  to ``tests/support/k8s_standin.py``'s HTTP API server through the official client,
  and its ``ProcessKubelet`` runs each pod's container command as a local process with
  the env the pod would get. The manifests, the API calls and the torchrun rendezvous
  are real; scheduling, images and the kubelet are not.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from alchemist import backends
from alchemist.testing.conformance import BackendContract


class TestLocal(BackendContract):
    @pytest.fixture
    def backend_name(self) -> str:
        return "local"


class TestKubernetesStandin(BackendContract):
    @pytest.fixture
    def backend_name(self, alchemist_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
        from tests.support.k8s_standin import standin_backend

        with standin_backend(alchemist_home) as (backend, _kubelet, _server):
            monkeypatch.setitem(backends._instances, "kubernetes", backend)
            yield "kubernetes"
