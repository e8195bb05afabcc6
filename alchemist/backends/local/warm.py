"""A local job's ranks forked from the user's warm pool (:mod:`.pool`), watched by its
supervisor exactly as torchrun's are: the same state, logs, timeout, cancel, restarts
(the whole group, forked again on a new attempt prefix) and failure reasons.

:meth:`WarmRanks.start` returns None when the job must run cold instead (the reason is
in the launcher log); then nothing of the job has started. :func:`launch_ranks` also forks
a session's engines (:mod:`.session`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import Any

import psutil

from alchemist.backends.local.pool import client
from alchemist.backends.local.pool.protocol import Lines, encode
from alchemist.backends.local.procs import STOP_GRACE_S, terminate
from alchemist.job import outcomes
from alchemist.job.jobdir import JobDir

#: How long the pool may take to fork a job's ranks before the job runs cold instead.
FORK_WAIT_S = 30.0


def rank_envs(
    base: dict[str, str], job_id: str, world: int, attempt: int, max_restarts: int
) -> list[dict[str, str]]:
    """Each rank's environment: what torchrun would give it (one node, ``world`` ranks)."""
    return [
        {
            **base,
            "RANK": str(r),
            "LOCAL_RANK": str(r),
            "GROUP_RANK": "0",
            "ROLE_RANK": str(r),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "GROUP_WORLD_SIZE": "1",
            "ROLE_WORLD_SIZE": str(world),
            "ROLE_NAME": "default",
            "TORCHELASTIC_RESTART_COUNT": str(attempt),
            "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
            "TORCHELASTIC_RUN_ID": job_id,
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "ALCHEMIST_WARM": "1",
        }
        for r in range(world)
    ]


class Attempt:
    """One attempt's ranks: their processes and the exit statuses heard so far."""

    def __init__(
        self, job_dir: JobDir, conn: socket.socket, lines: Lines, pids: list[int], attempt: int
    ) -> None:
        self.job_dir = job_dir
        self.conn = conn
        self.lines = lines
        self.attempt = attempt
        # None: the rank was gone (and reaped) before we looked; its exit is on its way.
        self.procs: dict[int, psutil.Process | None] = {}
        for rank, pid in enumerate(pids):
            try:
                self.procs[rank] = psutil.Process(pid)
            except psutil.Error:
                self.procs[rank] = None
        self.codes: dict[int, int] = {}
        self.unknown: set[int] = set()  # ranks that ended while the pool was not answering
        self.order: list[int] = []  # ranks in the order they ended
        self.lost = False  # the pool stopped answering: watch the pids ourselves

    def poll(self, timeout: float) -> None:
        if not self.lost:
            try:
                msgs = self.lines.wait(timeout)
            except OSError:
                msgs, self.lines.eof = [], True
            for msg in msgs:
                if msg.get("event") == "exit":
                    self.codes[msg["rank"]] = int(msg["status"])
                    self.order.append(msg["rank"])
            if msgs:  # for the diagnosis: how each rank ended (torchrun's are in its log)
                outcomes.record_exit_codes(self.job_dir, self.attempt, self.codes)
            if self.lines.eof and len(self.codes) < len(self.procs):
                self.lost = True
        else:
            time.sleep(timeout)
        if self.lost:
            for rank, proc in self.procs.items():
                if rank not in self.codes and not _running(proc):
                    self.codes[rank] = 0 if self._finished(rank) else 1
                    self.unknown.add(rank)
                    self.order.append(rank)

    @property
    def done(self) -> bool:
        return len(self.codes) >= len(self.procs)

    def failed(self) -> list[int]:
        return [r for r in self.order if self.codes[r] != 0]

    def stop(self, grace: float) -> None:
        """SIGTERM every rank still running (and its children), SIGKILL after ``grace``."""
        left = [p for r, p in self.procs.items() if r not in self.codes and p and _running(p)]
        tree: list[psutil.Process] = []
        for p in left:
            tree.append(p)
            with contextlib.suppress(psutil.Error):
                tree.extend(p.children(recursive=True))
        terminate(tree, grace=grace)
        deadline = time.time() + 5
        while not self.done and time.time() < deadline:
            self.poll(0.05)

    def _finished(self, rank: int) -> bool:
        """Whether ``rank`` recorded that its code of this attempt finished."""
        o = outcomes.read(self.job_dir).get(rank)
        return o is not None and o.status == 0 and o.attempt == self.attempt

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()


def _running(proc: psutil.Process | None) -> bool:
    if proc is None:
        return False
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _launch(
    job_dir: JobDir, request: dict[str, Any], env: dict[str, str], attempt: int
) -> Attempt | None:
    """Ask the pool for one attempt's ranks; None (the reason logged) to run cold."""
    world = int(request["world_size"])
    return launch_ranks(
        job_dir,
        rank_envs(env, job_dir.job_id, world, attempt, int(request.get("max_restarts") or 0)),
        request.get("env") or {},
        attempt,
        request.get("cwd") or str(job_dir.root),
    )


