"""Asking a local job's ranks for their stacks, and what became of each rank.

A local job's ranks are asked on their unix sockets first (:func:`socket_answers`:
every thread's stack and the flight recorder, in milliseconds); a rank that gives no
answer there (no socket, its code holds the GIL) is signalled. The rank processes are found as the local backend finds them
(:func:`alchemist.backends.local.procs.job_processes`) and each is sent ``SIGUSR1``
directly (torchrun stops the workers on any signal it handles, so it is never
signalled). Only a rank that wrote its hooks marker is signalled: ``SIGUSR1`` kills a
Python process with no handler for it. A rank's faulthandler writes its main thread's
stack from a C signal handler, without the GIL; the collector waits (a few seconds at
most) for each rank's stack file to grow and stop growing, and reads what was added.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from alchemist.backends.local.procs import job_processes, live_pid, read_pid
from alchemist.job import outcomes
from alchemist.job.jobdir import JobDir, make_private_dir
from alchemist.runtime import hooks

#: Seconds to wait for every rank's stacks.
STACKS_TIMEOUT_S = 3.0
#: Seconds between looks at the stack files.
POLL_S = 0.02
#: Bytes read from the end of a watchdog file (it grows by a dump per period).
WATCHDOG_TAIL_BYTES = 256 * 1024


@dataclass(frozen=True)
class RankProcess:
    """A live rank process whose hooks are in place."""

    rank: int
    process: psutil.Process
    #: the id of its main thread (as faulthandler writes it)
    main_thread: int | None
    #: the unix socket its responder listens on (None: it has none)
    socket: str | None = None


@dataclass(frozen=True)
class Liveness:
    """What became of one rank."""

    rank: int
    #: ``running``, ``finished`` (its code ended with status 0), ``failed`` (its code
    #: ended with an error), ``dead`` (gone before its code ended) or ``not started``
    state: str
    pid: int | None
    #: how it ended, one line (``killed by signal 9 (SIGKILL) (out of memory?)``)
    exit: str | None = None


def _live_pids(job_dir: JobDir) -> dict[int, psutil.Process]:
    roots = [p for p in (live_pid(job_dir.launcher_pid), live_pid(job_dir.torchrun_pid)) if p]
    return {p.pid: p for p in job_processes(job_dir.root, roots)}


def liveness(job_dir: JobDir, world_size: int) -> dict[int, Liveness]:
    """Every rank's :class:`Liveness`, from its pid file, its process and its record."""
    live = _live_pids(job_dir)
    recorded = outcomes.read(job_dir)
    attempt = outcomes.latest_attempt(job_dir, recorded)
    codes = outcomes.exit_codes(job_dir)
    out: dict[int, Liveness] = {}
    for rank in range(world_size):
        pid = read_pid(job_dir.rank_pid(rank))
        record = recorded.get(rank)
        ended = record is not None and record.attempt == attempt
        if ended and record is not None:
            state = "finished" if record.status == 0 else "failed"
            why = None if record.status == 0 else f"its code ended with status {record.status}"
            out[rank] = Liveness(rank, state, pid, why)
        elif pid is not None and pid in live:
            out[rank] = Liveness(rank, "running", pid)
        elif pid is None:
            out[rank] = Liveness(rank, "not started", None)
        else:
            code = codes.get(rank)
            why = outcomes.how_ended(code) if code is not None else "its process is gone"
            out[rank] = Liveness(rank, "dead", pid, why)
    return out


def is_stopped(pid: int | None) -> bool:
    """True when process ``pid`` is stopped (``SIGSTOP``, a debugger): it answers no
    signal and no request until it is continued."""
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def rank_processes(job_dir: JobDir, world_size: int) -> dict[int, RankProcess]:
    """The job's live rank processes that have their hooks in place."""
    live = _live_pids(job_dir)
    found: dict[int, RankProcess] = {}
    for rank in range(world_size):
        marker = hooks.read_marker(job_dir, rank)
        if not marker:
            continue
        pid = marker.get("pid")
        if not isinstance(pid, int) or pid not in live:
            continue
        main = marker.get("main_thread")
        sock = marker.get("socket")
        found[rank] = RankProcess(
            rank,
            live[pid],
            main if isinstance(main, int) else None,
            sock if isinstance(sock, str) else None,
        )
    return found


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


#: Seconds the ranks get to answer on their sockets before the others are signalled.
SOCKET_WAIT_S = 0.5


def _connect(rp: RankProcess) -> socket.socket | None:
    """A connection to ``rp``'s socket that has sent the request, or None: no socket,
    a folder that is not private to this account, no listener (a stale socket), or a
    peer that is not the rank's process of this account."""
    if rp.socket is None or hooks.unsafe_dir(Path(rp.socket).parent):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # Never blocks: a unix connect succeeds at once, or fails (EAGAIN: the rank has
        # not accepted earlier connections, its code holding the GIL).
        sock.setblocking(False)
        sock.connect(rp.socket)
        pid, uid, _ = hooks.peer_credentials(sock)
        if uid != os.getuid() or pid != rp.process.pid:
            sock.close()
            return None
        sock.send(hooks.SOCKET_REQUEST)  # a few bytes into an empty buffer
    except OSError:
        sock.close()
        return None
    return sock


