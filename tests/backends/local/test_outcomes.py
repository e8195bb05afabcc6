"""Ranks record that their code finished before interpreter teardown, and a failure is
put on the rank that died, with how, not on the survivor that lost its peer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from alchemist import client
from alchemist.job import outcomes
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobState

KILLED = """
import os, signal, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)
dist.all_reduce(torch.ones(1))
"""


def test_torchrun_s_report_names_the_killed_rank(tmp_path: Path) -> None:
    """Real torchrun, a rank SIGKILLed: its report is parsed as it is really printed."""
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode != 0
    codes = outcomes.torchrun_exit_codes(done.stderr)
    assert codes[1] == -9
    jd = JobDir(tmp_path / "j").create()
    outcomes.record(jd, 0, 0, 1)  # the survivor's code failed: it lost its peer
    assert outcomes.died_first(jd, 2, done.stderr) == (
        "rank 1 was killed by signal 9 (SIGKILL) (out of memory?)"
    )


# torchrun's closing report when rank 1 was SIGKILLed and torchrun then stopped rank 0,
# still blocked in its collective, with SIGTERM (its layout, as torch 2.13 prints it).
STOPPED_SURVIVOR = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
job.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-05_01:34:02
  host      : machine
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-05_01:34:02
  host      : machine
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 4241)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 4241
============================================================
"""


def test_the_rank_torchrun_stopped_is_not_blamed_for_the_one_that_died(tmp_path: Path) -> None:
    """Neither rank recorded its code's end: rank 1 was killed, and torchrun stopped rank 0
    (SIGTERM) while it waited for rank 1; torchrun's report may list rank 0 as its "first
    observed failure" (both seen in one poll). The report here is hand-written in
    torchrun's layout (the real one is parsed in the test above); seen in a full CI run."""
    jd = JobDir(tmp_path / "j").create()
    assert outcomes.torchrun_exit_codes(STOPPED_SURVIVOR) == {1: -9, 0: -15}
    assert outcomes.died_first(jd, 2, STOPPED_SURVIVOR) == (
        "rank 1 was killed by signal 9 (SIGKILL) (out of memory?)"
    )


def test_work_finished_needs_every_rank_of_the_latest_attempt(tmp_path: Path) -> None:
    jd = JobDir(tmp_path / "j").create()
    assert not outcomes.work_finished(jd, 2)
    outcomes.record(jd, 0, 0, 0)
    outcomes.record(jd, 1, 0, 0)
    assert outcomes.work_finished(jd, 2)
    (jd.restarts).write_text("1")  # a restart began: attempt 0's records are old
    assert not outcomes.work_finished(jd, 2)
    outcomes.record(jd, 0, 1, 0)
    outcomes.record(jd, 1, 1, 3)
    assert not outcomes.work_finished(jd, 2)
    assert outcomes.died_first(jd, 2) is None  # both ended on their own: see rank 1's log


def test_every_rank_of_a_real_job_records_its_code_s_end() -> None:
    job = client.submit("x = 1", namespace={}, workers=2)
    assert job.wait(timeout=180).state == JobState.SUCCEEDED, job.logs()
    recs = outcomes.read(job.job_dir)
    assert sorted(recs) == [0, 1] and all(r.status == 0 for r in recs.values())
    assert outcomes.work_finished(job.job_dir, 2)


HOLD = """
import os, time
deadline = time.time() + 120
while not os.path.exists({release!r}) and time.time() < deadline:
    time.sleep(0.05)
done = True
"""


def _wait_running(job: client.Job) -> None:
    deadline = time.monotonic() + 120
    while job.status().state != JobState.RUNNING:
        assert time.monotonic() < deadline, job.status()
        time.sleep(0.05)
    while not all(job.job_dir.rank_log(r).exists() for r in (0, 1)):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _kill_supervisor(job: client.Job) -> None:
    pid = int((job.job_dir.launcher_pid).read_text())
    os.kill(pid, signal.SIGKILL)
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.02)


