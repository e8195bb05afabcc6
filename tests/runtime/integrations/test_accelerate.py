"""An Accelerate cell under ``%%alchemist_distributed -n 2`` (real 2-rank jobs, gloo, CPU),
and Accelerate's own notebook launcher refused inside a job in one line."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

from alchemist.job.spec import JobState
from tests.support.ecosystem import only_job, steps_of

TRAIN = """
import torch
from accelerate import Accelerator

accelerator = Accelerator(cpu=True)
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 4)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
model, opt, data = accelerator.prepare(model, opt, data)
for step, (xb, yb) in enumerate(data):
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    accelerator.backward(loss)
    opt.step()
    opt.zero_grad()
    accelerator.log({"train/loss": loss.item()}, step=step)
procs, wrapped = accelerator.num_processes, type(model).__name__
state = accelerator.unwrap_model(model).state_dict()
"""


def test_an_accelerate_cell_runs_on_the_jobs_ranks_with_live_curves(ip: Any) -> None:
    ip.run_cell_magic("alchemist_distributed", "-n 2 -o procs,wrapped,state", TRAIN)
    job = only_job()
    assert job.status().state == JobState.SUCCEEDED
    assert (ip.user_ns["procs"], ip.user_ns["wrapped"]) == (2, "DistributedDataParallel")
    assert ip.user_ns["state"]["weight"].shape == (1, 4)
    # 64 examples / 2 ranks / batch 8: 4 steps on each rank, under the name logged.
    assert steps_of(job, "train/loss", rank=0) == [0, 1, 2, 3]
    assert steps_of(job, "train/loss", rank=1) == [0, 1, 2, 3]


def test_notebook_launcher_inside_a_job_fails_in_one_line_naming_the_fix(ip: Any) -> None:
    cell = (
        "from accelerate import notebook_launcher\n"
        "def train():\n"
        "    print('training')\n"
        "notebook_launcher(train, num_processes=2)\n"
    )
    with pytest.raises(UsageError, match=r"notebook_launcher\(train, \.\.\.\) starts its own"):
        ip.run_cell_magic("alchemist_distributed", "-n 2", cell)
    assert only_job().status().state == JobState.FAILED
