"""PyTorch Lightning in a job: the ranks are the job's, the curves are the monitor's.

A job's ranks carry torchrun's variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``GROUP_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``...) on the cold and the warm path
alike, so Lightning's own ``TorchElasticEnvironment`` recognises the job as its cluster
(``creates_processes_externally``): it launches nothing, and joins the process group the
worker already made. What :func:`patch` adds to ``Trainer.__init__``, in a job only:

- ``devices="auto"`` (the default) becomes the job's ranks per worker and ``num_nodes``
  its workers, so the cell prototyped in the kernel (one device) runs on every rank as
  it is; ``devices`` given and not matching the job is refused in one line;
- a strategy that starts processes of its own (``ddp_spawn``, ``ddp_notebook``,
  ``ddp_fork``) is refused in one line: the job's ranks are already running;
- :class:`AlchemistLogger` is added to the trainer's loggers, so ``self.log(...)`` draws
  curves in the monitor under the names the module logs.

Outside a job the same objects can be used by hand: ``Trainer(logger=AlchemistLogger())``.
"""

from __future__ import annotations

from argparse import Namespace
from types import ModuleType
from typing import Any

from alchemist.errors import IntegrationError
from alchemist.runtime.integrations import _common

#: Lightning's strategies that start (spawn or fork) their own processes.
LAUNCHING_STRATEGIES = ("ddp_spawn", "ddp_notebook", "ddp_fork", "xla")


def _logger_base() -> type:
    try:
        from lightning.pytorch.loggers import Logger

        return Logger
    except ImportError:
        from pytorch_lightning.loggers import Logger as PLLogger

        return PLLogger


def _make_logger_class() -> type:
    base = _logger_base()

    class AlchemistLogger(base):  # type: ignore[misc, valid-type]
        """A Lightning ``Logger`` whose metrics go to ``alchemist.log`` (the monitor's
        curves, the job's metrics files, TensorBoard), named as the module logs them."""

        @property
        def name(self) -> str:
            return "alchemist"

        @property
        def version(self) -> str:
            import os

            return os.environ.get("ALCHEMIST_JOB_ID", "local")

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            values = {k: v for k, v in metrics.items() if k != "epoch"}
            if "epoch" in metrics and values:
                values["epoch"] = metrics["epoch"]
            _common.forward(0 if step is None else step, values)

        def log_hyperparams(
            self, params: dict[str, Any] | Namespace, *args: Any, **kw: Any
        ) -> None:
            pass  # the job's spec and bundle keep what ran

    return AlchemistLogger


_logger = _common.LazyClass(_make_logger_class)


def AlchemistLogger() -> Any:
    """A new Lightning logger forwarding to ``alchemist.log`` (see the module docstring)."""
    return _logger.new()


def _strategy_name(strategy: Any) -> str:
    if isinstance(strategy, str):
        return strategy
    start = getattr(strategy, "_start_method", None)
    if start in ("spawn", "fork", "forkserver"):
        return f"{type(strategy).__name__}(start_method={start!r})"
    return ""


def check_and_adjust(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``Trainer`` keywords for this job, or an :class:`IntegrationError` naming what
    to change. Outside a job (or at world size 1) they are returned as they are."""
    world = _common.world_size()
    if not _common.in_job() or world <= 1:
        return kwargs
    kwargs = dict(kwargs)
    local, nodes = _common.local_world_size(), _common.nodes()
    name = _strategy_name(kwargs.get("strategy", "auto"))
    if name.startswith(LAUNCHING_STRATEGIES) or "start_method" in name:
        raise IntegrationError(
            f'Trainer(strategy="{name}") starts its own processes, but this job\'s {world}'
            ' ranks are already running: use strategy="ddp" (or leave strategy out)'
        )
    devices = kwargs.get("devices", "auto")
    if devices in ("auto", -1, "-1"):
        kwargs["devices"] = local
        kwargs.setdefault("num_nodes", nodes)
    else:
        count = len(devices) if isinstance(devices, (list, tuple)) else int(devices)
        asked = count * int(kwargs.get("num_nodes", 1))
        if asked != world:
            raise IntegrationError(
                f"Trainer(devices={devices!r}, num_nodes={kwargs.get('num_nodes', 1)}) asks"
                f" for {asked} processes, but this job has {world} ranks: pass"
                f" devices={local}, num_nodes={nodes} (or leave devices out)"
            )
    if kwargs.get("strategy", "auto") == "auto":
        kwargs["strategy"] = "ddp"
    return kwargs


def patch(module: ModuleType) -> None:
    """Wrap ``module.Trainer.__init__`` (``lightning.pytorch.trainer.trainer`` or
    ``pytorch_lightning.trainer.trainer``) as the module docstring says; idempotent."""
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None:
        return

    def make(original: Any) -> Any:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            if not _common.in_job():
                original(self, *args, **kwargs)
                return
            original(self, *args, **check_and_adjust(kwargs))
            if not any(_logger.made(lg) for lg in self.loggers):
                self.loggers = [*self.loggers, AlchemistLogger()]

        return __init__

    _common.wrap_method(trainer_cls, "__init__", make)
