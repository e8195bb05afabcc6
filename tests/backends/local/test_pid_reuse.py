"""A pid file names the process it was written for, not whichever has that pid now.

After a machine restarts, or a long while, a job's launcher pid may belong to another
process (another user's, the Jupyter server...). Trusting it kept such a job ``running``
for ever, and a cancel stopped that process and its children. Real parts: a job on the
local backend (supervisor, torchrun), and an unrelated process, run as ``nobody`` when
the tests run as root, standing for the process that got the pid.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from alchemist import client
from alchemist.backends.local import procs
from alchemist.job.spec import JobState
from tests.support.helpers import NOBODY


@pytest.fixture
def stranger() -> subprocess.Popen[bytes]:
    """A process that is not the job's: started after the job's pid files were written."""
    as_other = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
    proc = subprocess.Popen(["sleep", "600"], **as_other)  # type: ignore[call-overload]
    yield proc
    proc.kill()
    proc.wait()


def test_a_pid_reused_by_another_process_is_neither_the_jobs_launcher_nor_stopped_by_cancel(
    stranger: subprocess.Popen[bytes],
) -> None:
    job = client.submit("x = 1", namespace={}, workers=1, name="pid-reuse")
    assert job.wait(timeout=120).state == JobState.SUCCEEDED
    # The job as a restarted machine leaves it: recorded running, its launcher's and
    # torchrun's pids now another process's (their files written an hour before it).
    jd = job.job_dir
    jd.write_state(state="running", finished=None)
    hour_ago = time.time() - 3600
    for pid_file in (jd.launcher_pid, jd.torchrun_pid):
        pid_file.write_text(str(stranger.pid))
        os.utime(pid_file, (hour_ago, hour_ago))
    assert procs.live_pid(jd.launcher_pid) is None

    status = job.status()
    assert status.state == JobState.SUCCEEDED, status  # its ranks' records decide
    job.cancel()
    assert stranger.poll() is None, "cancel stopped a process that was not the job's"


def test_the_launcher_of_a_running_job_is_live_and_its_file_trusted(
    stranger: subprocess.Popen[bytes],
) -> None:
    """The control: a pid file written after its process started names it."""
    job = client.submit("import time\ntime.sleep(600)", namespace={}, workers=1)
    try:
        deadline = time.monotonic() + 60
        while procs.live_pid(job.job_dir.launcher_pid) is None:
            assert time.monotonic() < deadline, "the supervisor never wrote its pid"
            time.sleep(0.05)
        assert procs.live_pid(job.job_dir.launcher_pid) == procs.read_pid(job.job_dir.launcher_pid)
        assert job.status().state in (JobState.PENDING, JobState.RUNNING)
    finally:
        job.cancel()
    assert job.status().state == JobState.CANCELLED
    assert stranger.poll() is None
