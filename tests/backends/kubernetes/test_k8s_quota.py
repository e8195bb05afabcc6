"""A job against its namespace's ResourceQuota, on the Kubernetes backend.

Two kinds of tests:

- the arithmetic of :mod:`alchemist.backends.kubernetes.quota` (real: the module, the
  ``kubernetes`` client's ``parse_quantity``; no server involved);
- the backend at submission and in ``status``, against the STAND-IN API server of
  ``k8s_standin`` (no Kubernetes API server can run here, ENVIRONMENT.md). Real: the
  backend, the official ``kubernetes`` client over HTTP, the manifests, and the quota's
  ``spec.hard`` taken from the chart's own ``tenancy.quota`` default
  (helm/alchemist/values.yaml). Stand-in: the API server, and the test's ``Kubelet``
  playing the Job controller, the ResourceQuota admission (pods over the quota are not
  created; a FailedCreate event with the API server's message) and the quota
  controller (``status.used``). That a real API server lists quotas in this shape is
  Kubernetes' documented API; it is not verified here.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from alchemist.backends.api import JobRequest
from alchemist.backends.kubernetes import KubernetesBackend, slugs
from alchemist.backends.kubernetes.quota import (
    applies,
    check,
    format_quantity,
    parse_quantity,
    pod_amounts,
)
from alchemist.errors import CapacityError, SpecError
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobSpec, JobState, Resources
from tests.support.k8s_standin import Kubelet, StandinApiServer, standin_backend

REPO = Path(__file__).resolve().parents[3]
Env = tuple[KubernetesBackend, Kubelet, StandinApiServer]
GIB = 1024**3


def chart_quota() -> dict[str, str]:
    """The chart's default ``tenancy.quota``: each user namespace's ResourceQuota."""
    values = yaml.safe_load((REPO / "helm" / "alchemist" / "values.yaml").read_text())
    return {k: str(v) for k, v in values["tenancy"]["quota"].items()}


def quota_object(hard: dict[str, str], used: dict[str, str] | None = None, **spec: Any) -> Any:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "alchemist-user", "namespace": "default"},
        "spec": {"hard": dict(hard), **spec},
    }
    if used is not None:
        obj["status"] = {"hard": dict(hard), "used": dict(used)}
    return obj


def job_manifest(
    workers: int, requests: dict[str, str], limits: dict[str, str] | None = None, **pod: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": requests}
    if limits is not None:
        resources["limits"] = limits
    return {
        "spec": {
            "completions": workers,
            "parallelism": workers,
            "template": {
                "spec": {"containers": [{"name": "worker", "resources": resources}], **pod}
            },
        }
    }


# -- the arithmetic ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("1.5", Decimal("1.5")),
        ("4Gi", Decimal(4 * GIB)),
        ("1Ti", Decimal(1024 * GIB)),
        ("512Gi", Decimal(512 * GIB)),
        ("100M", Decimal(100_000_000)),
        ("1k", Decimal(1000)),
        (8, Decimal(8)),
    ],
)
def test_parse_quantity(text: Any, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["4GB", "", " 4", "abc", "1mi", "NaN", None])
def test_parse_quantity_refuses_what_is_not_a_quantity(bad: Any) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)


@pytest.mark.parametrize(
    ("value", "resource", "text"),
    [
        (Decimal(1024 * GIB), "requests.memory", "1Ti"),
        (Decimal(3 * GIB // 2), "memory", "1.5Gi"),
        (Decimal("0.5"), "requests.cpu", "500m"),
        (Decimal(16), "requests.nvidia.com/gpu", "16"),
        (Decimal(2048), "requests.nvidia.com/gpu", "2048"),  # a count, not bytes
        (Decimal(100), "limits.memory", "100"),  # bytes below 1Ki stay as they are
        (Decimal(1280 * GIB), "limits.memory", "1.25Ti"),
        (Decimal(3000 * 1024**2), "memory", "3000Mi"),  # not a rounded 2.93Gi
    ],
)
def test_format_quantity(value: Decimal, resource: str, text: str) -> None:
    assert format_quantity(value, resource) == text


def test_pod_amounts_count_as_kubernetes_does() -> None:
    """Containers add up; a limit without a request is the request; the largest init
    container counts when it is more than the containers together."""
    pod = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}},
        ],
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}],
    }
    requests, limits = pod_amounts(pod)
    assert requests == {"cpu": Decimal(4), "memory": Decimal(3 * GIB)}
    assert limits == {"memory": Decimal(GIB)}


def test_a_job_over_a_hard_limit_is_refused_in_one_line() -> None:
    job = job_manifest(8, {"cpu": "1", "nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "2"})
    with pytest.raises(CapacityError) as e:
        check(job, [quota_object(chart_quota())])
    assert str(e.value) == (
        "the job asks for 16 nvidia.com/gpu in total (8 workers × 2); your namespace's quota"
        " 'alchemist-user' allows 8 nvidia.com/gpu: use fewer workers or GPUs"
        " (--gpus-per-worker), or ask an admin for a larger quota"
    )


@pytest.mark.parametrize(
    ("workers", "requests", "expect"),
    [
        (8, {"memory": "128Gi"}, "asks for 1Ti memory in total (8 workers × 128Gi)"),
        (8, {"memory": "128Gi"}, "allows 512Gi memory: use fewer workers or less memory"),
        (9, {"cpu": "7500m"}, "asks for 67500m cpu in total (9 workers × 7500m)"),
        (9, {"cpu": "7500m"}, "(--cpu)"),
        (65, {"cpu": "100m"}, "asks for 65 pods (one per worker); your namespace's quota"),
        (65, {"cpu": "100m"}, "allows 64 pods: use fewer workers, or ask an admin"),
    ],
)
def test_the_message_names_resource_total_and_quota(
    workers: int, requests: dict[str, str], expect: str
) -> None:
    with pytest.raises(CapacityError) as e:
        check(job_manifest(workers, requests), [quota_object(chart_quota())])
    assert expect in str(e.value)
    assert "\n" not in str(e.value)


def test_limits_memory_counts_the_limits() -> None:
    """The chart's quota caps limits.memory at 1Ti: 5 workers × 256Gi is over it."""
    hard = {"limits.memory": "1Ti"}
    job = job_manifest(5, {"memory": "256Gi"}, {"memory": "256Gi"})
    with pytest.raises(CapacityError, match=r"1.25Ti memory \(limits\) in total"):
        check(job, [quota_object(hard)])
    assert (
        check(job_manifest(4, {"memory": "256Gi"}, {"memory": "256Gi"}), [quota_object(hard)])
        is None
    )


