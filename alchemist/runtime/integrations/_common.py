"""What the library hooks share: the job's shape, the forwarding of metrics, the wrapping
of a library's method and the classes made only once the library is imported."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable
from typing import Any


def in_job() -> bool:
    return bool(os.environ.get("ALCHEMIST_JOB_ID"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_world_size() -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


def nodes() -> int:
    return max(1, world_size() // max(1, local_world_size()))


def scalars(values: dict[str, Any]) -> dict[str, float]:
    """The values ``alchemist.log`` can draw: numbers and one-element tensors, finite."""
    out: dict[str, float] = {}
    for key, value in values.items():
        if hasattr(value, "numel") and hasattr(value, "item"):
            if value.numel() != 1:
                continue
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        number = float(value)
        if math.isfinite(number):
            out[str(key)] = number
    return out


def forward(step: int, values: dict[str, Any]) -> None:
    """Send ``values`` (the library's metric names) to ``alchemist.log`` at ``step``."""
    found = scalars(values)
    if found:
        from alchemist.runtime.helpers import log

        log(int(step), **found)


def wrap_method(cls: type, name: str, make: Callable[[Any], Any]) -> None:
    """Replace ``cls.<name>`` by ``make(original)``, once: the wrapper is marked, keeps the
    original's docstring and has it as ``__wrapped__``."""
    original = getattr(cls, name)
    if getattr(original, "_alchemist", False):
        return
    wrapper = make(original)
    wrapper._alchemist = True
    wrapper.__wrapped__ = original
    wrapper.__doc__ = original.__doc__
    setattr(cls, name, wrapper)


class LazyClass:
    """A class made on first use: its base comes from a library that is imported only
    then (so that alchemist imports without the library)."""

    def __init__(self, make: Callable[[], type]) -> None:
        self._make = make
        self._cls: type | None = None

    def new(self) -> Any:
        """A new instance (the class is made the first time)."""
        if self._cls is None:
            self._cls = self._make()
        return self._cls()

    def made(self, obj: Any) -> bool:
        """Whether ``obj`` is an instance of the class (False before it is made)."""
        return self._cls is not None and isinstance(obj, self._cls)
