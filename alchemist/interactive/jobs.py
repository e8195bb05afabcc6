"""A session as a job of kind ``session``: its job directory and its row in the index.

A session is recorded as a batch job is (``spec.json``, ``record.json``, a row in the
job store, its backend's), so ``alchemist jobs``, the REST API and the panel list
it, and ``alchemist logs``/``metrics``/``cancel`` work on it. Its spec's ``entry`` is
``session`` (what its ranks run: cells, one at a time), which is how a reader tells a
session from a batch job (:func:`kind_of`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from alchemist.job import config
from alchemist.job.jobdir import JobDir, atomic_write_json, make_private_dir
from alchemist.job.session import SESSION_ENTRY, SessionDir
from alchemist.job.spec import JobSpec, Resources


def kind_of(spec: dict[str, Any]) -> str:
    """``session`` for a session's spec (as stored), else ``batch``."""
    return "session" if spec.get("entry") == SESSION_ENTRY else "batch"


def session_spec(
    workers: int,
    gpus_per_worker: int,
    name: str | None,
    env: dict[str, str],
    backend: str = "local",
) -> JobSpec:
    """The spec of a session: validated as a batch job's (name, sizes, env), then its
    entry set to ``session``.

    Raises:
        SpecError: an invalid option (the message names it).
    """
    spec = JobSpec(
        name=name or "session",
        workers=workers,
        resources=Resources(gpus=gpus_per_worker),
        backend=backend,
        env=dict(env),
    ).validate()
    return dataclasses.replace(spec, entry=SESSION_ENTRY)


def create_session_job(spec: JobSpec, session_config: dict[str, Any]) -> JobDir:
    """Make the session's job directory (0700), its files and its row; returns the directory."""
    from alchemist import jobindex
    from alchemist.client import _record_file, new_job_id, pending_record
    from alchemist.store import get_store

    job_id = "s" + new_job_id()[1:]
    job_dir = JobDir(config.jobs_root() / job_id)
    with jobindex.indexing(job_id):
        job_dir.create()
        sd = SessionDir(job_dir)
        make_private_dir(sd.root)
        atomic_write_json(job_dir.spec, spec.to_dict())
        atomic_write_json(sd.config, session_config)
        record = pending_record(job_id, config.current_user(), spec, job_dir)
        atomic_write_json(job_dir.record, {**_record_file(record), "kind": "session"})
        get_store().add_new(record)
    return job_dir