def test_a_killed_supervisor_does_not_fail_work_that_finishes(tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = client.submit(HOLD.format(release=str(release)), namespace={}, workers=2)
    _wait_running(job)
    _kill_supervisor(job)
    assert job.status().state == JobState.RUNNING, "its ranks run on: so does the job"
    release.touch()
    status = job.wait(timeout=120)
    assert status.state == JobState.SUCCEEDED, status.reason


def test_cancel_stops_the_ranks_of_a_job_whose_supervisor_was_killed(tmp_path: Path) -> None:
    job = client.submit(HOLD.format(release=str(tmp_path / "never")), namespace={}, workers=2)
    _wait_running(job)
    _kill_supervisor(job)
    t0 = time.monotonic()
    job.cancel()
    assert job.status().state == JobState.CANCELLED
    assert time.monotonic() - t0 < 5
    from tests.conftest import processes_under

    assert processes_under(job.job_dir.root) == []


def test_a_rank_aborting_in_teardown_after_its_work_does_not_fail_the_job() -> None:
    cell = (
        "import atexit, os, torch.distributed as dist\n"
        "x = 42\n"
        "if dist.get_rank() == 0:\n"
        "    atexit.register(os.abort)  # as torch 2.13's gloo teardown abort does\n"
    )
    job = client.submit(cell, namespace={}, workers=2, outputs=["x"])
    status = job.wait(timeout=120)
    assert status.state == JobState.SUCCEEDED, (status.reason, job.logs())
    assert job.outputs() == {"x": 42}
    assert "after every rank's code had finished" in job.job_dir.launcher_log.read_text()


@pytest.mark.parametrize("no_warm", [False, True], ids=["warm", "cold"])
def test_a_rank_stuck_in_teardown_after_its_work_is_stopped_and_the_job_succeeds(
    no_warm: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank whose code finished but whose exit never ends (an atexit handler, or the
    process group's destruction, that blocks) would hold the job as running for ever: it
    is stopped once the teardown bound has passed, and the finished work succeeds."""
    monkeypatch.setenv("ALCHEMIST_TEARDOWN_S", "2")
    cell = (
        "import atexit, time, torch.distributed as dist\n"
        "x = 42\n"
        "if dist.get_rank() == 1:\n"
        "    atexit.register(time.sleep, 3600)  # blocks in teardown\n"
    )
    job = client.submit(cell, namespace={}, workers=2, outputs=["x"], no_warm=no_warm)
    status = job.wait(timeout=120)
    assert status.state == JobState.SUCCEEDED, (status.reason, job.logs())
    assert job.outputs() == {"x": 42}
    log = job.job_dir.launcher_log.read_text()
    assert "still in teardown" in log and "stopping them" in log, log
    # and no rank is left running: the autouse fixture of tests/conftest.py checks it


def test_a_killed_rank_is_named_with_how_it_died() -> None:
    cell = (
        "import os, signal, time, torch, torch.distributed as dist\n"
        "if dist.get_rank() == 1:\n"
        "    time.sleep(0.5)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "dist.all_reduce(torch.ones(1))\n"
    )
    job = client.submit(cell, namespace={}, workers=2)
    status = job.wait(timeout=120)
    assert status.state == JobState.FAILED
    assert status.reason == "rank 1 was killed by signal 9 (SIGKILL) (out of memory?)"


def test_the_state_shows_restarting_while_the_group_restarts() -> None:
    """Cold (torchrun restarts the group in seconds, long enough to be seen at a 20 ms
    poll): the state goes running, restarting, running, succeeded. A warm restart forks
    the group again in ~20 ms, too short to observe by polling; its count is checked in
    tests/backends/local/pool/test_warm_pool.py."""
    cell = (
        "import alchemist, torch.distributed as dist\n"
        "if alchemist.restart_count() == 0 and dist.get_rank() == 1:\n"
        "    raise RuntimeError('attempt 1 fails')\n"
    )
    job = client.submit(cell, namespace={}, workers=2, max_restarts=1, no_warm=True)
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        st = job.status()
        if not seen or seen[-1] != st.state:
            seen.append(st.state)
        if st.state.is_terminal:
            break
        time.sleep(0.02)
    assert JobState.RESTARTING in seen, seen
    assert seen[-1] == JobState.SUCCEEDED and seen.index(JobState.RESTARTING) < len(seen) - 1
    assert job.status().restarts == 1


def test_cancel_ends_a_job_with_a_stopped_rank_within_five_seconds(tmp_path: Path) -> None:
    marker = tmp_path / "stopped"
    cell = (
        "import os, signal, time, torch.distributed as dist\n"
        "if dist.get_rank() == 1:\n"
        f"    open({str(marker)!r}, 'w').close()\n"
        "    os.kill(os.getpid(), signal.SIGSTOP)\n"
        "time.sleep(120)\n"
    )
    job = client.submit(cell, namespace={}, workers=2)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert time.monotonic() < deadline, job.logs()
        time.sleep(0.05)
    t0 = time.monotonic()
    job.cancel()
    assert job.status().state == JobState.CANCELLED
    assert time.monotonic() - t0 < 5
    from tests.conftest import processes_under

    assert processes_under(job.job_dir.root) == []


def test_valid_outputs_are_kept_when_one_is_missing_or_unpicklable() -> None:
    cell = "import threading\nx = 1\nlock = threading.Lock()\n"
    job = client.submit(cell, namespace={}, workers=2, outputs=["x", "y", "lock"])
    status = job.wait(timeout=120)
    assert status.state == JobState.SUCCEEDED, job.logs()
    assert job.outputs() == {"x": 1}
    log = job.logs(0)
    assert "-o names y, which the cell did not define on rank 0" in log
    assert "output 'lock' cannot be pickled" in log


def test_a_rank_stopped_after_another_rank_s_code_failed_is_not_blamed(tmp_path: Path) -> None:
    """Rank 1's code raised (its record says so) and the launcher stopped rank 0, which
    waited in a collective, with SIGTERM before rank 0 noticed: the cause is rank 1's
    failure (its log says what), never "rank 0 was killed by signal 15". A rank killed by
    anything else still is named."""
    jd = JobDir(tmp_path / "j").create()
    outcomes.record(jd, 1, 0, 1)
    assert outcomes.died_first(jd, 2, codes={1: 1, 0: -15}) is None
    assert outcomes.died_first(jd, 2, codes={1: 1, 0: -9}) == (
        "rank 0 was killed by signal 9 (SIGKILL) (out of memory?)"
    )


def test_wait_says_what_each_rank_did() -> None:
    """``job.wait()`` returned ``ranks={}``: now each rank's state, exit status and
    attempt, from the ranks' records, every time it is asked."""
    cell = "import torch.distributed as dist\nif dist.get_rank() == 1:\n    raise SystemExit(3)\n"
    job = client.submit(cell, namespace={}, workers=2)
    for _ in range(2):  # the first answer comes from the backend, the next from the index
        status = job.wait(timeout=120)
        assert status.state == JobState.FAILED
        assert {r: {k: v[k] for k in ("state", "exit_status", "attempt")}
                for r, v in status.ranks.items()} == {
            "0": {"state": "finished", "exit_status": 0, "attempt": 1},
            "1": {"state": "failed", "exit_status": 3, "attempt": 1},
        }  # fmt: skip


def test_a_jobs_end_does_not_wait_for_torchruns_own_teardown(tmp_path: Path) -> None:
    """Every rank's code finished and every rank process ended: the job has ended,
    though torchrun takes another half second or more to exit (a cold job read
    ``running`` for 1-2 s after its last rank ended). Here a process that does not end
    stands for torchrun in its teardown; real rank processes have run and ended."""
    from alchemist.backends.local.cold import TorchrunRanks

    job_dir = JobDir(tmp_path / "jcold").create()
    for rank in range(2):
        done = subprocess.Popen([sys.executable, "-c", "pass"])
        done.wait()
        job_dir.rank_pid(rank).parent.mkdir(parents=True, exist_ok=True)
        job_dir.rank_pid(rank).write_text(str(done.pid))
    torchrun = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ranks = TorchrunRanks(job_dir, torchrun, {"world_size": 2, "max_restarts": 0})
        outcomes.record(job_dir, 0, 0, 0)
        assert not ranks.poll(0.05), "rank 1's code has not finished"
        outcomes.record(job_dir, 1, 0, 0)
        assert ranks.poll(0.05)
        assert ranks.result() == {"state": "succeeded", "reason": None, "exit_code": 0}
        assert torchrun.poll() is None  # it was not waited for, nor stopped
    finally:
        torchrun.kill()
        torchrun.wait()


RESTARTED = """
import os, signal, torch.distributed as dist
first = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
if first and dist.get_rank() == 1:
    {fault}
dist.barrier()
"""


@pytest.mark.parametrize("start", ["cold", "warm"])
@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        ("os.kill(os.getpid(), signal.SIGKILL)", "rank 1 was killed by signal 9 (SIGKILL)"),
        ("raise RuntimeError('bad batch 17')", "rank 1's code failed: RuntimeError: bad batch 17"),
    ],
)
def test_a_restarts_cause_is_said_and_kept(start: str, fault: str, cause: str) -> None:
    """Rank 1 dies (or its code fails) in the first attempt; the job restarts and
    succeeds. The cause is said where the user follows the job (rank 0's log, which the
    follower and the monitor show) and kept in the job's record (its reason, and
    ``restart_causes`` in its state), cold and warm alike. Before, the user saw the
    surviving rank's gloo error and ``restarts: 1, reason: null``."""
    job = client.submit(
        RESTARTED.format(fault=fault), namespace={}, workers=2, max_restarts=1,
        no_warm=start == "cold",
    )  # fmt: skip
    status = job.wait(timeout=180)
    assert status.state == JobState.SUCCEEDED, status
    assert status.restarts == 1
    assert status.reason is not None and status.reason.startswith(
        f"restarted after attempt 1: {cause}"
    ), status.reason
    said = f"[alchemist] attempt 1 ended: {cause}"
    assert said in job.job_dir.rank_log(0).read_text()
    (kept,) = (job.job_dir.read_state() or {})["restart_causes"]
    assert kept["attempt"] == 1 and kept["cause"].startswith(cause)
    if start == "warm":  # not vacuous: the ranks were the pool's
        assert "warm start" in job.job_dir.launcher_log.read_text()
