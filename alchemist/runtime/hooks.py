"""The cheap hooks every rank installs at start-up (:mod:`alchemist.runtime.worker`).

- **On-demand stacks**: ``faulthandler`` dumps the main thread's Python stack to
  ``debug/stacks-rank-<r>.txt`` on ``SIGUSR1``. Its handler is C and needs no GIL, so
  it answers even when the rank is in C code that holds the GIL (a long ``re`` match,
  a gloo collective). Signal the rank processes, never torchrun (it stops the workers
  on any signal it handles): :mod:`alchemist.diagnosis.collect` does. Linux delivers
  a signal sent to a process to its main thread, which the handler interrupts: it
  reads only that thread's frames, which hold still. It does not dump the other
  threads (``all_threads=True``): their frames change under it while one of them runs
  Python, and here that crashed the rank with SIGSEGV within about a hundred signals
  while a thread imported torch (none in 1,600 signals with the main thread only).
  The other threads' stacks come from the watchdog.
- **Stall watchdog**: a daemon thread writes every thread's stack to
  ``debug/watchdog-rank-<r>.txt`` when ``T`` seconds pass without an
  ``alchemist.log`` call, and again every ``T`` while none comes, with no request:
  stacks land in the job directory by themselves when a rank stops advancing. ``T``
  is ``max(floor, 10 x the mean time between log calls)``; the floor is
  :data:`WATCHDOG_FLOOR_S`, or ``$ALCHEMIST_WATCHDOG_S`` (``0`` turns it off). See
  :class:`_Watchdog` for why it is not faulthandler's ``dump_traceback_later``.
- **Request responder** (the path that needs no signal, no ``exec``: Kubernetes pods):
  a daemon thread looks at ``debug/requests/`` every :data:`RESPONDER_POLL_S` seconds
  (one ``stat`` of the folder; it lists the folder only when its mtime changed or is
  recent) and answers each new ``<id>.req`` with ``<id>.req.rank-<r>.txt``: every
  thread's stack (the watchdog's writer, :func:`all_thread_stacks`) and the rank's
  newest flight-recorder entries (:mod:`~alchemist.runtime.recorder`). The answer is
  written to a hidden file and renamed, so a reader never sees half of one. Like the
  watchdog it needs the GIL: a rank holding it in C code answers when the call returns.
- **Socket responder** (local jobs: fast, every thread): a daemon thread listens on a
  unix socket in the account's private runtime folder (:func:`socket_dir`:
  ``<runtime>/diag/``, see :func:`alchemist.job.config.runtime_dir`: a folder of the
  temporary directory with an unguessable name, 0700; a folder that another account
  owns or can write is refused, and the rank goes without the socket) and answers a connection that sends ``stacks`` with the same text as a
  request file's answer. It reads the peer's credentials (``SO_PEERCRED``) first and
  hangs up on any other account's process. The socket is removed when the rank's code
  ends (:func:`stop`); one left by a rank that was killed is replaced by the next rank
  of that job and rank, or removed by the next rank that starts once it is a minute
  old (:func:`sweep_stale_sockets`), and a collector that finds no listener falls back
  to the signal and the request file. Like the other threads it needs the GIL.
- ``debug/hooks-rank-<r>.json`` says the hooks are in place (pid, main thread id, the
  socket's path): a collector signals only a rank that wrote it, since ``SIGUSR1``
  kills a Python process that has no handler for it.

Re-arming the watchdog (:func:`rearm`, on every ``alchemist.log`` call) stores a
clock reading: well under a microsecond. The stack files stay open for the life of the
process (faulthandler writes to its descriptor from its signal handler).
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import socket
import stat
import struct
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from alchemist.job.config import private_dir_problem, runtime_dir
from alchemist.job.jobdir import JobDir, atomic_write_json, make_private_dir
from alchemist.runtime import recorder

#: The signal that asks a rank for its stacks.
STACK_SIGNAL = signal.SIGUSR1
#: The watchdog's least period in seconds.
WATCHDOG_FLOOR_S = 60.0
#: The environment variable that sets the watchdog's floor (``0``: no watchdog).
WATCHDOG_VAR = "ALCHEMIST_WATCHDOG_S"
#: The watchdog's period is this many times the mean time between log calls.
WATCHDOG_FACTOR = 10.0
#: The watchdog looks at least this often (seconds).
WATCHDOG_CHECK_S = 1.0
#: A watchdog file longer than this starts again (it keeps the newest dumps).
WATCHDOG_MAX_BYTES = 1 << 20
#: Frames written per thread, at most.
MAX_FRAMES = 100
#: The folder of request files, in ``debug/``.
REQUESTS_DIR = "requests"
#: A request file's name ends so.
REQUEST_SUFFIX = ".req"
#: Seconds between the responder's looks at the requests folder.
RESPONDER_POLL_S = 0.5
#: The responder lists the folder while its mtime is this recent (seconds), as well as
#: when it changed: two requests within the file system's clock tick share one mtime.
RESPONDER_FRESH_S = 2.0
#: Requests older than this (seconds, by mtime) are not answered: nobody waits for them.
REQUEST_MAX_AGE_S = 60.0
#: The folder of the ranks' sockets in the account's runtime folder.
SOCKET_DIR_NAME = "diag"
#: What a collector sends on a rank's socket to ask for its stacks.
SOCKET_REQUEST = b"stacks\n"
#: The longest path a unix socket may have (``sun_path`` is 108 bytes with its NUL).
SOCKET_PATH_MAX = 107
#: Seconds a socket responder waits for a connected collector to send its request.
SOCKET_READ_S = 2.0
#: ``struct ucred`` (``SO_PEERCRED``): pid, uid, gid.
_UCRED = struct.Struct("3i")


def stacks_path(job_dir: JobDir, rank: int) -> Path:
    """Where rank ``rank`` writes its stacks when signalled."""
    return job_dir.debug / f"stacks-rank-{rank}.txt"


def watchdog_path(job_dir: JobDir, rank: int) -> Path:
    """Where rank ``rank``'s watchdog writes its stacks."""
    return job_dir.debug / f"watchdog-rank-{rank}.txt"


