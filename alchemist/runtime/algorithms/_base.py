"""What every algorithm shares: the rank context and the optimizer wrapper.

The wrapped optimizer is a real :class:`torch.optim.Optimizer` that shares its
``param_groups`` and ``state`` with the user's optimizer (the pattern of Horovod's
``DistributedOptimizer``), so learning-rate schedulers, ``zero_grad`` and
``state_dict`` keep working on whichever of the two objects the user holds.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch


class RankContext(Protocol):
    """What an algorithm needs to know about its process (``alchemist.context()`` has it)."""

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def local_rank(self) -> int: ...

    @property
    def device(self) -> Any: ...


class WrappedOptimizer(torch.optim.Optimizer):
    """An optimizer that does an algorithm's communication in :meth:`step`.

    It shares ``param_groups`` (the same dicts) and ``state`` with ``inner``, so a
    scheduler attached to either object changes the learning rate both use.
    Subclasses override :meth:`step`; :meth:`finish` ends the algorithm's communication
    (idempotent; called for every live wrapper by :func:`finish_all` and at exit).
    """

    def __init__(self, inner: torch.optim.Optimizer) -> None:
        # Optimizer.__init__ reuses the group dicts it is given (it only replaces
        # their "params" by a list), so both objects see the same hyperparameters.
        super().__init__(inner.param_groups, inner.defaults)
        self.inner = inner
        self.state = inner.state
        _register(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError(f"{type(self).__name__} holds live connections and cannot be pickled")

    def finish(self) -> None:
        """End this algorithm's communication; the default has nothing to end."""

    def local_step(self, closure: Callable[[], float] | None = None) -> Any:
        """One step of the user's own optimizer, without communication."""
        return self.inner.step(closure) if closure is not None else self.inner.step()


# Strong references: the runtime drops the cell's namespace before exit, and a wrapper
# collected then would close its connection without saying "done".
_live: list[WrappedOptimizer] = []
_live_lock = threading.Lock()


def _register(opt: WrappedOptimizer) -> None:
    with _live_lock:
        _live.append(opt)


def finish_all() -> None:
    """Finish every live wrapped optimizer of this process (idempotent).

    The runtime calls this after the cell and before saving outputs, so that rank 0's
    model holds the final parameters of ``async`` and ``easgd``; it also runs at exit.
    """
    with _live_lock:
        opts = list(_live)
        _live.clear()
    for opt in opts:
        opt.finish()


atexit.register(finish_all)


def params_of(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every parameter of ``optimizer``, in group order (the wire order of the servers)."""
    return [p for g in optimizer.param_groups for p in g["params"]]


def log_metrics(step: int, **values: float) -> None:
    """Report metrics through ``alchemist.log`` when the runtime has it; never fail."""
    try:
        from alchemist.runtime import log
    except ImportError:
        return
    try:
        log(step, **values)
    except Exception:
        pass


def flat(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """The tensors flattened into one float32 CPU vector (the wire format)."""
    parts = [t.detach().reshape(-1).to("cpu", torch.float32) for t in tensors]
    return torch.cat(parts) if parts else torch.zeros(0)


def unflat_into(vector: torch.Tensor, tensors: Iterable[torch.Tensor]) -> None:
    """Copy ``vector`` (as made by :func:`flat`) back into ``tensors`` in place."""
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(vector[offset : offset + n].view_as(t))
            offset += n
