"""A session's launcher: ``python -m alchemist.interactive.supervisor JOB_DIR``.

Like a batch job's supervisor (:mod:`alchemist.backends.local.supervisor`) it runs in a
session of its own, so the engines outlive the kernel that started them, and it writes
the job's ``state.json``. It

0. waits in the machine's queue (:mod:`alchemist.backends.local.admission`) for its CPU
   slots and GPUs, as a batch job does (state ``queued`` with the reason meanwhile),
1. starts the rendezvous store on loopback (:func:`alchemist.backends.launch.loopback_store`),
2. starts the ipyparallel controller on loopback (``python -m
   alchemist.interactive.controller JOB_DIR``), whose connection files land 0600 in the
   session's 0700 ``session/ipython/security/``,
3. starts one engine per rank (``python -m alchemist.interactive.engine JOB_DIR RANK``)
   with the rank's environment at the same time (an engine sets itself up, then waits
   for the controller's connection file), and marks the job ``running`` once the
   controller wrote it,
4. watches them: a rank that dies stops the others and fails the session with the
   reason ("rank 1 was killed by signal 9 (SIGKILL) (out of memory?)"), as torchrun
   stops a batch job's group; a stop request (``session/stop-requested``) ends it as
   ``succeeded``, a cancel (``alchemist cancel``, SIGTERM) as ``cancelled``, and idling
   past ``idle_timeout`` (after a warning in ``state.json``'s reason) as ``cancelled``.

The engines' and the controller's command lines name the job directory, so
:func:`alchemist.backends.local.procs.job_processes` finds every process of the session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from alchemist.backends.launch import LOOPBACK, loopback_socket, store_on
from alchemist.backends.local.procs import job_processes, spawn_logged, terminate
from alchemist.backends.local.supervisor import queue_of, wait_for_admission
from alchemist.backends.local.warm import Attempt, launch_ranks
from alchemist.interactive.idle import IdleClock
from alchemist.job import outcomes
from alchemist.job.jobdir import JobDir
from alchemist.job.session import SESSION_ENTRY, SessionDir, read_stop

#: Seconds between two looks at the engines.
POLL_S = 0.2
#: Seconds the engines get to stop on SIGTERM before they are killed.
STOP_GRACE_S = 3.0


def died(rank: int, code: int) -> str:
    """One line saying how rank ``rank``'s engine ended (``code`` as Popen reports it)."""
    if code < 0:
        return f"rank {rank} {outcomes.how_ended(code)}"  # as a batch job's reason says it
    return f"rank {rank} exited with status {code}"


def rank_env(
    cfg: dict[str, Any],
    job_dir: JobDir,
    rank: int,
    port: int,
    master_addr: str = LOOPBACK,
    pod: bool = False,
    gpus: list[int] | None = None,
) -> dict[str, str]:
    """The environment of rank ``rank``'s engine: what torchrun and the local backend give
    a batch rank (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_*``, the agent-store
    flag that makes :func:`alchemist.runtime.worker._attempt_store` use the store on an
    attempt prefix, ``GLOO_SOCKET_IFNAME``, per-rank ``CUDA_VISIBLE_DEVICES``), plus the
    session's collective timeout. The user's ``env`` comes first; the runtime's wins.

    ``pod``: the rank is a pod of its own (Kubernetes): it is local rank 0 of a node of
    one, its store is served by rank 0's pod at ``master_addr``, and its devices are the
    ones the device plugin gave the pod. ``gpus``: the devices the machine's queue
    granted the session, one per rank."""
    world = int(cfg["world_size"])
    env = {**os.environ, **cfg.get("env", {})}
    env.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": "0" if pod else str(rank),
            "LOCAL_WORLD_SIZE": "1" if pod else str(world),
            "GROUP_RANK": str(rank) if pod else "0",
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCHELASTIC_RESTART_COUNT": "0",
            "ALCHEMIST_STORE_PREFIX": "alchemist/session/pg-0",
            "ALCHEMIST_JOB_ID": job_dir.job_id,
            "ALCHEMIST_JOB_DIR": str(job_dir.root),
            "ALCHEMIST_COLLECTIVE_TIMEOUT": str(cfg["collective_timeout"]),
            "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    # An idle engine is no stalled rank: the stall watchdog stays off unless asked for.
    env.setdefault("ALCHEMIST_WATCHDOG_S", "0")
    if pod:
        return env
    if cfg.get("loopback_if"):
        env.setdefault("GLOO_SOCKET_IFNAME", cfg["loopback_if"])
    if int(cfg.get("gpus_per_worker") or 0) > 0:
        env["CUDA_VISIBLE_DEVICES"] = str(gpus[rank] if gpus else rank)
        env["LOCAL_RANK"] = "0"  # the one device it sees is cuda:0
    return env


class _Stop(Exception):
    def __init__(self, state: str, reason: str | None) -> None:
        super().__init__(reason)
        self.state = state
        self.reason = reason


