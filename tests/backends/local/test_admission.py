"""The local queue's rules: fair order across users, disjoint GPUs, reasons, a dead
job's ticket never blocks the queue, and tickets another account forged or holds the
lock over do not stall it. (End-to-end queued jobs: test_queue.py.)

Each ticket names a real process standing for its supervisor (its command line names
the job directory, as a supervisor's does); ``nobody`` plays another account of the
machine when the tests run as root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from alchemist.backends.local import admission
from alchemist.backends.local.admission import Capacity, Queue, Ticket, Wait, process_started
from tests.support.helpers import NOBODY

Supervisor = Callable[[str], int]


@pytest.fixture
def queue(tmp_path: Path) -> Queue:
    return Queue(tmp_path, Capacity(slots=4, gpus=4))


@pytest.fixture
def supervisor() -> Iterator[Supervisor]:
    """``supervisor(job_root, as_nobody=False)``: the pid of a live process whose command
    line names ``job_root``, as a job's supervisor's does."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(job_root: str, as_nobody: bool = False) -> int:
        user = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if as_nobody else {}
        code = "import sys; sys.stdin.read()"
        proc = subprocess.Popen(  # type: ignore[call-overload]
            [sys.executable, "-c", code, job_root], stdin=subprocess.PIPE, **user
        )
        procs.append(proc)
        return int(proc.pid)

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _ticket(job_id: str, owner: str, created: float, slots: int = 2, gpus: int = 0) -> Ticket:
    """A ticket whose supervisor is this test's process for ``job_id`` (``_SUPERVISORS``)."""
    pid = _SUPERVISORS[job_id]
    started = process_started(pid)
    return Ticket(job_id, owner, started + created, slots, gpus, f"/jobs/{job_id}", pid, started)


_SUPERVISORS: dict[str, int] = {}


@pytest.fixture(autouse=True)
def supervisors(supervisor: Supervisor) -> Iterator[None]:
    """A supervisor for every job id these tests use."""
    for job_id in ("a", "b", "c", "big", "ana-2", "ana-3", "bob-1", "next", "mine"):
        _SUPERVISORS[job_id] = supervisor(f"/jobs/{job_id}")
    yield
    _SUPERVISORS.clear()


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


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Queue]:
    """A queue in a folder every account may write, as the machine's is (1777)."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="alchemist-queue-test-"))
    root.chmod(0o1777)
    yield Queue(root, Capacity(slots=4, gpus=0))
    shutil.rmtree(root, ignore_errors=True)


def _as_nobody(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


WRITE_TICKET = """
import json, sys
root, name, ticket = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with open(f"{root}/{name}.json", "w") as f:
    json.dump(ticket, f)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another account needs root")
def test_tickets_another_account_forged_do_not_hold_or_jump_the_queue(
    shared: Queue, supervisor: Supervisor
) -> None:
    """``nobody`` writes tickets that would fill the machine: bigger than the machine,
    naming this account's supervisor or a process of its own that is no supervisor of
    that job, in this account's name, from the epoch. None of them counts; this
    account's job is admitted. A real job of ``nobody``'s counts, as its own."""
    mine_pid = supervisor("/jobs/mine")
    mine = Ticket("mine", "root", process_started(mine_pid), 2, 0, "/jobs/mine", mine_pid,
                  process_started(mine_pid))  # fmt: skip
    theirs_pid = supervisor("/jobs/theirs", as_nobody=True)
    theirs_started = process_started(theirs_pid)
    forged = {
        "huge": {"slots": 10**6, "pid": mine_pid, "job_root": "/jobs/mine"},
        "borrowed": {"slots": 4, "pid": mine_pid, "job_root": "/jobs/mine"},
        "no-supervisor": {"slots": 4, "pid": theirs_pid, "job_root": "/jobs/elsewhere"},
    }
    for name, fields in forged.items():
        ticket = {
            "job_id": name, "owner": "nobody", "created": 0.0, "gpus": 0,
            "pid_started": process_started(fields["pid"]), **fields,
        }  # fmt: skip
        wrote = subprocess.run(
            [sys.executable, "-c", WRITE_TICKET, str(shared.root), name, json.dumps(ticket)],
            user=NOBODY, group=NOBODY, extra_groups=[], capture_output=True, check=False,
        )  # fmt: skip
        assert wrote.returncode == 0, wrote.stderr
    malformed = {  # nobody's own supervisor, with a start time that is no number
        "job_id": "bad", "owner": "nobody", "created": 0.0, "gpus": 0, "slots": 1,
        "pid": theirs_pid, "pid_started": "y", "job_root": "/jobs/theirs",
    }  # fmt: skip
    subprocess.run(
        [sys.executable, "-c", WRITE_TICKET, str(shared.root), "malformed", json.dumps(malformed)],
        user=NOBODY, group=NOBODY, extra_groups=[], check=True,
    )  # fmt: skip
    shared.enqueue(mine)
    assert shared.try_admit("mine") == []  # and nothing of it broke the reader
    assert {p.stem for p in shared.root.glob("*.json")} == {"mine"}  # the forged: dropped

    # nobody's real job, in root's name and from the epoch: counted as nobody's, from
    # when its supervisor started; it waits behind this account's running job.
    real = {
        "job_id": "theirs", "owner": "root", "created": 0.0, "slots": 4, "gpus": 0,
        "job_root": "/jobs/theirs", "pid": theirs_pid, "pid_started": theirs_started,
    }  # fmt: skip
    subprocess.run(
        [sys.executable, "-c", WRITE_TICKET, str(shared.root), "theirs", json.dumps(real)],
        user=NOBODY, group=NOBODY, extra_groups=[], check=True,
    )  # fmt: skip
    wait = shared.try_admit("theirs")
    assert wait == Wait(0, "waiting for 4 CPU slots (2 of 4 free); 0 jobs ahead")
    with shared._locked() as tickets:
        counted = {t.job_id: t for t in tickets}
    assert counted["theirs"].owner == "nobody"
    assert counted["theirs"].created >= theirs_started - admission.MAX_SUBMIT_LAG_S


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another account needs root")
def test_a_lock_held_by_another_account_is_named_not_waited_on_in_silence(
    shared: Queue, supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admission, "LOCK_WAIT_S", 0.5)
    pid = supervisor("/jobs/mine")
    shared.enqueue(Ticket("mine", "root", process_started(pid), 1, 0, "/jobs/mine", pid,
                          process_started(pid)))  # fmt: skip
    holder = _as_nobody(
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\nsys.stdin.read()\n",
        str(shared.root / admission.LOCK_FILE),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(admission.QueueLocked) as e:
            shared.try_admit("mine")
        assert f"process {holder.pid} (python" in str(e.value)
        assert "of account nobody" in str(e.value)
    finally:
        holder.kill()
        holder.wait()
    assert shared.try_admit("mine") == []  # let go: the queue goes on


def test_a_default_queue_folder_another_account_owns_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "queue"
    folder.mkdir(mode=0o1777)
    folder.chmod(0o1777)
    assert admission.shared_folder_problem(folder) is None
    folder.chmod(0o777)
    assert "without the sticky bit" in (admission.shared_folder_problem(folder) or "")
    folder.chmod(0o1777)
    if os.geteuid() == 0:
        os.chown(folder, NOBODY, NOBODY)
        problem = admission.shared_folder_problem(folder) or ""
        assert "belongs to account nobody, who could remove anyone's tickets" in problem