def test_a_job_that_fits_passes_and_one_that_waits_says_so() -> None:
    hard = chart_quota()
    job = job_manifest(2, {"cpu": "1", "nvidia.com/gpu": "2"})
    assert check(job, [quota_object(hard)]) is None  # no status yet: nothing known in use
    assert check(job, [quota_object(hard, {"requests.nvidia.com/gpu": "4"})]) is None
    note = check(job, [quota_object(hard, {"requests.nvidia.com/gpu": "6"})])
    assert note == (
        "your namespace's quota 'alchemist-user' has 2 of 8 nvidia.com/gpu free and the job"
        " asks for 4: it waits (pending) until other jobs or notebooks release them"
    )
    # more in use than the (lowered) limit: nothing free, not a negative amount
    note = check(job, [quota_object(hard, {"requests.nvidia.com/gpu": "10"})])
    assert note is not None and "has 0 of 8 nvidia.com/gpu free" in note


def test_every_quota_of_the_namespace_counts() -> None:
    team = quota_object({"requests.cpu": "4"})
    team["metadata"]["name"] = "team-cap"
    job = job_manifest(2, {"cpu": "3"})
    with pytest.raises(CapacityError, match="quota 'team-cap' allows 4 cpu"):
        check(job, [quota_object(chart_quota()), team])


