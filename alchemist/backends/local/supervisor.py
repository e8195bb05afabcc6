"""The launcher of a local job: ``python -m alchemist.backends.local.supervisor JOB_DIR``.

It runs in a session of its own (so it outlives the kernel that submitted it), waits
in the machine's queue until the job fits (state ``queued``, with the reason;
:mod:`alchemist.backends.local.admission`), forks the ranks from the user's warm pool
(:mod:`alchemist.backends.local.warm`) or else starts torchrun exactly as recorded in
``launch.json`` by the dry run (on the GPUs it was granted), enforces the timeout,
turns SIGTERM into a clean cancel, and writes the final state to ``state.json``. The
final state is the work's: when every rank recorded that its code finished
(:mod:`alchemist.job.outcomes`), a non-zero exit of torchrun (a rank aborting in
interpreter teardown) does not fail the job; a failure names the rank that died first.
It imports neither torch nor the job store, so it starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from alchemist.backends.local import admission, warm
from alchemist.backends.local.procs import job_processes, terminate
from alchemist.job import outcomes
from alchemist.job.jobdir import JobDir


def main(argv: list[str]) -> int:
    job_dir = JobDir(Path(argv[0]))
    request = json.loads(job_dir.launch.read_text())
    timeout = request.get("timeout")
    cancelled = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal cancelled
        cancelled = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    env = {**os.environ, **request["env"]}
    queue = queue_of(request)
    final: dict[str, Any] = {"state": "failed", "reason": "the supervisor failed"}
    try:
        granted: list[int] | None = []
        if queue is not None:
            granted = wait_for_admission(job_dir, request, queue, lambda: cancelled)
            if granted and request["admission"]["gpus"]:
                # The job's own devices: each rank's cuda:LOCAL_RANK is one of them.
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in granted)
        if granted is None:
            final = {"state": "cancelled", "reason": "cancelled by the user"}
        else:
            warm_final = None
            if request.get("warm"):
                warm_final = warm.run(
                    job_dir, request, env, timeout, lambda: cancelled, CANCEL_GRACE_S
                )
            final = warm_final or _run(job_dir, request, env, timeout, lambda: cancelled)
    finally:
        # Free the job's place before the state says it ended: whoever sees the end
        # may submit the next job at once.
        if queue is not None:
            queue.release(job_dir.job_id)
        job_dir.write_state(finished=time.time(), **final)
    return 0


def queue_of(request: dict[str, Any]) -> admission.Queue | None:
    adm = request.get("admission")
    if not adm:
        return None
    capacity = admission.Capacity(**adm["capacity"])
    return admission.Queue(admission.queue_dir(), capacity)


def wait_for_admission(
    job_dir: JobDir, request: dict[str, Any], queue: admission.Queue, cancelled: Any
) -> list[int] | None:
    """Hold a ticket until the job is admitted: the GPUs granted, or None if cancelled
    (``cancelled()``, or the cancel marker). ``request["admission"]`` is what
    :meth:`LocalBackend._dryrun` (or a session's start) wrote: owner, created, slots,
    gpus, capacity. While it waits the state is ``queued`` with the reason."""
    adm = request["admission"]
    pid = os.getpid()
    queue.enqueue(
        admission.Ticket(
            job_id=job_dir.job_id,
            owner=adm["owner"],
            created=adm["created"],
            slots=adm["slots"],
            gpus=adm["gpus"],
            job_root=str(job_dir.root),
            pid=pid,
            pid_started=admission.process_started(pid),
        )
    )
    shown = None
    while True:
        got = queue.try_admit(job_dir.job_id)
        if not isinstance(got, admission.Wait):
            return got
        if cancelled() or job_dir.cancel_marker.exists():
            return None
        if got.reason != shown:
            shown = got.reason
            job_dir.write_state(state="queued", reason=got.reason, supervisor_pid=pid)
            print(f"[alchemist] queued: {got.reason}", flush=True)
        time.sleep(0.2)


#: Seconds a cancelled job's ranks get to stop on SIGTERM before they are killed.
CANCEL_GRACE_S = 3.0


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
        job_dir.write_state(state="running", reason=None)
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


def _run(
    job_dir: JobDir, request: dict[str, Any], env: dict[str, str], timeout: Any, cancelled_: Any
) -> dict[str, Any]:
    """Run torchrun to its end; return the job's final state fields."""
    started = time.time()
    job_dir.write_state(state="running", started=started, supervisor_pid=os.getpid())
    proc = subprocess.Popen(request["argv"], env=env, cwd=request.get("cwd") or None)
    (job_dir.pids / "torchrun.pid").write_text(str(proc.pid))

    reason = None
    cancelled = False
    restarting: int | None = None
    max_restarts = int(request.get("max_restarts") or 0)
    world = int(request.get("world_size") or 0)
    look = time.time() + 1.0  # when to look for ranks stuck in teardown next
    while True:
        try:
            rc = proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        late = None
        if time.time() >= look:
            look = time.time() + 1.0
            late = outcomes.teardown_overdue(job_dir, world)
        if cancelled_() or job_dir.cancel_marker.exists():
            cancelled = True
            reason = "cancelled by the user"
        elif timeout and time.time() - started > timeout:
            reason = f"timed out after {timeout:g} s (--timeout)"
        elif late is not None:
            print(
                f"[alchemist] every rank's code finished {late:.0f} s ago, but the ranks"
                " are still in teardown (interpreter exit, atexit handlers, the process"
                " group); stopping them",
                flush=True,
            )
        else:
            restarting = _show_restart(job_dir, max_restarts, restarting)
            continue
        # torchrun forwards SIGTERM to its workers; stragglers (a stopped rank, one
        # blocked in a gloo collective, which ignores signals) are killed after the grace.
        terminate(job_processes(job_dir.root, [proc.pid]), grace=CANCEL_GRACE_S)
        rc = proc.wait()
        break

    if cancelled:
        return {"state": "cancelled", "reason": reason, "exit_code": rc}
    if reason:
        return {"state": "failed", "reason": reason, "exit_code": rc}
    if rc == 0 or outcomes.work_finished(job_dir, world):
        # Every rank's code finished: a rank that aborted in interpreter teardown
        # afterwards (torch 2.13 with gloo, about 1 run in 20) lost no work.
        if rc:
            print(
                f"[alchemist] torchrun exited with status {rc} after every rank's code had"
                " finished (a rank aborted in interpreter teardown); the job succeeded",
                flush=True,
            )
        return {"state": "succeeded", "reason": None, "exit_code": rc}
    try:
        launcher_log = job_dir.launcher_log.read_text(errors="replace")
    except OSError:
        launcher_log = ""
    why = outcomes.died_first(job_dir, world, launcher_log) if world else None
    return {
        "state": "failed",
        "reason": why or outcomes.failure_reason(job_dir, rc),
        "exit_code": rc,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
