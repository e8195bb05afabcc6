"""Where a session's engines run, seen from the notebook: local processes or pods.

A :class:`~alchemist.interactive.sessions.Session` talks to its ranks through
ipyparallel on both backends; what differs is how they are started, watched, signalled
and stopped, which this module hides behind one small interface:

Both are started the same way, through :func:`alchemist.client.submit_session`
(``Backend.submit``); then:

- :class:`LocalEngines`: the job's local supervisor
  (:mod:`alchemist.backends.local.session`), a process of its own that waits in the
  machine's queue, starts the controller and one engine per rank (forked from the user's
  warm pool, or as a new process) and writes the job's ``state.json``. Interrupts are
  SIGINT to the ranks' pids.
- :class:`PodEngines`: an Indexed Job and headless Service made by the Kubernetes
  backend (one pod per rank, rank 0's pod also serving the store and the controller;
  see :mod:`.engine`). The state is the Job's, read through the backend; interrupts go
  over ipyparallel's control channel (the notebook cannot signal a pod); a stop writes
  the stop marker on the shared volume, after which every pod ends with status 0 and
  the Job completes.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

from alchemist.job.jobdir import JobDir
from alchemist.job.session import SessionDir

#: Seconds between two reads of a Kubernetes session's state (an API call each).
POD_STATE_EVERY_S = 1.0
#: Seconds a stopped Kubernetes session's pods get to end before the Job is deleted.
POD_STOP_WAIT_S = 30.0


class LocalEngines:
    """A session's engines as local processes under its supervisor."""

    backend = "local"

    def __init__(self, job_dir: JobDir) -> None:
        self.job_dir = job_dir
        self.dirs = SessionDir(job_dir)

    def state(self, fresh: bool = False) -> dict[str, Any]:
        """The job's state record (``state``, ``reason``, ...) as the supervisor wrote it."""
        return self.job_dir.read_state() or {}

    def alive(self, ranks: list[int]) -> list[int]:
        from alchemist.backends.local.procs import live_pid

        return [r for r in ranks if live_pid(self.job_dir.rank_pid(r)) is not None]

    def interrupt(self, client: Any, ranks: list[int]) -> None:
        """SIGINT to each rank's process, at once."""
        import os

        from alchemist.backends.local.procs import live_pid

        for r in ranks:
            pid = live_pid(self.job_dir.rank_pid(r))
            if pid:
                try:
                    os.kill(pid, signal.SIGINT)
                except ProcessLookupError:
                    pass

    def _wait_supervisor(self, seconds: float) -> None:
        from alchemist.backends.local.procs import alive, live_pid

        launcher = live_pid(self.job_dir.launcher_pid)
        deadline = time.monotonic() + seconds
        while alive(launcher) and time.monotonic() < deadline:  # a zombie counts as ended
            time.sleep(0.05)

    def stop(self, running: bool) -> None:
        """Ask the supervisor to stop the engines (the job ends ``succeeded``) and wait."""
        if running:
            self.dirs.stop_marker.touch()
        self._wait_supervisor(15)
        self.kill("")

    def kill(self, reason: str, running: bool = False) -> None:
        """Stop whatever still runs; with ``running``, first ask the supervisor to end the
        session as failed with ``reason``."""
        from alchemist.backends.local.procs import job_processes, live_pid, terminate

        if running:
            self.dirs.stop_marker.write_text(reason)
            self._wait_supervisor(10)
        launcher = live_pid(self.job_dir.launcher_pid)
        left = job_processes(self.job_dir.root, [launcher] if launcher else [])
        if left:
            terminate(left, grace=2.0)


class PodEngines:
    """A session's engines as the pods of an Indexed Job on Kubernetes."""

    backend = "kubernetes"

    def __init__(self, job_dir: JobDir) -> None:
        self.job_dir = job_dir
        self.dirs = SessionDir(job_dir)
        self._read_at = 0.0
        self._state: dict[str, Any] = {}

    def _job(self) -> Any:
        from alchemist.client import attach

        return attach(self.job_dir.job_id)

    def state(self, fresh: bool = False) -> dict[str, Any]:
        """The Job's state through the backend (read at most every
        :data:`POD_STATE_EVERY_S`), with rank 0's idle warning as the reason while it runs."""
        now = time.monotonic()
        if fresh or not self._state or now - self._read_at >= POD_STATE_EVERY_S:
            self._read_at = now
            try:
                st = self._job().status()
                self._state = {"state": st.state.value, "reason": st.reason}
            except Exception as e:  # the API is briefly unreachable: keep the last answer
                if not self._state:
                    self._state = {"state": "pending", "reason": f"reading the Job: {e}"}
            if self._state.get("state") == "running" and self.dirs.notice.exists():
                self._state["reason"] = self.dirs.notice.read_text().strip() or None
        return dict(self._state)

    def alive(self, ranks: list[int]) -> list[int]:
        """The ranks whose pod runs (from the Job's pods, per completion index)."""
        try:
            st = self._job().status()
        except Exception:
            return []
        detail = st.ranks or {}
        return [r for r in ranks if (detail.get(str(r)) or {}).get("phase") == "Running"]

    def interrupt(self, client: Any, ranks: list[int]) -> None:
        """SIGINT to each rank over ipyparallel's control channel (served by the engine's
        control thread while a cell runs)."""
        if client is not None:
            client.send_signal(signal.SIGINT, targets=ranks, block=False)

    def _wait_end(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.state(fresh=True).get("state") not in ("pending", "running"):
                return True
            time.sleep(0.5)
        return False

    def stop(self, running: bool) -> None:
        """Ask every pod to end (the stop marker) and wait for the Job to complete; after
        :data:`POD_STOP_WAIT_S` the Job is deleted."""
        if running:
            self.dirs.stop_marker.touch()
            if self._wait_end(POD_STOP_WAIT_S):
                return
        self.kill("")

    def kill(self, reason: str, running: bool = False) -> None:
        """Delete the Job (its pods and Service go with it); a ``reason`` records the
        session as failed with it (it did not start), else as cancelled."""
        if reason:
            self.dirs.stop_marker.write_text(reason)
        try:
            self._job().cancel()  # a Job that already ended is left as it is
        except Exception as e:
            print(f"[alchemist] could not delete the session's Job: {e}", file=sys.stderr)


def engines_for(job_dir: JobDir, backend: str) -> LocalEngines | PodEngines:
    """The engines of a session on ``backend``."""
    return PodEngines(job_dir) if backend == "kubernetes" else LocalEngines(job_dir)
