"""Helpers of the diagnosis tests of real jobs (the ``submit`` fixture that starts them is
in ``tests/conftest.py``): the missing-rank cell, the cell whose rank 1 stops itself,
polling with a deadline, reading a rank's log, and diagnosing until a report says a
given class."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import psutil

from alchemist import client
from alchemist.backends.local.procs import read_pid
from alchemist.diagnosis import collect

MISSING = """
import time, torch, torch.distributed as dist, alchemist
def load_batch():
    time.sleep(600)
rank = dist.get_rank()
for step in range(10 if rank == 0 else 5):
    alchemist.log(step, loss=1.0 / (step + 1))
    time.sleep(0.02)
print(f"rank {rank} ready", flush=True)
if rank == 1:
    load_batch()
dist.all_reduce(torch.ones(1))
"""


def line_of(cell: str, text: str) -> int:
    """The 1-based line of ``cell`` that holds ``text`` (as the ranks number it)."""
    return next(i for i, line in enumerate(cell.split("\n"), 1) if text in line)


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def logged(job: client.Job, rank: int, text: str) -> bool:
    path = job.job_dir.rank_log(rank)
    return path.exists() and text in path.read_text(errors="replace")


def diagnose_until(job: client.Job, kind: str, timeout: float = 10.0) -> dict[str, Any]:
    """Diagnose until the report says ``kind`` (ranks may still be on their way)."""
    reports: list[dict[str, Any]] = []

    def attempt() -> dict[str, Any] | None:
        reports.append(job.diagnose())
        return reports[-1] if reports[-1]["classification"] == kind else None

    try:
        return wait_for(attempt, timeout, kind)  # type: ignore[no-any-return]
    except AssertionError:
        raise AssertionError(f"no {kind}; last report: {json.dumps(reports[-1])[:3000]}")


#: Rank 1 answers nothing for minutes without being stopped: it ignores the stack
#: signal and its main thread holds the GIL (a regular expression that backtracks for
#: ever), so neither its socket responder nor its request-file reader can run.
SILENT = """
import re, signal, torch, torch.distributed as dist
rank = dist.get_rank()
print(f"rank {rank} ready", flush=True)
if rank == 1:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    re.match(r"(a+)+$", "a" * 64 + "b")
dist.all_reduce(torch.ones(1))
"""

STOPPED = """
import os, signal, torch, torch.distributed as dist
rank = dist.get_rank()
print(f"rank {rank} ready", flush=True)
if rank == 1:
    os.kill(os.getpid(), signal.SIGSTOP)
dist.all_reduce(torch.ones(1))
"""


def stopped_job(submit: Callable[..., client.Job]) -> client.Job:
    """The job of :data:`STOPPED` (``submit``: the fixture), once rank 1 is stopped: a
    stopped process runs no signal handler and no thread, so it answers never."""
    job = submit(STOPPED)
    wait_for(
        lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"), 120, "ready"
    )
    wait_for(
        lambda: collect.is_stopped(read_pid(job.job_dir.pids / "rank-1.pid")), 30, "rank 1 stopped"
    )
    return job


def silent_job(submit: Callable[..., client.Job]) -> client.Job:
    """The job of :data:`SILENT` once rank 1 is in its endless match: it runs, and
    answers no request (its main thread holds the GIL, the stack signal is ignored)."""
    job = submit(SILENT)
    wait_for(
        lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"), 120, "ready"
    )

    def busy() -> bool:  # past the print, in the match: all its CPU, in user code
        proc = psutil.Process(read_pid(job.job_dir.pids / "rank-1.pid") or 0)
        return proc.cpu_percent(interval=0.3) > 50

    wait_for(busy, 30, "rank 1 in its match")
    return job
