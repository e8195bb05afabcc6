"""Where this process stands: rank, world size, device, job.

Inside a job the values come from torchrun's environment; in a plain notebook the
process is rank 0 of a world of 1, so the same cell runs in both places.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from alchemist.job.jobdir import JobDir


@dataclass(frozen=True)
class Context:
    """This process's place in the job.

    Attributes:
        rank: global rank (0 outside a job).
        world_size: number of processes (1 outside a job).
        local_rank: rank on this node.
        device: ``torch.device`` this rank should use (``cuda:<local_rank>`` when the job
            asked for GPUs and CUDA is available, else ``cpu``).
        job_id: the job's id, or None outside a job.
        job_dir: the job directory, or None outside a job.
        spec: the job spec as a dict (empty outside a job).
    """

    rank: int
    world_size: int
    local_rank: int
    device: Any
    job_id: str | None
    job_dir: JobDir | None
    spec: dict[str, Any]

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that writes checkpoints and outputs."""
        return self.rank == 0

    @property
    def in_job(self) -> bool:
        return self.job_id is not None

    @property
    def algorithm(self) -> str:
        return str(self.spec.get("algorithm") or "sync")


def _device(local_rank: int, gpus: int) -> Any:
    import torch

    if gpus > 0 and torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if gpus == 0 and os.environ.get("ALCHEMIST_JOB_ID") is None and torch.cuda.is_available():
        # A plain notebook with a GPU: prototype on it.
        return torch.device("cuda", 0)
    return torch.device("cpu")


@lru_cache(maxsize=1)
def context() -> Context:
    """This process's :class:`Context` (computed once)."""
    job_dir_env = os.environ.get("ALCHEMIST_JOB_DIR")
    job_dir = JobDir(Path(job_dir_env)) if job_dir_env else None
    spec: dict[str, Any] = {}
    if job_dir is not None and job_dir.spec.exists():
        spec = json.loads(job_dir.spec.read_text())
    gpus = int((spec.get("resources") or {}).get("gpus") or 0)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return Context(
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        local_rank=local_rank,
        device=_device(local_rank, gpus),
        job_id=os.environ.get("ALCHEMIST_JOB_ID"),
        job_dir=job_dir,
        spec=spec,
    )
