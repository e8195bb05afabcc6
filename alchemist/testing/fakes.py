"""Named fake backends, for tests where a real torchrun job adds nothing.

The model: JupyterHub's ``tests/mocking.py`` (``NeverSpawner``, ``BadSpawner``, ...):
each fake is named for what it simulates, and plays the Backend contract honestly (its
jobs have a job directory, logs and states, and go through :func:`alchemist.submit`).

- :class:`InstantBackend`: every job succeeds at once. Rank 0's log says so, each rank
  logs one metric event (``loss`` = 1.0 at step 0), and the outputs named with ``-o``
  are written as ``None``.
- :class:`NeverStartsBackend`: jobs stay ``pending`` until cancelled (a full cluster).
- :class:`FailingBackend`: every job fails at once, with :attr:`FailingBackend.reason`.
- :class:`SlowCancelBackend`: jobs run until cancelled; a cancel takes
  :attr:`SlowCancelBackend.cancel_seconds` before the job is ``cancelled``.

Register one for a test with :func:`alchemist.backends.register_backend` (the
``fake_backend`` fixture of ``tests/conftest.py`` does, and unregisters it after).
"""

from __future__ import annotations

import time

import cloudpickle

from alchemist.backends.api import Backend, DryRunInfo, JobRequest
from alchemist.errors import JobNotFoundError
from alchemist.job.spec import JobState, JobStatus
from alchemist.metrics.reporter import Reporter


class _FakeBackend(Backend):
    """Keeps each job's state in its job directory's ``state.json``, as the real ones."""

    def _dryrun(self, req: JobRequest) -> DryRunInfo:
        return DryRunInfo(
            backend=self.name,
            request={"fake": type(self).__name__},
            text=f"# {type(self).__name__}: nothing runs",
        )

    def status(self, req: JobRequest) -> JobStatus:
        if not req.job_dir.root.is_dir():
            raise JobNotFoundError(f"job {req.job_id} has no job directory")
        st = req.job_dir.read_state() or {}
        return JobStatus(
            state=JobState(st.get("state", "pending")),
            reason=st.get("reason"),
            started=st.get("started"),
            finished=st.get("finished"),
        )

    def cancel(self, req: JobRequest) -> None:
        if self.status(req).state.is_terminal:
            return
        req.job_dir.write_state(
            state="cancelled", reason=req.job_dir.cancel_reason(), finished=time.time()
        )


class InstantBackend(_FakeBackend):
    name = "fake-instant"

    def _schedule(self, req: JobRequest, info: DryRunInfo) -> None:
        jd = req.job_dir
        now = time.time()
        for rank in range(req.spec.world_size):
            log = jd.rank_log(rank)
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"[fake] rank {rank} ran the cell instantly\n")
            reporter = Reporter(jd, req.job_id, rank, tensorboard=False)
            reporter.log(0, loss=1.0)
            reporter.close()
        if req.spec.outputs:
            jd.outputs.write_bytes(cloudpickle.dumps(dict.fromkeys(req.spec.outputs)))
        jd.write_state(state="succeeded", reason=None, started=now, finished=now)


class NeverStartsBackend(_FakeBackend):
    name = "fake-never-starts"

    def _schedule(self, req: JobRequest, info: DryRunInfo) -> None:
        req.job_dir.write_state(state="pending", reason="waiting for room (it never comes)")


class FailingBackend(_FakeBackend):
    name = "fake-failing"
    reason = "rank 0 failed: RuntimeError: the fake backend always fails"

    def _schedule(self, req: JobRequest, info: DryRunInfo) -> None:
        now = time.time()
        req.job_dir.write_state(state="failed", reason=self.reason, started=now, finished=now)


class SlowCancelBackend(_FakeBackend):
    name = "fake-slow-cancel"
    cancel_seconds = 2.0

    def _schedule(self, req: JobRequest, info: DryRunInfo) -> None:
        req.job_dir.write_state(state="running", started=time.time())

    def cancel(self, req: JobRequest) -> None:
        if not self.status(req).state.is_terminal:
            time.sleep(self.cancel_seconds)
        super().cancel(req)


FAKES: tuple[type[_FakeBackend], ...] = (
    InstantBackend,
    NeverStartsBackend,
    FailingBackend,
    SlowCancelBackend,
)