def marker_path(job_dir: JobDir, rank: int) -> Path:
    """``{pid, rank, main_thread, watchdog_s, socket, time}``: rank ``rank``'s hooks are
    in place (``socket``: the path its socket responder listens on, or null)."""
    return job_dir.debug / f"hooks-rank-{rank}.json"


def requests_dir(job_dir: JobDir) -> Path:
    """Where collectors drop request files (:mod:`~alchemist.diagnosis.collect`)."""
    return job_dir.debug / REQUESTS_DIR


def answer_path(request: Path, rank: int) -> Path:
    """Rank ``rank``'s answer to ``request``: ``<request>.rank-<r>.txt`` next to it."""
    return request.with_name(f"{request.name}.rank-{rank}.txt")


def socket_dir() -> Path:
    """The folder of this account's rank sockets: ``<runtime>/diag``."""
    return runtime_dir() / SOCKET_DIR_NAME


def socket_path(job_id: str, rank: int) -> Path:
    """Where rank ``rank`` of job ``job_id`` listens: ``<socket_dir>/<job_id>-<rank>.sock``."""
    return socket_dir() / f"{job_id}-{rank}.sock"


def unsafe_dir(folder: Path) -> str | None:
    """Why ``folder`` may not hold this account's sockets (None: it may): it is not a
    folder (a link, a file), another account owns it, or another account can write
    in it (it could put its own socket there)."""
    return private_dir_problem(folder, closed=0o022)


def make_socket_dir() -> Path:
    """:func:`socket_dir`, made 0700 if missing and checked (:func:`unsafe_dir`); a
    folder of ours that others can read or enter is closed to them.

    Raises:
        OSError: the folder cannot be made, or may not be used (the reason says why).
    """
    folder = socket_dir()
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    problem = unsafe_dir(folder)
    if problem:
        raise OSError(f"no diagnosis socket: {problem}")
    if os.lstat(folder).st_mode & 0o077:
        os.chmod(folder, 0o700)
    return folder


