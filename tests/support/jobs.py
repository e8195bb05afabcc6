"""Helpers of the handler tests: finished jobs recorded in the real job store."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobSpec
from alchemist.store import JobRecord, get_store

#: The Jupyter server's user in these tests (JUPYTERHUB_USER).
USER = "alice"

#: ``await api(method, *path_parts, params=, body=, raw_body=, headers=)`` → ``(status, json)``
Api = Callable[..., Awaitable[tuple[int, Any]]]


def make_record(
    *,
    name: str = "done",
    owner: str = USER,
    state: str = "succeeded",
    created: float | None = None,
    workers: int = 2,
) -> tuple[JobRecord, JobDir]:
    """Record a finished job in the store with an (empty) job directory.

    This is a job as it looks after it ran: the handlers read it through the same
    client API as a live one (a terminal job is not asked of the backend again).
    """
    from alchemist.client import new_job_id
    from alchemist.job import config

    job_id = new_job_id()
    job_dir = JobDir(config.jobs_root() / job_id).create()
    created = time.time() if created is None else created
    spec = JobSpec(name=name, workers=workers, entry="script").validate()
    record = JobRecord(
        id=job_id,
        owner=owner,
        name=name,
        backend="local",
        state=state,
        reason=None,
        created=created,
        started=created + 1,
        finished=created + 5 if state in ("succeeded", "failed", "cancelled") else None,
        restarts=0,
        spec=spec.to_dict(),
        job_dir=str(job_dir.root),
    )
    get_store().add(record)
    return record, job_dir


def write_events(job_dir: JobDir, events: list[dict[str, Any]]) -> None:
    """Append each event to its rank's metrics file, as the workers' reporters do."""
    job_dir.metrics_dir.mkdir(parents=True, exist_ok=True)
    for e in events:
        with open(job_dir.rank_metrics(int(e["rank"])), "a") as f:
            f.write(json.dumps(e) + "\n")
