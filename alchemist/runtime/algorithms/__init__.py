"""The distributed training algorithms a job can use (``--algorithm``).

Each algorithm is a module with ``wrap(model, optimizer, ctx, **options) -> (model,
optimizer)``, called by :func:`alchemist.distribute` once the process group is up.
The user's loop stays ``loss.backward(); optimizer.step()``: the returned optimizer
(or, for ``sync``, the DDP model) does the communication. At world size 1 every
algorithm returns the model and optimizer unchanged.

=========  ===============================================  ===========================
name       algorithm                                        module
=========  ===============================================  ===========================
sync       synchronous SGD, all-reduce (DDP)                :mod:`.sync`
async      asynchronous SGD, parameter server on rank 0     :mod:`.async_ps`
bmuf       block-wise model-update filtering (Chen & Huo)   :mod:`.bmuf`
easgd      elastic averaging SGD (Zhang et al.)             :mod:`.easgd`
horovod    Horovod's DistributedOptimizer                   :mod:`.horovod`
=========  ===============================================  ===========================

:mod:`alchemist.job.algorithms` holds every option of every algorithm: its default (the papers'
recommended settings; ``None`` means "derived from the world size"), its type and its
valid values. It imports no torch: a job's options are checked with :func:`check` when
it is submitted, and again, by the same function, when a rank wraps the model.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from alchemist.errors import SpecError
from alchemist.job.algorithms import ALGORITHM_DEFAULTS, CATALOGUE, check, describe


def names() -> tuple[str, ...]:
    """The algorithm names, in the order of :data:`ALGORITHM_DEFAULTS`."""
    return tuple(ALGORITHM_DEFAULTS)


def get(name: str) -> ModuleType:
    """The module implementing algorithm ``name`` (it has ``wrap`` and ``DEFAULTS``).

    Raises:
        SpecError: ``name`` is not an algorithm (the message lists the valid ones).
    """
    if name not in CATALOGUE:
        raise SpecError(f"algorithm {name!r} is unknown; choose one of {', '.join(CATALOGUE)}")
    return importlib.import_module(f"{__name__}.{CATALOGUE[name].module}")


def finish_all() -> None:
    """Finish every wrapped optimizer of this process (see ``_base.finish_all``).

    The runtime calls it after the cell and before saving outputs: ``async`` and
    ``easgd`` then load the final parameters into rank 0's model and ``bmuf`` closes an
    incomplete last block. Cheap and harmless when no algorithm was used.
    """
    base = sys.modules.get(f"{__name__}._base")
    if base is not None:
        base.finish_all()


__all__ = ["ALGORITHM_DEFAULTS", "check", "describe", "finish_all", "get", "names"]
