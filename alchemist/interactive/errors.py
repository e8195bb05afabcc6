"""The interactive mode's errors; each message is one line that names the fix."""

from __future__ import annotations

from alchemist.errors import AlchemistError


class SessionError(AlchemistError):
    """A session cannot do what was asked (none running, one already running, unknown
    targets, engines that did not come up)."""


class SessionBroken(SessionError):
    """A rank of the session died: the others were stopped (the message says why)."""


class CellFailed(SessionError):
    """A cell raised on one or more ranks (their tracebacks were shown above)."""

    def __init__(self, message: str, ranks: list[int]) -> None:
        super().__init__(message)
        self.ranks = ranks
