"""FSDP2 (``torch.distributed.fsdp.fully_shard``) and ``torch.compile`` inside a job:
real 2-rank jobs on the local backend (gloo, CPU)."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

from alchemist.job.spec import JobState
from tests.support.ecosystem import only_job, steps_of

FSDP = """
import torch, alchemist
from torch.distributed.fsdp import fully_shard

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(4):
    x = torch.randn(8, 16)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    alchemist.log(step, fsdp_loss=loss.item())
local_rows = model[0].weight.to_local().shape[0]           # this rank's shard
full = {k: v.full_tensor() for k, v in model.state_dict().items()}  # a collective
"""

COMPILE = """
import torch, alchemist
from torch._inductor.compile_fx import compile_fx

graphs = []
def inductor(gm, example_inputs):        # inductor (C++ on CPU), counting its graphs
    graphs.append(len(gm.graph.nodes))
    return compile_fx(gm, example_inputs)

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
compiled = torch.compile(net, backend=inductor)  # the module first, then DDP around it
model, opt = alchemist.distribute(compiled, torch.optim.SGD(net.parameters(), lr=0.05))
for step in range(3):
    x = torch.randn(16, 8)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    alchemist.log(step, compiled_loss=loss.item())
frames, wrapper = len(graphs), type(model).__name__
"""


def test_fully_shard_trains_sharded_on_gloo_and_gathers_the_full_state(ip: Any) -> None:
    ip.run_cell_magic("alchemist_distributed", "-n 2 -o local_rows,full", FSDP)
    job = only_job()
    assert job.status().state == JobState.SUCCEEDED
    assert ip.user_ns["local_rows"] == 16  # 32 rows of the first layer, half on rank 0
    assert {k: tuple(v.shape) for k, v in ip.user_ns["full"].items()} == {
        "0.weight": (32, 16),
        "0.bias": (32,),
        "2.weight": (1, 32),
        "2.bias": (1,),
    }
    assert steps_of(job, "fsdp_loss") == [0, 1, 2, 3]
    assert steps_of(job, "fsdp_loss", rank=1) == [0, 1, 2, 3]


def test_torch_compile_runs_inside_a_job(ip: Any) -> None:
    ip.run_cell_magic("alchemist_distributed", "-n 2 -o frames,wrapper", COMPILE)
    job = only_job()
    assert job.status().state == JobState.SUCCEEDED
    assert ip.user_ns["frames"] >= 1  # dynamo captured a graph and inductor compiled it
    assert ip.user_ns["wrapper"] == "DistributedDataParallel"
    assert steps_of(job, "compiled_loss") == [0, 1, 2]


def test_a_second_init_process_group_of_another_backend_fails_in_one_line(ip: Any) -> None:
    cell = "import torch.distributed as dist\ndist.init_process_group('nccl')\n"
    with pytest.raises(UsageError, match="process group is already made with 'gloo'"):
        ip.run_cell_magic("alchemist_distributed", "-n 2", cell)
