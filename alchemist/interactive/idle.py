"""The idle timeout of a session: warn, then stop, when no cell ran for a while.

One clock for both places that enforce it: the local session's supervisor and, on
Kubernetes, rank 0's pod (:mod:`alchemist.interactive.engine`). Activity is what the
notebook writes to ``session/activity.json`` when a cell starts and ends.
"""

from __future__ import annotations

import json
import time
from typing import Any

from alchemist.job.session import SessionDir


def idle_seconds(sd: SessionDir) -> float | None:
    """Seconds since the last cell ended; None while one runs."""
    try:
        activity = json.loads(sd.activity.read_text())
    except (OSError, ValueError):
        activity = {}
    if activity.get("busy"):
        return None
    since = float(activity.get("time") or sd.config.stat().st_mtime)
    return time.time() - since


class IdleClock:
    """Call :meth:`tick` now and then: it says when to warn, when the warning is void (a
    cell ran), and when to stop (``grace`` seconds after the warning)."""

    def __init__(self, sd: SessionDir, cfg: dict[str, Any]) -> None:
        self.sd = sd
        self.timeout = cfg.get("idle_timeout")
        self.grace = float(cfg.get("idle_grace") or 60.0)
        self.warned_at: float | None = None

    def tick(self) -> tuple[str, str | None]:
        """``("warn", text)`` once when the timeout passes, ``("clear", None)`` when a cell
        ran after a warning, ``("stop", reason)`` once the grace ran out, else
        ``("", None)``."""
        if not self.timeout:
            return "", None
        idle = idle_seconds(self.sd)
        if idle is None or idle < self.timeout:
            if self.warned_at is not None:
                self.warned_at = None
                return "clear", None
            return "", None
        if self.warned_at is None:
            self.warned_at = time.time()
            return "warn", (
                f"idle for {idle:.0f} s: the engines stop in {self.grace:.0f} s unless a cell"
                " runs (--idle-timeout)"
            )
        if time.time() - self.warned_at >= self.grace:
            return "stop", (
                f"stopped after {self.timeout:g} s idle (--idle-timeout): the engines were"
                " freed; start a new session"
            )
        return "", None
