"""``sync``: synchronous data-parallel SGD with all-reduce (PyTorch DistributedDataParallel).

Each rank computes gradients on its share of the batch; DDP averages them with bucketed
all-reduces overlapped with the backward pass, so after ``loss.backward()`` every rank
holds the gradient of the global batch and the user's own ``optimizer.step()`` makes the
same update everywhere. DDP broadcasts rank 0's parameters and buffers at start. The
optimizer is returned unchanged: the communication happens in ``backward()``.

At world size 1 the model and optimizer are returned unchanged (plain local training).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from alchemist.runtime.algorithms import ALGORITHM_DEFAULTS, check
from alchemist.runtime.algorithms._base import RankContext

NAME = "sync"
DEFAULTS = ALGORITHM_DEFAULTS[NAME]


def wrap(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, ctx: RankContext, **options: Any
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Wrap ``model`` in DistributedDataParallel.

    Options (see :data:`DEFAULTS`): ``bucket_cap_mb``, ``find_unused_parameters``,
    ``gradient_as_bucket_view``, ``static_graph`` (DDP's own arguments).

    Raises:
        SpecError: an unknown or out-of-range option.
    """
    opts = check(NAME, options, ctx.world_size)
    if ctx.world_size == 1:
        return model, optimizer
    device = torch.device(ctx.device)
    ids = (
        [device.index if device.index is not None else ctx.local_rank]
        if device.type == "cuda"
        else None
    )
    ddp = DistributedDataParallel(
        model,
        device_ids=ids,
        bucket_cap_mb=float(opts["bucket_cap_mb"]),
        find_unused_parameters=bool(opts["find_unused_parameters"]),
        gradient_as_bucket_view=bool(opts["gradient_as_bucket_view"]),
        static_graph=bool(opts["static_graph"]),
    )
    return ddp, optimizer