def test_scopes_decide_whether_a_quota_counts() -> None:
    job = job_manifest(4, {"cpu": "1"})
    pod = job["spec"]["template"]["spec"]
    tiny = {"pods": "1"}
    # BestEffort pods have no requests; the job's have: this quota is not theirs
    assert applies(quota_object(tiny, scopes=["BestEffort"]), pod) is False
    assert check(job, [quota_object(tiny, scopes=["BestEffort"])]) is None
    with pytest.raises(CapacityError):
        check(job, [quota_object(tiny, scopes=["NotBestEffort", "NotTerminating"])])
    selector = {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]
    }
    high = job_manifest(4, {"cpu": "1"}, priorityClassName="high")
    low = job_manifest(4, {"cpu": "1"}, priorityClassName="low")
    with pytest.raises(CapacityError):
        check(high, [quota_object(tiny, scopeSelector=selector)])
    assert check(low, [quota_object(tiny, scopeSelector=selector)]) is None
    # no priorityClassName: the cluster's default class may apply; never refuse on a guess
    assert applies(quota_object(tiny, scopeSelector=selector), pod) is None
    assert check(job, [quota_object(tiny, scopeSelector=selector)]) is None


def test_object_counts_and_storage_are_left_to_the_api_server() -> None:
    hard = {"services": "0", "count/jobs.batch": "0", "persistentvolumeclaims": "0"}
    assert check(job_manifest(2, {"cpu": "1"}), [quota_object(hard)]) is None


def test_a_quantity_that_is_not_one_is_a_spec_error() -> None:
    with pytest.raises(
        SpecError, match=r"memory '4GB' of container 'worker' is not a Kubernetes quantity"
    ):
        check(job_manifest(2, {"memory": "4GB"}), [quota_object(chart_quota())])


# -- the backend against the stand-in API server -----------------------------------------


@pytest.fixture
def env(alchemist_home: Path) -> Iterator[Env]:
    with standin_backend(alchemist_home, run_pods=False) as e:
        yield e


_counter = iter(range(1000))


def new_request(home: Path, workers: int, gpus: int = 0) -> JobRequest:
    job_id = f"jquota{next(_counter):04d}"
    jd = JobDir(home / "jobs" / job_id).create()
    spec = JobSpec(name="q", workers=workers, backend="kubernetes", resources=Resources(gpus=gpus))
    return JobRequest(job_id, "alice", spec, jd)


def install_quota(kubelet: Kubelet, server: StandinApiServer) -> None:
    """What the hub creates in each user namespace: the chart's ResourceQuota."""
    server.put("resourcequotas", quota_object(chart_quota()))
    kubelet.account_quotas()


def test_a_job_that_can_never_fit_is_refused_and_nothing_is_created(
    env: Env, alchemist_home: Path
) -> None:
    backend, kubelet, server = env
    install_quota(kubelet, server)
    req = new_request(alchemist_home, workers=8, gpus=2)
    with pytest.raises(CapacityError) as e:
        backend.submit(req)
    msg = str(e.value)
    assert "\n" not in msg
    assert "16 nvidia.com/gpu in total (8 workers × 2)" in msg
    assert "quota 'alchemist-user' allows 8 nvidia.com/gpu" in msg
    assert "ask an admin for a larger quota" in msg
    assert server.requests == [("GET", "/api/v1/namespaces/default/resourcequotas")]
    assert server.list("jobs", "default") == [] and server.list("services", "default") == []
    assert (req.job_dir.read_state() or {}).get("kubernetes") is None


