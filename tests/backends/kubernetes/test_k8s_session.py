"""Interactive sessions on Kubernetes: the ranks are the pods of an Indexed Job.

What is real: the session's notebook side (:class:`alchemist.interactive.Session`), the
Kubernetes backend's manifests and its calls through the official ``kubernetes``
client, every pod's command and environment as the generated Job says (the engine
module, rank 0's pod serving the rendezvous store and the ipyparallel controller),
real ipyparallel engines and torch.distributed (gloo), and the job directory as the
shared volume through which the connection files, the stop marker and the idle
warning travel.

What is a STAND-IN, and why: there is no cluster here. The stand-in API server, Job
controller and kubelet (``tests/support/k8s_standin.py``) run each pod as a local
process, with ``<job>-<i>.<job>`` names resolved to 127.0.0.1; the manifests are
checked against the real Kubernetes schemas in ``test_k8s_manifests.py``-style below.
"""

from __future__ import annotations

import json
import signal
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import alchemist.backends as backends_registry
from alchemist.backends.kubernetes import KubernetesBackend, slugs
from tests.interactive.conftest import (
    ALL_REDUCE,
    assert_guessed_key_refused,
    interrupt_a_loop,
    wait_for,
)
from tests.support.k8s_standin import Kubelet, StandinApiServer, standin_backend


@pytest.fixture
def cluster(
    alchemist_home: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[KubernetesBackend, Kubelet, StandinApiServer]]:
    with standin_backend(alchemist_home, run_pods=True) as env:
        monkeypatch.setitem(backends_registry._instances, "kubernetes", env[0])
        yield env


@pytest.fixture
def k8s_session(cluster: Any) -> Iterator[Any]:
    """``start(**options)``: a 2-rank session on the stand-in cluster, stopped at the end."""
    from alchemist.interactive import session

    made: list[Any] = []

    def start(**options: Any) -> Any:
        options.setdefault("start_timeout", 180)
        s = session(2, backend="kubernetes", **options)
        made.append(s)
        return s

    yield start
    for s in made:
        s.stop()


def _pod_ip() -> str:
    """An address of this machine other than loopback (as another pod would dial rank
    0's pod), or loopback when it has none."""
    import psutil

    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return str(a.address)
    return "127.0.0.1"


def _pods_running(server: StandinApiServer, name: str) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in server.list("pods", "default", f"batch.kubernetes.io/job-name={name}")
        if p["status"].get("phase") == "Running"
    ]


