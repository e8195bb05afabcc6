"""Ranks record that their code finished before interpreter teardown, and a failure is
put on the rank that died, with how, not on the survivor that lost its peer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from alchemist import client, outcomes
from alchemist.jobdir import JobDir
from alchemist.spec import JobState

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


def test_work_finished_needs_every_rank_of_the_latest_attempt(tmp_path: Path) -> None:
    jd = JobDir(tmp_path / "j").create()
    assert not outcomes.work_finished(jd, 2)
    outcomes.record(jd, 0, 0, 0)
    outcomes.record(jd, 1, 0, 0)
    assert outcomes.work_finished(jd, 2)
    (jd.root / "restarts").write_text("1")  # a restart began: attempt 0's records are old
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
