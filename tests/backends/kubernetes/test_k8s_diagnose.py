"""Hang diagnosis of a Kubernetes job: the request-file path, end to end.

What is real: the client's submit and ``Job.diagnose()``, the Kubernetes backend's
manifests, every pod's command and environment as the generated Job says, the ranks'
``alchemist.runtime`` with its responder thread, real torch.distributed (gloo), and the
job directory as the shared volume through which the request and the answers travel
(no ``pods/exec``, no port of the ranks').

What is a STAND-IN, and why: there is no cluster here. The stand-in API server and its
kubelet run each pod as a local process (``tests/support/k8s_standin.py``, as in
``test_k8s_rendezvous.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import alchemist.backends as backends_registry
from alchemist.backends.kubernetes import KubernetesBackend
from alchemist.job.spec import JobState
from alchemist.runtime import hooks
from tests.support.diagnose import MISSING, diagnose_until, line_of, logged, wait_for
from tests.support.k8s_standin import Kubelet, StandinApiServer, standin_backend


@pytest.fixture
def cluster(alchemist_home: Path) -> Iterator[tuple[KubernetesBackend, Kubelet, StandinApiServer]]:
    with standin_backend(alchemist_home, run_pods=True) as env:
        yield env


def test_a_missing_rank_is_named_through_request_files(
    cluster: tuple[KubernetesBackend, Kubelet, StandinApiServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import alchemist.client as client

    backend, _, _ = cluster
    monkeypatch.setitem(backends_registry._instances, "kubernetes", backend)
    job = client.submit(MISSING, namespace={}, workers=2, backend="kubernetes")
    try:
        wait_for(
            lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"),
            180,
            "both ranks ready",
        )
        found = diagnose_until(job, "missing_rank")
        sleep_line = line_of(MISSING, "time.sleep(600)")
        reduce_line = line_of(MISSING, "all_reduce")
        assert found["headline"] == (
            f"rank 1 has not reached all_reduce; it is in `load_batch` (cell line"
            f" {sleep_line}); rank 0 waits in all_reduce from the cell (line {reduce_line})"
        )
        # answered by the pods' responder threads, not by signal (no pod is this process's)
        assert [r["stacks_from"] for r in found["ranks"]] == ["request", "request"]
        assert list(hooks.requests_dir(job.job_dir).glob("*")) == []  # the request is gone
        assert job.status().state == JobState.RUNNING  # diagnosis never changes the job
    finally:
        job.cancel()
    assert job.status().state == JobState.CANCELLED
