"""Sizes as a person reads them, in the bundle's and the CLI's messages."""

from __future__ import annotations


def human_size(n: float) -> str:
    """``n`` bytes as ``512 B``, ``1.5 KB``, ``3.2 MB`` or ``1.0 GB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover
