"""Sweeps: the same cell over many settings, compared live, the bad trials stopped early.

``%%alchemist_sweep --param lr=loguniform(1e-4,1e-1) --objective val_acc`` (or
:func:`start`) runs a cell once per setting, each trial an ordinary job, with Optuna's
samplers choosing the settings and its pruners stopping the trials that fall behind.
See docs/sweeps.md.

- :mod:`~alchemist.sweep.space`: the swept names (``NAME=SPEC``);
- :mod:`~alchemist.sweep.cell`: the cell's own assignments, set per trial;
- :mod:`~alchemist.sweep.spec`: the sweep's definition (objective, sampler, pruner);
- :mod:`~alchemist.sweep.driver`: the detached process that runs a sweep;
- :mod:`~alchemist.sweep.api`: :func:`start`, :func:`attach`, :func:`sweeps`, :class:`Sweep`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alchemist._lazy import lazy_exports

if TYPE_CHECKING:
    from alchemist.sweep.api import Sweep, SweepDryRun, attach, start, sweeps

__getattr__, __dir__ = lazy_exports(
    globals(),
    {name: "alchemist.sweep.api" for name in ("Sweep", "SweepDryRun", "attach", "start", "sweeps")},
)

__all__ = ["Sweep", "SweepDryRun", "attach", "start", "sweeps"]
