"""``bmuf``: block-wise model-update filtering (Chen & Huo, ICASSP 2016).

Every worker trains its own copy with the user's optimizer for a *block* of
``block_size`` local steps, starting from the global model ``W_g(t−1)``. At the end of
block ``t`` the local models are averaged (one all-reduce) into ``W̄(t)`` and the block
update is filtered with block momentum:

    G(t)   = W̄(t) − W_g(t−1)              # aggregated block update
    Δ(t)   = η Δ(t−1) + ζ G(t)            # η block momentum, ζ block learning rate
    W(t)   = W(t−1) + Δ(t)
    W_g(t) = W(t) + η Δ(t)   (Nesterov block momentum, NBM)
    W_g(t) = W(t)            (classical block momentum, CBM)

and every worker starts the next block from ``W_g(t)``. ``W(0) = W_g(0)`` are rank 0's
initial parameters (broadcast at start), ``Δ(0) = 0``.

The model the paper evaluates is ``W(t)``, the filtered global model; ``W_g(t)`` is only
where the next block starts (with Nesterov block momentum it is a look-ahead point
``η Δ(t)`` beyond ``W(t)``). ``optimizer.finish()`` (called by the runtime after the cell)
closes an incomplete last block with the same filter and then loads ``W(t)`` into the
model, so every rank ends with the same model, the global one. Every rank must take the
same number of steps (``alchemist.shard`` guarantees it), as with ``sync``.

Defaults follow the paper's recommendation: ``block_momentum`` η = 1 − 1/N (None selects
it), ``block_lr`` ζ = 1, Nesterov block momentum on. ``block_size`` (local steps per block)
defaults to 16; the paper sizes blocks by data, so tune it to the communication cost.

``local_momentum`` says what happens to the workers' own optimizer momentum when a new
block starts from ``W_g(t)``: ``reset`` (the default, as CNTK's BMUF, which resets it
after every aggregation) zeroes it, so a block does not carry a velocity built up on a
model it no longer holds; ``keep`` carries it over. Reset zeroes the first-moment buffers
of the local optimizer's state, ``momentum_buffer`` (SGD, RMSprop, LARS) and ``exp_avg``
(Adam, AdamW, NAdam, RAdam, LAMB); other state (second moments, step counts) is kept.
For momentum SGD without dampening (torch's default) a zeroed buffer is exactly a fresh
optimizer.

At world size 1 the model and optimizer are returned unchanged (plain local training).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from alchemist.runtime.algorithms import ALGORITHM_DEFAULTS, check
from alchemist.runtime.algorithms._base import RankContext, WrappedOptimizer, params_of

NAME = "bmuf"
DEFAULTS = ALGORITHM_DEFAULTS[NAME]

#: The state entries that ``local_momentum="reset"`` zeroes: torch's names for the
#: first moment (SGD, RMSprop and LARS: ``momentum_buffer``; the Adam family and LAMB:
#: ``exp_avg``).
MOMENTUM_KEYS = ("momentum_buffer", "exp_avg")


def _vector(params: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def _assign(vector: torch.Tensor, params: list[torch.Tensor]) -> None:
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(vector[offset : offset + n].view_as(p))
            offset += n


class BMUFOptimizer(WrappedOptimizer):
    """Local steps with the user's optimizer; a filtered block update every block.

    Attributes:
        block_size, block_momentum, block_lr, nesterov, local_momentum: the settings in use.
        blocks: number of block updates done so far.
        model: ``W(t)``, the global model after the last block update (flattened).
        block_start: ``W_g(t)``, where the current block started (flattened).
    """

    def __init__(
        self,
        inner: torch.optim.Optimizer,
        ctx: RankContext,
        *,
        block_size: int,
        block_momentum: float,
        block_lr: float,
        nesterov: bool,
        local_momentum: str = "reset",
    ) -> None:
        super().__init__(inner)
        self.world_size = ctx.world_size
        self.block_size = block_size
        self.block_momentum = block_momentum
        self.block_lr = block_lr
        self.nesterov = nesterov
        self.local_momentum = local_momentum
        self.steps = 0
        self.blocks = 0
        self._finished = False
        params = params_of(inner)
        start = _vector(params).clone()
        dist.broadcast(start, src=0)
        _assign(start, params)
        self.block_start = start.clone()  # W_g(t−1): where the current block started
        self.model = start.clone()  # W(t−1)
        self.delta = torch.zeros_like(start)  # Δ(t−1)

    def step(self, closure: Callable[[], float] | None = None) -> Any:
        loss = self.local_step(closure)
        self.steps += 1
        if self.steps % self.block_size == 0:
            self.block_update()
        return loss

    @torch.no_grad()
    def block_update(self) -> None:
        """End the current block on every rank (collective)."""
        params = params_of(self.inner)
        average = _vector(params).clone()
        dist.all_reduce(average, op=dist.ReduceOp.SUM)
        average /= self.world_size  # W̄(t)
        block_grad = average - self.block_start  # G(t)
        self.delta.mul_(self.block_momentum).add_(block_grad, alpha=self.block_lr)  # Δ(t)
        self.model += self.delta  # W(t)
        if self.nesterov:
            self.block_start = self.model + self.block_momentum * self.delta  # W_g(t)
        else:
            self.block_start = self.model.clone()
        _assign(self.block_start, params)
        if self.local_momentum == "reset":
            self.reset_local_momentum()
        self.blocks += 1

    @torch.no_grad()
    def reset_local_momentum(self) -> None:
        """Zero the local optimizer's first-moment buffers (CNTK's reset between blocks)."""
        for state in self.inner.state.values():
            for key in MOMENTUM_KEYS:
                buffer = state.get(key)
                if isinstance(buffer, torch.Tensor):
                    buffer.zero_()

    def finish(self) -> None:
        """Close an incomplete last block and load the global model ``W(t)`` into the model.

        Collective when a block is left to close (skipped without a process group).
        """
        if self._finished:
            return
        self._finished = True
        if self.steps % self.block_size and dist.is_available() and dist.is_initialized():
            self.block_update()
        _assign(self.model, params_of(self.inner))


def wrap(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, ctx: RankContext, **options: Any
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Make ``optimizer`` run BMUF across the job's ranks.

    Options (see :data:`DEFAULTS`): ``block_size`` (local steps per block),
    ``block_momentum`` η (None = 1 − 1/N), ``block_lr`` ζ, ``nesterov``,
    ``local_momentum`` (``reset`` or ``keep``).

    Raises:
        SpecError: an unknown or out-of-range option.
    """
    opts = check(NAME, options, ctx.world_size)
    if ctx.world_size == 1:
        return model, optimizer
    wrapped = BMUFOptimizer(
        optimizer,
        ctx,
        block_size=opts["block_size"],
        block_momentum=float(opts["block_momentum"]),
        block_lr=float(opts["block_lr"]),
        nesterov=opts["nesterov"],
        local_momentum=opts["local_momentum"],
    )
    return model, wrapped
