"""Jobs outlive the kernel: a real Jupyter kernel is killed while its cell's job runs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import alchemist
from alchemist.job.spec import JobState

CELL = """%%alchemist_distributed -n 2 --name survivor
import time, alchemist
for step in range(12):
    alchemist.log(step, loss=1.0 / (step + 1))
    print(f"step {step}", flush=True)
    time.sleep(0.5)
"""


def test_killed_kernel_leaves_the_job_running_and_attach_shows_everything(
    alchemist_home: Path,
) -> None:
    from jupyter_client.manager import start_new_kernel

    # The kernel inherits ALCHEMIST_HOME from this process (set by the fixture).
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        kc.execute_interactive("%load_ext alchemist", timeout=60)
        kc.execute(CELL)  # do not wait: the cell follows the job in the foreground
        deadline = time.monotonic() + 120
        job = None
        while job is None or "step 2" not in job.logs(rank=0):
            assert time.monotonic() < deadline, "the job never started logging"
            jobs = alchemist.jobs()
            job = jobs[0] if jobs else None
            time.sleep(0.2)
        assert job.status().state == JobState.RUNNING
    finally:
        km.shutdown_kernel(now=True)  # SIGKILL to the kernel's process group
        kc.stop_channels()

    assert not km.is_alive()
    job = alchemist.attach(job.id)  # a fresh handle, as after a kernel restart
    status = job.wait(timeout=120)
    assert status.state == JobState.SUCCEEDED, status
    for rank in (0, 1):
        lines = job.logs(rank=rank).splitlines()
        assert [ln for ln in lines if ln.startswith("step ")] == [f"step {i}" for i in range(12)]
    events = job.metrics()
    assert sorted((e["rank"], e["step"]) for e in events) == [
        (r, s) for r in (0, 1) for s in range(12)
    ]


@pytest.mark.parametrize("view", ["--no-widget", ""], ids=["text", "monitor"])
def test_interrupting_the_cell_cancels_its_job_and_says_so(alchemist_home: Path, view: str) -> None:
    from jupyter_client.manager import start_new_kernel

    from tests.conftest import processes_under

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        kc.execute_interactive("%load_ext alchemist", timeout=60)
        msg_id = kc.execute(
            f"%%alchemist_distributed -n 2 {view}\nimport time\nprint('up', flush=True)\ntime.sleep(600)\n"
        )
        deadline = time.monotonic() + 120
        while not alchemist.jobs() or alchemist.jobs()[0].logs().count("up") < 2:
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.2)
        km.interrupt_kernel()  # what the notebook's stop button does
        stderr = []
        while True:
            msg = kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stderr":
                stderr.append(msg["content"]["text"])
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
    finally:
        km.shutdown_kernel(now=True)
        kc.stop_channels()
    job = alchemist.jobs()[0]
    assert job.status().state == JobState.CANCELLED
    assert f"interrupted: job {job.id} cancelled" in "".join(stderr)
    assert processes_under(job.job_dir.root) == []
