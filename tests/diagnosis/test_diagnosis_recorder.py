"""The flight recorder, the request-file path and ``--debug``, on real jobs: real
torchrun, gloo, 2 ranks on this machine.

Real parts: jobs submitted through ``alchemist.client.submit`` to the local backend
(supervisor, torchrun, a process per rank), the ranks' real hooks and responder threads,
torch 2.13's real flight recorder and ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` check. Stand-in:
for the Kubernetes path, the local job's ranks and job directory stand in for pods and
their shared volume: :func:`alchemist.diagnosis.report.diagnose` is called with
``backend="kubernetes"``, so it sends no signal and asks by request file only, as it
would for pods. Waits poll for a condition with a deadline; every job is cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from alchemist import client
from alchemist.diagnosis import report
from alchemist.job.spec import JobState
from tests.support.diagnose import diagnose_until, line_of, logged, wait_for

NUMBERED = """
import time, torch, torch.distributed as dist
def load_batch():
    time.sleep(600)
rank = dist.get_rank()
for _ in range(5):
    dist.all_reduce(torch.ones(3))
print(f"rank {rank} ready", flush=True)
if rank == 1:
    load_batch()
dist.all_reduce(torch.ones(3))  # the wait
"""


def both_ready(job: client.Job) -> None:
    wait_for(
        lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"), 120, "ready"
    )


def test_the_missing_rank_headline_numbers_the_collective(
    submit: Callable[..., client.Job],
) -> None:
    """Both ranks ran all_reduce #1-#5; rank 0 waits in #6, rank 1 never reaches it:
    the headline says so by sequence id, from each rank's flight recorder."""
    job = submit(NUMBERED)
    both_ready(job)
    found = diagnose_until(job, "missing_rank")
    sleep_line, reduce_line = line_of(NUMBERED, "time.sleep(600)"), line_of(NUMBERED, "# the wait")
    assert found["headline"] == (
        "rank 1 has not reached all_reduce #6 (its last collective: all_reduce #5); it is in"
        f" `load_batch` (cell line {sleep_line}); rank 0 waits in all_reduce #6 from the cell"
        f" (line {reduce_line})"
    ), found["headline"]
    rank0, rank1 = found["ranks"]
    assert (rank0["collective_seq"], rank0["collective_op"]) == (6, "all_reduce")
    assert (rank1["collective_seq"], rank1["collective_op"]) == (5, "all_reduce")
    assert rank0["recorder"]["sizes"] == [[3]]
    assert rank0["stacks_from"] == rank1["stacks_from"] == "socket"
    assert found["elapsed_s"] < 3.0, found["elapsed_s"]
    assert job.status().state == JobState.RUNNING


STUCK = """
import threading, time, torch, torch.distributed as dist
def stuck():
    time.sleep(600)
def helper():
    time.sleep(600)
threading.Thread(target=helper, name="helper", daemon=True).start()
rank = dist.get_rank()
dist.all_reduce(torch.ones(2))
print(f"rank {rank} ready", flush=True)
if rank == 1:
    HOLD
stuck()
"""


def k8s_diagnose(job: client.Job, timeout: float = 3.0) -> dict[str, Any]:
    """The report a Kubernetes job gets: no signals, the request file only."""
    st = job.status()
    return report.diagnose(
        job.job_dir,
        job_id=job.id,
        state=st.state.value,
        reason=st.reason,
        world_size=2,
        backend="kubernetes",
        timeout=timeout,
    )


def test_ranks_answer_a_request_file_with_every_thread_and_their_recorder(
    submit: Callable[..., client.Job],
) -> None:
    """As a Kubernetes pod's ranks would: each rank's responder thread sees the request
    in the job directory and answers next to it within seconds, with every thread's stack
    (the main thread in ``stuck``, the cell's ``helper`` thread) and its recorder."""
    job = submit(STUCK.replace("HOLD", "pass"))
    both_ready(job)
    t0 = time.monotonic()
    found = k8s_diagnose(job)
    assert time.monotonic() - t0 < 3.0
    assert found["answered"] == 2 and not found["partial"], found["notes"]
    assert found["notes"][0] == (
        "2/2 ranks answered the request file on the kubernetes backend (within 3 s)"
    )
    for entry in found["ranks"]:
        assert entry["stacks_from"] == "request" and entry["answered"]
        assert entry["activity"]["user_frame"]["function"] == "stuck"
        functions = {t["frames"][0]["function"] for t in entry["threads"] if t["frames"]}
        assert "helper" in functions, functions  # every thread, not the main one alone
        assert (entry["collective_seq"], entry["collective_op"]) == (1, "all_reduce")
    assert found["groups"][0]["ranks"] == [0, 1]
    assert not list((job.job_dir.root / "debug" / "requests").glob("*.req*")), "left behind"
    assert job.status().state == JobState.RUNNING


def test_a_rank_that_cannot_answer_leaves_a_partial_report(
    submit: Callable[..., client.Job],
) -> None:
    """Rank 1 holds the GIL in a catastrophic ``re`` match, so its responder cannot run:
    the report keeps rank 0's answer and says 1/2 ranks answered."""
    job = submit(STUCK.replace("HOLD", "import re; re.match(r'(a+)+b', 'a' * 64)"))
    both_ready(job)
    t0 = time.monotonic()
    found = k8s_diagnose(job, timeout=2.0)
    assert time.monotonic() - t0 < 4.0
    rank0, rank1 = found["ranks"]
    assert rank0["answered"] and rank0["activity"]["user_frame"]["function"] == "stuck"
    assert not rank1["answered"] and rank1["stacks_from"] is None
    assert found["partial"] and found["answered"] == 1
    assert found["notes"][0].startswith(
        "1/2 ranks answered the request file on the kubernetes backend (within 2 s); rank 1"
    ), found["notes"]
