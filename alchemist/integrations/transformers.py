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

from alchemist.integrations import _common

_callback_class: type | None = None


def _make_callback_class() -> type:
    from transformers import TrainerCallback

    class AlchemistCallback(TrainerCallback):
        """Forwards each ``on_log`` to ``alchemist.log`` at the trainer's global step."""

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs:
                _common.forward(int(state.global_step), dict(logs))

    return AlchemistCallback


def AlchemistCallback() -> Any:
    """A new ``TrainerCallback`` forwarding the trainer's logs to ``alchemist.log``."""
    global _callback_class
    if _callback_class is None:
        _callback_class = _make_callback_class()
    return _callback_class()


def patch(module: ModuleType) -> None:
    """Wrap ``transformers.trainer.Trainer.__init__`` to add the callback in a job."""
    trainer_cls = getattr(module, "Trainer", None)
    if trainer_cls is None or getattr(trainer_cls.__init__, "_alchemist", False):
        return
    original = trainer_cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if not _common.in_job():
            return
        handlers = getattr(getattr(self, "callback_handler", None), "callbacks", [])
        if not any(
            _callback_class is not None and isinstance(h, _callback_class) for h in handlers
        ):
            self.add_callback(AlchemistCallback())

    __init__._alchemist = True  # type: ignore[attr-defined]
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    __init__.__doc__ = original.__doc__
    trainer_cls.__init__ = __init__
