"""Where a session keeps its files, inside its job directory (:class:`JobDir`).

A session is a job whose spec's ``entry`` is ``session``: besides the job directory's usual files
(``spec.json``, ``state.json``, ``logs/rank-<r>.log``, ``metrics/``, ``pids/``,
``debug/``), it has a ``session/`` folder (0700)::

    session/config.json          what the session was started with (workers, timeouts, cwd)
    session/ipython/security/    the controller's connection files (0600; they hold the key)
    session/transcript.jsonl     one record per %%alchemist_px cell (for promote)
    session/activity.json        the last cell's start or end, and whether one runs (idle timeout)
    session/notice               on Kubernetes, rank 0's idle warning to the notebook
    session/stop-requested       asks the session's supervisor (local) or engines (pods) to stop

Also the session's rules that its launchers share: each rank's environment
(:func:`rank_env`) and the idle timeout (:class:`IdleClock`), which the local supervisor
and, on Kubernetes, rank 0's pod enforce.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alchemist.job.jobdir import JobDir
from alchemist.job.spec import SESSION_ENTRY, JobSpec, Resources

__all__ = [
    "SESSION_ENTRY",
    "STOP_MARKER",
    "IdleClock",
    "SessionDir",
    "rank_env",
    "read_stop",
    "session_spec",
]

#: The file that asks the supervisor to stop the session (a normal stop, not a cancel).
STOP_MARKER = "stop-requested"


def session_spec(
    workers: int,
    gpus_per_worker: int,
    name: str | None,
    env: dict[str, str],
    backend: str = "local",
    no_warm: bool = False,
) -> JobSpec:
    """The spec of a session: validated as a batch job's (name, sizes, env), then its
    entry set to ``session``.

    Raises:
        SpecError: an invalid option (the message names it).
    """
    spec = JobSpec(
        name=name or "session",
        workers=workers,
        resources=Resources(gpus=gpus_per_worker),
        backend=backend,
        env=dict(env),
        no_warm=no_warm,
    ).validate()
    return dataclasses.replace(spec, entry=SESSION_ENTRY)


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


def rank_env(
    cfg: dict[str, Any],
    job_id: str,
    job_root: str,
    rank: int,
    port: int,
    master_addr: str,
    base: dict[str, str] | None = None,
    pod: bool = False,
    gpus: list[int] | None = None,
) -> dict[str, str]:
    """The environment of rank ``rank``'s engine: what torchrun and the local backend give
    a batch rank (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_*``, the agent-store
    flag that makes :func:`alchemist.runtime.worker._attempt_store` use the store on an
    attempt prefix, per-rank ``CUDA_VISIBLE_DEVICES``), plus the session's collective
    timeout, over ``base`` (default: this process's environment and the user's ``env``;
    the local backend passes its launch request's, which has ``GLOO_SOCKET_IFNAME``).

    ``pod``: the rank is a pod of its own (Kubernetes): it is local rank 0 of a node of
    one, its store is served by rank 0's pod at ``master_addr``, and its devices are the
    ones the device plugin gave the pod. ``gpus``: the devices the machine's queue
    granted the session, one per rank."""
    world = int(cfg["world_size"])
    env = dict(base) if base is not None else {**os.environ, **cfg.get("env", {})}
    env.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": "0" if pod else str(rank),
            "LOCAL_WORLD_SIZE": "1" if pod else str(world),
            "GROUP_RANK": str(rank) if pod else "0",
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCHELASTIC_RESTART_COUNT": "0",
            "ALCHEMIST_STORE_PREFIX": "alchemist/session/pg-0",
            "ALCHEMIST_JOB_ID": job_id,
            "ALCHEMIST_JOB_DIR": job_root,
            "ALCHEMIST_COLLECTIVE_TIMEOUT": str(cfg["collective_timeout"]),
            "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    # An idle engine is no stalled rank: the stall watchdog stays off unless asked for.
    env.setdefault("ALCHEMIST_WATCHDOG_S", "0")
    if not pod and int(cfg.get("gpus_per_worker") or 0) > 0:
        env["CUDA_VISIBLE_DEVICES"] = str(gpus[rank] if gpus else rank)
        env["LOCAL_RANK"] = "0"  # the one device it sees is cuda:0
    return env


def idle_seconds(sd: SessionDir) -> float | None:
    """Seconds since the last cell ended; None while one runs. Activity is what the
    notebook writes to ``session/activity.json`` when a cell starts and ends."""
    try:
        activity = json.loads(sd.activity.read_text())
    except (OSError, ValueError):
        activity = {}
    if activity.get("busy"):
        return None
    since = float(activity.get("time") or sd.config.stat().st_mtime)
    return time.time() - since


class IdleClock:
    """The idle timeout: call :meth:`tick` now and then; it says when to warn, when the
    warning is void (a cell ran), and when to stop (``grace`` seconds after the warning)."""

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
