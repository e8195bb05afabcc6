"""``easgd``: elastic averaging SGD (Zhang, Choromanska & LeCun, NeurIPS 2015).

The asynchronous EASGD of the paper (its Algorithm 1). Every worker ``i`` trains its
own copy ``x_i`` with the user's optimizer (local SGD, or momentum SGD: EAMSGD). Every
``communication_period`` (τ) local steps it exchanges with the centre variable ``x̃``
held by a parameter server on rank 0, atomically:

    diff = α (x_i − x̃)        # α = η ρ, the moving rate
    x_i  ← x_i − diff         # the worker is pulled towards the centre
    x̃    ← x̃ + diff           # the centre is pulled towards the worker

Defaults are the paper's: β = p α = 0.9, i.e. ``moving_rate`` α = 0.9 / p for p workers
(the paper keeps β fixed as p grows); ``communication_period`` τ = 10 (the paper studies
τ from 1 to 64 and finds EASGD stable with large periods).

The paper's moving rate is α = η ρ: the learning rate η times the elastic coefficient ρ.
With ``follow_lr`` (the default) ρ stays fixed when η is scheduled, so each exchange uses

    α_t = α · min(1, η_t / η_0)

with η_t the first param group's learning rate at that exchange and η_0 its base rate:
the ``initial_lr`` a torch scheduler records (``large_batch_schedule`` sets it to the
peak), else the rate when the optimizer was wrapped. ``moving_rate`` is thus α at the
base rate; a decayed or warming-up rate pulls less, and a rate above its base (a cyclic
schedule) never pulls more than α, which keeps β = p α_t within the paper's stable range.
``follow_lr=false`` keeps α fixed whatever the learning rate does.

The centre variable is the model the paper evaluates: ``optimizer.finish()`` (called by
the runtime after the cell and at exit) loads it into rank 0's model once every worker
is done, so outputs and checkpoints taken on rank 0 are the centre. ``optimizer.centre()``
returns the current centre on any rank. Transport, placement (rank 0 hosts the server
in background threads and also trains) and crash behaviour are those of
:mod:`alchemist.runtime.algorithms._ps`: a worker that dies loses at most its
unfinished exchange and the others go on with an intact centre.

At world size 1 the model and optimizer are returned unchanged (plain local training).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from alchemist.runtime.algorithms import ALGORITHM_DEFAULTS, _ps, check
from alchemist.runtime.algorithms._base import (
    RankContext,
    WrappedOptimizer,
    flat,
    params_of,
    unflat_into,
)

NAME = "easgd"
DEFAULTS = ALGORITHM_DEFAULTS[NAME]
SERVER_RANK = 0


class ElasticServer(_ps.ParameterServer):
    """Holds the centre variable ``x̃`` and applies the elastic exchange atomically."""

    def __init__(
        self, world_size: int, host: str, centre: torch.Tensor, moving_rate: float
    ) -> None:
        self.centre_vec = centre.clone()
        self.moving_rate = moving_rate
        self.numel = centre.numel()
        super().__init__(world_size, host)

    def handle(self, header: dict[str, Any], payload: torch.Tensor) -> bytes:
        op = header["op"]
        if op == "pull":
            return _ps.encode({"version": self.version}, self.centre_vec)
        if op != "elastic":
            return _ps.encode({"error": f"unknown op {op!r}"})
        # The worker sends the moving rate it uses now (it follows its learning rate).
        rate = min(1.0, max(0.0, float(header.get("moving_rate", self.moving_rate))))
        diff = rate * (payload - self.centre_vec)
        self.centre_vec += diff
        self.version += 1
        return _ps.encode({"version": self.version}, diff)


class EASGDOptimizer(WrappedOptimizer):
    """Local steps with the user's optimizer; an elastic exchange every τ steps.

    Attributes:
        moving_rate: α, the moving rate at the base learning rate.
        follow_lr: whether each exchange scales α by the learning rate (see the module).
        communication_period: τ.
        exchanges: elastic exchanges this worker has done.
        last_moving_rate: α_t of the last exchange (None before the first).
    """

    def __init__(
        self,
        inner: torch.optim.Optimizer,
        ctx: RankContext,
        *,
        moving_rate: float,
        communication_period: int,
        follow_lr: bool = True,
        finish_timeout: float,
        request_timeout: float,
    ) -> None:
        super().__init__(inner)
        self.moving_rate = moving_rate
        self.follow_lr = follow_lr
        self.communication_period = communication_period
        self.last_moving_rate: float | None = None
        # η_0 when no scheduler records one (see current_moving_rate).
        self._wrapped_lr = float(inner.param_groups[0]["lr"])
        self.finish_timeout = finish_timeout
        params = params_of(inner)
        self.server, self.conn = _ps.start(
            lambda host: ElasticServer(ctx.world_size, host, flat(params), moving_rate),
            ctx,
            SERVER_RANK,
            sum(p.numel() for p in params),
            request_timeout,
        )
        self.steps = 0
        self.exchanges = 0
        self._finished = False
        # Every worker starts from the centre (rank 0's initial parameters); the barrier
        # keeps a fast rank from exchanging before a slow one has pulled the start.
        _, centre = self.conn.request({"op": "pull"})
        unflat_into(centre, self._params())
        dist.barrier()

    def _params(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def centre(self) -> torch.Tensor:
        """The current centre variable ``x̃``, flattened (float32, parameter order)."""
        if self._finished:
            raise RuntimeError("the EASGD exchange has finished; the centre is in rank 0's model")
        return self.conn.request({"op": "pull"})[1]

    def current_moving_rate(self) -> float:
        """α_t = α · min(1, η_t / η_0) with ``follow_lr`` (see the module), else α."""
        if not self.follow_lr:
            return self.moving_rate
        group = self.param_groups[0]
        base = float(group.get("initial_lr", self._wrapped_lr))
        if base <= 0:
            return self.moving_rate
        return self.moving_rate * min(1.0, max(0.0, float(group["lr"]) / base))

    @torch.no_grad()
    def exchange(self) -> None:
        """One elastic exchange with the centre (the paper's Algorithm 1, lines 5-8)."""
        params = self._params()
        rate = self.current_moving_rate()
        _, diff = self.conn.request({"op": "elastic", "moving_rate": rate}, flat(params))
        self.last_moving_rate = rate
        offset = 0
        for p in params:
            n = p.numel()
            p.sub_(diff[offset : offset + n].view_as(p).to(p.device, p.dtype))
            offset += n
        self.exchanges += 1

    def step(self, closure: Callable[[], float] | None = None) -> Any:
        loss = self.local_step(closure)
        self.steps += 1
        if self.steps % self.communication_period == 0:
            self.exchange()
        return loss

    def finish(self) -> None:
        """Say done; on rank 0 wait for every worker, then load the centre into the model."""
        if self._finished:
            return
        self._finished = True
        try:
            self.conn.request({"op": "done"})
            if self.server is not None:
                if not self.server.wait_finished(self.finish_timeout):
                    print(
                        f"[alchemist] easgd: not every worker finished within"
                        f" {self.finish_timeout:.0f} s; taking the centre as it is",
                        flush=True,
                    )
                with self.server.lock:
                    centre = self.server.centre_vec.clone()
                unflat_into(centre, self._params())
        finally:
            self.conn.close()
            if self.server is not None:
                self.server.close()


def wrap(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, ctx: RankContext, **options: Any
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Make ``optimizer`` run asynchronous EASGD against a centre on rank 0.

    Options (see :data:`DEFAULTS`): ``moving_rate`` α (None = 0.9 / world size),
    ``communication_period`` τ (local steps between exchanges), ``follow_lr`` (α scaled
    by the learning rate over its base), ``finish_timeout``,
    ``request_timeout`` (as for ``async``).

    Raises:
        SpecError: an unknown or out-of-range option.
    """
    opts = check(NAME, options, ctx.world_size)
    if ctx.world_size == 1:
        return model, optimizer
    wrapped = EASGDOptimizer(
        optimizer,
        ctx,
        moving_rate=float(opts["moving_rate"]),
        communication_period=opts["communication_period"],
        follow_lr=opts["follow_lr"],
        finish_timeout=float(opts["finish_timeout"]),
        request_timeout=float(opts["request_timeout"]),
    )
    return model, wrapped