def socket_answers(
    procs: dict[int, RankProcess],
    deadline: float,
    on_answer: Callable[[int, str], None] | None = None,
) -> dict[int, str]:
    """Ask each rank on its unix socket and return the answers that came whole before
    ``deadline`` (a ``time.monotonic()`` value): rank → every thread's stack, then the
    flight-recorder line (the request file's answer). A rank with no socket, or whose
    responder did not answer in time (its code holds the GIL), is left out.
    ``on_answer(rank, text)`` is called as each answer comes."""
    done: dict[int, str] = {}
    with selectors.DefaultSelector() as sel:
        for rank, rp in procs.items():
            conn = _connect(rp)
            if conn is not None:
                sel.register(conn, selectors.EVENT_READ, (rank, bytearray()))
        try:
            while sel.get_map() and time.monotonic() < deadline:
                for key, _ in sel.select(max(0.0, deadline - time.monotonic())):
                    rank, got = key.data
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        chunk = sock.recv(1 << 16)
                    except BlockingIOError:
                        continue
                    except OSError:
                        chunk = b""
                        got.clear()  # a broken answer is no answer
                    if chunk:
                        got.extend(chunk)
                        continue
                    sel.unregister(sock)
                    sock.close()
                    if got:  # the rank hung up after its answer: it is whole
                        done[rank] = got.decode("utf-8", "replace")
                        if on_answer is not None:
                            on_answer(rank, done[rank])
        finally:
            for key in list(sel.get_map().values()):
                sel.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]
    return done


def request_stacks(
    job_dir: JobDir,
    procs: dict[int, RankProcess],
    timeout: float = STACKS_TIMEOUT_S,
    on_answer: Callable[[int, str], None] | None = None,
) -> dict[int, str]:
    """Signal each rank and return the stacks each wrote (rank → dump text).

    A rank whose file did not grow within ``timeout`` seconds is left out. A dump is
    taken as complete when its file grew and then stayed the same for one poll.
    ``on_answer(rank, text)`` is called as each rank's dump completes.
    """
    before = {r: _size(hooks.stacks_path(job_dir, r)) for r in procs}
    for rp in procs.values():
        with contextlib.suppress(psutil.Error):
            rp.process.send_signal(hooks.STACK_SIGNAL)
    seen = dict(before)
    done: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    while len(done) < len(procs) and time.monotonic() < deadline:
        time.sleep(POLL_S)
        for rank in procs:
            if rank in done:
                continue
            path = hooks.stacks_path(job_dir, rank)
            size = _size(path)
            if size > before[rank] and size == seen[rank]:
                with open(path, "rb") as f:
                    f.seek(before[rank])
                    done[rank] = f.read(size - before[rank]).decode("utf-8", "replace")
                if on_answer is not None:
                    on_answer(rank, done[rank])
            seen[rank] = size
    return done


def watchdog_stacks(job_dir: JobDir, rank: int) -> tuple[str, float] | None:
    """The last dump rank ``rank``'s watchdog wrote, and when (the file's mtime)."""
    from alchemist.diagnosis.stacks import last_dump

    path = hooks.watchdog_path(job_dir, rank)
    # The watchdog may be writing a dump right now: read when the size holds still.
    size = _size(path)
    if size == 0:
        return None  # no file, or the watchdog never fired
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        time.sleep(POLL_S)
        size, previous = _size(path), size
        if size == previous:
            break
    try:
        with open(path, "rb") as f:
            f.seek(max(0, size - WATCHDOG_TAIL_BYTES))
            text = f.read(min(size, WATCHDOG_TAIL_BYTES)).decode("utf-8", "replace")
        when = path.stat().st_mtime
    except OSError:
        return None
    return (last_dump(text), when) if text.strip() else None


def post_request(job_dir: JobDir) -> Path:
    """Drop a new request file for every rank's responder; returns its path."""
    folder = hooks.requests_dir(job_dir)
    make_private_dir(job_dir.debug)
    make_private_dir(folder)
    name = f"{time.time_ns()}-{os.getpid()}-{secrets.token_hex(3)}{hooks.REQUEST_SUFFIX}"
    request = folder / name
    fd = os.open(request, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    return request


def wait_answers(
    request: Path,
    ranks: list[int],
    deadline: float,
    on_answer: Callable[[int, str], None] | None = None,
) -> dict[int, str]:
    """The answers to ``request`` of ``ranks`` that came before ``deadline`` (a
    ``time.monotonic()`` value): rank → answer text. An answer is renamed into place
    whole, so one that exists is complete. ``on_answer(rank, text)`` is called as each
    answer comes."""
    done: dict[int, str] = {}
    while True:
        for rank in ranks:
            if rank in done:
                continue
            try:
                done[rank] = hooks.answer_path(request, rank).read_text(errors="replace")
            except OSError:
                continue  # not yet
            if on_answer is not None:
                on_answer(rank, done[rank])
        if len(done) == len(ranks) or time.monotonic() >= deadline:
            return done
        time.sleep(POLL_S)


def remove_request(request: Path, ranks: list[int]) -> None:
    """Remove ``request`` and the answers of ``ranks`` (a late answer stays: harmless)."""
    for path in [request, *(hooks.answer_path(request, r) for r in ranks)]:
        with contextlib.suppress(OSError):
            path.unlink()


def request_answers(
    job_dir: JobDir, ranks: list[int], timeout: float = STACKS_TIMEOUT_S
) -> dict[int, str]:
    """Ask ``ranks`` by request file and wait up to ``timeout`` s: rank → answer text
    (every thread's stack, then the flight-recorder line); a rank that did not answer in
    time is left out."""
    request = post_request(job_dir)
    try:
        return wait_answers(request, ranks, time.monotonic() + timeout)
    finally:
        remove_request(request, ranks)