def test_a_session_s_ranks_are_pods_and_a_stop_completes_the_job(
    cluster: Any, k8s_session: Any, capsys: Any
) -> None:
    """Engine id = rank = completion index; state across cells; all_reduce equals the
    world sum; interrupt over the control channel reaches every pod and the next cell
    runs; a stop ends every pod with status 0, so the Job completes and the session
    is ``succeeded``."""
    from alchemist import client

    _, kubelet, server = cluster
    s = k8s_session()
    name = slugs.job_name(s.id)
    job = server.get("jobs", "default", name)
    assert job is not None
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["backoffLimit"] == 0  # a dead engine breaks the session; no pod comes back
    command = spec["template"]["spec"]["containers"][0]["command"]
    assert command[:5] == [
        "python",
        "-m",
        "alchemist.interactive.engine",
        str(s.job_dir.root),
        "$(JOB_COMPLETION_INDEX)",
    ]
    assert server.get("services", "default", name) is not None  # the pods' names
    assert s.status()["backend"] == "kubernetes"
    assert s.status()["ranks_alive"] == [0, 1]
    # the connection files hold the key: the owner's only, on the shared volume
    for f in (s.dirs.client_file, s.dirs.engine_file):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f

    # rank 0's pod serves the controller on every interface: another pod of the
    # namespace dials it, but a client with a guessed key (and, as another user,
    # no way to read the real one) is refused
    import ipyparallel as ipp

    info = json.loads(s.dirs.client_file.read_text())
    other_pod = ipp.Client({**info, "location": _pod_ip()}, timeout=30)
    try:
        assert sorted(other_pod.ids) == [0, 1]  # reachable beyond loopback, with the key
    finally:
        other_pod.close()
    assert_guessed_key_refused(s.dirs.client_file, s.job_dir.root.parent / "pwned", _pod_ip())

    s.run("import os, alchemist\nx = 10 * alchemist.context().rank\npid = os.getpid()")
    s.run(ALL_REDUCE)
    out = capsys.readouterr().out
    assert "[rank 0] rank=0 sum=3" in out and "[rank 1] rank=1 sum=3" in out
    assert s.pull("x", rank=1) == 10  # state kept across cells, per rank
    # rank r is the process of pod <job>-<r> (the stand-in kubelet runs one per pod)
    pod_pids = {
        int(pname[len(name) + 1 :].split("-")[0]): proc.pid for pname, proc in kubelet.procs.items()
    }
    assert {r: s.pull("pid", rank=r) for r in s.ranks} == pod_pids

    interrupt_a_loop(s, capsys)  # over the control channel: no pod is signalled from here
    s.run(ALL_REDUCE)  # the next cell runs on the same group
    assert "[rank 1] rank=1 sum=3" in capsys.readouterr().out

    s.stop()
    st = client.attach(s.id).status()
    assert (st.state.value, st.reason) == ("succeeded", "stopped by the user")
    conditions = {c["type"] for c in server.get("jobs", "default", name)["status"]["conditions"]}
    assert "Complete" in conditions  # every pod ended with status 0
    wait_for(
        lambda: not kubelet.procs or all(p.poll() is not None for p in kubelet.procs.values()),
        30,
        "the pods' processes to end",
    )


def test_a_killed_pod_breaks_the_session_and_the_job_stops_the_other(
    cluster: Any, k8s_session: Any
) -> None:
    """SIGKILL of rank 1's pod process: the Job fails (podFailurePolicy), the Job
    controller deletes the other pod, and the next cell says the session is broken."""
    from alchemist.interactive import SessionBroken

    _, kubelet, server = cluster
    s = k8s_session()
    name = slugs.job_name(s.id)
    (pod1,) = [p for p in kubelet.procs if p.startswith(f"{name}-1-")]
    kubelet.procs[pod1].send_signal(signal.SIGKILL)
    wait_for(lambda: not s.running(), 60, "the session to break")
    with pytest.raises(SessionBroken, match=r"session .* is broken: .*(137|SIGKILL|killed)"):
        s.run("print(1)")
    wait_for(lambda: not _pods_running(server, name), 30, "the other pod to be deleted")


def test_bad_input_on_kubernetes_is_one_line_and_nothing_runs(cluster: Any) -> None:
    """Two GPUs per rank (a rank is a pod with one GPU) and a backend without an image
    are refused in one line; no Job is created."""
    from alchemist.interactive import SessionError, session

    backend, _, server = cluster
    with pytest.raises(SessionError, match=r"-n 4 --gpus-per-worker 1"):
        session(2, gpus_per_worker=2, backend="kubernetes")
    backend.image = ""
    with pytest.raises(SessionError, match=r"did not start: no worker image"):
        session(2, backend="kubernetes")
    assert server.list("jobs", "default") == []


def test_an_idle_session_on_kubernetes_stops_itself(cluster: Any, k8s_session: Any) -> None:
    """With ``idle_timeout`` rank 0's pod keeps the idle clock (the notebook may be gone):
    it warns in the session's notice, then asks every pod to end; the session is
    ``cancelled`` with the reason and its Job completed (no pod left)."""
    from alchemist import client

    _, _, server = cluster
    s = k8s_session(idle_timeout=3)
    s.run("x = 1")
    wait_for(lambda: not s.running(), 60, "the idle session to stop")
    st = client.attach(s.id).status()
    assert st.state.value == "cancelled"
    assert "stopped after 3 s idle (--idle-timeout)" in (st.reason or "")
    assert "idle for" in s.dirs.notice.read_text()  # the warning came first
    wait_for(lambda: not _pods_running(server, slugs.job_name(s.id)), 30, "the pods to end")
