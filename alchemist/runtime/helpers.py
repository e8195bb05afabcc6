"""The helpers a training cell calls; identical in a plain notebook and in a job."""

from __future__ import annotations

import io
import os
import pickle
import re
import tempfile
from pathlib import Path
from typing import Any

from alchemist.errors import CheckpointError
from alchemist.job.jobdir import atomic_write_bytes
from alchemist.metrics import reporter as _reporting
from alchemist.runtime.context import context
from alchemist.runtime.hooks import rearm as rearm_watchdog


def _dist_ready() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def distribute(
    model: Any, optimizer: Any, algorithm: str | None = None, **options: Any
) -> tuple[Any, Any]:
    """Make ``model`` and ``optimizer`` train data-parallel across the job's ranks.

    The training loop stays as it is (``loss.backward(); optimizer.step()``). At world
    size 1 (a plain notebook) the model is moved to the context's device and both are
    returned unchanged.

    Args:
        model: a ``torch.nn.Module``.
        optimizer: an optimizer over ``model``'s parameters.
        algorithm: ``sync``, ``async``, ``bmuf``, ``easgd`` or ``horovod``; None uses the
            job's ``--algorithm`` (default ``sync``).
        **options: the algorithm's parameters (e.g. ``block_momentum=0.9``); the job's
            ``--algorithm-option`` values are the defaults when ``algorithm`` is the
            job's own.

    Returns:
        ``(model, optimizer)`` to use in the training loop.

    Raises:
        SpecError: an unknown algorithm or a bad option (at every world size).
    """
    ctx = context()
    model = model.to(ctx.device)
    name = algorithm or ctx.algorithm
    # The job's --algorithm-option values belong to the job's --algorithm.
    job_options = (ctx.spec.get("algorithm_options") or {}) if name == ctx.algorithm else {}
    merged = {**job_options, **options}
    from alchemist.runtime import algorithms

    if ctx.world_size == 1:
        # No wrap here, but the same check: a typo fails the prototype, not the job.
        algorithms.check(name, merged)
        return model, optimizer
    result: tuple[Any, Any] = algorithms.get(name).wrap(model, optimizer, ctx, **merged)
    return result


def per_worker_batch(global_batch: int | None = None) -> int | None:
    """The per-rank batch for ``global_batch`` (default: the job's ``--global-batch``)."""
    ctx = context()
    gb = global_batch or ctx.spec.get("global_batch")
    if not gb:
        return None
    return max(1, int(gb) // ctx.world_size)


def shard(
    dataset: Any,
    batch_size: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    **loader_kwargs: Any,
) -> Any:
    """A DataLoader over this rank's share of ``dataset`` (a DistributedSampler).

    Args:
        dataset: a map-style dataset (e.g. ``TensorDataset``).
        batch_size: per-rank batch; None uses ``--global-batch`` / world size (or 32).
        shuffle: reshuffle every epoch (call ``loader.sampler.set_epoch(epoch)``).
        seed: the shuffling seed, the same on every rank.
        **loader_kwargs: passed to ``torch.utils.data.DataLoader``.
    """
    from torch.utils.data import DataLoader, DistributedSampler

    ctx = context()
    if batch_size is None:
        batch_size = per_worker_batch() or 32
    sampler: DistributedSampler[Any] = DistributedSampler(
        dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=shuffle, seed=seed
    )
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, **loader_kwargs)


def log(step: int, **metrics: float) -> None:
    """Record metrics for ``step`` (learning curves, TensorBoard).

    In a job each rank's events go to its own ``metrics/rank-<r>.jsonl`` in the job
    directory, and on to TensorBoard; in a plain notebook they are kept in memory for
    the prototype's curve.
    """
    # The hot path of a training loop: no import statement, no lock, the keywords' dict
    # handed on as it is (benchmarks/step_overhead.py measures it on the training thread).
    reporter = _reporting._reporter
    if reporter is None:
        reporter = _reporting.get_reporter()
    reporter.log_values(step, metrics)
    rearm_watchdog()  # the rank advanced (alchemist.runtime.hooks)


# -- checkpoints ---------------------------------------------------------------------------

