"""The zygote: ``python -m alchemist.backends.local.pool.zygote`` (run by the daemon).

It imports torch, numpy and Alchemist's runtime (:data:`PRELOAD`, plus the modules in
``$ALCHEMIST_POOL_PRELOAD``), freezes the garbage collector's view of them, and waits
on its standard input for the daemon's requests. For each job it forks one process per
rank; the child takes a session of its own, the job's environment, folder, log and
thread settings, and runs the rank exactly as ``python -m alchemist.runtime JOB_DIR``
would (:func:`alchemist.runtime.worker.main`). The zygote itself never runs user code,
never opens a process group or store, never runs a tensor operation (that would start
the OpenMP pool, whose threads a fork does not copy), and never initialises CUDA (a
child could then not use it): it checks that before every fork, and refuses to go on
otherwise.

Messages (JSON lines; the daemon's on stdin, ours on stdout):

- in: ``{"op": "fork", "tag": T, "job_root": DIR, "cwd": DIR, "log": FILE,
  "ranks": [ENV, ...], "entry": "session"?}`` (one full environment per rank; with
  ``entry`` ``session`` each child runs a session's engine,
  :func:`alchemist.interactive.engine.main`, instead of a batch rank);
- out: ``{"ready": true, ...}`` once, ``{"forked": T, "pids": [...]}``,
  ``{"exit": PID, "status": CODE}`` (a negative code: killed by that signal),
  ``{"error": TEXT, "tag": T}``.
"""

from __future__ import annotations

import gc
import importlib
import os
import select
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from alchemist.job.spec import RANK_ENTRIES, SESSION_ENTRY

#: Imported before the first fork: what every rank imports anyway. Never the user's own
#: modules (an edited one would go on being served stale).
PRELOAD = (
    "numpy",
    "torch",
    "torch.distributed",
    "torch.nn",
    "torch.nn.functional",
    "torch.optim",
    "torch._dynamo",  # what an optimizer's first step imports (2 s here): torch.optim's
    # methods are wrapped to disable dynamo, which imports it on first call
    "torch.utils.data",
    "cloudpickle",
    "psutil",
    "alchemist",
    "alchemist.runtime.worker",
    "alchemist.runtime.algorithms",
    "alchemist.runtime.large_batch",
    "alchemist.runtime.hooks",
    "alchemist.runtime.recorder",
    "alchemist.metrics.reporter",
    "alchemist.metrics.system",
    "alchemist.bundle",
    "alchemist.job.outcomes",
    # an interactive session's engine (alchemist.interactive.engine); no threads, no sockets
    "ipyparallel",
    "ipyparallel.engine.app",
    "alchemist.interactive.engine",
)
#: Further modules to import (comma-separated), e.g. ``torchvision,transformers``.
PRELOAD_VAR = "ALCHEMIST_POOL_PRELOAD"
#: Exit status of a child whose set-up failed before the rank's code could start.
_SETUP_FAILED = 70
#: The pool's folder (the daemon starts the zygote in it); what was imported when ready.
_FOLDER = Path.cwd()
_BASELINE: set[str] = set()


def _send(fd: int, obj: dict[str, Any]) -> None:
    from alchemist.backends.local.pool.protocol import encode

    os.write(fd, encode(obj))


def _names(var: str) -> list[str]:
    return [n for n in (n.strip() for n in os.environ.get(var, "").split(",")) if n]


def _preload() -> tuple[list[str], str | None]:
    """Import :data:`PRELOAD`, the user's extra modules and what the pool learned its
    jobs import (:mod:`~alchemist.backends.local.pool.learn`); return the modules that
    failed, and the first learned one that started threads (None: none did)."""
    from alchemist.backends.local.pool.learn import LEARNED_VAR
    from alchemist.runtime import recorder

    # torch reads the flight recorder's buffer size when it makes a process group, in
    # the child; set the default here too, as a rank does before its first import.
    recorder.enable()
    for name in PRELOAD:
        importlib.import_module(name)
    failed = []
    for name in _names(PRELOAD_VAR):
        try:
            importlib.import_module(name)
        except Exception:
            failed.append(name)
    for name in _names(LEARNED_VAR):
        try:
            importlib.import_module(name)
        except Exception:
            failed.append(name)
        if threading.active_count() != 1:
            return failed, name  # a fork would not copy its threads
    return failed, None


