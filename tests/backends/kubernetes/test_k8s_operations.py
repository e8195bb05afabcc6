"""Operations of the Kubernetes backend against a STAND-IN API server.

No Kubernetes API server can run here (ENVIRONMENT.md). These tests run the real
backend and the official ``kubernetes`` client over real HTTP against
``k8s_standin.StandinApiServer`` (an in-memory subset of the Kubernetes REST API), with
the test playing the Job controller and the kubelet (``k8s_standin.Kubelet``): it
creates the pods, moves them through their phases, writes their logs and derives the
Job's conditions. What is verified is the backend's side of the contract: what it
sends, how it reads states and reasons back, and how API errors reach the user. That
a real API server and Job controller behave like the stand-in is checked by the
``k8s`` suite in ``tests/k8s_real`` when a cluster is reachable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from alchemist.backends.api import JobRequest
from alchemist.backends.kubernetes import KubernetesBackend, slugs
from alchemist.errors import BackendError, JobNotFoundError
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobSpec, JobState, Resources
from tests.support.k8s_standin import Kubelet, StandinApiServer, standin_backend

Env = tuple[KubernetesBackend, Kubelet, StandinApiServer]

UNSCHEDULABLE = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are"
    " available: 3 No preemption victims found for incoming pod."
)
QUOTA = (
    "exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=16,"
    " used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=8"
)


@pytest.fixture
def env(alchemist_home: Path) -> Iterator[Env]:
    with standin_backend(alchemist_home, run_pods=False) as e:
        yield e


_counter = iter(range(1000))


def new_request(home: Path, workers: int = 2, owner: str = "alice", **spec: Any) -> JobRequest:
    job_id = f"jtest{next(_counter):04d}"
    jd = JobDir(home / "jobs" / job_id).create()
    return JobRequest(
        job_id, owner, JobSpec(name="t", workers=workers, backend="kubernetes", **spec), jd
    )


def name_of(req: JobRequest) -> str:
    return slugs.job_name(req.job_id)


def one_line_error(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_submit_creates_exactly_the_dry_run(env: Env, alchemist_home: Path) -> None:
    backend, _, server = env
    req = new_request(alchemist_home)
    info = backend.submit(req)
    job_doc, svc_doc = info.request["manifests"]
    job = server.get("jobs", "default", name_of(req))
    svc = server.get("services", "default", name_of(req))
    assert job is not None and svc is not None
    assert job["spec"] == job_doc["spec"]
    assert job["metadata"]["labels"] == job_doc["metadata"]["labels"]
    assert svc["spec"] == svc_doc["spec"]
    # the Service is owned by the Job, so it is deleted with it
    assert svc["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    # the namespace's quotas are read first (a job that can never fit is refused before
    # anything exists), then exactly the two objects are created
    assert server.requests[0] == ("GET", "/api/v1/namespaces/default/resourcequotas")
    assert [m for m, _ in server.requests[1:]] == ["POST", "POST"]
    assert backend.status(req).state is JobState.PENDING


def test_lifecycle_pending_unschedulable_running_succeeded(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, server = env
    req = new_request(alchemist_home, resources=Resources(gpus=8))
    backend.submit(req)
    name = name_of(req)
    kubelet.sync(name)
    kubelet.run(name, 0)
    kubelet.unschedulable(name, 1, UNSCHEDULABLE)
    st = backend.status(req)
    assert st.state is JobState.PENDING
    assert st.reason is not None
    assert st.reason.startswith("worker 1 cannot be scheduled (Unschedulable): 0/3 nodes")
    assert "Insufficient nvidia.com/gpu" in st.reason
    assert st.ranks["0"]["phase"] == "Running" and st.ranks["1"]["phase"] == "Pending"

    kubelet.run(name, 1)
    st = backend.status(req)
    assert st.state is JobState.RUNNING and st.reason is None and st.started is not None
    kubelet.finish(name, 0)
    kubelet.finish(name, 1)
    st = backend.status(req)
    assert (st.state, st.exit_code, st.restarts) == (JobState.SUCCEEDED, 0, 0)
    assert st.finished is not None

    # ttlSecondsAfterFinished removes the Job: the recorded final status remains
    server.delete("jobs", "default", name)
    assert server.get("services", "default", name) is None  # owned: collected with it
    assert backend.status(req).state is JobState.SUCCEEDED


def test_failed_worker_fails_fast_with_its_error(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, _ = env
    req = new_request(alchemist_home, workers=3)
    backend.submit(req)
    name = name_of(req)
    kubelet.run_all(name)
    tail = "Traceback (most recent call last):\n  ...\nZeroDivisionError: division by zero\n"
    kubelet.finish(name, 2, 1, tail + "=" * 60 + "\n")
    st = backend.status(req)
    assert st.state is JobState.FAILED  # podFailurePolicy FailJob: no waiting for the others
    assert st.exit_code == 1 and st.restarts == 0
    assert st.reason == "worker 2 exited with code 1: ZeroDivisionError: division by zero"


def test_failure_reason_prefers_the_rank_log(env: Env, alchemist_home: Path) -> None:
    """The ranks write their logs on the shared volume; their error is the best reason."""
    backend, kubelet, _ = env
    req = new_request(alchemist_home)
    backend.submit(req)
    name = name_of(req)
    kubelet.run_all(name)
    req.job_dir.rank_log(1).write_text(
        'Traceback (most recent call last):\n  File "<cell>", line 3\n'
        "NameError: name 'modle' is not defined\n[alchemist] rank 1 exited with status 1 after 0.1s\n"
    )
    kubelet.finish(name, 1, 1, "torch.distributed.elastic...ChildFailedError")
    st = backend.status(req)
    assert st.state is JobState.FAILED
    assert st.reason == "rank 1 failed: NameError: name 'modle' is not defined"


def test_restart_then_success(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, _ = env
    req = new_request(alchemist_home, max_restarts=1)
    backend.submit(req)
    name = name_of(req)
    kubelet.run_all(name)
    kubelet.finish(name, 0, 1, "RuntimeError: Connection reset by peer")
    st = backend.status(req)
    assert st.state is JobState.RESTARTING and st.restarts == 0  # not replaced yet
    kubelet.sync(name)  # the Job controller replaces the failed pod
    assert backend.status(req).state is JobState.RESTARTING
    kubelet.run(name, 0)
    st = backend.status(req)
    assert st.state is JobState.RUNNING and st.restarts == 1
    kubelet.succeed_all(name)
    assert backend.status(req).state is JobState.SUCCEEDED


def test_restarts_exhausted(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, _ = env
    req = new_request(alchemist_home, max_restarts=1)  # backoffLimit = 1 * 2 workers
    backend.submit(req)
    name = name_of(req)
    kubelet.run_all(name)
    for _ in range(2):
        kubelet.finish(name, 1, 1, "RuntimeError: boom")
        assert backend.status(req).state is JobState.RESTARTING
        kubelet.sync(name)
        kubelet.run(name, 1)
    kubelet.finish(name, 1, 1, "RuntimeError: boom")  # the third failure > backoffLimit 2
    st = backend.status(req)
    assert st.state is JobState.FAILED
    assert st.reason is not None and "RuntimeError: boom" in st.reason
    assert "raise max_restarts" in st.reason


def test_node_loss_is_retried_without_counting(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, _ = env
    req = new_request(alchemist_home)  # max_restarts=0: any counted failure fails the job
    backend.submit(req)
    name = name_of(req)
    kubelet.run_all(name)
    kubelet.finish(name, 1, 137, disrupted=True)  # node drained: DisruptionTarget
    assert not backend.status(req).state.is_terminal
    kubelet.sync(name)
    kubelet.run(name, 1)
    st = backend.status(req)
    assert st.state is JobState.RUNNING and st.restarts == 1  # replaced, but not counted


def test_image_pull_error_names_the_setting(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, _ = env
    req = new_request(alchemist_home)
    backend.submit(req)
    kubelet.sync(name_of(req))
    kubelet.waiting(name_of(req), 0, "ImagePullBackOff", 'Back-off pulling image "nope:1"')
    st = backend.status(req)
    assert st.state is JobState.PENDING
    assert st.reason is not None and st.reason.startswith("worker 0 ImagePullBackOff")
    assert "c.KubernetesBackend.image" in st.reason and "nope:1" in st.reason


def test_quota_refusing_pods_is_the_pending_reason(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, _ = env
    req = new_request(alchemist_home, resources=Resources(gpus=8))
    backend.submit(req)
    kubelet.quota_exceeded = QUOTA
    kubelet.sync(name_of(req))
    st = backend.status(req)
    assert st.state is JobState.PENDING
    assert st.reason is not None
    assert st.reason.startswith("workers cannot be created: the namespace's resource quota")
    assert "limited: requests.nvidia.com/gpu=8" in st.reason and "fewer" in st.reason


def test_queued_by_kueue(env: Env, alchemist_home: Path) -> None:
    backend, _, server = env
    backend.queue = "team-queue"
    req = new_request(alchemist_home)
    backend.submit(req)
    job = server.get("jobs", "default", name_of(req))
    assert job is not None
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-queue"
    # what Kueue's webhook and controller do to a Job waiting for quota
    job["spec"]["suspend"] = True
    job["status"]["conditions"] = [
        {
            "type": "Suspended",
            "status": "True",
            "reason": "JobSuspended",
            "message": "Job suspended",
        }
    ]
    server.put("jobs", job)
    st = backend.status(req)
    assert st.state is JobState.PENDING and st.reason is not None and "Kueue" in st.reason


def test_timeout(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, server = env
    req = new_request(alchemist_home, timeout=5)
    backend.submit(req)
    name = name_of(req)
    kubelet.run_all(name)
    job = server.get("jobs", "default", name)
    assert job is not None and job["spec"]["activeDeadlineSeconds"] == 5
    job["status"]["conditions"] = [
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "x"}
    ]
    server.put("jobs", job)
    st = backend.status(req)
    assert st.state is JobState.FAILED and st.reason is not None and "timeout" in st.reason


def test_cancel_deletes_everything_and_is_idempotent(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, server = env
    req = new_request(alchemist_home)
    backend.submit(req)
    name = name_of(req)
    kubelet.run_all(name)
    backend.cancel(req)
    assert server.get("jobs", "default", name) is None
    assert server.get("services", "default", name) is None
    assert server.list("pods", "default") == []  # collected through ownerReferences
    st = backend.status(req)
    assert st.state is JobState.CANCELLED and st.reason == "cancelled by the user"
    deletes = [r for r in server.requests if r[0] == "DELETE"]
    backend.cancel(req)
    assert [r for r in server.requests if r[0] == "DELETE"] == deletes
    assert backend.status(req).state is JobState.CANCELLED


def test_cancel_after_success_changes_nothing(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, server = env
    req = new_request(alchemist_home)
    backend.submit(req)
    kubelet.succeed_all(name_of(req))
    backend.cancel(req)
    assert backend.status(req).state is JobState.SUCCEEDED
    assert server.get("jobs", "default", name_of(req)) is not None


def test_cancel_refused_keeps_the_job_running(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, server = env
    req = new_request(alchemist_home)
    backend.submit(req)
    kubelet.run_all(name_of(req))
    server.fail("DELETE", "/jobs/", 403, "Forbidden", 'jobs.batch "x" is forbidden: no delete')
    with pytest.raises(BackendError) as e:
        backend.cancel(req)
    assert "forbids Alchemist to delete Job" in one_line_error(e)
    assert backend.status(req).state is JobState.RUNNING


def test_unknown_job(env: Env, alchemist_home: Path) -> None:
    backend, _, _ = env
    with pytest.raises(JobNotFoundError):
        backend.status(new_request(alchemist_home))


def test_job_deleted_by_someone_else(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, server = env
    req = new_request(alchemist_home)
    backend.submit(req)
    kubelet.run_all(name_of(req))
    server.delete("jobs", "default", name_of(req))
    st = backend.status(req)
    assert st.state is JobState.FAILED and st.reason is not None and "deleted" in st.reason


@pytest.mark.parametrize(
    ("status", "reason", "message", "expect"),
    [
        (
            403,
            "Forbidden",
            'jobs.batch is forbidden: User "system:serviceaccount:u-alice:default" cannot create'
            ' resource "jobs" in API group "batch" in the namespace "default"',
            "Kubernetes forbids Alchemist to create Job",
        ),
        (403, "Forbidden", f'jobs.batch "x" is forbidden: {QUOTA}', "resource quota is exhausted"),
        (401, "Unauthorized", "Unauthorized", "renew your kubeconfig"),
        (422, "Invalid", 'Job.batch "x" is invalid: spec.completions: Invalid value', "rejected"),
        (500, "InternalError", "etcd timeout", "(500 Internal Server Error): etcd timeout"),
    ],
)
def test_api_errors_on_submit_are_one_line(
    env: Env, alchemist_home: Path, status: int, reason: str, message: str, expect: str
) -> None:
    backend, _, server = env
    server.fail("POST", "/jobs$", status, reason, message)
    with pytest.raises(BackendError) as e:
        backend.submit(new_request(alchemist_home))
    assert expect in one_line_error(e)
    assert server.list("jobs", "default") == []


def test_conflict_is_one_line(env: Env, alchemist_home: Path) -> None:
    """A real 409 from the (stand-in) server: the same job id submitted twice."""
    backend, _, _ = env
    req = new_request(alchemist_home)
    backend.submit(req)
    with pytest.raises(BackendError) as e:
        backend.submit(req)
    msg = one_line_error(e)
    assert "already exists in namespace default" in msg and "new id" in msg


def test_service_failure_rolls_back_the_job(env: Env, alchemist_home: Path) -> None:
    backend, _, server = env
    server.fail("POST", "/services$", 403, "Forbidden", "services is forbidden")
    with pytest.raises(BackendError) as e:
        backend.submit(new_request(alchemist_home))
    assert "create Service" in one_line_error(e)
    assert server.list("jobs", "default") == []


def test_missing_namespace(alchemist_home: Path) -> None:
    with standin_backend(alchemist_home, run_pods=False, namespace="default") as (b, _, _):
        b.namespace = "nobody"
        with pytest.raises(BackendError) as e:
            b.submit(new_request(alchemist_home))
        assert "namespace nobody does not exist" in one_line_error(e)


def test_unreachable_api_server(alchemist_home: Path) -> None:
    with StandinApiServer() as server:
        client = server.api_client()
    backend = KubernetesBackend(
        api_client=client,
        config=Config(),
        namespace="default",
        image="i",
        pvc="p",
        mount_path=str(alchemist_home),
    )
    backend.request_timeout = 2
    with pytest.raises(BackendError) as e:
        backend.submit(new_request(alchemist_home))
    assert "cannot reach the Kubernetes API" in one_line_error(e)
    client.close()


def test_list_by_owner(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, _ = env
    a1 = new_request(alchemist_home, owner="alice@example.org")
    a2 = new_request(alchemist_home, owner="alice@example.org")
    b1 = new_request(alchemist_home, owner="bob")
    for r in (a1, a2, b1):
        backend.submit(r)
    kubelet.succeed_all(name_of(a1))
    jobs = backend.list("alice@example.org")
    assert {j["job_id"]: j["state"] for j in jobs} == {a1.job_id: "succeeded", a2.job_id: "pending"}
    assert all(j["owner"] == "alice@example.org" for j in jobs)
    assert [j["job_id"] for j in backend.list("bob")] == [b1.job_id]


def test_pod_logs_and_follow(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, _ = env
    req = new_request(alchemist_home)
    backend.submit(req)
    name = name_of(req)
    kubelet.run_all(name)
    kubelet.log(name, 1, "starting torchrun\nrendezvous ok\n")
    assert list(backend.pod_logs(req, 1)) == ["starting torchrun", "rendezvous ok"]

    def later() -> None:
        time.sleep(0.3)
        kubelet.log(name, 1, "step 1\nstep 2\n")
        time.sleep(0.2)
        kubelet.finish(name, 1, 0)

    t = threading.Thread(target=later)
    t.start()
    lines = list(backend.pod_logs(req, 1, follow=True))  # ends when the container ends
    t.join()
    assert lines == ["starting torchrun", "rendezvous ok", "step 1", "step 2"]


def test_pod_logs_of_a_pod_not_started(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, _ = env
    req = new_request(alchemist_home)
    backend.submit(req)
    kubelet.sync(name_of(req))
    assert list(backend.pod_logs(req, 0, wait=0.2)) == []


def test_rank_logs_come_from_the_job_dir(env: Env, alchemist_home: Path) -> None:
    backend, _, _ = env
    req = new_request(alchemist_home)
    backend.submit(req)
    assert backend.logs(req, 0).lines == []  # not written yet: no lines, no error
    req.job_dir.rank_log(0).write_text("hello from rank 0\n")
    chunk = backend.logs(req, 0)
    assert chunk.lines == ["hello from rank 0"] and chunk.cursor == 18


def test_reattach_from_a_new_kernel(env: Env, alchemist_home: Path) -> None:
    """A fresh backend (a restarted kernel, other settings) finds the job from its job dir."""
    backend, kubelet, server = env
    req = new_request(alchemist_home)
    backend.submit(req)
    kubelet.run_all(name_of(req))
    fresh = KubernetesBackend(
        api_client=server.api_client(),
        config=Config(),
        namespace="elsewhere",  # the record of the submission wins
        image="i",
        pvc="p",
        mount_path=str(alchemist_home),
    )
    try:
        assert fresh.status(req).state is JobState.RUNNING
        fresh.cancel(req)
        assert backend.status(req).state is JobState.CANCELLED
    finally:
        fresh.api_client.close()
