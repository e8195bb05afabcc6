"""An unmodified torchrun script as a job (``alchemist submit train.py -n 2 -- ARGS``).

Such a script calls ``dist.init_process_group(...)`` itself, reads ``RANK``,
``LOCAL_RANK`` and ``WORLD_SIZE`` (set as torchrun sets them) and parses ``sys.argv``.
The worker has made the job's process group already (on the attempt's store prefix, so
restarts and warm ranks keep apart), so :func:`install` makes a second
``init_process_group`` return that group when it asks for the same backend, and say in
one line what to change when it asks for another. ``sys.argv`` is the script's name and
the arguments given after ``--`` (:data:`ARGV_FILE` in the bundle), as torchrun gives it.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

from alchemist.errors import IntegrationError

#: In the job's bundle folder: ``[script name, arg, ...]`` for a script's ``sys.argv``.
ARGV_FILE = "argv.json"

_installed = False


def _backends(spec: Any) -> set[str]:
    """``"gloo"`` -> {"gloo"}; ``"cpu:gloo,cuda:nccl"`` -> {"gloo", "nccl"}."""
    if spec is None:
        return set()
    text = str(spec).lower()
    return {part.split(":")[-1] for part in text.split(",") if part}


def install() -> None:
    """Make ``torch.distributed.init_process_group`` idempotent for the job's group."""
    global _installed
    if _installed:
        return
    import torch.distributed as dist

    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> None:
        if not dist.is_initialized():
            return original(backend, *args, **kwargs)
        made = _backends(dist.get_backend())
        asked = _backends(backend if backend is not None else kwargs.get("backend"))
        if asked and not asked & made:
            raise IntegrationError(
                f"init_process_group({backend!r}): this job's process group is already made"
                f" with {dist.get_backend()!r} (gloo on CPU, nccl when the job has GPUs):"
                f" ask for {dist.get_backend()!r} or for no backend"
            )
        return None

    init_process_group._alchemist = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group
    import torch.distributed.distributed_c10d as c10d

    c10d.init_process_group = init_process_group
    _installed = True


def write_argv(bundle_dir: Path, script: str, args: list[str]) -> None:
    """Keep a script's ``sys.argv`` with its bundle (read by :func:`set_argv`)."""
    from alchemist.jobdir import atomic_write_json

    atomic_write_json(bundle_dir / ARGV_FILE, [script, *args])


def set_argv(bundle_dir: Path) -> str | None:
    """Set ``sys.argv`` for a script from its bundle; returns the script's name (or None
    where the bundle is a cell's)."""
    path = bundle_dir / ARGV_FILE
    if not path.is_file():
        return None
    argv = [str(a) for a in json.loads(path.read_text())]
    sys.argv = argv
    return argv[0]