def launch_ranks(
    job_dir: JobDir,
    envs: list[dict[str, str]],
    job_env: dict[str, str],
    attempt: int,
    cwd: str,
    entry: str | None = None,
) -> Attempt | None:
    """Fork one process per environment in ``envs`` (rank r gets ``envs[r]``) from the
    user's pool: a batch job's ranks, or with ``entry`` ``"session"`` a session's
    engines. None (the reason logged) to start them cold instead."""
    base = {k: v for k, v in os.environ.items() if k not in job_env}
    try:
        conn = client.connect(base, job_env, restart=attempt > 0)
    except client.Cold as e:
        print(f"[alchemist] cold start: {e}", flush=True)
        return None
    world = len(envs)
    msg: dict[str, Any] = {
        "op": "run",
        "job_id": job_dir.job_id,
        "attempt": attempt,
        "job_root": str(job_dir.root),
        "cwd": cwd,
        "log": str(job_dir.launcher_log),
        "ranks": envs,
    }
    if entry is not None:
        msg["entry"] = entry
    t0 = time.perf_counter()
    lines = Lines(conn.fileno())
    try:
        conn.sendall(encode(msg))
        deadline = time.time() + FORK_WAIT_S
        while time.time() < deadline and not lines.eof:
            for reply in lines.wait(deadline - time.time()):
                if reply.get("event") == "started":
                    print(
                        f"[alchemist] warm start: {world} ranks forked from the warm pool"
                        f" in {(time.perf_counter() - t0) * 1000:.0f} ms",
                        flush=True,
                    )
                    return Attempt(job_dir, conn, lines, reply["pids"], attempt)
                if reply.get("event") == "error":
                    print(
                        f"[alchemist] cold start: the warm pool failed: {reply['message']}",
                        flush=True,
                    )
                    conn.close()
                    return None
    except OSError as e:
        print(f"[alchemist] cold start: the warm pool does not answer ({e})", flush=True)
    conn.close()
    if attempt == 0:
        print("[alchemist] cold start: the warm pool did not fork the ranks in time", flush=True)
    return None


class WarmRanks:
    """A batch job's ranks forked from the user's warm pool, one :class:`Attempt` at a
    time: as torchrun does, a rank that fails with restarts left stops the whole group
    and a new attempt starts (:meth:`check`)."""

    def __init__(
        self, job_dir: JobDir, request: dict[str, Any], env: dict[str, str], first: Attempt
    ) -> None:
        self.job_dir = job_dir
        self.request = request
        self.env = env
        self.world = int(request["world_size"])
        self.max_restarts = int(request.get("max_restarts") or 0)
        self.current = first
        self.attempt = 0

    @classmethod
    def start(
        cls, job_dir: JobDir, request: dict[str, Any], env: dict[str, str]
    ) -> WarmRanks | None:
        """Fork the first attempt's ranks; None (the reason logged) to run cold instead:
        nothing was started then."""
        first = _launch(job_dir, request, env, 0)
        if first is None:
            return None
        job_dir.write_state(state="running", started=time.time(), supervisor_pid=os.getpid())
        return cls(job_dir, request, env, first)

    def poll(self, seconds: float) -> bool:
        self.current.poll(seconds)
        # A failed attempt with restarts left is no end: check() starts the next one.
        return self.current.done and not (self.current.failed() and self._restarts_left())

    def _restarts_left(self) -> bool:
        return self.attempt < self.max_restarts

    def check(self) -> dict[str, Any] | None:
        if not self.current.failed():
            return None
        if not self._restarts_left():
            self.current.stop(STOP_GRACE_S)  # as torchrun: the others are stopped
            return self.result()
        # As torchrun: one rank failed, so the whole group stops and starts again.
        current = self.current
        known = {r: current.codes[r] for r in current.failed() if r not in current.unknown}
        current.stop(STOP_GRACE_S)
        current.close()
        cause = outcomes.restart_cause(self.job_dir, self.attempt, self.world, codes=known)
        print(outcomes.note_restart(self.job_dir, self.attempt, cause, self.max_restarts))
        self.job_dir.write_state(state="restarting")
        self.attempt += 1
        nxt = _launch(self.job_dir, self.request, self.env, self.attempt)
        if nxt is None:
            return self.ended(
                "failed", "the warm pool could not start the next attempt (see the launcher log)"
            )
        self.current = nxt
        self.job_dir.write_state(state="running")  # the reason: the restart's cause
        return None

    def stop(self, grace: float) -> None:
        self.current.stop(grace)
        self.current.close()

    def ended(self, state: str, reason: str) -> dict[str, Any]:
        return {"state": state, "reason": reason, "exit_code": None}

    def result(self) -> dict[str, Any]:
        current = self.current
        current.close()
        codes = current.codes
        failed = current.failed()
        if not failed or outcomes.work_finished(self.job_dir, self.world):
            if failed:
                print(
                    f"[alchemist] rank {failed[0]} exited with status {codes[failed[0]]}"
                    " after every rank's code had finished; the job succeeded",
                    flush=True,
                )
            return {"state": "succeeded", "reason": None, "exit_code": 0}
        # The rank that died first, as torchrun's report would name it: ranks stopped by
        # our SIGTERM after the first failure are not the cause.
        first = failed[0]
        exit_code = codes[first]
        known = {r: codes[r] for r in failed if r not in current.unknown}
        why = outcomes.died_first(self.job_dir, self.world, codes=known)
        return {
            "state": "failed",
            "reason": why or outcomes.failure_reason(self.job_dir, exit_code),
            "exit_code": exit_code if exit_code >= 0 else 128 - exit_code,
        }