#: A socket file with no listener is removed once it is this old (seconds): a rank's
#: socket has none only between its ``bind`` and ``listen``, microseconds apart.
STALE_SOCKET_S = 60.0


def sweep_stale_sockets(folder: Path) -> int:
    """Remove the sockets in ``folder`` that no process listens on (ranks that were
    killed or cancelled, whose code never reached :func:`stop`), older than
    :data:`STALE_SOCKET_S`; returns how many went."""
    removed = 0
    now = time.time()
    for path in folder.glob("*.sock"):
        try:
            st = os.lstat(path)
            if not stat.S_ISSOCK(st.st_mode) or now - st.st_mtime < STALE_SOCKET_S:
                continue
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.setblocking(False)
                try:
                    probe.connect(str(path))
                    continue  # someone listens
                except ConnectionRefusedError:
                    pass
                except OSError:
                    continue  # busy (EAGAIN) or gone: leave it
            path.unlink()
            removed += 1
        except OSError:
            continue
    return removed


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process at the other end of the unix socket ``sock``."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


def read_marker(job_dir: JobDir, rank: int) -> dict[str, Any] | None:
    try:
        data = json.loads(marker_path(job_dir, rank).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def watchdog_floor() -> float:
    """The watchdog's floor: ``$ALCHEMIST_WATCHDOG_S`` or :data:`WATCHDOG_FLOOR_S`.

    Raises:
        ValueError: the variable is not a number of seconds, 0 or more.
    """
    raw = os.environ.get(WATCHDOG_VAR, "").strip()
    if not raw:
        return WATCHDOG_FLOOR_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{WATCHDOG_VAR} must be a number of seconds, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{WATCHDOG_VAR} must be 0 or more, got {raw!r}")
    return value


def all_thread_stacks(header: str) -> str:
    """Every thread's stack but the calling one's, main thread first, in faulthandler's
    format under ``header``: read with ``sys._current_frames()`` holding the GIL (safe;
    see :class:`_Watchdog`). The watchdog and the request responder both write this."""
    me = threading.get_ident()
    lines = [header]
    main = threading.main_thread().ident
    found = sys._current_frames()
    for ident in sorted(found, key=lambda i: i != main):  # the main thread first
        frame = found[ident]
        if ident == me:
            continue
        lines.append(f"Thread 0x{ident:016x} (most recent call first):")
        depth: Any = frame
        for _ in range(MAX_FRAMES):
            if depth is None:
                break
            code = depth.f_code
            lines.append(f'  File "{code.co_filename}", line {depth.f_lineno} in {code.co_name}')
            depth = depth.f_back
        lines.append("")
    return "\n".join(lines) + "\n"


def answer_text(asker: str, rank: int) -> str:
    """A responder's answer: every thread's stack (:func:`all_thread_stacks`) under a
    header naming ``asker`` (the request), then the rank's flight-recorder line. It
    imports nothing (see :func:`alchemist.runtime.recorder.snapshot`)."""
    header = f"Request {asker} (rank {rank}, pid {os.getpid()}, time {time.time():.3f})"
    return all_thread_stacks(header) + recorder.format_snapshot(recorder.snapshot())


class _Watchdog:
    """A daemon thread that writes every thread's stack when ``period`` seconds pass
    without a :meth:`rearm` call, and again every ``period`` while none comes.

    It reads the stacks with ``sys._current_frames()`` while holding the GIL, which is
    safe, and writes them in faulthandler's format. (faulthandler's own
    ``dump_traceback_later`` reads other threads' frames without the GIL; here it
    crashed a rank with SIGSEGV when it fired while the rank imported torch.) The price:
    a rank that holds the GIL in C code gets no watchdog dump until the call returns;
    the on-demand signal still answers for it.
    """

    def __init__(self, file: IO[str], floor: float) -> None:
        self.file = file
        self.floor = floor
        self.period = floor
        self.last = time.monotonic()  # the last sign of progress (start-up counts)
        self._mean: float | None = None
        self._count = 0  # rearm calls so far
        self._seen = (0, 0.0)  # (count, last) at the watchdog's previous look
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="alchemist-watchdog", daemon=True)
        self._thread.start()

    def rearm(self) -> None:
        # On the training thread at every alchemist.log: two stores, nothing else. The
        # watchdog thread turns the counts into the mean gap between calls (_learn).
        self.last = time.monotonic()
        self._count += 1

    def _learn(self) -> None:
        """The mean gap between rearm calls since the last look, folded into a moving
        average (the first call, from start-up, is not a gap)."""
        count, last = self._count, self.last
        seen_count, seen_last = self._seen
        if seen_count and count > seen_count:
            gap = (last - seen_last) / (count - seen_count)
            self._mean = gap if self._mean is None else 0.9 * self._mean + 0.1 * gap
        if count:
            self._seen = (count, last)

    def _run(self) -> None:
        dumped = 0.0
        while not self._stop.wait(min(self.period / 10, WATCHDOG_CHECK_S)):
            self._learn()
            self.period = max(self.floor, WATCHDOG_FACTOR * (self._mean or 0.0))
            now = time.monotonic()
            idle = now - self.last
            if idle >= self.period and now - max(dumped, self.last) >= self.period:
                self._dump(idle)
                dumped = now

    def _dump(self, idle: float) -> None:
        minutes, seconds = divmod(int(idle), 60)
        text = all_thread_stacks(f"Timeout ({minutes // 60}:{minutes % 60:02d}:{seconds:02d})!")
        try:
            if self.file.tell() > WATCHDOG_MAX_BYTES:
                self.file.truncate(0)  # keep the newest dumps, not an ever-growing file
                self.file.seek(0)
            self.file.write(text)
            self.file.flush()
        except (OSError, ValueError):
            self._stop.set()  # the disk is full or the file closed: stop quietly

    def stop(self) -> None:
        self._stop.set()


