"""The backend seam: submit schedules exactly the dry run it validated, once; every
backend/algorithm pair runs or is refused at dry-run in one line; the named fakes of
:mod:`alchemist.testing.fakes` play the contract (and drive the magic without torchrun)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from traitlets.config import Config

from alchemist import client
from alchemist.backends import register_backend
from alchemist.backends.api import DryRunInfo, JobRequest
from alchemist.backends.local import LocalBackend
from alchemist.errors import SpecError
from alchemist.job.spec import ALGORITHMS, JobState
from alchemist.testing.fakes import (
    FailingBackend,
    InstantBackend,
    NeverStartsBackend,
    SlowCancelBackend,
)


class CountingBackend(InstantBackend):
    name = "counting"

    def __init__(self) -> None:
        self.dryruns = 0
        self.scheduled: list[DryRunInfo] = []

    def _dryrun(self, req: JobRequest) -> DryRunInfo:
        self.dryruns += 1
        info = super()._dryrun(req)
        info.request["call"] = self.dryruns  # each dry run is told apart
        return info

    def _schedule(self, req: JobRequest, info: DryRunInfo) -> None:
        self.scheduled.append(info)
        super()._schedule(req, info)


def test_submit_schedules_the_dry_run_it_validated_once() -> None:
    backend = CountingBackend()
    register_backend("counting", backend)
    try:
        job = client.submit("x = 1", namespace={}, backend="counting", outputs=["x"])
        assert job.status().state == JobState.SUCCEEDED
    finally:
        register_backend("counting", None)
    assert backend.dryruns == 1
    assert [i.request["call"] for i in backend.scheduled] == [1]


def _backends(home: Path) -> list[Any]:
    from alchemist.backends.kubernetes import KubernetesBackend

    k8s = KubernetesBackend(
        config=Config(), namespace="default", image="img", pvc="home", mount_path=str(home)
    )

    class SyncOnly(InstantBackend):
        name = "sync-only"
        algorithms = frozenset({"sync"})

    return [LocalBackend(), k8s, SyncOnly()]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_backend_runs_or_refuses_each_algorithm_in_one_line(
    algorithm: str, alchemist_home: Path
) -> None:
    from alchemist.job.jobdir import JobDir
    from alchemist.job.spec import JobSpec

    for backend in _backends(alchemist_home):
        spec = JobSpec(workers=2, algorithm=algorithm, backend=backend.name)
        req = JobRequest("jpair000001", "ana", spec, JobDir(alchemist_home / "jobs" / "jp"))
        if algorithm in backend.algorithms:
            assert backend.dryrun(req).text
            continue
        with pytest.raises(SpecError) as e:
            backend.dryrun(req)
        assert len(str(e.value).splitlines()) == 1
        assert f"does not run algorithm {algorithm!r}; it runs sync" in str(e.value)
    assert {"local", "kubernetes"} <= {
        b.name for b in _backends(alchemist_home) if algorithm in b.algorithms
    }


def test_the_magic_on_named_fakes(ip: Any, fake_backend: Callable[[type], str]) -> None:
    name = fake_backend(FailingBackend)
    with pytest.raises(UsageError, match="the fake backend always fails"):
        ip.run_cell_magic("alchemist_distributed", f"--backend {name} --no-widget", "x = 1")
    name = fake_backend(InstantBackend)
    ip.run_cell_magic("alchemist_distributed", f"--backend {name} --no-widget -o x", "x = 1")
    assert ip.user_ns["x"] is None  # the instant fake writes every output as None


def test_never_starting_and_slow_cancelling_jobs(fake_backend: Callable[[type], str]) -> None:
    never = client.submit("pass", namespace={}, backend=fake_backend(NeverStartsBackend))
    assert never.wait(timeout=0.5).state == JobState.PENDING
    never.cancel()
    assert never.status().state == JobState.CANCELLED
    slow = client.submit("pass", namespace={}, backend=fake_backend(SlowCancelBackend))
    assert slow.status().state == JobState.RUNNING
    slow.cancel()
    assert slow.status().state == JobState.CANCELLED
