"""The job directory: the one place a job's files live, on every backend.

Layout of ``<ALCHEMIST_HOME>/jobs/<job_id>/``::

    spec.json            the JobSpec (written once, at submission)
    bundle/              the shipped cell: source.py, namespace.pkl, manifest.json
    state.json           the launcher's view of the job (state, reason, exit code)
    logs/rank-<r>.log    each rank's stdout and stderr, appended across restarts
    logs/launcher.log    the launcher's own output (torchrun, the supervisor)
    metrics.jsonl        metric events, one JSON object a line
    tensorboard/         TensorBoard event files
    checkpoints/         checkpoints written by rank 0
    outputs.pkl          the values named with ``--outputs``, pickled by rank 0
    pids/                pid files of the launcher and each rank (local backend)

Writers that others read while they write (state, checkpoints, outputs) write a
temporary file and rename it, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=True).encode())


@dataclass(frozen=True)
class JobDir:
    """Paths inside one job directory."""

    root: Path

    @property
    def job_id(self) -> str:
        return self.root.name

    @property
    def spec(self) -> Path:
        return self.root / "spec.json"

    @property
    def bundle(self) -> Path:
        return self.root / "bundle"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def rank_log(self, rank: int) -> Path:
        return self.logs / f"rank-{rank}.log"

    @property
    def launcher_log(self) -> Path:
        return self.logs / "launcher.log"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def outputs(self) -> Path:
        return self.root / "outputs.pkl"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    def create(self) -> JobDir:
        for sub in (
            self.root,
            self.bundle,
            self.logs,
            self.tensorboard,
            self.checkpoints,
            self.pids,
        ):
            sub.mkdir(parents=True, exist_ok=True)
        return self

    def read_state(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def write_state(self, **fields: Any) -> None:
        current = self.read_state() or {}
        current.update(fields)
        atomic_write_json(self.state, current)

    def ranks_with_logs(self) -> list[int]:
        ranks = []
        for p in self.logs.glob("rank-*.log"):
            try:
                ranks.append(int(p.stem.split("-", 1)[1]))
            except ValueError:
                continue
        return sorted(ranks)
