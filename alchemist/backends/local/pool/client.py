"""The supervisor's side of the pool: find (or start) the user's pool and connect.

:func:`connect` returns a connection to a ready pool whose fingerprint matches this
environment, or raises :class:`Cold` with the reason the job runs cold: warm starts are
off, the job sets a variable read at import, or the environment changed since the pool
started (then the pool is rebuilt in the background, for the next job). It imports
neither torch nor the job store.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from alchemist.backends.local.pool import fingerprint, state
from alchemist.backends.local.pool.protocol import Lines, encode
from alchemist.backends.local.procs import POOL_DAEMON_MODULE, spawn_logged

#: How long a job waits for a pool that is starting (its own, or another job's).
START_WAIT_S = 120.0


class Cold(Exception):
    """This job runs cold; the message says why (one line, for the job's log)."""


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One supervisor at a time decides whether to start or replace the pool."""
    with open(folder / "lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def start_daemon(folder: Path, parts: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start the pool's daemon in a session of its own (it outlives the caller)."""
    proc = spawn_logged(
        ["-m", POOL_DAEMON_MODULE, str(folder)],
        folder / "daemon.log",
        cwd=folder,
        new_session=True,
        stdin=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(dict(parts)).encode())
    proc.stdin.close()
    # Not waited for here: the daemon is reparented when this process ends. Until then
    # Popen's own bookkeeping reaps it if it ends first.
    return proc


def stop(folder: Path | None = None, timeout: float = 15.0) -> bool:
    """Ask the pool to end; True if there was one. Running ranks go on."""
    folder = folder or state.pool_dir()
    info = state.read_info(folder)
    if info is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(state.socket_path(folder)))
            s.sendall(encode({"op": "stop"}))
            Lines(s.fileno()).wait(2.0)
    except OSError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.pid, 15)  # still starting, or not answering: SIGTERM
    deadline = time.time() + timeout
    while time.time() < deadline and _alive(info.pid):
        time.sleep(0.05)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - reused by another account
        return False
    try:  # a zombie (the caller started it and has not reaped it yet) has ended
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_ready(
    folder: Path, deadline: float, starting: subprocess.Popen[bytes] | None
) -> state.PoolInfo | None:
    """The pool once ready; None if there is none (and none starting), or at the deadline."""
    while time.time() < deadline:
        info = state.read_info(folder)
        if info is None and (starting is None or starting.poll() is not None):
            return None
        if info is not None and info.status == "ready":
            return info
        time.sleep(0.02)
    return state.read_info(folder)


def connect(
    env: Mapping[str, str], job_env: Mapping[str, str], restart: bool = False
) -> socket.socket:
    """A connection to this user's ready pool for ``env`` (the ranks' environment
    without the job's own variables, ``job_env``).

    ``restart``: for a restart of a job that started warm, whose attempts must all come
    from a pool: any ready pool serves it (one started since for a changed environment
    too), and none is started anew unless there is none.

    Raises:
        Cold: the job must start cold; the message says why.
    """
    if not state.enabled():
        raise Cold(f"warm starts are off ({state.ENABLE_VAR}=0)")
    set_at_import = fingerprint.import_time_vars(job_env)
    if set_at_import:
        raise Cold(
            f"the job sets {', '.join(set_at_import)}, read when modules are imported"
            " (the warm pool imported them already)"
        )
    try:
        folder = state.pool_dir()
        state.keepalive_s()  # a bad setting is said here, in the job's log
    except state.PoolError as e:
        raise Cold(str(e)) from None
    parts = fingerprint.parts(env)
    digest = fingerprint.digest(parts)
    starting = None
    with _locked(folder):
        info = state.read_info(folder)
        if info is not None and info.fingerprint != digest and not restart:
            why = fingerprint.what_changed(info.parts, parts)
            stop(folder)
            start_daemon(folder, parts)
            raise Cold(
                f"the environment changed since the warm pool started ({why});"
                " the pool is being rebuilt for the next job"
            )
        if info is None:
            starting = start_daemon(folder, parts)
    info = _wait_ready(folder, time.time() + START_WAIT_S, starting)
    if info is None or info.status != "ready":
        raise Cold(
            f"the warm pool did not start (see {folder / 'daemon.log'} and {folder / 'zygote.log'})"
            if info is None
            else f"the warm pool did not start within {START_WAIT_S:g} s"
        )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(state.socket_path(folder)))
    except OSError as e:
        sock.close()
        raise Cold(f"the warm pool does not answer ({e})") from None
    return sock
