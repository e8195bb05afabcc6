"""Admission on the local backend, end to end with real supervisors and torchrun jobs:
jobs wait as ``queued`` for CPU slots and GPUs, start in order, get disjoint devices,
can be cancelled while they wait, and one that can never fit is refused at submit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alchemist import client
from alchemist.errors import CapacityError
from alchemist.job.spec import JobState

HOLD = """
import os, time
deadline = time.time() + 120
while not os.path.exists({release!r}) and time.time() < deadline:
    time.sleep(0.05)
devices = os.environ.get("CUDA_VISIBLE_DEVICES")
"""


def _wait_state(job: client.Job, state: JobState, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job.status().state == state:
            return
        time.sleep(0.05)
    raise AssertionError(f"job {job.id} never became {state.value}: {job.status()}")


def test_concurrent_jobs_get_disjoint_gpus_and_a_third_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fake inventory of 4 GPUs (ALCHEMIST_LOCAL_GPUS, the documented test hook) on a
    machine without any: the ranks run on CPU, but each job's CUDA_VISIBLE_DEVICES is
    what a real GPU job would get."""
    monkeypatch.setenv("ALCHEMIST_LOCAL_GPUS", "4")
    release = tmp_path / "release"
    cell = HOLD.format(release=str(release))
    kw = dict(namespace={}, workers=1, gpus_per_worker=2, outputs=["devices"])
    a = client.submit(cell, name="a", **kw)
    _wait_state(a, JobState.RUNNING)
    b = client.submit(cell, name="b", **kw)
    _wait_state(b, JobState.RUNNING)
    c = client.submit(cell, name="c", **kw)
    _wait_state(c, JobState.QUEUED)
    assert c.status().reason == "waiting for 2 GPUs (0 free); 0 jobs ahead"
    release.touch()
    for job in (a, b, c):
        assert job.wait(timeout=180).state == JobState.SUCCEEDED, job.logs()
    got = {job.name: job.outputs()["devices"] for job in (a, b, c)}
    assert {got["a"], got["b"]} == {"0,1", "2,3"}
    assert got["c"] in ("0,1", "2,3")


def test_a_queued_job_can_be_cancelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALCHEMIST_LOCAL_CPU_SLOTS", "2")
    release = tmp_path / "release"
    first = client.submit(HOLD.format(release=str(release)), namespace={}, workers=2)
    _wait_state(first, JobState.RUNNING)
    second = client.submit("print('never')", namespace={}, workers=2)
    _wait_state(second, JobState.QUEUED)
    assert "waiting for 2 CPU slots (0 of 2 free)" in (second.status().reason or "")
    t0 = time.monotonic()
    second.cancel()
    assert second.status().state == JobState.CANCELLED
    assert time.monotonic() - t0 < 5
    assert not second.job_dir.rank_log(0).exists(), "a cancelled queued job never ran"
    release.touch()
    assert first.wait(timeout=120).state == JobState.SUCCEEDED


def test_a_job_that_can_never_fit_is_refused_at_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALCHEMIST_LOCAL_CPU_SLOTS", "2")
    with pytest.raises(CapacityError, match=r"runs 3 ranks but this machine has 2 CPU slots"):
        client.submit("pass", namespace={}, workers=3)
    with pytest.raises(CapacityError, match=r"asks for 2 GPUs .* this machine has 0"):
        client.submit("pass", namespace={}, workers=1, gpus_per_worker=2)
    assert client.jobs() == []


def test_twelve_cli_submits_at_once_all_run_and_all_are_listed(
    tmp_path: Path, alchemist_home: Path
) -> None:
    """Twelve `alchemist submit --detach` at once into a fresh home, on a machine with
    two CPU slots: every job is indexed and succeeds, taking its turn in the queue."""
    script = tmp_path / "train.py"
    script.write_text("import alchemist\nalchemist.log(0, loss=1.0)\n")
    env = {**os.environ, "ALCHEMIST_LOCAL_CPU_SLOTS": "2", "ALCHEMIST_LOCAL_GPUS": "0"}
    cli = [sys.executable, "-m", "alchemist.cli", "submit", str(script), "-n", "2", "--detach"]
    procs = [
        subprocess.Popen(cli, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(12)
    ]
    ids = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        ids.append(out.strip())
    listed = {j.id for j in client.jobs()}
    assert listed == set(ids) and len(ids) == 12
    queued_seen = 0
    for job_id in ids:
        job = client.attach(job_id)
        assert job.wait(timeout=600).state == JobState.SUCCEEDED, job.logs()
        log = job.job_dir.launcher_log.read_text()
        queued_seen += "[alchemist] queued: waiting for" in log
    assert queued_seen >= 1, "two slots for twelve 2-rank jobs: some must have waited"


def test_the_dry_run_shows_what_the_queue_will_ask_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALCHEMIST_LOCAL_CPU_SLOTS", "4")
    dry = client.submit("pass", namespace={}, workers=2, dry_run=True)
    assert "# admission: 2 of 4 CPU slots, 0 of 0 GPUs" in dry.text
    assert json.loads(json.dumps(dry.info.request))["admission"]["slots"] == 2


@pytest.mark.parametrize(
    ("visible", "count"),
    [(None, 4), ("1,3", 2), ("0,-1,2", 1), ("", 0), ("0,1,2,3,4,5", 4), ("GPU-a1,GPU-b2", 2)],
)
def test_the_gpu_count_is_torchs_without_importing_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, visible: str | None, count: int
) -> None:
    """The queue's GPU count, read from the NVIDIA driver's list (here four GPUs in a
    stand-in of ``/proc/driver/nvidia/gpus``) and narrowed by CUDA_VISIBLE_DEVICES as
    CUDA narrows it; torch is not imported for it (``alchemist submit``: about 1 s)."""
    from alchemist.backends.local import backend

    gpus = tmp_path / "gpus"
    for bus in ("0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:81:00.0"):
        (gpus / bus).mkdir(parents=True)
    monkeypatch.setattr(backend, "NVIDIA_GPUS", gpus)
    monkeypatch.setattr(backend, "_other_gpu_devices", lambda: False)
    monkeypatch.delenv(backend.GPUS_VAR, raising=False)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # put back after the test
    assert backend._gpu_inventory() == count
    assert "torch" not in sys.modules


def test_submitting_from_a_terminal_imports_no_torch(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    probe = (
        "import sys\nfrom alchemist import cli\n"
        f"code = cli.main(['submit', {str(script)!r}, '-n', '1', '--detach'])\n"
        "print(code, 'torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    job_id = done.stdout.split()[0]
    assert done.stdout.split()[-2:] == ["0", "False"], done.stdout + done.stderr
    assert client.attach(job_id).wait(timeout=120).state == JobState.SUCCEEDED
