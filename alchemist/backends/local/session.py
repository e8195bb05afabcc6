"""An interactive session's processes on this machine, under the one local supervisor.

A session is a job whose spec's ``entry`` is ``session`` (:mod:`alchemist.job.session`),
submitted as every job is (:func:`alchemist.client.submit_session` →
:meth:`LocalBackend.submit`). Once the machine's queue admitted it, its supervisor
(:mod:`.supervisor`)

1. starts the ipyparallel controller on loopback (``python -m
   alchemist.interactive.controller JOB_DIR``), whose connection files land 0600 in the
   session's 0700 ``session/ipython/security/``,
2. starts one engine per rank with the rank's environment at the same time, forked from
   the user's warm pool (:func:`.warm.launch_ranks`) or as new processes (``python -m
   alchemist.interactive.engine JOB_DIR RANK``) on a rendezvous store on loopback (an
   engine sets itself up, then waits for the controller's connection file), and marks
   the job ``running`` once the controller wrote it,
3. is watched by :func:`.supervisor.supervise` like any job (cancel, timeout); what is a
   session's own is :meth:`SessionRanks.check`: a rank that dies stops the others and
   fails the session with the reason ("rank 1 was killed by signal 9 (SIGKILL) (out of
   memory?)"), as torchrun stops a batch job's group; a stop request
   (``session/stop-requested``) ends it as ``succeeded``; idling past ``idle_timeout``
   (after a warning in ``state.json``'s reason) as ``cancelled``.

The engines' and the controller's command lines name the job directory, so
:func:`alchemist.backends.local.procs.job_processes` finds every process of the session.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

from alchemist.backends.launch import LOOPBACK, loopback_socket, store_on
from alchemist.backends.local.procs import job_processes, spawn_logged, terminate
from alchemist.backends.local.warm import Attempt, launch_ranks
from alchemist.job import outcomes
from alchemist.job.jobdir import JobDir
from alchemist.job.session import SESSION_ENTRY, IdleClock, SessionDir, rank_env, read_stop
from alchemist.job.spec import RANK_ENTRIES


def stop_requested(job_dir: JobDir) -> bool:
    """Whether the notebook asked the session to stop (its stop marker)."""
    return SessionDir(job_dir).stop_marker.exists()


def died(rank: int, code: int) -> str:
    """One line saying how rank ``rank``'s engine ended (``code`` as Popen reports it)."""
    if code < 0:
        return f"rank {rank} {outcomes.how_ended(code)}"  # as a batch job's reason says it
    return f"rank {rank} exited with status {code}"


