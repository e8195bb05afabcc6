"""Which logged values a curve shows after a restart.

A job restarted from a checkpoint redoes the steps since that checkpoint: attempt 0
logged steps 0–70, attempt 1 resumes at step 50 and logs 50, 51, ... Drawn as logged,
the curve runs to 70, jumps back to 50 and runs over itself (a zig-zag). Every event
carries its ``attempt`` (torchrun's restart count); the rule, one place for every
view: when a rank's first event of a newer attempt arrives at step ``s``, that rank's
values of earlier attempts at steps ``>= s`` are superseded. The monitor drops them,
the TensorBoard converter writes a ``SessionLog.START`` at ``s`` (TensorBoard then
purges them itself), and the raw files keep everything.
"""

from __future__ import annotations

from typing import Any


def attempt_of(event: dict[str, Any]) -> int:
    """The attempt an event was logged in (0 for events written before attempts)."""
    try:
        return int(event.get("attempt") or 0)
    except (TypeError, ValueError):
        return 0


class AttemptTracker:
    """Follows each rank's attempt through its events, in file order.

    Args:
        seen: rank → newest attempt already seen (to resume a tracker kept elsewhere).
    """

    def __init__(self, seen: dict[int, int] | None = None) -> None:
        self.seen: dict[int, int] = dict(seen or {})

    def restart_at(self, event: dict[str, Any]) -> int | None:
        """The step from which ``event``'s rank's earlier values are superseded, when
        ``event`` is that rank's first of a newer attempt; otherwise None."""
        rank, attempt = int(event["rank"]), attempt_of(event)
        step = event.get("step")
        if attempt <= self.seen.get(rank, 0) or step is None:
            if rank not in self.seen:
                self.seen[rank] = attempt
            return None
        self.seen[rank] = attempt
        return int(step)


def surviving(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events a curve shows: those no later attempt of their rank redid."""
    tracker = AttemptTracker()
    kept: list[dict[str, Any]] = []
    for event in events:
        cut = tracker.restart_at(event)
        if cut is not None:
            rank = int(event["rank"])
            kept = [
                e
                for e in kept
                if int(e["rank"]) != rank or e.get("step") is None or int(e["step"]) < cut
            ]
        kept.append(event)
    return kept
