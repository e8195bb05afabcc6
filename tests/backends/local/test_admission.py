"""The local queue's rules: fair order across users, disjoint GPUs, reasons, and a dead
job's ticket never blocks the queue. (End-to-end queued jobs: test_queue.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from alchemist.backends.local.admission import Capacity, Queue, Ticket, Wait, process_started


@pytest.fixture
def queue(tmp_path: Path) -> Queue:
    return Queue(tmp_path, Capacity(slots=4, gpus=4))


def _ticket(job_id: str, owner: str, created: float, slots: int = 2, gpus: int = 0) -> Ticket:
    pid = os.getpid()  # alive for the whole test
    return Ticket(job_id, owner, created, slots, gpus, "/nowhere", pid, process_started(pid))


def test_gpus_granted_are_disjoint_and_a_job_that_does_not_fit_waits(queue: Queue) -> None:
    for i, job in enumerate(("a", "b", "c")):
        queue.enqueue(_ticket(job, "ana", float(i), slots=1, gpus=2))
    assert queue.try_admit("a") == [0, 1]
    assert queue.try_admit("b") == [2, 3]
    wait = queue.try_admit("c")
    assert wait == Wait(0, "waiting for 2 GPUs (0 free); 0 jobs ahead")
    queue.release("a")
    assert queue.try_admit("c") == [0, 1]


def test_each_users_first_job_comes_before_anyones_second(queue: Queue) -> None:
    queue.enqueue(_ticket("big", "ana", 0.0, slots=4))  # runs, fills the machine
    queue.enqueue(_ticket("ana-2", "ana", 1.0))
    queue.enqueue(_ticket("ana-3", "ana", 2.0))
    queue.enqueue(_ticket("bob-1", "bob", 3.0))
    assert queue.try_admit("big") == []
    w = queue.try_admit("ana-3")
    assert isinstance(w, Wait) and w.ahead == 2
    assert queue.try_admit("bob-1") == Wait(
        0, "waiting for 2 CPU slots (0 of 4 free); 0 jobs ahead"
    )
    assert isinstance(queue.try_admit("ana-2"), Wait)  # bob's first job is ahead of it
    queue.release("big")  # ana runs nothing now: her older job comes first again
    assert queue.try_admit("bob-1") == Wait(1, "waiting for its turn; 1 job ahead")
    assert queue.try_admit("ana-2") == []
    assert queue.try_admit("bob-1") == []
    assert isinstance(queue.try_admit("ana-3"), Wait)  # 4 slots used: ana-2 and bob-1


def test_a_ticket_whose_job_died_is_dropped(queue: Queue) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    t = Ticket("gone", "ana", 0.0, 4, 0, "/nowhere", dead.pid, 1.0)
    queue.enqueue(t)
    queue.enqueue(_ticket("next", "bob", 1.0, slots=4))
    assert queue.try_admit("next") == []
    assert not (queue.root / "gone.json").exists()