class SessionRanks:
    """The controller and the engines: cold processes (``procs``, by name: ``controller``,
    ``rank-<r>``), or engines forked from the warm pool (``warm``)."""

    def __init__(self, job_dir: JobDir, cfg: dict[str, Any]) -> None:
        self.job_dir = job_dir
        self.sd = SessionDir(job_dir)
        self.cfg = cfg
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.warm: Attempt | None = None
        self.store: Any = None  # the cold engines' rendezvous store, served while we run
        self.ready = False
        self.deadline = time.time() + float(cfg["start_timeout"])
        self.clock = IdleClock(self.sd, cfg)

    @classmethod
    def asked_to_stop(cls, job_dir: JobDir) -> dict[str, Any] | None:
        """The final state the notebook asked for with the stop marker (an empty marker:
        the user's stop; a reason: the notebook gave up on a session that did not
        start), or None when nobody asked."""
        marker = SessionDir(job_dir).stop_marker
        if marker.exists():
            state, reason = read_stop(marker)
            return {"state": state, "reason": reason}
        return None

    @classmethod
    def start(
        cls, job_dir: JobDir, request: dict[str, Any], env: dict[str, str], gpus: list[int]
    ) -> SessionRanks:
        sd = SessionDir(job_dir)
        self = cls(job_dir, json.loads(sd.config.read_text()))
        try:
            self._spawn(request, env, gpus)
        except BaseException:
            self.stop(0.5)
            raise
        return self

    def _spawn(self, request: dict[str, Any], env: dict[str, str], gpus: list[int]) -> None:
        jd = self.job_dir
        cwd = self.cfg.get("cwd") or str(jd.root)
        self.procs["controller"] = spawn_logged(
            ["-m", "alchemist.interactive.controller", str(jd.root)],
            jd.launcher_log,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            cwd=cwd,
        )
        # The engines start now, beside the controller: each sets itself up (torch, the
        # process group) while the controller starts, then waits for its connection file.
        # The store's socket listens before they start, so they may dial it while this
        # process is still importing torch to serve it.
        sock = loopback_socket()
        port = int(sock.getsockname()[1])
        world = int(self.cfg["world_size"])
        envs = [
            rank_env(self.cfg, jd.job_id, str(jd.root), r, port, LOOPBACK, base=env, gpus=gpus)
            for r in range(world)
        ]
        if request.get("warm"):
            # Forked from the user's warm pool (torch and ipyparallel imported): on the
            # pool's store, under the session's own prefix. None: started cold, said why.
            self.warm = launch_ranks(
                jd, envs, request.get("env") or {}, 0, cwd, entry=SESSION_ENTRY
            )
        if self.warm is None:
            entry = RANK_ENTRIES[SESSION_ENTRY]
            for rank, rank_vars in enumerate(envs):
                self.procs[f"rank-{rank}"] = spawn_logged(
                    ["-m", entry.module, *entry.argv(str(jd.root), str(rank))],
                    jd.rank_log(rank),
                    env=rank_vars,
                    cwd=cwd,
                )
            # The store lives as long as this process: the cold ranks' group meets on it.
            self.store = store_on(sock)
        else:
            sock.close()  # warm ranks meet on the pool's store: no torch import here

    def poll(self, seconds: float) -> bool:
        time.sleep(seconds)
        return False  # a session ends only when asked to, or when a process of it ends

    def check(self) -> dict[str, Any] | None:
        asked = self.asked_to_stop(self.job_dir)
        if asked is not None:
            return asked
        ended = self._ended()
        if ended is not None:
            name, code = ended
            if name == "controller":
                return self.ended("failed", f"the session's controller exited with status {code}")
            rank = int(name.split("-", 1)[1])
            return self.ended("failed", died(rank, code) + "; the other ranks were stopped")
        if not self.ready:
            if self.sd.engine_file.exists():
                self.ready = True
                self.job_dir.write_state(
                    state="running", reason=None, started=time.time(), supervisor_pid=os.getpid()
                )
            elif time.time() > self.deadline:
                return self.ended(
                    "failed",
                    "the session's controller did not start within"
                    f" {float(self.cfg['start_timeout']):g} s (--start-timeout);"
                    " see logs/launcher.log",
                )
            return None
        what, text = self.clock.tick()
        if what == "warn":
            self.job_dir.write_state(reason=text)
        elif what == "clear":
            self.job_dir.write_state(reason=None)
        elif what == "stop":
            return self.ended("cancelled", text or "idle")
        return None

    def _ended(self) -> tuple[str, int] | None:
        """``(name, status)`` of a process that ended, if one did."""
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

    def stop(self, grace: float) -> None:
        if self.warm is not None:
            self.warm.stop(grace)
            self.warm.close()
        roots = [p.pid for p in self.procs.values() if p.poll() is None]
        left = job_processes(self.job_dir.root, roots)
        if left:
            terminate(left, grace=grace)
        for p in self.procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover - terminate() killed it
                pass

    def ended(self, state: str, reason: str) -> dict[str, Any]:
        return {"state": state, "reason": reason}

    def result(self) -> dict[str, Any]:  # pragma: no cover - poll() never says the end
        return self.ended("failed", "the session's processes ended")
