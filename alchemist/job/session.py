"""Where a session keeps its files, inside its job directory (:class:`JobDir`).

A session is a job of kind ``session``: besides the job directory's usual files
(``spec.json``, ``state.json``, ``logs/rank-<r>.log``, ``metrics/``, ``pids/``,
``debug/``), it has a ``session/`` folder (0700)::

    session/config.json          what the session was started with (workers, timeouts, cwd)
    session/ipython/security/    the controller's connection files (0600; they hold the key)
    session/transcript.jsonl     one record per %%alchemist_px cell (for promote)
    session/activity.json        the last cell's start or end, and whether one runs (idle timeout)
    session/notice               on Kubernetes, rank 0's idle warning to the notebook
    session/stop-requested       asks the session's supervisor (local) or engines (pods) to stop
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from alchemist.job.jobdir import JobDir
from alchemist.job.spec import SESSION_ENTRY

__all__ = ["SESSION_ENTRY", "STOP_MARKER", "SessionDir", "read_stop"]

#: The file that asks the supervisor to stop the session (a normal stop, not a cancel).
STOP_MARKER = "stop-requested"


@dataclass(frozen=True)
class SessionDir:
    """Paths of one session's files."""

    job: JobDir

    @property
    def root(self) -> Path:
        return self.job.root / "session"

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def profile(self) -> Path:
        """The ipyparallel profile folder of the session's controller."""
        return self.root / "ipython"

    @property
    def security(self) -> Path:
        return self.profile / "security"

    @property
    def client_file(self) -> Path:
        return self.security / "ipcontroller-client.json"

    @property
    def engine_file(self) -> Path:
        return self.security / "ipcontroller-engine.json"

    @property
    def transcript(self) -> Path:
        return self.root / "transcript.jsonl"

    @property
    def activity(self) -> Path:
        return self.root / "activity.json"

    @property
    def notice(self) -> Path:
        """On Kubernetes, rank 0's warning to the notebook (the idle timeout's)."""
        return self.root / "notice"

    @property
    def stop_marker(self) -> Path:
        return self.root / STOP_MARKER


def read_stop(marker: Path) -> tuple[str, str]:
    """How a session asked to stop ends: ``(state, reason)`` from its stop marker.

    An empty marker is the user's stop (``succeeded``); a JSON object names the state
    and reason (an idle session's engines stopping themselves: ``cancelled``); any
    other text is why the notebook gave up on a session that did not start (``failed``).
    """
    text = marker.read_text().strip()
    if not text:
        return "succeeded", "stopped by the user"
    if text.startswith("{"):
        try:
            d = json.loads(text)
            return str(d["state"]), str(d["reason"])
        except (ValueError, KeyError, TypeError):
            pass
    return "failed", text