_CKPT_RE = re.compile(r"^ckpt-(\d+)\.pt$")
_local_ckpt_dir: Path | None = None


def _checkpoint_dir() -> Path:
    ctx = context()
    if ctx.job_dir is not None:
        return ctx.job_dir.checkpoints
    global _local_ckpt_dir
    if _local_ckpt_dir is None:
        _local_ckpt_dir = Path(tempfile.mkdtemp(prefix="alchemist-ckpt-"))
    return _local_ckpt_dir


def save_checkpoint(state: dict[str, Any], step: int, keep: int = 3) -> Path | None:
    """Save ``state`` (e.g. model and optimizer ``state_dict()``) as of ``step``.

    Every rank calls it. It first waits for all ranks to reach this step, so a
    checkpoint only ever records a step the whole job completed; then rank 0 writes it
    atomically (a crash mid-write never leaves a broken latest checkpoint). The newest
    ``keep`` checkpoints are kept.

    Returns:
        The checkpoint's path on rank 0, None on other ranks.
    """
    import torch

    if _dist_ready():
        import torch.distributed as dist

        dist.barrier()
    ctx = context()
    if not ctx.is_main:
        return None
    directory = _checkpoint_dir()
    buf = io.BytesIO()
    torch.save({"step": step, "state": state}, buf)
    path = directory / f"ckpt-{step:09d}.pt"
    atomic_write_bytes(path, buf.getvalue())
    for old in _checkpoints(directory)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def _checkpoints(directory: Path) -> list[Path]:
    found = [
        (int(m.group(1)), p) for p in directory.glob("ckpt-*.pt") if (m := _CKPT_RE.match(p.name))
    ]
    return [p for _, p in sorted(found)]


def restore(map_location: Any = None, *, weights_only: bool = True) -> dict[str, Any] | None:
    """The latest checkpoint as ``{"step": int, "state": dict}``, or None if there is none.

    A restarted job calls this at the start of training to resume where it stopped.
    Every rank calls it; rank 0 chooses the checkpoint and all ranks load that one, so
    the ranks resume from the same step.

    Args:
        map_location: where tensors go (default: this rank's device).
        weights_only: load with torch's safe loader (the default), which rebuilds only
            tensors, containers and plain values, so a checkpoint file cannot run code
            when it is loaded. ``False`` loads any Python object (your own classes,
            numpy values) by unpickling the file, which runs whatever code the file
            names: pass it only for checkpoints you trust, that no one else could have
            written.

    Raises:
        CheckpointError: the safe loader refused the checkpoint (the message says what
            it holds and how to opt out).
    """
    import torch

    directory = _checkpoint_dir()
    ckpts = _checkpoints(directory)
    chosen: list[str | None] = [ckpts[-1].name if ckpts else None]
    if _dist_ready():
        import torch.distributed as dist

        dist.broadcast_object_list(chosen, src=0)
    if chosen[0] is None:
        return None
    loc = map_location if map_location is not None else context().device
    try:
        ckpt: dict[str, Any] = torch.load(
            directory / chosen[0], map_location=loc, weights_only=weights_only
        )
    except pickle.UnpicklingError as e:
        if not weights_only:
            raise
        raise CheckpointError(
            f"restore() refused checkpoint {directory / chosen[0]}: {_refusal(str(e))};"
            " if you trust the file, call alchemist.restore(weights_only=False)"
        ) from e
    return ckpt


_UNSUPPORTED_GLOBAL_RE = re.compile(r"Unsupported global: GLOBAL (\S+)")


def _refusal(message: str) -> str:
    """Why torch's safe loader refused a file, from its multi-paragraph message, in a clause."""
    found = _UNSUPPORTED_GLOBAL_RE.search(message)
    if found:
        return (
            f"it uses {found.group(1)}, which the safe loader does not load because loading"
            " arbitrary objects can run code"
        )
    _, _, reason = message.partition("WeightsUnpickler error:")
    first = next((line.strip() for line in reason.splitlines() if line.strip()), "")
    return f"the safe loader cannot read it ({first or 'no reason given'})"


def restart_count() -> int:
    """How many times torchrun restarted this job's workers (0 on the first attempt)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
