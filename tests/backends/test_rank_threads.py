"""How many CPU threads each rank's torch uses: its worker's CPUs shared by its ranks.

Every rank ran with ``OMP_NUM_THREADS=1`` whatever its share: a 1-rank job, or a pod
given 8 CPUs, ran its CPU work (augmentation, a CPU model, the optimizer) on one core.
Real: a 1-rank and a 2-rank job on the local backend reading ``torch.get_num_threads()``
in the rank; the Kubernetes manifests of a worker with a CPU request.
"""

from __future__ import annotations

import os

import pytest

from alchemist import client
from alchemist.backends.launch import rank_threads
from alchemist.job.spec import JobSpec, JobState, Resources

CELL = "import torch\nprint('threads', torch.get_num_threads(), flush=True)\n"


@pytest.mark.parametrize("start", ["cold", "warm"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_local_ranks_threads_are_its_share_of_the_cores(workers: int, start: str) -> None:
    cores = len(os.sched_getaffinity(0))
    job = client.submit(CELL, namespace={}, workers=workers, no_warm=start == "cold")
    assert job.wait(timeout=120).state == JobState.SUCCEEDED
    share = max(1, cores // workers)
    for rank in range(workers):
        assert f"threads {share}\n" in job.job_dir.rank_log(rank).read_text()


def test_a_user_setting_wins_and_the_share_is_never_zero() -> None:
    job = client.submit(CELL, namespace={}, workers=1, env={"OMP_NUM_THREADS": "1"})
    assert job.wait(timeout=120).state == JobState.SUCCEEDED
    assert "threads 1\n" in job.job_dir.rank_log(0).read_text()
    four_gpus = JobSpec(workers=1, resources=Resources(gpus=4, cpu="2")).validate()  # 4 ranks
    assert rank_threads(2.0, four_gpus) == 1  # fewer cores than ranks: one each
    assert rank_threads(None, four_gpus) == 1  # unknown: torchrun's pick
    two_gpus = JobSpec(workers=2, resources=Resources(gpus=2, cpu="8")).validate()
    assert rank_threads(8.0, two_gpus) == 4
