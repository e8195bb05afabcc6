"""Where a user's warm pool lives, and what it says of itself.

A pool's folder is ``<base>/<interpreter key>``, where ``<base>`` is
``$ALCHEMIST_POOL_DIR`` or ``pool/`` in the account's runtime folder
(:func:`alchemist.job.config.runtime_dir`: a private folder of the temporary directory
that no other account can make first). Its unix socket is the way into the pool, so a
folder another account made or can write is refused. The daemon keeps ``state.json`` there (what
:class:`PoolInfo` reads) and listens on ``pool.sock``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alchemist.errors import AlchemistError
from alchemist.job.config import private_dir_problem, runtime_dir
from alchemist.job.jobdir import make_private_dir

#: Overrides the folder that holds the user's pools.
POOL_DIR_VAR = "ALCHEMIST_POOL_DIR"
#: Minutes an idle pool stays up after its last job (default :data:`DEFAULT_KEEPALIVE_MIN`).
KEEPALIVE_VAR = "ALCHEMIST_POOL_KEEPALIVE"
#: ``0`` turns warm starts off in this environment (as ``--no-warm`` does per job).
ENABLE_VAR = "ALCHEMIST_WARM_POOL"
DEFAULT_KEEPALIVE_MIN = 10.0


class PoolError(AlchemistError):
    """The pool cannot be used (its folder is unsafe, a setting is invalid)."""


def enabled() -> bool:
    return os.environ.get(ENABLE_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def keepalive_s() -> float:
    raw = os.environ.get(KEEPALIVE_VAR, "").strip()
    if not raw:
        return DEFAULT_KEEPALIVE_MIN * 60
    try:
        minutes = float(raw)
    except ValueError:
        raise PoolError(f"{KEEPALIVE_VAR} must be a number of minutes, got {raw!r}") from None
    if not minutes > 0:
        raise PoolError(f"{KEEPALIVE_VAR} must be more than 0 minutes, got {raw!r}")
    return minutes * 60


def _check_private(path: Path) -> Path:
    problem = private_dir_problem(path)
    if problem:
        raise PoolError(
            f"the warm pool's folder {path} is not a private folder of yours ({problem}):"
            f" remove it, or set {POOL_DIR_VAR} to a folder only you can use"
        )
    return path


def base_dir() -> Path:
    raw = os.environ.get(POOL_DIR_VAR)
    path = Path(raw) if raw else runtime_dir() / "pool"
    return _check_private(make_private_dir(path))


def pool_dir() -> Path:
    """The folder of this user's pool for this interpreter and environment (a virtual
    environment's interpreter is a link to the base one: ``sys.prefix`` tells them apart)."""
    key = hashlib.sha256(f"{sys.executable}\0{sys.prefix}".encode()).hexdigest()[:10]
    return _check_private(make_private_dir(base_dir() / key))


def socket_path(folder: Path) -> Path:
    return folder / "pool.sock"


def state_path(folder: Path) -> Path:
    return folder / "state.json"


@dataclass
class PoolInfo:
    """What a running pool's daemon says of itself (``state.json``)."""

    pid: int
    status: str  # "starting", "ready"
    fingerprint: str
    started: float
    keepalive: float
    executable: str = ""
    parts: dict[str, str] = field(default_factory=dict)  # what the fingerprint hashes
    jobs: list[str] = field(default_factory=list)  # job ids with ranks running
    ranks: int = 0  # ranks running now
    idle_since: float | None = None
    served: int = 0  # job attempts forked so far
    ready: float | None = None  # when it became ready (start-up = ready - started)
    preloaded: list[str] = field(default_factory=list)  # learned from its jobs' imports

    def to_dict(self) -> dict[str, Any]:
        now = time.time()
        idle = now - self.idle_since if self.idle_since is not None and not self.jobs else None
        return {
            "running": True,
            "status": self.status,
            "pid": self.pid,
            "jobs": list(self.jobs),
            "ranks": self.ranks,
            "idle_s": idle,
            "keepalive_s": self.keepalive,
            "ends_in_s": max(0.0, self.keepalive - idle) if idle is not None else None,
            "served": self.served,
            "preloaded": list(self.preloaded),
            "started": self.started,
            "text": describe(self, now),
        }


def read_info(folder: Path) -> PoolInfo | None:
    """The pool in ``folder``, or None when there is none (or its daemon is gone)."""
    try:
        data = json.loads(state_path(folder).read_text())
        info = PoolInfo(**data)
    except (OSError, ValueError, TypeError):
        return None
    try:
        os.kill(info.pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # pragma: no cover - a pid reused by another account
        return None
    return info


def _minutes(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"


def describe(info: PoolInfo | None, now: float | None = None) -> str:
    """One line for people: ``warm pool: idle 4 min (ends in 6 min), 3 jobs served``."""
    if info is None:
        return "warm pool: none (the next local job starts one)"
    now = time.time() if now is None else now
    if info.status != "ready":
        return "warm pool: starting"
    learned = (
        f"; preloads {', '.join(info.preloaded)} (your jobs import them)" if info.preloaded else ""
    )
    if info.jobs:
        jobs = f"{len(info.jobs)} job" + ("s" if len(info.jobs) != 1 else "")
        return f"warm pool: {info.ranks} ranks running ({jobs}){learned}"
    idle = now - (info.idle_since or info.started)
    left = max(0.0, info.keepalive - idle)
    return (
        f"warm pool: idle {_minutes(idle)} (ends in {_minutes(left)}),"
        f" {info.served} job{'s' if info.served != 1 else ''} served{learned}"
    )


def status() -> dict[str, Any]:
    """The pool of this user and interpreter as JSON (the CLI's and the REST API's)."""
    info = read_info(pool_dir())
    if info is None:
        return {"running": False, "text": describe(None)}
    return info.to_dict()
