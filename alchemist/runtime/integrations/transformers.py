"""Hugging Face Transformers' ``Trainer`` in a job: its logs become the monitor's curves.

The ``Trainer`` runs on the job's ranks as under torchrun (it reads ``LOCAL_RANK`` and
``WORLD_SIZE`` through Accelerate and joins the process group already made). In a job
:func:`patch` adds an :class:`AlchemistCallback` to every ``Trainer``, so what it logs
(``loss``, ``learning_rate``, ``grad_norm``, ``eval_*``...) is drawn at its
``global_step``. Outside a job: ``Trainer(..., callbacks=[AlchemistCallback()])``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from alchemist.runtime.integrations import _common


def _make_callback_class() -> type:
    from transformers import TrainerCallback

    class AlchemistCallback(TrainerCallback):
        """Forwards each ``on_log`` to ``alchemist.log`` at the trainer's global step."""

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs:
                _common.forward(int(state.global_step), dict(logs))

    return AlchemistCallback


_callback = _common.LazyClass(_make_callback_class)


def AlchemistCallback() -> Any:
    """A new ``TrainerCallback`` forwarding the trainer's logs to ``alchemist.log``."""
    return _callback.new()


def patch(module: ModuleType) -> None:
    """Wrap ``transformers.trainer.Trainer.__init__`` to add the callback in a job."""
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None:
        return

    def make(original: Any) -> Any:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            if not _common.in_job():
                return
            handlers = getattr(getattr(self, "callback_handler", None), "callbacks", [])
            if not any(_callback.made(h) for h in handlers):
                self.add_callback(AlchemistCallback())

        return __init__

    _common.wrap_method(trainer_cls, "__init__", make)
