"""Finding and stopping a local job's processes."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from alchemist.job.jobdir import JobDir

#: Seconds a job's processes get to end on SIGTERM before they are killed (a cancel, a
#: timeout, a failed attempt's other ranks, a session's stop).
STOP_GRACE_S = 3.0


def spawn_logged(
    args: list[str],
    log: Path,
    *,
    cwd: str | Path,
    env: dict[str, str] | None = None,
    new_session: bool = False,
    stdin: int = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """Start ``python *args`` with its output (stdout and stderr) appended to ``log``; the
    child keeps the file open, this process does not. ``new_session``: in a session of
    its own, so that it outlives this process's terminal, kernel or server."""
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(
            [sys.executable, *args],
            stdin=stdin,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=new_session,
            close_fds=True,
        )
    finally:
        out.close()


def start_supervisor(module: str, job_root: Path, launcher_log: Path) -> subprocess.Popen[bytes]:
    """Start ``python -m module JOB_DIR`` (a batch job's or a session's supervisor) in a
    session of its own, so that it outlives the kernel, the Jupyter server and the hub,
    with its output in the job's launcher log; its pid goes to ``pids/launcher.pid``."""
    proc = spawn_logged(["-m", module, str(job_root)], launcher_log, cwd=job_root, new_session=True)
    JobDir(job_root).launcher_pid.write_text(str(proc.pid))
    return proc


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


#: Seconds a process may seem to have started after its pid file was written: a start
#: time is read from ``/proc`` in clock ticks after the boot time, whole seconds.
PID_CLOCK_SLACK_S = 1.0


def live_pid(path: Path) -> int | None:
    """The pid in the pid file ``path`` if that process runs now and is the one the file
    was written for; else None (no file, ended, a zombie, or a pid reused since).

    Every pid file is written after its process started (the launcher's and torchrun's
    by the process that started them, a rank's by the rank), so a process that started
    later is another one that got the pid after ours ended: after a restart of the
    machine, or a long while. Trusting it would keep a job ``running`` for ever, and a
    cancel would stop that process and its children.
    """
    pid = read_pid(path)
    if pid is None:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        if proc.create_time() > path.stat().st_mtime + PID_CLOCK_SLACK_S:
            return None
    except (psutil.Error, OSError):
        return None
    return pid


def alive(pid: int | None) -> bool:
    """True if ``pid`` runs and is not a zombie waiting to be reaped."""
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


#: The warm pool's daemon: a child of the supervisor that started it until that one
#: ends, but never part of that job (it serves every job of the user).
POOL_DAEMON_MODULE = "alchemist.backends.local.pool.daemon"


def _descendants(proc: psutil.Process) -> list[psutil.Process]:
    """``proc``'s children, theirs and so on, but not a warm pool's daemon nor anything
    under it (the zygote; warm ranks are found by their pid files instead)."""
    out: list[psutil.Process] = []
    todo = [proc]
    while todo:
        for child in todo.pop().children():
            with contextlib.suppress(psutil.Error):
                if POOL_DAEMON_MODULE in child.cmdline():
                    continue
                out.append(child)
                todo.append(child)
    return out


def job_processes(job_root: Path, root_pids: list[int]) -> list[psutil.Process]:
    """Every live process of a job: the given roots, their descendants, the ranks named
    in ``pids/`` and any process whose command line names the job directory (a rank
    torchrun started in a session of its own, or one orphaned by a killed launcher).
    Never the user's warm pool, which the job's supervisor may have started."""
    found: dict[int, psutil.Process] = {}
    for pid in root_pids:
        try:
            proc = psutil.Process(pid)
            found[pid] = proc
            for child in _descendants(proc):
                found[child.pid] = child
        except psutil.Error:
            continue
    # Ranks forked from the warm pool carry the zygote's command line: their pid files
    # (written by each rank at start) find them; a pid reused since is not theirs.
    for pid_file in (job_root / "pids").glob("rank-*.pid"):
        rank_pid = live_pid(pid_file)
        with contextlib.suppress(psutil.Error):
            if rank_pid is None or rank_pid in found:
                continue
            proc = psutil.Process(rank_pid)
            found[rank_pid] = proc
            for child in _descendants(proc):
                found[child.pid] = child
    marker = str(job_root)
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = proc.info["cmdline"] or []
            if any(marker == arg for arg in cmdline):
                found[proc.pid] = proc
                for child in _descendants(proc):
                    found[child.pid] = child
    return [p for p in found.values() if p.pid != psutil.Process().pid]


def _ended(p: psutil.Process) -> bool:
    """Gone, or a zombie: it has ended, whoever reaps it. (``psutil.wait_procs`` waits
    for another process's zombie until its parent reaps it: an orphan's parent is
    init, which reaps when it likes; here that held every cancel about 1.5 s.)"""
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _wait_ended(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` s for ``procs`` to end (reaping our own children);
    returns those still running."""
    deadline = time.monotonic() + timeout
    left = list(procs)
    while True:
        psutil.wait_procs(left, timeout=0)  # reaps the ones that are our children
        left = [p for p in left if not _ended(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.01)


def terminate(procs: list[psutil.Process], grace: float = 5.0) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL what is left, and reap.

    A stopped process (SIGSTOP, a debugger) is continued after the SIGTERM, so that it
    can act on it instead of sitting out the grace.
    """
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGTERM)
            p.send_signal(signal.SIGCONT)
    left = _wait_ended(procs, grace)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(left, timeout=5)
