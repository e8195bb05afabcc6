"""What the ecosystem tests share: the one job a test ran, and its curves by name."""

from __future__ import annotations

from typing import Any

import alchemist


def only_job() -> Any:
    jobs = alchemist.jobs()
    assert len(jobs) == 1, [j.id for j in jobs]
    return jobs[0]


def steps_of(job: Any, metric: str, rank: int = 0) -> list[int]:
    """The steps at which ``rank`` logged ``metric`` (the monitor draws these)."""
    return [e["step"] for e in job.metrics() if e["rank"] == rank and metric in e["values"]]
