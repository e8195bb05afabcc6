"""``async``: asynchronous SGD with a parameter server (Dean et al. 2012, "Downpour SGD").

The server holds the parameters and a copy of the user's optimizer (same class, same
hyperparameters). Each worker, at every ``optimizer.step()``:

1. pushes its gradient, computed on the parameters it last pulled, together with its
   current hyperparameters (so a learning-rate scheduler on the worker keeps working);
2. the server applies it at once with its optimizer (no barrier, no averaging: workers
   proceed at their own pace) and bumps the parameter version;
3. the worker receives the new parameters and trains on them.

**Staleness** of an update is the number of updates other workers applied between the
worker's pull and its push (0 with one worker). It is measured on the server for every
update and reported to the worker: ``optimizer.staleness`` (last update),
``optimizer.mean_staleness``, ``optimizer.max_staleness``, and every ``log_every`` steps
as the metric ``async_staleness`` (mean over those steps) through ``alchemist.log``.

**Placement**: rank 0 hosts the server in background threads and also trains as a
worker (see :mod:`alchemist.runtime.algorithms._ps` for the transport and why).
Parameters and optimizer state live on rank 0's CPU.

**End of training**: ``optimizer.finish()`` (called by the runtime after the cell and at
exit; call it yourself before evaluating) tells the server this worker is done; on
rank 0 it then waits until every worker is done (or lost) and loads the final server
parameters into rank 0's model, the model that outputs and checkpoints are taken from.
Other ranks keep the parameters they last pulled.

**Crashes**: a worker that dies loses its unfinished update; the server and the other
workers go on. If rank 0 dies the others stop with a clear error.

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
    log_metrics,
    params_of,
    unflat_into,
)

NAME = "async"
DEFAULTS = ALGORITHM_DEFAULTS[NAME]
SERVER_RANK = 0


def hyperparameters(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """The scalar settings of each parameter group (what a scheduler may change)."""
    out = []
    for g in optimizer.param_groups:
        hp: dict[str, Any] = {}
        for k, v in g.items():
            if k == "params":
                continue
            if isinstance(v, torch.Tensor) and v.numel() == 1:
                v = v.item()
            if isinstance(v, (bool, int, float, str, tuple, type(None))):
                hp[k] = v
        out.append(hp)
    return out


def clone_optimizer(
    optimizer: torch.optim.Optimizer, params: list[torch.Tensor]
) -> torch.optim.Optimizer:
    """An optimizer of the same class and settings over ``params`` (same group layout)."""
    groups, i = [], 0
    for g in optimizer.param_groups:
        n = len(g["params"])
        groups.append(
            {**{k: v for k, v in g.items() if k != "params"}, "params": params[i : i + n]}
        )
        i += n
    cls = type(optimizer)
    try:
        clone = cls(groups, **optimizer.defaults)
    except TypeError:
        clone = cls(groups)  # type: ignore[call-arg]
    if optimizer.state:
        clone.load_state_dict(optimizer.state_dict())
    return clone


class AsyncServer(_ps.ParameterServer):
    """Holds the parameters; applies each pushed gradient with the user's optimizer."""

    def __init__(self, world_size: int, host: str, optimizer: torch.optim.Optimizer) -> None:
        self.params = [
            p.detach().to("cpu", torch.float32).clone().requires_grad_(True)
            for p in params_of(optimizer)
        ]
        self.optimizer = clone_optimizer(optimizer, self.params)
        self.numel = sum(p.numel() for p in self.params)
        super().__init__(world_size, host)

    def handle(self, header: dict[str, Any], payload: torch.Tensor) -> bytes:
        op = header["op"]
        if op == "pull":
            return _ps.encode({"version": self.version}, flat(self.params))
        if op != "push":
            return _ps.encode({"error": f"unknown op {op!r}"})
        staleness = self.version - int(header["version"])
        for group, hp in zip(self.optimizer.param_groups, header["hyperparameters"], strict=True):
            group.update(hp)
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = payload[offset : offset + n].view_as(p).clone()
            offset += n
        self.optimizer.step()
        self.version += 1
        return _ps.encode({"version": self.version, "staleness": staleness}, flat(self.params))


class AsyncOptimizer(WrappedOptimizer):
    """Pushes gradients to the server and pulls parameters in :meth:`step`.

    Attributes:
        staleness: staleness of this worker's last update.
        mean_staleness: mean over all of this worker's updates.
        max_staleness: the largest so far.
        version: server version of the parameters this worker holds.
    """

    def __init__(
        self,
        inner: torch.optim.Optimizer,
        ctx: RankContext,
        *,
        log_every: int,
        finish_timeout: float,
        request_timeout: float,
    ) -> None:
        super().__init__(inner)
        self.rank = ctx.rank
        self.log_every = log_every
        self.finish_timeout = finish_timeout
        self.server, self.conn = _ps.start(
            lambda host: AsyncServer(ctx.world_size, host, inner),
            ctx,
            SERVER_RANK,
            sum(p.numel() for p in params_of(inner)),
            request_timeout,
        )
        self.steps = 0
        self.staleness = 0
        self.max_staleness = 0
        self._staleness_sum = 0
        self._window: list[int] = []
        self._finished = False
        self.pull()
        # Everyone starts from rank 0's initial parameters: no push before every pull.
        dist.barrier()

    @property
    def mean_staleness(self) -> float:
        return self._staleness_sum / self.steps if self.steps else 0.0

    def _params(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def pull(self) -> None:
        """Load the server's current parameters into this worker's model."""
        header, payload = self.conn.request({"op": "pull"})
        unflat_into(payload, self._params())
        self.version = int(header["version"])

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self._params()]
        header, payload = self.conn.request(
            {"op": "push", "version": self.version, "hyperparameters": hyperparameters(self)},
            flat(grads),
        )
        unflat_into(payload, self._params())
        self.version = int(header["version"])
        self.staleness = int(header["staleness"])
        self.steps += 1
        self._staleness_sum += self.staleness
        self.max_staleness = max(self.max_staleness, self.staleness)
        self._window.append(self.staleness)
        if self.log_every and self.steps % self.log_every == 0:
            log_metrics(self.steps, async_staleness=sum(self._window) / len(self._window))
            self._window.clear()
        return loss

    def finish(self) -> None:
        """Tell the server this worker is done; on rank 0 wait for all, load the final model."""
        if self._finished:
            return
        self._finished = True
        try:
            self.conn.request({"op": "done"})
            if self.server is not None:
                if not self.server.wait_finished(self.finish_timeout):
                    print(
                        f"[alchemist] async: not every worker finished within"
                        f" {self.finish_timeout:.0f} s; keeping the parameters as they are",
                        flush=True,
                    )
                self.pull()
        finally:
            self.conn.close()
            if self.server is not None:
                self.server.close()


def wrap(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, ctx: RankContext, **options: Any
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Make ``optimizer.step()`` an asynchronous push/pull against rank 0's server.

    Options (see :data:`DEFAULTS`): ``log_every`` (steps between staleness metrics, 0
    = never), ``finish_timeout`` (seconds rank 0 waits for the others at the end),
    ``request_timeout`` (seconds a worker waits for one server reply).

    Raises:
        SpecError: an unknown or out-of-range option.
    """
    opts = check(NAME, options, ctx.world_size)
    if ctx.world_size == 1:
        return model, optimizer
    wrapped = AsyncOptimizer(
        optimizer,
        ctx,
        log_every=opts["log_every"],
        finish_timeout=float(opts["finish_timeout"]),
        request_timeout=float(opts["request_timeout"]),
    )
    return model, wrapped
