"""The Kubernetes backend against a REAL cluster (marker ``k8s``).

Skips itself unless a kubeconfig (or the in-cluster service account) reaches an API
server that answers within a few seconds. What each test needs:

- ``test_server_side_dry_run_accepts_the_manifests``: only a namespace you may create
  Jobs and Services in (``ALCHEMIST_K8S_NAMESPACE``, default: the kubeconfig's). The
  API server validates and admits the manifests (``dryRun=All``); nothing runs.
- the tests that run jobs also need ``ALCHEMIST_K8S_IMAGE`` (an image with torch and
  alchemist), ``ALCHEMIST_K8S_PVC`` (a ReadWriteMany claim) and this process must see
  that volume at ``ALCHEMIST_K8S_MOUNT_PATH``, where the pods mount it: run them from a
  notebook pod (or any pod) that mounts the claim. Each test's ALCHEMIST_HOME is then a
  folder of its own on that volume (tests/k8s_real/conftest.py). The whole recipe, kind
  included: docs/deploy-kubernetes.md, "The real-cluster suite".

Run: ``pytest -m k8s tests/k8s_real``. Objects are labelled ``alchemist.dev/owner`` =
``k8s-real-test`` and deleted at the end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from alchemist.testing.conformance import BackendContract

pytestmark = pytest.mark.k8s

kubernetes = pytest.importorskip("kubernetes")

OWNER = "k8s-real-test"


_probe: dict[str, Any] = {}


def _cluster_client() -> Any:
    """An ApiClient for the cluster, or skip; the probe runs once per session."""
    from kubernetes import client, config

    if "skip" in _probe:
        pytest.skip(_probe["skip"])
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        try:
            config.load_kube_config(
                context=os.environ.get("ALCHEMIST_K8S_CONTEXT") or None, client_configuration=cfg
            )
        except Exception as e:
            _probe["skip"] = f"no kubeconfig reaches a cluster ({type(e).__name__}: {e})"
            pytest.skip(_probe["skip"])
    api = client.ApiClient(cfg)
    try:
        client.VersionApi(api).get_code(_request_timeout=5)
    except Exception as e:
        api.close()
        _probe["skip"] = f"the Kubernetes API at {cfg.host} does not answer ({type(e).__name__})"
        pytest.skip(_probe["skip"])
    return api


@pytest.fixture(scope="module")
def api_client() -> Iterator[Any]:
    api = _cluster_client()
    yield api
    api.close()


@pytest.fixture
def backend(api_client: Any) -> Any:
    from traitlets.config import Config

    from alchemist.backends.kubernetes import KubernetesBackend

    return KubernetesBackend(api_client=api_client, config=Config())


def _needs_volume(backend: Any) -> None:
    needed = ("ALCHEMIST_K8S_IMAGE", "ALCHEMIST_K8S_PVC", "ALCHEMIST_K8S_MOUNT_PATH")
    missing = [v for v in needed if not os.environ.get(v)]
    if missing:
        pytest.skip(f"set {', '.join(missing)} to run jobs on the cluster")
    home = Path(os.environ.get("ALCHEMIST_HOME", ""))
    if not home.is_absolute() or not home.is_relative_to(backend.mount_path):
        pytest.skip("ALCHEMIST_HOME must lie on the shared volume (ALCHEMIST_K8S_MOUNT_PATH)")


def _request(job_id: str, source: str, workers: int = 2, **spec: Any) -> Any:
    from alchemist.backends.api import JobRequest
    from alchemist.bundle import build_bundle, write_bundle
    from alchemist.job.config import jobs_root
    from alchemist.job.jobdir import JobDir, atomic_write_json
    from alchemist.job.spec import JobSpec

    s = JobSpec(name="k8s-test", workers=workers, backend="kubernetes", **spec)
    jd = JobDir(jobs_root() / job_id).create()
    atomic_write_json(jd.spec, s.to_dict())
    write_bundle(build_bundle(source, {}, entry="cell", max_value_bytes=1 << 20), jd.bundle)
    return JobRequest(job_id, OWNER, s, jd)


def _wait(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def cleanup(backend: Any) -> Iterator[list[Any]]:
    reqs: list[Any] = []
    yield reqs
    for req in reqs:
        try:
            backend.cancel(req)
        except Exception:
            pass


def test_server_side_dry_run_accepts_the_manifests(
    backend: Any, api_client: Any, tmp_path: Path
) -> None:
    """The real API server admits every object (schema, podFailurePolicy rules, names)."""
    from kubernetes import client

    from alchemist.backends.api import JobRequest
    from alchemist.job.jobdir import JobDir
    from alchemist.job.spec import JobSpec, Resources

    backend.image = backend.image or "busybox"
    backend.pvc = backend.pvc or "alchemist-home"
    backend.mount_path = str(tmp_path)
    for spec in (
        JobSpec(name="a", workers=2, backend="kubernetes"),
        JobSpec(
            name="b",
            workers=4,
            max_restarts=2,
            timeout=60,
            resources=Resources(gpus=2),
            backend="kubernetes",
        ),
    ):
        req = JobRequest(f"jdry{spec.workers}x", OWNER, spec, JobDir(tmp_path / "jobs" / "jdry"))
        job, svc = backend.dryrun(req).request["manifests"]
        ns = job["metadata"]["namespace"]
        client.BatchV1Api(api_client).create_namespaced_job(ns, job, dry_run="All")
        client.CoreV1Api(api_client).create_namespaced_service(ns, svc, dry_run="All")


def test_job_runs_to_success(backend: Any, cleanup: list[Any]) -> None:
    from alchemist.job.spec import JobState

    _needs_volume(backend)
    source = (
        "import torch, torch.distributed as dist, alchemist\n"
        "ctx = alchemist.context()\n"
        "t = torch.tensor([float(ctx.rank + 1)])\n"
        "dist.all_reduce(t)\n"
        "print(f'rank={ctx.rank} world={ctx.world_size} sum={t.item():g}', flush=True)\n"
    )
    req = _request(f"jreal{os.getpid():x}a", source)
    cleanup.append(req)
    backend.submit(req)
    _wait(lambda: backend.status(req).state.is_terminal, 900, "the job to end")
    st = backend.status(req)
    assert st.state is JobState.SUCCEEDED, st
    assert "world=2 sum=3" in req.job_dir.rank_log(1).read_text()


def test_unschedulable_reason_then_cancel(backend: Any, cleanup: list[Any]) -> None:
    from alchemist.job.spec import JobState, Resources

    _needs_volume(backend)
    req = _request(f"jreal{os.getpid():x}b", "pass\n", workers=1, resources=Resources(gpus=4096))
    cleanup.append(req)
    backend.submit(req)

    def reason() -> str:
        return backend.status(req).reason or ""

    _wait(lambda: "cannot" in reason(), 120, "the unschedulable reason")
    assert backend.status(req).state is JobState.PENDING
    backend.cancel(req)
    assert backend.status(req).state is JobState.CANCELLED
    assert all(j["job_id"] != req.job_id for j in backend.list(OWNER))


class TestBackendContractOnTheCluster(BackendContract):
    """The conformance suite of every backend (:mod:`alchemist.testing.conformance`),
    on the real cluster; needs what the job tests above need."""

    @pytest.fixture
    def backend_name(self, backend: Any, monkeypatch: pytest.MonkeyPatch) -> str:
        from alchemist import backends

        _needs_volume(backend)
        monkeypatch.setitem(backends._instances, "kubernetes", backend)
        return "kubernetes"