def test_the_refusal_reaches_the_user_as_a_4xx(
    env: Env, alchemist_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole submission path (``alchemist.client.submit``, as the magic, CLI and REST
    use it) with the stand-in backend: the user gets the one line, the job's row says
    why it failed, and the REST layer maps the error to 400."""
    import alchemist.client as client
    from alchemist import backends
    from alchemist.server.handlers import _translate

    backend, kubelet, server = env
    install_quota(kubelet, server)
    monkeypatch.setitem(backends._instances, "kubernetes", backend)
    with pytest.raises(CapacityError) as e:
        client.submit("x = 1", namespace={}, workers=8, gpus_per_worker=2, backend="kubernetes")
    (job,) = client.jobs()
    st = job.status()  # what %alchemist_jobs and the panel show
    assert st.state is JobState.FAILED and st.reason == str(e.value)
    assert server.list("jobs", "default") == []
    reply = _translate(e.value)
    assert (reply.status_code, reply.message) == (400, str(e.value))


def test_a_job_that_fits_is_created(env: Env, alchemist_home: Path) -> None:
    backend, kubelet, server = env
    install_quota(kubelet, server)
    req = new_request(alchemist_home, workers=4, gpus=2)  # 8 of 8 GPUs: exactly the quota
    info = backend.submit(req)
    assert info.warnings == []
    assert server.get("jobs", "default", slugs.job_name(req.job_id)) is not None
    kubelet.run_all(slugs.job_name(req.job_id))
    assert backend.status(req).state is JobState.RUNNING


def test_a_forbidden_quota_list_does_not_block(env: Env, alchemist_home: Path) -> None:
    """A Role without the quota right: no check, the submission goes on (the API
    server still enforces the quota pod by pod)."""
    backend, kubelet, server = env
    install_quota(kubelet, server)
    server.fail(
        "GET",
        "/resourcequotas$",
        403,
        "Forbidden",
        'resourcequotas is forbidden: User "system:serviceaccount:default:alchemist-user"'
        ' cannot list resource "resourcequotas" in API group "" in the namespace "default"',
    )
    req = new_request(alchemist_home, workers=8, gpus=2)  # would be refused if it could look
    backend.submit(req)
    assert ("GET", "/api/v1/namespaces/default/resourcequotas") in server.requests
    assert server.get("jobs", "default", slugs.job_name(req.job_id)) is not None


def test_a_job_that_fits_but_finds_too_little_free_waits(env: Env, alchemist_home: Path) -> None:
    """Another job holds 6 of the 8 GPUs: the new one (4) is created, told it waits, is
    pending with the quota as the reason while its pods cannot be created, and runs once
    the other job's pods have ended."""
    backend, kubelet, server = env
    install_quota(kubelet, server)
    first = new_request(alchemist_home, workers=3, gpus=2)
    backend.submit(first)
    kubelet.run_all(slugs.job_name(first.job_id))
    quota = server.get("resourcequotas", "default", "alchemist-user")
    assert quota is not None and quota["status"]["used"]["requests.nvidia.com/gpu"] == "6"

    req = new_request(alchemist_home, workers=2, gpus=2)
    info = backend.submit(req)
    assert info.warnings == [
        "your namespace's quota 'alchemist-user' has 2 of 8 nvidia.com/gpu free and the job"
        " asks for 4: it waits (pending) until other jobs or notebooks release them"
    ]
    name = slugs.job_name(req.job_id)
    assert server.get("jobs", "default", name) is not None
    assert len(kubelet.sync(name)) == 1  # the admission lets one pod in, not the second
    st = backend.status(req)
    assert st.state is JobState.PENDING and st.reason is not None
    assert st.reason.startswith("workers cannot be created: the namespace's resource quota")
    assert "exceeded quota: alchemist-user" in st.reason and "wait for other jobs" in st.reason

    kubelet.succeed_all(slugs.job_name(first.job_id))
    assert backend.status(first).state is JobState.SUCCEEDED
    kubelet.run_all(name)
    assert backend.status(req).state is JobState.RUNNING


def test_without_events_the_submission_note_is_the_reason(env: Env, alchemist_home: Path) -> None:
    """A Role that may not read events (the FailedCreate events are the precise reason):
    the note made at submission says why the job waits, as 'queued: ...'."""
    backend, kubelet, server = env
    install_quota(kubelet, server)
    first = new_request(alchemist_home, workers=4, gpus=2)
    backend.submit(first)
    kubelet.run_all(slugs.job_name(first.job_id))
    req = new_request(alchemist_home, workers=1, gpus=2)
    backend.submit(req)
    assert kubelet.sync(slugs.job_name(req.job_id)) == {}
    server.fail("GET", "/events$", 403, "Forbidden", "events is forbidden", times=100)
    st = backend.status(req)
    assert st.state is JobState.PENDING
    assert st.reason == (
        "queued: your namespace's quota 'alchemist-user' has 0 of 8 nvidia.com/gpu free and"
        " the job asks for 2: it waits (pending) until other jobs or notebooks release them"
    )
