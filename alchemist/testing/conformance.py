"""The Backend contract as one importable suite, re-run against every backend.

Subclass :class:`BackendContract` in a test module and give it a ``backend_name``
fixture that yields the name of a backend registered for the test (the model:
ipyparallel's ``tests/test_slurm.py``, which imports the shared tests and overrides the
launcher fixtures). ``tests/conformance`` runs it for ``local`` and for the Kubernetes
stand-in; ``tests/k8s_real`` runs it against a real cluster when one answers. It needs
pytest (a test dependency, not one of alchemist's own).

Every test goes through :func:`alchemist.submit`, the one submission path, and uses
the ``alchemist_home`` fixture (a fresh ``ALCHEMIST_HOME``) of the test suite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import alchemist
from alchemist import backends
from alchemist.backends.api import JobRequest
from alchemist.errors import JobNotFoundError
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobSpec, JobState


def _wait(job: alchemist.Job, timeout: float = 180) -> Any:
    status = job.wait(timeout=timeout)
    assert status.state.is_terminal, f"job still {status.state} after {timeout} s:\n{job.logs()}"
    return status


class BackendContract:
    """What every backend guarantees (see :class:`alchemist.backends.api.Backend`).

    Subclasses provide the ``backend_name`` fixture.
    """

    def test_a_job_runs_on_every_rank_and_its_logs_and_metrics_are_kept(
        self, backend_name: str
    ) -> None:
        cell = (
            "import torch, torch.distributed as dist, alchemist\n"
            "t = torch.ones(1)\n"
            "dist.all_reduce(t)\n"
            "r = alchemist.context().rank\n"
            "alchemist.log(0, value=t.item())\n"
            "print(f'rank {r} sum {t.item():.0f}')\n"
        )
        job = alchemist.submit(cell, namespace={}, workers=2, backend=backend_name)
        status = _wait(job)
        assert status.state == JobState.SUCCEEDED, job.logs()
        assert "rank 0 sum 2" in job.logs(rank=0) and "rank 1 sum 2" in job.logs(rank=1)
        assert sorted(e["rank"] for e in job.metrics()) == [0, 1]
        # Terminal states are final; cancelling a finished job changes nothing.
        job.cancel()
        assert job.status().state == JobState.SUCCEEDED
        # A rank that never wrote reads as empty, without an error.
        assert job.log_chunk(7).lines == []

    def test_a_failing_job_reports_why(self, backend_name: str) -> None:
        job = alchemist.submit(
            "raise ValueError('bad learning rate')", namespace={}, workers=1, backend=backend_name
        )
        status = _wait(job)
        assert status.state == JobState.FAILED
        assert "ValueError: bad learning rate" in (status.reason or "")

    def test_cancel_stops_a_running_job_and_is_idempotent(self, backend_name: str) -> None:
        import time

        job = alchemist.submit(
            "import time\nprint('up', flush=True)\ntime.sleep(600)",
            namespace={},
            workers=1,
            backend=backend_name,
        )
        deadline = time.monotonic() + 120
        while "up" not in job.logs(rank=0):
            assert time.monotonic() < deadline, "the job never started"
            assert not job.status().state.is_terminal, job.logs()
            time.sleep(0.2)
        job.cancel()
        assert job.status().state == JobState.CANCELLED
        job.cancel()
        assert job.status().state == JobState.CANCELLED

    def test_dry_run_submits_nothing_and_unknown_jobs_are_not_found(
        self, backend_name: str, alchemist_home: Path
    ) -> None:
        dry = alchemist.submit(
            "print(1)", namespace={}, workers=2, backend=backend_name, dry_run=True
        )
        assert dry.info.backend == backend_name and dry.text
        assert alchemist.jobs() == []
        assert not (alchemist_home / "jobs" / dry.job_id).exists()
        ghost = JobRequest(
            "jnosuchjob0",
            "nobody",
            JobSpec(backend=backend_name),
            JobDir(alchemist_home / "jobs" / "jnosuchjob0"),
        )
        with pytest.raises(JobNotFoundError):
            backends.get_backend(backend_name).status(ghost)

    def test_a_session_goes_through_the_same_dry_run_or_is_refused_in_a_line(
        self, backend_name: str, alchemist_home: Path
    ) -> None:
        """An interactive session is submitted as every job is (``client.submit_session``
        → ``Backend.dryrun``/``submit``): a backend that runs sessions shows what it would
        start; one that does not refuses in one line. Nothing is written either way."""
        from alchemist.client import submit_session
        from alchemist.errors import SpecError
        from alchemist.job.session import session_spec

        spec = session_spec(2, 0, "contract", {}, backend=backend_name)
        config = {"workers": 2, "world_size": 2, "collective_timeout": 60.0}
        if backends.get_backend(backend_name).runs_sessions:
            dry = submit_session(spec, config, dry_run=True)
            assert dry.info.backend == backend_name and dry.job_id.startswith("s")
            assert dry.bundle is None and dry.text
        else:
            with pytest.raises(SpecError, match="does not run interactive sessions"):
                submit_session(spec, config, dry_run=True)
        assert alchemist.jobs() == []
        assert not (alchemist_home / "jobs").exists() or not any(
            (alchemist_home / "jobs").iterdir()
        )
