"""What the notebook asks of every rank between cells (run on the engines).

The health check after an interrupted or failed cell: a rank interrupted in the middle
of a loop of collectives may have made more of them than its peers, and continuing
would pair mismatched tensors (silent corruption, not a hang). Each rank reports its
default group's collective sequence number; when they differ, or a short
``monitored_barrier`` fails (a peer's collective timed out, leaving the group unusable),
every rank rebuilds the process group on a fresh store prefix.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

#: The store prefix a rank's first process group was made on (its rebuilds go under it).
STORE_BASE_VAR = "ALCHEMIST_SESSION_STORE_BASE"


def sequence_number() -> int | None:
    """The default process group's collective sequence number; None without a group."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return None
    group = dist.distributed_c10d._get_default_group()
    return int(group._get_sequence_number_for_group())  # type: ignore[attr-defined]


def barrier(timeout_s: float) -> str | None:
    """A ``monitored_barrier`` (gloo) or barrier; None when every rank reached it, else
    the error's first line."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return None
    try:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=timedelta(seconds=timeout_s))
        else:
            dist.barrier()
    except Exception as e:
        return (str(e).strip().splitlines() or [type(e).__name__])[0]
    return None


def store_base() -> str:
    """The store prefix of the rank's first process group, remembered (in
    :data:`STORE_BASE_VAR`) the first time this is asked, before any rebuild."""
    return os.environ.setdefault(STORE_BASE_VAR, os.environ.get("ALCHEMIST_STORE_PREFIX", ""))


def rebuild(generation: int) -> int | None:
    """Destroy the process group and make it again on the store prefix of
    ``generation``, as the rank first made it; returns the new sequence number."""
    import torch.distributed as dist

    from alchemist.runtime import worker

    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:
            pass
    # Under the prefix the rank started on: a warm pool's store serves other jobs too.
    os.environ["ALCHEMIST_STORE_PREFIX"] = f"{store_base()}/pg-{generation}"
    worker._init_process_group("sync")
    print(f"[alchemist] process group rebuilt (generation {generation})", flush=True)
    return sequence_number()


def info() -> dict[str, Any]:
    """The rank's pid and identity (the notebook checks engine id = rank)."""
    return {
        "pid": os.getpid(),
        "rank": int(os.environ["RANK"]),
        "world_size": int(os.environ["WORLD_SIZE"]),
    }
