"""The rendezvous contract of the generated pods, for real, as local processes.

What is real: the worker command of every pod exactly as the generated Job's template
says (``torch.distributed.run`` with ``--nnodes``/``--node-rank=$(JOB_COMPLETION_INDEX)``
/``--master-addr``), the env each pod would get, the lead's ``alchemist.runtime``, a real
bundle written with ``alchemist.bundle``, real torch.distributed (gloo) all-reduces
across the pods, and the job directory as the shared volume.

What is a STAND-IN, and why: there is no cluster here, so each pod is a local process
(``k8s_standin.pod_process``): ``JOB_COMPLETION_INDEX`` is taken from the pod's
completion-index annotation as the downward API would, ``$(VAR)`` is expanded as the
kubelet does, and the headless Service's name of pod 0 (``<job>-0.<service>``) is
replaced by 127.0.0.1 because there is no cluster DNS; ``python`` is this venv's. The
end-to-end tests also use the stand-in API server, whose Job controller and kubelet
(``ProcessKubelet``) run the pods this way.
"""

from __future__ import annotations

import copy
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from traitlets.config import Config

import alchemist.backends as backends_registry
from alchemist.backends.api import JobRequest
from alchemist.backends.kubernetes import KubernetesBackend, slugs
from alchemist.bundle import build_bundle, write_bundle
from alchemist.job.jobdir import JobDir, atomic_write_json
from alchemist.job.spec import JobSpec, JobState
from tests.support.k8s_standin import (
    COMPLETION_INDEX,
    Kubelet,
    StandinApiServer,
    free_port,
    pod_process,
    standin_backend,
)

ALL_REDUCE_CELL = """
import torch
import torch.distributed as dist
import alchemist

ctx = alchemist.context()
t = torch.tensor([float(ctx.rank + 1)])
dist.all_reduce(t)
print(f"rank={ctx.rank} world={ctx.world_size} sum={t.item():g}", flush=True)
assert t.item() == ctx.world_size * (ctx.world_size + 1) / 2
total = t.item()
"""


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def write_job(home: Path, job_id: str, spec: JobSpec, source: str) -> JobRequest:
    """A job directory as ``alchemist.submit`` writes it: spec.json and the bundle."""
    jd = JobDir(home / "jobs" / job_id).create()
    atomic_write_json(jd.spec, spec.to_dict())
    write_bundle(build_bundle(source, {}, entry="cell", max_value_bytes=1 << 20), jd.bundle)
    return JobRequest(job_id, "alice", spec, jd)


def run_pods(
    req: JobRequest, home: Path, check: Callable[[int, list[str]], None], timeout: float = 180
) -> None:
    """Run every pod of the job's generated Indexed Job as a local process (what the Job
    controller does with the template for each completion index); ``check(index,
    argv)`` looks at each pod's command first. Every pod must exit 0."""
    backend = KubernetesBackend(
        config=Config(),
        namespace="default",
        image="unused",
        pvc="home",
        mount_path=str(home),
        master_port=free_port(),
    )
    job = backend.dryrun(req).request["manifests"][0]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for index in range(req.spec.workers):
            pod = copy.deepcopy(job["spec"]["template"])
            pod["metadata"]["annotations"][COMPLETION_INDEX] = str(index)
            argv, env, cwd = pod_process(pod)
            assert env["JOB_COMPLETION_INDEX"] == str(index)
            check(index, argv)
            procs.append(
                subprocess.Popen(
                    argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
                )
            )
        outputs = [p.communicate(timeout=timeout)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0] * req.spec.workers, outputs


def test_pods_form_the_whole_world(alchemist_home: Path) -> None:
    """Each generated pod, run as a process, joins one world of `workers` ranks; all succeed."""
    spec = JobSpec(name="rdzv", workers=2, backend="kubernetes")
    req = write_job(alchemist_home, "jrdzv000001", spec, ALL_REDUCE_CELL)

    def check(index: int, argv: list[str]) -> None:
        assert f"--node-rank={index}" in argv and "--master-addr=127.0.0.1" in argv

    run_pods(req, alchemist_home, check)
    for rank in range(2):
        log = req.job_dir.rank_log(rank).read_text()
        assert f"rank={rank} world=2 sum=3" in log, log


