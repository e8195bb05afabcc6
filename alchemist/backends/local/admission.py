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

Tickets are checked, not trusted: the queue folder is shared by every account of the
machine, so any of them could write one. A ticket counts only while it is a plain file
whose owner (the kernel's ``st_uid``, not what the file says) also owns the live
process it names (its supervisor, checked against pid reuse) and, while it waits, that
process's command line names the ticket's job directory; it may ask for no more than
the machine has; it is owned, for fairness, by the file's account (a ticket naming
another system account as its owner counts as its writer's); and it cannot claim to be
older than :data:`MAX_SUBMIT_LAG_S` before its supervisor started. Other tickets are
ignored (and dropped when the reader may). The lock is taken for milliseconds; one held
for longer than :data:`LOCK_WAIT_S` (another account holding it on purpose) is named
in the waiting job's reason (:class:`QueueLocked`: which process, which account),
instead of leaving every job pending with no word. The default folder must not belong
to another ordinary account (its owner could remove anyone's tickets).

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
import math
import os
import pwd
import stat
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from alchemist.job.jobdir import atomic_write_json

LOCK_FILE = ".lock"
#: Seconds a reader waits for the queue's lock before saying who holds it.
LOCK_WAIT_S = 5.0
#: The most a ticket's ``created`` may precede its supervisor's start (seconds): the
#: submit and the supervisor's start are that close; an older claim is clamped.
MAX_SUBMIT_LAG_S = 60.0
#: Where the machine's queue lives unless ``ALCHEMIST_ADMISSION_DIR`` says otherwise.
DEFAULT_QUEUE_DIR = Path("/var/tmp/alchemist-admission")


class QueueLocked(Exception):
    """The queue's lock has been held longer than any reader needs (the message says
    by which process of which account)."""


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
    its owner may remove it, as in ``/tmp``; made by root when the embedded hub or
    ``scripts/setup.sh`` runs as root).

    Raises:
        OSError: the default folder belongs to another ordinary account, or is not a
            sticky folder (that account, or anyone, could remove others' tickets).
    """
    raw = os.environ.get("ALCHEMIST_ADMISSION_DIR")
    path = Path(raw) if raw else DEFAULT_QUEUE_DIR
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        if not raw:
            with contextlib.suppress(OSError):
                os.chmod(path, 0o1777)
    if not raw:
        problem = shared_folder_problem(path)
        if problem:
            raise OSError(f"the machine's job queue cannot be used: {problem}")
    return path


def shared_folder_problem(path: Path) -> str | None:
    """Why ``path`` may not hold every account's tickets (None: it may): it is not a
    folder, another ordinary account owns it, or others may remove tickets not theirs."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    if st.st_uid not in (0, os.getuid()):
        return (
            f"{path} belongs to account {_account(st.st_uid)}, who could remove anyone's"
            " tickets; an administrator should remove it (the next job makes it again),"
            " or make it as root with mode 1777"
        )
    if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
        return f"{path} lets every account remove others' tickets (mode 777 without the sticky bit)"
    return None


def _account(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def prepare_machine_queue() -> Path:
    """As root: make the default queue folder root's, mode 1777 (the embedded hub and
    ``scripts/setup.sh`` call this, so no user's first job owns it)."""
    path = DEFAULT_QUEUE_DIR
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) and st.st_uid != 0:
        os.chown(path, 0, 0, follow_symlinks=False)
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


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _well_formed(t: Ticket) -> bool:
    """Every field of the type a supervisor writes (a file of another account may hold
    anything JSON can: it must never break the readers, every job's supervisor)."""
    whole = (t.slots, t.gpus, t.pid)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in whole) or t.pid <= 0:
        return False
    if not all(isinstance(v, str) for v in (t.job_id, t.owner, t.job_root)):
        return False
    if not (_number(t.created) and _number(t.pid_started)):
        return False
    if t.admitted is not None and not _number(t.admitted):
        return False
    granted = t.granted
    return granted is None or (
        isinstance(granted, list)
        and all(isinstance(g, int) and not isinstance(g, bool) for g in granted)
    )


def _account_uid(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def _lock_holder(fd: int, path: Path) -> str:
    """Who holds the flock on ``path`` (open as ``fd``), from ``/proc/locks``."""
    inode = os.fstat(fd).st_ino
    holder = "another process"
    with contextlib.suppress(OSError):
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].endswith(f":{inode}"):
                pid = int(fields[4])
                with contextlib.suppress(psutil.Error):
                    proc = psutil.Process(pid)
                    holder = (
                        f"process {pid} ({proc.name()}) of account {_account(proc.uids().real)}"
                    )
                break
    return (
        f"the machine's job queue has been locked for more than {LOCK_WAIT_S:g} s by"
        f" {holder} ({path}); jobs start once it lets go: ask them, or an administrator"
    )


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
        """The tickets, under the queue's lock.

        Raises:
            QueueLocked: the lock was not free within :data:`LOCK_WAIT_S`.
        """
        # Read-only is enough for flock, and every user of the machine can open the
        # lock read-only, whoever created it (a file of another user's, mode 0644).
        fd = os.open(self.root / LOCK_FILE, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise QueueLocked(_lock_holder(fd, self.root / LOCK_FILE)) from None
                    time.sleep(0.01)
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
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                with os.fdopen(fd) as f:
                    st = os.fstat(f.fileno())
                    ticket = Ticket(**json.loads(f.read(1 << 16)))
            except (OSError, ValueError, TypeError):
                continue  # torn, foreign, a link: not a ticket
            if stat.S_ISREG(st.st_mode) and self._valid(ticket, st.st_uid) and _alive(ticket):
                tickets.append(ticket)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()  # its job is gone, or it is forged: free its place
        return tickets

    def _valid(self, ticket: Ticket, uid: int) -> bool:
        """Whether ``ticket``, in a file of account ``uid``, may count (see the module);
        its owner and time are set to what can be checked."""
        if not _well_formed(ticket):
            return False
        if not (
            1 <= ticket.slots <= self.capacity.slots and 0 <= ticket.gpus <= self.capacity.gpus
        ):
            return False
        try:
            proc = psutil.Process(int(ticket.pid))
            if proc.uids().real != uid:
                return False  # someone else's process: not this ticket's supervisor
            if ticket.granted is None and ticket.job_root not in proc.cmdline():
                return False  # a waiting ticket's supervisor names its job directory
        except (psutil.Error, ValueError, TypeError):
            pass  # gone: _alive decides (a killed supervisor's ranks may still run)
        claimed = _account_uid(str(ticket.owner))
        if claimed is not None and claimed != uid:
            ticket.owner = _account(uid)  # nobody queues in another account's name
        ticket.created = max(float(ticket.created), float(ticket.pid_started) - MAX_SUBMIT_LAG_S)
        return True

    def enqueue(self, ticket: Ticket) -> None:
        with self._locked():
            atomic_write_json(self._path(ticket.job_id), asdict(ticket))
            with contextlib.suppress(OSError):
                os.chmod(self._path(ticket.job_id), 0o644)

    def release(self, job_id: str) -> None:
        try:
            with self._locked():
                self._path(job_id).unlink(missing_ok=True)
        except QueueLocked:  # removing one's own ticket needs no lock: readers only
            self._path(job_id).unlink(missing_ok=True)  # see fewer jobs ahead

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
