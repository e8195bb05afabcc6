"""A listing that indexes a job while it is being submitted does not fail the submit.

A job's files are written before its row, so that a directory whose row was lost is
indexed again by the next listing (``client._reindex``). A listing in another process
(the panel polling, ``alchemist jobs`` in a terminal, a test waiting for the job) can
therefore index the job between the two; the submit then found its row taken and
failed with ``UNIQUE constraint failed: jobs.id``, a traceback in the notebook (seen
with a real kernel in CI). Here the listing runs at exactly that moment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from alchemist import client
from alchemist.job.spec import JobState


def test_a_job_indexed_by_a_listing_mid_submit_is_submitted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = client.atomic_write_json
    listed: list[list[str]] = []

    def write_then_list(path: Path, data: Any) -> None:
        real(path, data)
        if path.name == "record.json":  # the files are there, the row is not yet
            listed.append([j.id for j in client.jobs()])

    monkeypatch.setattr(client, "atomic_write_json", write_then_list)
    job = client.submit("x = 1", namespace={}, workers=1, name="raced")
    monkeypatch.setattr(client, "atomic_write_json", real)
    assert listed == [[job.id]]  # the listing indexed it from its files
    assert job.wait(timeout=120).state == JobState.SUCCEEDED, job.logs()
    assert [(j.id, j.name) for j in client.jobs()] == [(job.id, "raced")]  # one job, one row
    assert client.attach(job.id).name == "raced"
