"""A batch job's ranks started cold: torchrun (or horovodrun) as ``launch.json`` says.

torchrun restarts the worker group itself (``--max-restarts``); it says nothing when it
does, so :meth:`TorchrunRanks.check` shows ``restarting`` from the ranks' records.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from alchemist.backends.local.procs import job_processes, live_pid, terminate
from alchemist.job import outcomes
from alchemist.job.jobdir import JobDir


class TorchrunRanks:
    """The launcher process (torchrun) and the ranks below it."""

    def __init__(self, job_dir: JobDir, proc: subprocess.Popen[bytes], request: dict[str, Any]):
        self.job_dir = job_dir
        self.proc = proc
        self.world = int(request.get("world_size") or 0)
        self.max_restarts = int(request.get("max_restarts") or 0)
        self.restarting: int | None = None  # the attempt whose failure shows as restarting
        self.seen_attempt = 0  # attempts before this one have their restart noted
        self.rc: int | None = None

    @classmethod
    def start(cls, job_dir: JobDir, request: dict[str, Any], env: dict[str, str]) -> TorchrunRanks:
        job_dir.write_state(state="running", started=time.time(), supervisor_pid=os.getpid())
        proc = subprocess.Popen(request["argv"], env=env, cwd=request.get("cwd") or None)
        job_dir.torchrun_pid.write_text(str(proc.pid))
        return cls(job_dir, proc, request)

    def poll(self, seconds: float) -> bool:
        """Whether the ranks are done: torchrun exited, or every rank's code finished
        and every rank process ended (torchrun's own teardown then takes another half
        second or more; the job's state need not wait for it, and torchrun, which has
        nothing left to restart, ends by itself)."""
        try:
            self.rc = self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return self._work_done()
        return True

    def _work_done(self) -> bool:
        if not self.world or not outcomes.work_finished(self.job_dir, self.world):
            return False
        return all(live_pid(self.job_dir.rank_pid(r)) is None for r in range(self.world))

    def check(self) -> dict[str, Any] | None:
        self.restarting = _show_restart(self.job_dir, self.max_restarts, self.restarting)
        attempt = outcomes.latest_attempt(self.job_dir, outcomes.read(self.job_dir))
        while self.seen_attempt < attempt:  # torchrun restarted: say why, and keep it
            try:
                log = self.job_dir.launcher_log.read_text(errors="replace")
            except OSError:
                log = ""
            cause = outcomes.restart_cause(self.job_dir, self.seen_attempt, self.world, log)
            print(outcomes.note_restart(self.job_dir, self.seen_attempt, cause, self.max_restarts))
            self.seen_attempt += 1
        return None

    def stop(self, grace: float) -> None:
        # torchrun forwards SIGTERM to its workers; stragglers (a stopped rank, one
        # blocked in a gloo collective, which ignores signals) are killed after the grace.
        left = job_processes(self.job_dir.root, [self.proc.pid])
        if left:
            terminate(left, grace=grace)
        self.rc = self.proc.wait()

    def ended(self, state: str, reason: str) -> dict[str, Any]:
        return {"state": state, "reason": reason, "exit_code": self.rc}

    def result(self) -> dict[str, Any]:
        if self.rc is None and self._work_done():
            return {"state": "succeeded", "reason": None, "exit_code": 0}
        rc = self.proc.wait() if self.rc is None else self.rc
        if rc == 0 or outcomes.work_finished(self.job_dir, self.world):
            # Every rank's code finished: a rank that aborted in interpreter teardown
            # afterwards (torch 2.13 with gloo, about 1 run in 20) lost no work.
            if rc:
                print(
                    f"[alchemist] torchrun exited with status {rc} after every rank's code"
                    " had finished (a rank aborted in interpreter teardown); the job succeeded",
                    flush=True,
                )
            return {"state": "succeeded", "reason": None, "exit_code": rc}
        try:
            launcher_log = self.job_dir.launcher_log.read_text(errors="replace")
        except OSError:
            launcher_log = ""
        why = outcomes.died_first(self.job_dir, self.world, launcher_log) if self.world else None
        return {
            "state": "failed",
            "reason": why or outcomes.failure_reason(self.job_dir, rc),
            "exit_code": rc,
        }


def _show_restart(job_dir: JobDir, max_restarts: int, shown: int | None) -> int | None:
    """Show ``restarting`` while torchrun restarts the worker group.

    torchrun says nothing when it restarts; the ranks' records do: a rank of the
    current attempt whose code failed, with restarts left, means a new attempt is
    coming; the new attempt's rank 0 then writes its number to ``restarts``.

    Returns:
        The attempt whose failure is shown as ``restarting``, or None.
    """
    if not max_restarts:
        return None
    recorded = outcomes.read(job_dir)
    attempt = outcomes.latest_attempt(job_dir, recorded)
    if shown is not None and attempt > shown:
        job_dir.write_state(state="running")  # the reason: the restart's cause (check)
        return None
    failed = any(o.attempt == attempt and o.status != 0 for o in recorded.values())
    if shown is None and failed and attempt < max_restarts:
        job_dir.write_state(
            state="restarting",
            reason=f"attempt {attempt + 1} failed; restarting the workers"
            f" ({attempt + 1} of {max_restarts} restarts)",
        )
        return attempt
    return shown
