"""The launcher of a local job: ``python -m alchemist.backends.local.supervisor JOB_DIR``.

One supervisor for every kind of local job: a batch job's ranks started cold under
torchrun (:mod:`.cold`) or forked from the user's warm pool (:mod:`.warm`), and an
interactive session's controller and engines (:mod:`.session`). It runs in a session of
its own (so it outlives the kernel that submitted it), waits in the machine's queue until
the job fits (state ``queued``, with the reason; :mod:`alchemist.backends.local.admission`),
starts the ranks as ``launch.json`` (written by the dry run) says, and then runs the one
supervision loop (:func:`supervise`), which owns what every kind shares: cancel (SIGTERM,
or the cancel marker) with a grace period, the ``--timeout``, the bound on ranks stuck in
teardown after their work finished. What differs (restarts, a session's stop and idle
timeout) is each kind's :meth:`Ranks.check`. The final state is written to ``state.json``
and is the work's: when every rank recorded that its code finished
(:mod:`alchemist.job.outcomes`), a rank aborting in interpreter teardown does not fail the
job; a failure names the rank that died first. It imports neither torch nor the job
store, so it starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from alchemist.backends.local import admission
from alchemist.backends.local.procs import STOP_GRACE_S
from alchemist.job import outcomes
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import SESSION_ENTRY

#: Seconds between two looks at the ranks.
POLL_S = 0.2


class Ranks(Protocol):
    """One kind of job's running processes, as :func:`supervise` watches them."""

    def poll(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True once the ranks all ended by themselves."""

    def check(self) -> dict[str, Any] | None:
        """What this kind watches besides the shared rules (a restart, a session's stop
        or idle timeout): the final state fields to end with now, or None to go on."""

    def stop(self, grace: float) -> None:
        """SIGTERM what still runs, SIGKILL after ``grace``; idempotent."""

    def ended(self, state: str, reason: str) -> dict[str, Any]:
        """The final state fields of ranks stopped for ``reason`` (cancel, timeout)."""

    def result(self) -> dict[str, Any]:
        """The final state fields of ranks that ended (by themselves or stopped once
        their work had finished): succeeded, or failed naming the rank that died first."""


def supervise(
    job_dir: JobDir,
    ranks: Ranks,
    *,
    world: int,
    timeout: float | None,
    cancelled: Callable[[], bool],
) -> dict[str, Any]:
    """Watch ``ranks`` to their end and return the job's final state fields."""
    started = time.time()
    look = started + 1.0  # when to look for ranks stuck in teardown next
    while True:
        if ranks.poll(POLL_S):
            return ranks.result()
        if cancelled() or job_dir.cancel_marker.exists():
            ranks.stop(STOP_GRACE_S)
            return ranks.ended("cancelled", job_dir.cancel_reason())
        if timeout and time.time() - started > timeout:
            ranks.stop(STOP_GRACE_S)
            return ranks.ended("failed", f"timed out after {timeout:g} s (--timeout)")
        if time.time() >= look:
            look = time.time() + 1.0
            late = outcomes.teardown_overdue(job_dir, world)
            if late is not None:
                print(
                    f"[alchemist] every rank's code finished {late:.0f} s ago, but the ranks"
                    " are still in teardown (interpreter exit, atexit handlers, the process"
                    " group); stopping them",
                    flush=True,
                )
                ranks.stop(STOP_GRACE_S)
                return ranks.result()
        final = ranks.check()
        if final is not None:
            ranks.stop(STOP_GRACE_S)
            return final


def main(argv: list[str]) -> int:
    job_dir = JobDir(Path(argv[0]))
    request = json.loads(job_dir.launch.read_text())
    signalled = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal signalled
        signalled = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    env = {**os.environ, **request["env"]}
    session = request.get("entry") == SESSION_ENTRY
    if session:
        from alchemist.backends.local.session import SessionRanks, stop_requested

        def cancelled() -> bool:
            return signalled or stop_requested(job_dir)
    else:

        def cancelled() -> bool:
            return signalled

    queue: admission.Queue | None = None
    ranks: Any = None
    final: dict[str, Any] = {"state": "failed", "reason": "the supervisor failed"}
    try:
        queue = queue_of(request)
        granted: list[int] | None = []
        if queue is not None:
            granted = wait_for_admission(job_dir, request, queue, cancelled)
            if granted and request["admission"]["gpus"] and not session:
                # The job's own devices: each rank's cuda:LOCAL_RANK is one of them.
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in granted)
        if granted is None:
            final = {"state": "cancelled", "reason": job_dir.cancel_reason()}
            if session:
                final = SessionRanks.asked_to_stop(job_dir) or final
        else:
            ranks = start(job_dir, request, env, granted)
            final = supervise(
                job_dir,
                ranks,
                world=int(request.get("world_size") or 0),
                timeout=request.get("timeout"),
                cancelled=lambda: signalled,
            )
    except Exception as e:  # said in the launcher log and the state
        print(f"[alchemist] supervisor: {type(e).__name__}: {e}", flush=True)
        final = {"state": "failed", "reason": f"the supervisor failed: {e}"}
        if ranks is not None:
            ranks.stop(STOP_GRACE_S)  # nothing of the job outlives a failed supervisor
    finally:
        # Ranks that ended by themselves are left to end (a rank 0 still writing its
        # last TensorBoard events is not stopped). Free the job's place before the state
        # says it ended: whoever sees the end may submit the next job at once.
        if queue is not None:
            queue.release(job_dir.job_id)
        if final.get("state") == "succeeded" and not final.get("reason"):
            final["reason"] = outcomes.restarts_summary(job_dir)  # what it came through
        job_dir.write_state(finished=time.time(), **final)
    return 0


def start(
    job_dir: JobDir, request: dict[str, Any], env: dict[str, str], granted: list[int]
) -> Ranks:
    """Start the job's processes as its launch request says: a session's, or a batch
    job's from the warm pool (where it matches this environment) or else cold."""
    if request.get("entry") == SESSION_ENTRY:
        from alchemist.backends.local.session import SessionRanks

        return SessionRanks.start(job_dir, request, env, granted)
    if request.get("warm"):
        from alchemist.backends.local.warm import WarmRanks

        warm = WarmRanks.start(job_dir, request, env)
        if warm is not None:
            return warm
    from alchemist.backends.local.cold import TorchrunRanks

    return TorchrunRanks.start(job_dir, request, env)


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
    :meth:`LocalBackend._dryrun` wrote: owner, created, slots, gpus, capacity. While it
    waits the state is ``queued`` with the reason."""
    adm = request["admission"]
    pid = os.getpid()
    ticket = admission.Ticket(
        job_id=job_dir.job_id,
        owner=adm["owner"],
        created=adm["created"],
        slots=adm["slots"],
        gpus=adm["gpus"],
        job_root=str(job_dir.root),
        pid=pid,
        pid_started=admission.process_started(pid),
    )
    shown = None
    enqueued = False
    while True:
        try:
            if not enqueued:
                queue.enqueue(ticket)
                enqueued = True
            got: list[int] | admission.Wait = queue.try_admit(job_dir.job_id)
        except admission.QueueLocked as e:  # another account holds the queue's lock
            got = admission.Wait(0, str(e))
        if not isinstance(got, admission.Wait):
            return got
        if cancelled() or job_dir.cancel_marker.exists():
            return None
        if got.reason != shown:
            shown = got.reason
            job_dir.write_state(state="queued", reason=got.reason, supervisor_pid=pid)
            print(f"[alchemist] queued: {got.reason}", flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
