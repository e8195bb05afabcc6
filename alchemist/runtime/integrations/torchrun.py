"""An unmodified torchrun script as a job (``alchemist submit train.py -n 2 -- ARGS``).

Such a script calls ``dist.init_process_group(...)`` itself, reads ``RANK``,
``LOCAL_RANK`` and ``WORLD_SIZE`` (set as torchrun sets them) and parses ``sys.argv``.
The worker has made the job's process group already (on the attempt's store prefix, so
restarts and warm ranks keep apart), so :func:`install` makes a second
``init_process_group`` return that group when it asks for the same backend, and say in
one line what to change when it asks for another. The script's closing
``destroy_process_group()`` leaves the job's group to the worker, which destroys it after
the rank has recorded that its code finished: a gloo rank forked from the warm pool can
block for ever in a ``destroy_process_group`` made while its peer already exits (seen on
torch 2.13), and a rank blocked there before its record would hold the job as running.
``sys.argv`` is the script's name and
the arguments given after ``--`` (``argv.json`` in the bundle, :func:`alchemist.bundle.store.set_argv`), as torchrun gives it.
"""

from __future__ import annotations

import functools
from typing import Any

from alchemist.errors import IntegrationError

_installed = False

#: torch's own ``destroy_process_group``, kept by :func:`install` for the worker.
_destroy: Any = None


def _backends(spec: Any) -> set[str]:
    """``"gloo"`` -> {"gloo"}; ``"cpu:gloo,cuda:nccl"`` -> {"gloo", "nccl"}."""
    if spec is None:
        return set()
    text = str(spec).lower()
    return {part.split(":")[-1] for part in text.split(",") if part}


def install() -> None:
    """Make ``torch.distributed.init_process_group`` idempotent for the job's group, and
    ``destroy_process_group()`` of that group the worker's (see :func:`destroy`)."""
    global _installed, _destroy
    if _installed:
        return
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    original = dist.init_process_group
    _destroy = original_destroy = dist.destroy_process_group
    job_group = dist.group.WORLD if dist.is_initialized() else None

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

    @functools.wraps(original_destroy)
    def destroy_process_group(group: Any = None) -> None:
        job_world = job_group is not None and dist.group.WORLD is job_group
        if job_world and group in (None, job_group):
            return None  # the job's group: the worker destroys it at the end
        return original_destroy(group)

    init_process_group._alchemist = True  # type: ignore[attr-defined]
    destroy_process_group._alchemist = True  # type: ignore[attr-defined]
    dist.init_process_group = c10d.init_process_group = init_process_group
    dist.destroy_process_group = c10d.destroy_process_group = destroy_process_group
    _installed = True


def destroy() -> None:
    """Destroy the job's process group (the worker's last step), past :func:`install`'s
    wrapper."""
    import torch.distributed as dist

    if dist.is_initialized():
        (_destroy or dist.destroy_process_group)()