def _become_rank(cmd: dict[str, Any], env: dict[str, str], channel: tuple[int, int]) -> int:
    """In the forked child: become the job's rank and run it; returns its exit status."""
    os.setsid()  # a session of its own: the zygote's signals are not the rank's
    for fd in channel:
        os.close(fd)
    # Until the rank points fds 1 and 2 at its own log, anything said goes to the job's
    # launcher log (never to the daemon's pipe).
    log = os.open(cmd["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(devnull)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cmd["cwd"])
    # As `python -m alchemist.runtime JOB_DIR` has them.
    import alchemist.runtime

    sys.argv = [
        os.path.join(os.path.dirname(alchemist.runtime.__file__), "__main__.py"),
        cmd["job_root"],
    ]
    sys.path[0] = cmd["cwd"]
    # A fork shares its parent's random state: draw fresh seeds, as a new process would.
    import random

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    import torch

    threads = env.get("OMP_NUM_THREADS", "").strip()
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    # The rank's module, named by the job protocol's table (what `python -m` would run).
    entry = RANK_ENTRIES[cmd.get("entry") or "cell"]
    status = importlib.import_module(entry.main).main(entry.argv(cmd["job_root"], env["RANK"]))
    return int(status or 0)


def _fork(cmd: dict[str, Any], channel: tuple[int, int], out: int) -> bool:
    """Fork the ranks of one request; False when the zygote can no longer serve."""
    import torch

    if torch.cuda.is_initialized():  # a child could not use CUDA: never fork then
        _send(out, {"error": "CUDA was initialised in the zygote", "tag": cmd["tag"]})
        return False
    pids = []
    for env in cmd["ranks"]:
        pid = os.fork()
        if pid == 0:  # the rank
            status = _SETUP_FAILED
            try:
                status = _become_rank(cmd, env, channel)
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                try:
                    if env.get("RANK") == "0" and cmd.get("entry") != SESSION_ENTRY:
                        from alchemist.backends.local.pool.learn import record

                        record(_FOLDER, _BASELINE)
                    import atexit

                    atexit._run_exitfuncs()  # as the interpreter would at exit
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(status & 0xFF)
        pids.append(pid)
    _send(out, {"forked": cmd["tag"], "pids": pids})
    return True


def _reap(out: int) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(out, {"exit": pid, "status": os.waitstatus_to_exitcode(status)})


def main() -> int:
    from alchemist.backends.local.pool.protocol import Lines

    # The daemon's pipes move off fds 0 and 1, so that nothing printed by a preloaded
    # module can be read as a message.
    cmd_in, out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon stops us by closing stdin
    failed, threaded = _preload()
    import torch

    if threaded is not None:
        _send(out, {"error": f"{threaded} starts threads when imported", "unsafe": threaded})
        return 1
    global _BASELINE
    _BASELINE = set(sys.modules)  # a rank's imports beyond these are learned

    if threading.active_count() != 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        _send(out, {"error": f"a preloaded module started Python threads ({names})"})
        return 1
    gc.collect()
    gc.freeze()  # the children share these pages instead of copying them on the next gc
    _send(
        out,
        {
            "ready": True,
            "pid": os.getpid(),
            "cuda_initialized": torch.cuda.is_initialized(),
            "preload_failed": failed,
        },
    )
    lines = Lines(cmd_in)
    channel = (cmd_in, out)
    while not lines.eof:
        ready, _, _ = select.select([cmd_in], [], [], 0.05)
        if ready:
            for cmd in lines.feed():
                if cmd.get("op") == "fork" and not _fork(cmd, channel, out):
                    return 1
        _reap(out)
    # The daemon is gone: running ranks go on (each in a session of its own); their
    # supervisors watch them by pid.
    return 0


if __name__ == "__main__":
    sys.exit(main())