class _Responder:
    """A daemon thread answering request files in ``folder`` (see the module docstring)."""

    def __init__(self, folder: Path, rank: int, poll: float = RESPONDER_POLL_S) -> None:
        self.folder = folder
        self.rank = rank
        self.poll = poll
        self._mtime: int | None = None
        self._answered: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="alchemist-responder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                mtime = os.stat(self.folder).st_mtime_ns
            except OSError:
                continue  # no request yet (the folder is made by the first collector)
            fresh = time.time() - mtime / 1e9 < RESPONDER_FRESH_S
            if mtime != self._mtime or fresh:
                self._mtime = mtime
                try:
                    self.answer_new()
                except OSError:
                    pass  # the folder went away, or the disk is full: try again later

    def answer_new(self) -> int:
        """Answer every request not answered yet; returns how many were answered."""
        count = 0
        for name in sorted(os.listdir(self.folder)):
            if not name.endswith(REQUEST_SUFFIX) or name in self._answered:
                continue
            self._answered.add(name)
            request = self.folder / name
            answer = answer_path(request, self.rank)
            try:
                if answer.exists() or time.time() - request.stat().st_mtime > REQUEST_MAX_AGE_S:
                    continue
            except OSError:
                continue  # the collector removed it: nobody waits
            text = answer_text(name, self.rank)
            hidden = answer.with_name(f".{answer.name}.tmp")
            with _open_private(hidden) as f:
                f.truncate(0)
                f.write(text)
            os.replace(hidden, answer)
            count += 1
        return count

    def stop(self) -> None:
        self._stop.set()


