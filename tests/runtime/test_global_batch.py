"""``--global-batch`` end to end: a real 2-rank job sees its share; a bad value is one line."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

import alchemist
from alchemist.job.spec import JobState

CELL = """
import torch
import torch.distributed as dist
import alchemist

ctx = alchemist.context()
mine = alchemist.per_worker_batch()
# batch_size=None: shard() takes the per-worker batch that follows from --global-batch
loader = alchemist.shard(torch.utils.data.TensorDataset(torch.arange(256.0)))
first = len(next(iter(loader))[0])
print(f"per-worker batch {mine}, first batch {first}, world {ctx.world_size}")
seen = [None] * ctx.world_size
dist.all_gather_object(seen, (ctx.rank, mine, first))
"""


def test_each_rank_gets_the_global_batch_divided_by_the_world_size(
    ip: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic("alchemist_distributed", "-n 2 --global-batch 64 --name gb -o seen", CELL)
    out = capsys.readouterr().out
    assert "[rank 0] per-worker batch 32, first batch 32, world 2" in out
    assert "[rank 1] per-worker batch 32, first batch 32, world 2" in out
    assert ip.user_ns["seen"] == [(0, 32, 32), (1, 32, 32)]
    (job,) = alchemist.jobs()
    assert job.status().state == JobState.SUCCEEDED
    assert job.spec.global_batch == 64


@pytest.mark.parametrize(
    ("line", "world"), [("-n 2 --global-batch 1", 2), ("-n 3 --global-batch 2", 3)]
)
def test_global_batch_below_the_world_size_is_one_line_and_submits_nothing(
    ip: Any, capsys: pytest.CaptureFixture[str], line: str, world: int
) -> None:
    # run_cell, as a notebook runs it: what the user sees is what IPython prints.
    result = ip.run_cell(f"%%alchemist_distributed {line}\nprint('never runs')\n")
    assert isinstance(result.error_in_exec, UsageError)
    captured = capsys.readouterr()
    shown = captured.out + captured.err
    batch = line.split()[-1]
    assert (
        f"UsageError: global_batch {batch} is smaller than the world size {world}:"
        " every worker needs at least one sample" in shown
    )
    assert "Traceback" not in shown and "never runs" not in shown
    assert alchemist.jobs() == []


def test_global_batch_not_a_multiple_of_the_world_size_names_the_nearest(
    ip: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch that cannot split evenly is refused rather than trained as a smaller one."""
    result = ip.run_cell("%%alchemist_distributed -n 2 --global-batch 65\nprint('never runs')\n")
    assert isinstance(result.error_in_exec, UsageError)
    captured = capsys.readouterr()
    shown = captured.out + captured.err
    assert "global_batch 65 is not a multiple of the world size 2" in shown
    assert "use 64 or 66" in shown
    assert "Traceback" not in shown and "never runs" not in shown
    assert alchemist.jobs() == []
