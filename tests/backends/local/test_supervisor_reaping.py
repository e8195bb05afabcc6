"""A long-lived process that submits jobs (a Jupyter server, a kernel) keeps no zombie
per finished job.

Each local job's supervisor is a child of the process that submitted it, and it exits
just after writing the job's final state, so a watcher that stops asking at that state
never asks again about that job. The scale benchmark's soak found the Jupyter server
holding 512 unreaped supervisors after 1,000 jobs; the backend now reaps every ended
supervisor of its own on each call. Real supervisors and torchrun jobs, in this process.
"""

from __future__ import annotations

import time

import psutil

from alchemist import client
from alchemist.backends.local.procs import read_pid
from alchemist.job.spec import JobState


def _ended(pid: int) -> bool:
    """The process has exited: it is gone, or a zombie waiting for its parent."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_jobs_watched_to_their_end_leave_no_zombie_supervisors() -> None:
    supervisors = []
    for i in range(3):
        job = client.submit("x = 1", name=f"reap-{i}", namespace={}, workers=1)
        # What the panel does: follow the job until its state is final, then stop.
        assert job.wait(timeout=120).state == JobState.SUCCEEDED
        pid = read_pid(job.job_dir.launcher_pid)
        assert pid is not None
        supervisors.append(pid)
    deadline = time.monotonic() + 60
    while not all(_ended(p) for p in supervisors):
        assert time.monotonic() < deadline, "a supervisor did not exit after its job ended"
        time.sleep(0.05)
    # The next call to the backend, here the next job, reaps the ones that ended.
    nxt = client.submit("x = 1", name="reap-next", namespace={}, workers=1)
    zombies = [
        c.pid
        for c in psutil.Process().children()
        if c.pid in supervisors and c.status() == psutil.STATUS_ZOMBIE
    ]
    assert zombies == [], f"ended supervisors left unreaped: {zombies}"
    assert nxt.wait(timeout=120).state == JobState.SUCCEEDED