class _SocketResponder:
    """A daemon thread answering collectors on a unix socket at ``path`` (see the module
    docstring): one connection at a time; the peer must be this account's."""

    def __init__(self, path: Path, rank: int) -> None:
        if len(os.fsencode(path)) > SOCKET_PATH_MAX:
            raise OSError(f"no diagnosis socket: {path} is longer than a unix socket's path")
        self.path = path
        self.rank = rank
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)  # a stale one (a killed rank's): the next rank's now
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            os.chmod(path, 0o600)
            sock.listen(8)
            sock.settimeout(1.0)  # a look at the stop flag every second
            self._inode = os.stat(path).st_ino
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="alchemist-socket-responder", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    conn, _ = self._sock.accept()
                except TimeoutError:
                    continue
                except OSError:
                    if self._stop.is_set():
                        break
                    time.sleep(0.1)  # out of descriptors, say: try again shortly
                    continue
                with conn, contextlib.suppress(OSError):
                    self.serve(conn)
        finally:
            self._sock.close()

    def serve(self, conn: socket.socket) -> None:
        """Answer one collector: hang up on another account's process, and on anything
        but :data:`SOCKET_REQUEST`."""
        _, uid, _ = peer_credentials(conn)
        if uid != os.getuid():
            return  # closing the connection is the whole answer
        conn.settimeout(SOCKET_READ_S)
        asked = b""
        while not asked.endswith(b"\n") and len(asked) < 64:
            chunk = conn.recv(64)
            if not chunk:
                break
            asked += chunk
        if asked != SOCKET_REQUEST:
            return
        conn.sendall(answer_text("by socket", self.rank).encode("utf-8", "replace"))

    def stop(self) -> None:
        """Stop answering and remove the socket (unless another rank's took its place)."""
        self._stop.set()
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept at once


def _open_private(path: Path) -> IO[str]:
    """``path`` opened for appending, 0600 when it is made (the owner's alone)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    return open(fd, "a", encoding="utf-8")  # kept open for the life of the process


_files: list[IO[str]] = []  # open for the life of the process
_watchdog: _Watchdog | None = None
_responder: _Responder | None = None
_socket_responder: _SocketResponder | None = None


def install(job_dir: JobDir, rank: int) -> None:
    """Install the hooks in this rank; idempotent. A failure is said in the rank's log
    and never stops the job."""
    global _watchdog, _responder, _socket_responder
    if _files:
        return
    try:
        make_private_dir(job_dir.debug)
        stacks = _open_private(stacks_path(job_dir, rank))
        _files.append(stacks)
        faulthandler.register(STACK_SIGNAL, file=stacks, all_threads=False, chain=False)
        try:
            floor = watchdog_floor()
        except ValueError as e:
            floor = WATCHDOG_FLOOR_S
            print(f"[alchemist] warning: {e}; the watchdog uses {floor:g} s", flush=True)
        if floor > 0:
            dog = _open_private(watchdog_path(job_dir, rank))
            _files.append(dog)
            _watchdog = _Watchdog(dog, floor)
        _responder = _Responder(requests_dir(job_dir), rank)
        try:
            sweep_stale_sockets(make_socket_dir())
            _socket_responder = _SocketResponder(socket_path(job_dir.job_id, rank), rank)
        except OSError as e:  # the signal and the request file still answer
            print(f"[alchemist] warning: {e}", flush=True)
        atomic_write_json(
            marker_path(job_dir, rank),
            {
                "pid": os.getpid(),
                "rank": rank,
                "main_thread": threading.main_thread().ident,
                "watchdog_s": floor,
                "socket": str(_socket_responder.path) if _socket_responder else None,
                "time": time.time(),
            },
        )
    except (OSError, ValueError, RuntimeError) as e:
        print(f"[alchemist] warning: hang diagnosis hooks not installed: {e}", flush=True)


def rearm() -> None:
    """Tell the watchdog the rank advanced (``alchemist.log`` calls this)."""
    if _watchdog is not None:
        _watchdog.rearm()


def stop(job_dir: JobDir | None = None, rank: int = 0) -> None:
    """Stop the watchdog and the responders, and remove the rank's socket (the rank's
    code ended: teardown is not a stall) and, given the job directory, the marker, so
    that no collector signals the rank while it exits (the interpreter drops the handler
    at exit, and ``SIGUSR1`` would then kill it)."""
    global _watchdog, _responder, _socket_responder
    if _watchdog is not None:
        _watchdog.stop()
        _watchdog = None
    if _responder is not None:
        _responder.stop()
        _responder = None
    if _socket_responder is not None:
        _socket_responder.stop()
        _socket_responder = None
    if job_dir is not None:
        marker_path(job_dir, rank).unlink(missing_ok=True)
