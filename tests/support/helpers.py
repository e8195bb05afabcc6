"""Helpers shared by the core tests: a job index row, and a command run as another user."""

from __future__ import annotations

import subprocess
import time

from alchemist.store import JobRecord

#: The unprivileged account the permission tests act as (``nobody``).
NOBODY = 65534


def job_record(job_id: str, owner: str = "ana") -> JobRecord:
    """A pending job's index row whose directory does not exist."""
    return JobRecord(
        id=job_id,
        owner=owner,
        name="job",
        backend="local",
        state="pending",
        reason=None,
        created=time.time(),
        started=None,
        finished=None,
        restarts=0,
        spec={},
        job_dir=f"/nowhere/{job_id}",
    )


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as ``nobody`` (needs root): what another user of the machine sees."""
    return subprocess.run(
        list(argv),
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
