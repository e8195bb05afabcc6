"""``horovod``: Horovod's ``DistributedOptimizer`` (Sergeev & Del Balso, 2018).

The job runs under ``horovodrun`` (see :mod:`alchemist.backends.horovod_launch`); gloo
on CPU, NCCL on GPU when Horovod was built with it. ``wrap`` calls ``hvd.init()``,
broadcasts rank 0's parameters and optimizer state, and wraps the optimizer: gradients
are all-reduced (averaged) by Horovod as the backward pass produces them and
``optimizer.step()`` waits for them, then steps.

Horovod is optional; when it is missing ``--algorithm horovod`` fails with one line
naming how to install it. At world size 1 the model and optimizer are returned
unchanged and Horovod is not needed.
"""

from __future__ import annotations

from typing import Any

import torch

from alchemist.errors import BackendError
from alchemist.runtime.algorithms import ALGORITHM_DEFAULTS, check
from alchemist.runtime.algorithms._base import RankContext

NAME = "horovod"
DEFAULTS = ALGORITHM_DEFAULTS[NAME]

INSTALL_HINT = (
    "Horovod is not installed: run scripts/setup.d/50-horovod.sh from the Alchemist checkout"
    " (it builds Horovod 0.28.1 with gloo and the C++17 fix for current torch), or use"
    " another --algorithm (sync, async, bmuf, easgd)"
)


def import_horovod() -> Any:
    """``horovod.torch``, or :class:`BackendError` with :data:`INSTALL_HINT`."""
    try:
        import horovod.torch as hvd
    except ImportError as e:
        raise BackendError(INSTALL_HINT) from e
    return hvd


def wrap(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, ctx: RankContext, **options: Any
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Wrap ``optimizer`` in ``hvd.DistributedOptimizer`` (after ``hvd.init()``).

    Options (see :data:`DEFAULTS`): ``backward_passes_per_step``, ``compression``
    (``none`` or ``fp16``), ``op`` (``average``, ``sum`` or ``adasum``),
    ``gradient_predivide_factor``.

    Raises:
        SpecError: an unknown or invalid option.
        BackendError: Horovod is not installed.
    """
    opts = check(NAME, options, ctx.world_size)
    if ctx.world_size == 1:
        return model, optimizer
    hvd = import_horovod()
    hvd.init()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if opts["compression"] == "fp16" else hvd.Compression.none
    op = {"average": hvd.Average, "sum": hvd.Sum, "adasum": hvd.Adasum}[opts["op"]]
    wrapped = hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        compression=compression,
        backward_passes_per_step=opts["backward_passes_per_step"],
        op=op,
        gradient_predivide_factor=float(opts["gradient_predivide_factor"]),
    )
    return model, wrapped
