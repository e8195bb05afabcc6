"""What the library hooks share: the job's shape and the forwarding of metrics."""

from __future__ import annotations

import math
import numbers
import os
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