def main(argv: list[str]) -> int:
    job_dir = JobDir(Path(argv[0]))
    sd = SessionDir(job_dir)
    cfg = json.loads(sd.config.read_text())
    signalled: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        signalled.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    procs = _Children()
    final = {"state": "failed", "reason": "the session's supervisor failed"}
    queue = queue_of(cfg)
    try:
        granted: list[int] | None = []
        if queue is not None:
            # Ranks hold CPU slots and GPUs as a batch job's do: wait in the same queue.
            granted = wait_for_admission(
                job_dir, cfg, queue, lambda: bool(signalled) or sd.stop_marker.exists()
            )
            if granted is None:
                _check(job_dir, sd, procs, signalled)  # raises with the state it asked for
        final = _run(job_dir, sd, cfg, procs, signalled, granted or [])
    except _Stop as stop:
        final = {"state": stop.state, "reason": stop.reason}  # type: ignore[dict-item]
    except Exception as e:  # said in the launcher log and the state
        print(f"[alchemist] session supervisor: {type(e).__name__}: {e}", flush=True)
        final = {"state": "failed", "reason": f"the session's supervisor failed: {e}"}
    finally:
        _stop_all(job_dir, procs)
        if queue is not None:
            queue.release(job_dir.job_id)  # before the state says it ended (as a batch job)
        job_dir.write_state(finished=time.time(), **final)
    return 0


@dataclass
class _Children:
    """What the supervisor watches: the controller and cold engines (``procs``, by name:
    ``controller``, ``rank-<r>``), or engines forked from the warm pool (``warm``)."""

    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    warm: Attempt | None = None

    def ended(self) -> tuple[str, int] | None:
        """``(name, status)`` of a child that ended, if one did."""
        for name, proc in self.procs.items():
            code = proc.poll()
            if code is not None:
                return name, code
        if self.warm is not None:
            self.warm.poll(0)
            if self.warm.order:
                rank = self.warm.order[0]
                return f"rank-{rank}", self.warm.codes[rank]
        return None


def _stop_all(job_dir: JobDir, kids: _Children) -> None:
    if kids.warm is not None:
        kids.warm.stop(STOP_GRACE_S)
        kids.warm.close()
    roots = [p.pid for p in kids.procs.values() if p.poll() is None]
    left = job_processes(job_dir.root, roots)
    if left:
        terminate(left, grace=STOP_GRACE_S)
    for p in kids.procs.values():
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - terminate() killed it
            pass


def _check(
    job_dir: JobDir,
    sd: SessionDir,
    kids: _Children,
    signalled: list[int],
) -> None:
    """Raise :class:`_Stop` when the session must end now."""
    if signalled or job_dir.cancel_marker.exists():
        raise _Stop("cancelled", "cancelled by the user")
    if sd.stop_marker.exists():
        # A reason in the marker: the notebook gave up on the session (it did not start).
        raise _Stop(*read_stop(sd.stop_marker))
    ended = kids.ended()
    if ended is not None:
        name, code = ended
        if name == "controller":
            raise _Stop("failed", f"the session's controller exited with status {code}")
        rank = int(name.split("-", 1)[1])
        raise _Stop("failed", died(rank, code) + "; the other ranks were stopped")


def _run(
    job_dir: JobDir,
    sd: SessionDir,
    cfg: dict[str, Any],
    kids: _Children,
    signalled: list[int],
    gpus: list[int],
) -> dict[str, Any]:
    cwd = cfg.get("cwd") or str(job_dir.root)
    base_env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    kids.procs["controller"] = spawn_logged(
        ["-m", "alchemist.interactive.controller", str(job_dir.root)],
        job_dir.launcher_log,
        env=base_env,
        cwd=cwd,
    )
    # The engines start now, beside the controller: each sets itself up (torch, the
    # process group) while the controller starts, then waits for its connection file.
    # The store's socket listens before they start, so they may dial it while this
    # process is still importing torch to serve it.
    sock = loopback_socket()
    port = int(sock.getsockname()[1])
    envs = [rank_env(cfg, job_dir, r, port, gpus=gpus) for r in range(int(cfg["world_size"]))]
    if cfg.get("warm"):
        # Forked from the user's warm pool (torch and ipyparallel imported): on the
        # pool's store, under the session's own prefix. None: started cold, said why.
        kids.warm = launch_ranks(job_dir, envs, cfg.get("env") or {}, 0, cwd, entry=SESSION_ENTRY)
    if kids.warm is None:
        for rank, env in enumerate(envs):
            kids.procs[f"rank-{rank}"] = spawn_logged(
                ["-m", "alchemist.interactive.engine", str(job_dir.root), str(rank)],
                job_dir.rank_log(rank),
                env=env,
                cwd=cwd,
            )
        # The store lives as long as this process: the cold ranks' group meets on it.
        store = store_on(sock)
    else:
        sock.close()  # warm ranks meet on the pool's store: no torch import here
    deadline = time.time() + float(cfg["start_timeout"])
    while not sd.engine_file.exists():
        _check(job_dir, sd, kids, signalled)
        if time.time() > deadline:
            raise _Stop(
                "failed",
                f"the session's controller did not start within {cfg['start_timeout']:g} s"
                " (--start-timeout); see logs/launcher.log",
            )
        time.sleep(0.05)
    job_dir.write_state(
        state="running", reason=None, started=time.time(), supervisor_pid=os.getpid()
    )
    clock = IdleClock(sd, cfg)
    while True:
        _check(job_dir, sd, kids, signalled)
        what, text = clock.tick()
        if what == "warn":
            job_dir.write_state(reason=text)
        elif what == "clear":
            job_dir.write_state(reason=None)
        elif what == "stop":
            raise _Stop("cancelled", text)
        time.sleep(POLL_S)
    del store  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