@pytest.fixture
def cluster(alchemist_home: Path) -> Iterator[tuple[KubernetesBackend, Kubelet, StandinApiServer]]:
    with standin_backend(alchemist_home, run_pods=True) as env:
        yield env


def test_submit_through_the_client_runs_to_success(
    cluster: tuple[KubernetesBackend, Kubelet, StandinApiServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``alchemist.submit(..., backend="kubernetes")`` end to end, pods run by the stand-in kubelet."""
    import alchemist.client as client

    backend, _, server = cluster
    monkeypatch.setitem(backends_registry._instances, "kubernetes", backend)
    job = client.submit(ALL_REDUCE_CELL, workers=2, backend="kubernetes", outputs=["total"])
    st = job.wait(timeout=180)
    assert st.state is JobState.SUCCEEDED, (st, job.logs())
    assert job.outputs() == {"total": 3.0}
    assert "rank=1 world=2 sum=3" in job.logs(1)
    name = slugs.job_name(job.id)
    assert server.get("jobs", "default", name) is not None
    # the pod log holds the launcher's output (ranks write theirs to the job directory)
    req = JobRequest(job.id, job.owner, job.spec, job.job_dir)
    assert isinstance(list(backend.pod_logs(req, 0)), list)


def test_user_error_fails_the_job_with_its_line(
    cluster: tuple[KubernetesBackend, Kubelet, StandinApiServer], alchemist_home: Path
) -> None:
    backend, _, _ = cluster
    spec = JobSpec(name="bad", workers=2, backend="kubernetes")
    source = "import alchemist\nif alchemist.context().rank == 1:\n    raise ValueError('bad lr')\n"
    req = write_job(alchemist_home, "jrdzvbad001", spec, source)
    backend.submit(req)
    wait_for(lambda: backend.status(req).state.is_terminal, 180, "the job to end")
    st = backend.status(req)
    assert st.state is JobState.FAILED
    assert st.reason == "rank 1 failed: ValueError: bad lr"


def test_cancel_stops_the_pods(
    cluster: tuple[KubernetesBackend, Kubelet, StandinApiServer], alchemist_home: Path
) -> None:
    backend, kubelet, server = cluster
    spec = JobSpec(name="long", workers=2, backend="kubernetes")
    source = "import time\nprint('working', flush=True)\ntime.sleep(600)\n"
    req = write_job(alchemist_home, "jrdzvlong01", spec, source)
    backend.submit(req)
    wait_for(
        lambda: (
            "working" in req.job_dir.rank_log(1).read_text()
            if req.job_dir.rank_log(1).exists()
            else False
        ),
        120,
        "rank 1 to run",
    )
    assert backend.status(req).state is JobState.RUNNING
    backend.cancel(req)
    assert backend.status(req).state is JobState.CANCELLED
    procs = getattr(kubelet, "procs", {})
    wait_for(lambda: all(p.poll() is not None for p in procs.values()), 30, "pods to stop")
    assert server.list("pods", "default") == []


def test_timeout_stops_the_job(
    cluster: tuple[KubernetesBackend, Kubelet, StandinApiServer], alchemist_home: Path
) -> None:
    """``timeout`` becomes activeDeadlineSeconds; the stand-in Job controller enforces it."""
    backend, kubelet, _ = cluster
    spec = JobSpec(name="slow", workers=1, timeout=3, backend="kubernetes")
    req = write_job(alchemist_home, "jrdzvslow01", spec, "import time\ntime.sleep(600)\n")
    backend.submit(req)
    wait_for(lambda: backend.status(req).state.is_terminal, 120, "the deadline")
    st = backend.status(req)
    assert st.state is JobState.FAILED and st.reason is not None and "timeout" in st.reason
    procs = getattr(kubelet, "procs", {})
    wait_for(lambda: all(p.poll() is not None for p in procs.values()), 30, "pods to stop")


HOROVOD_CELL = """
import torch
import horovod.torch as hvd
import alchemist

model = torch.nn.Linear(2, 1)
model, opt = alchemist.distribute(model, torch.optim.SGD(model.parameters(), lr=0.1))
t = torch.tensor([float(hvd.rank() + 1)])
total = hvd.allreduce(t, op=hvd.Sum).item()
print(f"horovod rank={hvd.rank()} size={hvd.size()} sum={total:g}", flush=True)
assert total == hvd.size() * (hvd.size() + 1) / 2
"""


def test_horovod_pods_train_through_horovods_own_rendezvous(alchemist_home: Path) -> None:
    """``--backend kubernetes --algorithm horovod``: each generated pod, run as a process
    (stand-in: no cluster, see the module docstring), starts its rank through Horovod's
    gloo rendezvous served by pod 0, and the two pods all-reduce with Horovod."""
    pytest.importorskip("horovod.torch")
    spec = JobSpec(name="hvd", workers=2, backend="kubernetes", algorithm="horovod")
    req = write_job(alchemist_home, "jhvd0000001", spec, HOROVOD_CELL)

    def check(index: int, argv: list[str]) -> None:
        assert argv[1:3] == ["-m", "alchemist.backends.horovod_pod"]
        assert f"--index={index}" in argv and "--addr=127.0.0.1" in argv

    run_pods(req, alchemist_home, check, timeout=240)
    for rank in range(2):
        log = req.job_dir.rank_log(rank).read_text()
        assert f"horovod rank={rank} size=2 sum=3" in log, log


WORKSPACE_CELL = """
import alchemist
from helpers.numbers import total
from model import Scaler
with open("data/numbers.txt") as f:
    numbers = [int(line) for line in f]
print(f"rank={alchemist.context().rank} scaled={Scaler(10)(total(numbers))}", flush=True)
"""


def test_pods_find_the_notebooks_modules_and_data_files(
    alchemist_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell importing a module and a package beside the notebook and reading a data
    file by relative path runs in pods that cannot see the notebook's folder: the
    folder is deleted before the pods start, as a pod's filesystem never had it."""
    import shutil
    import sys

    import alchemist.client as client

    nb = tmp_path / "project"
    (nb / "helpers").mkdir(parents=True)
    (nb / "data").mkdir()
    (nb / "model.py").write_text(
        "class Scaler:\n    def __init__(self, k):\n        self.k = k\n"
        "    def __call__(self, v):\n        return v * self.k\n"
    )
    (nb / "helpers" / "__init__.py").write_text("")
    (nb / "helpers" / "numbers.py").write_text("def total(xs):\n    return sum(xs)\n")
    (nb / "data" / "numbers.txt").write_text("1\n2\n3\n")
    (nb / "data" / "cache.bin").write_bytes(b"\0" * 4096)
    (nb / ".alchemistignore").write_text("*.bin\n")
    monkeypatch.chdir(nb)
    monkeypatch.syspath_prepend(str(nb))
    monkeypatch.setitem(
        backends_registry._instances,
        "kubernetes",
        KubernetesBackend(config=Config(), namespace="default", image="unused", pvc="home"),
    )
    try:
        dry = client.submit(WORKSPACE_CELL, dry_run=True, workers=2, backend="kubernetes")
    finally:
        for name in ("model", "helpers", "helpers.numbers"):
            sys.modules.pop(name, None)
    assert "data/numbers.txt" in dry.text and "cache.bin" not in dry.text, dry.text
    assert "model.py" in dry.text and "helpers/numbers.py" in dry.text

    spec = JobSpec(name="ws", workers=2, backend="kubernetes")
    jd = JobDir(alchemist_home / "jobs" / "jrdzvws0001").create()
    atomic_write_json(jd.spec, spec.to_dict())
    write_bundle(dry.bundle, jd.bundle)
    monkeypatch.chdir(tmp_path)
    shutil.rmtree(nb)  # what a pod sees of the notebook's folder: nothing
    run_pods(JobRequest("jrdzvws0001", "alice", spec, jd), alchemist_home, lambda i, a: None)
    for rank in range(2):
        assert f"rank={rank} scaled=60" in jd.rank_log(rank).read_text()
