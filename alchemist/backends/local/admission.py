"""Admission on one machine: jobs wait in a queue for GPUs and CPU slots.

A machine has a capacity: its GPUs (each job gets devices of its own, disjoint from
every other running job's, through ``CUDA_VISIBLE_DEVICES``) and a budget of CPU slots
(default: the core count; one slot per rank). A job that does not fit now waits as
``queued`` with its reason ("waiting for 4 GPUs (2 free); 2 jobs ahead"); one that can
never fit is refused at submit.

The queue is a folder of tickets, one JSON file per job, shared by every user of the
machine (:func:`queue_dir`), changed only under an exclusive ``flock`` of its ``.lock``.
There is no queue daemon: each job's supervisor (in a session of its own, so it
outlives the kernel, the Jupyter server and the hub) holds its ticket, asks
:meth:`Queue.try_admit` until it is admitted, and removes the ticket when the job ends.
A ticket whose job has no live process left (its supervisor and ranks were killed, the
machine restarted) is dropped by the next reader, so a crash never blocks the queue.

Order: fair across users, then first come, first served. A ticket's place is
``(k, created)`` where ``k`` is how many older tickets its owner holds (running or
waiting), so each user's first job comes before anyone's second. The head of the queue
starts as soon as it fits, and nothing behind it starts before it (no backfilling: a
big job is never starved by a stream of small ones).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from alchemist.job.jobdir import atomic_write_json

LOCK_FILE = ".lock"


@dataclass(frozen=True)
class Capacity:
    """What the machine offers: CPU slots (one per rank) and GPU devices."""

    slots: int
    gpus: int


@dataclass
class Ticket:
    """One job's place in the queue.

    Attributes:
        job_id: the job.
        owner: who submitted it (for fairness).
        created: when it was submitted (UNIX time).
        slots: CPU slots it needs (its world size).
        gpus: GPU devices it needs.
        job_root: its job directory (to find its processes).
        pid: its supervisor's pid, with ``pid_started`` (create time) against pid reuse.
        granted: the GPU indices it holds once admitted; None while it waits.
    """

    job_id: str
    owner: str
    created: float
    slots: int
    gpus: int
    job_root: str
    pid: int
    pid_started: float
    granted: list[int] | None = None
    admitted: float | None = field(default=None)


@dataclass(frozen=True)
class Wait:
    """Why a ticket waits: how many tickets are ahead of it, and for what."""

    ahead: int
    reason: str


def queue_dir() -> Path:
    """The machine's queue folder: ``ALCHEMIST_ADMISSION_DIR``, by default
    ``/var/tmp/alchemist-admission`` (mode 1777: every user may add a ticket, and only
    its owner may remove it, as in ``/tmp``)."""
    raw = os.environ.get("ALCHEMIST_ADMISSION_DIR")
    path = Path(raw) if raw else Path("/var/tmp/alchemist-admission")
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        if not raw:
            with contextlib.suppress(OSError):
                os.chmod(path, 0o1777)
    return path


def process_started(pid: int) -> float:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def _alive(ticket: Ticket) -> bool:
    try:
        proc = psutil.Process(ticket.pid)
        if abs(proc.create_time() - ticket.pid_started) < 1e-3 and (
            proc.status() != psutil.STATUS_ZOMBIE
        ):
            return True
    except psutil.Error:
        pass
    if ticket.granted is None:
        return False  # a waiting job has no process but its supervisor
    # An admitted job whose supervisor was killed may still have ranks running: they
    # keep their devices until they end.
    from alchemist.backends.local.procs import job_processes

    return bool(job_processes(Path(ticket.job_root), []))


def fair_order(tickets: list[Ticket]) -> list[Ticket]:
    """Tickets in the order they are served (see the module docstring)."""
    seen: dict[str, int] = {}
    keyed = []
    for t in sorted(tickets, key=lambda t: (t.created, t.job_id)):
        k = seen.get(t.owner, 0)
        seen[t.owner] = k + 1
        keyed.append(((k, t.created, t.job_id), t))
    return [t for _, t in sorted(keyed, key=lambda kt: kt[0])]


class Queue:
    """The machine's tickets, under one lock."""

    def __init__(self, root: Path, capacity: Capacity) -> None:
        self.root = root
        self.capacity = capacity

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[Ticket]]:
        # Read-only is enough for flock, and every user of the machine can open the
        # lock read-only, whoever created it (a file of another user's, mode 0644).
        fd = os.open(self.root / LOCK_FILE, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield self._load()
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _path(self, job_id: str) -> Path:
        return self.root / f"{job_id}.json"

    def _load(self) -> list[Ticket]:
        tickets = []
        for path in sorted(self.root.glob("*.json")):
            try:
                ticket = Ticket(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                continue  # torn or foreign: not a ticket
            if _alive(ticket):
                tickets.append(ticket)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()  # its job is gone: free its place
        return tickets

    def enqueue(self, ticket: Ticket) -> None:
        with self._locked():
            atomic_write_json(self._path(ticket.job_id), asdict(ticket))
            with contextlib.suppress(OSError):
                os.chmod(self._path(ticket.job_id), 0o644)

    def release(self, job_id: str) -> None:
        with self._locked():
            self._path(job_id).unlink(missing_ok=True)

    def try_admit(self, job_id: str) -> list[int] | Wait:
        """Admit ``job_id`` if it is at the head of the queue and fits.

        Returns:
            The GPU indices granted (empty for a CPU job), or a :class:`Wait` saying
            how many jobs are ahead and what it waits for.

        Raises:
            KeyError: ``job_id`` has no ticket.
        """
        with self._locked() as tickets:
            mine = next((t for t in tickets if t.job_id == job_id), None)
            if mine is None:
                raise KeyError(job_id)
            if mine.granted is not None:
                return mine.granted
            running = [t for t in tickets if t.granted is not None]
            used_gpus = {g for t in running for g in t.granted or []}
            free_slots = self.capacity.slots - sum(t.slots for t in running)
            free_gpus = [g for g in range(self.capacity.gpus) if g not in used_gpus]
            waiting = [t for t in fair_order(tickets) if t.granted is None]
            for ahead, t in enumerate(waiting):
                fits = t.slots <= free_slots and t.gpus <= len(free_gpus)
                if t.job_id == job_id:
                    if ahead == 0 and fits:
                        mine.granted = free_gpus[: mine.gpus]
                        mine.admitted = time.time()
                        atomic_write_json(self._path(job_id), asdict(mine))
                        return mine.granted
                    return Wait(ahead, self._reason(mine, ahead, free_slots, len(free_gpus)))
            raise KeyError(job_id)  # pragma: no cover - mine is among the waiting

    def _reason(self, t: Ticket, ahead: int, free_slots: int, free_gpus: int) -> str:
        if t.gpus and t.gpus > free_gpus:
            need = f"{t.gpus} GPU{'s' if t.gpus > 1 else ''} ({free_gpus} free)"
        elif t.slots > free_slots:
            need = f"{t.slots} CPU slots ({max(0, free_slots)} of {self.capacity.slots} free)"
        else:
            need = "its turn"
        jobs = f"{ahead} job{'s' if ahead != 1 else ''} ahead"
        return f"waiting for {need}; {jobs}"
