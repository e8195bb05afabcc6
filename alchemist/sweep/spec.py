"""What a sweep is: the swept names, the objective, the search and the pruning.

:class:`SweepSpec` is to a sweep what :class:`~alchemist.job.spec.JobSpec` is to a job:
written once to ``sweep.json`` when the sweep starts, read by its driver (also after a
restart) and by every view. The trials' own job options (``-n``, GPUs, algorithm,
backend...) travel in it unchanged: each trial is an ordinary job.

The search and the early stopping are Optuna's: :meth:`SweepSpec.make_sampler` and
:meth:`SweepSpec.make_pruner` name which of its samplers and pruners a sweep uses.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from itertools import product
from typing import Any

from alchemist.errors import SpecError
from alchemist.sweep.space import MAX_TRIALS, Param, grid_size

#: Optuna's samplers a sweep may use: every combination of the lists, random draws, or
#: TPE (draws guided by the trials so far).
SAMPLERS = ("grid", "random", "tpe")
#: Optuna's pruners: stop a trial whose objective is worse than the median of the
#: finished trials at the same step; successive halving; Hyperband; never stop one.
PRUNERS = ("median", "halving", "hyperband", "none")
MODES = ("max", "min")
#: Trials drawn when a sweep draws values and names no --trials.
DEFAULT_DRAWN_TRIALS = 10
_METRIC = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")


@dataclass
class SweepSpec:
    """One sweep.

    Attributes:
        name: the sweep's name; trial ``n`` is the job ``<name>-t<n>``.
        params: the swept names (:class:`~alchemist.sweep.space.Param`).
        objective: the metric (an ``alchemist.log`` keyword) that judges a trial: its
            last value logged by rank 0 is the trial's result; each value is reported
            to the pruner at its step. Optuna's median pruner stops a trial when its
            best value so far is worse than the median of the finished trials' values
            at the same step.
        mode: ``max`` or ``min``.
        sampler: one of :data:`SAMPLERS`.
        pruner: one of :data:`PRUNERS`.
        trials: how many trials run (the whole grid by default).
        parallel: how many trials run at once.
        prune_after: finished trials before the median pruner stops any (default: a
            quarter of the trials, from 2 to 5: one finished trial is no median).
        prune_warmup: steps a trial runs before it may be stopped.
        seed: the sampler's seed (None: random).
        job_options: every trial's job options, as :func:`alchemist.client.make_spec`.
    """

    name: str
    params: list[Param]
    objective: str
    mode: str = "max"
    sampler: str = "grid"
    pruner: str = "median"
    trials: int = 1
    parallel: int = 1
    prune_after: int = 2
    prune_warmup: int = 0
    seed: int | None = None
    job_options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def make(
        cls,
        name: str,
        params: list[Param],
        objective: str,
        *,
        mode: str = "max",
        sampler: str | None = None,
        pruner: str = "median",
        trials: int | None = None,
        parallel: int = 1,
        prune_after: int | None = None,
        prune_warmup: int = 0,
        seed: int | None = None,
        job_options: dict[str, Any] | None = None,
    ) -> SweepSpec:
        """A checked spec, with the defaults a user expects: a grid when every name is a
        list (all of it, or ``trials`` of it), TPE when a name is drawn.

        Raises:
            SpecError: one line naming the value and the fix.
        """
        if not _METRIC.fullmatch(objective or ""):
            raise SpecError(
                f"--objective {objective!r}: name the metric the cell logs, e.g. --objective"
                " val_acc for alchemist.log(step, val_acc=...)"
            )
        if mode not in MODES:
            raise SpecError(f"--mode must be max or min, got {mode!r}")
        if pruner not in PRUNERS:
            raise SpecError(f"--pruner must be one of {', '.join(PRUNERS)}, got {pruner!r}")
        grid = grid_size(params)
        if sampler is None:
            sampler = "grid" if grid is not None else "tpe"
        if sampler not in SAMPLERS:
            raise SpecError(f"--sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
        if sampler == "grid" and grid is None:
            drawn = next(p for p in params if not p.is_grid)
            raise SpecError(
                f"--sampler grid tries every value of lists, but {drawn.describe()} is drawn:"
                " use --sampler random or tpe with --trials N, or give it a list of values"
            )
        if trials is None:
            trials = grid if grid is not None else DEFAULT_DRAWN_TRIALS
            if trials > MAX_TRIALS:
                raise SpecError(
                    f"the grid has {trials:,} combinations (at most {MAX_TRIALS:,} trials):"
                    " run a sample of it with --trials N (and --sampler random or tpe)"
                )
        if not isinstance(trials, int) or isinstance(trials, bool) or not trials >= 1:
            raise SpecError(f"--trials must be a whole number from 1, got {trials!r}")
        if trials > MAX_TRIALS:
            raise SpecError(f"--trials {trials:,} is more than {MAX_TRIALS:,}")
        if sampler == "grid" and grid is not None and trials > grid:
            trials = grid  # a grid has no more settings to try
        if not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1:
            raise SpecError(f"--parallel must be a whole number from 1, got {parallel!r}")
        if prune_after is None:
            prune_after = min(5, max(2, trials // 4))
        for flag, value in (("--prune-after", prune_after), ("--prune-warmup", prune_warmup)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecError(f"{flag} must be a whole number from 0, got {value!r}")
        return cls(
            name=name,
            params=list(params),
            objective=objective,
            mode=mode,
            sampler=sampler,
            pruner=pruner,
            trials=trials,
            parallel=min(parallel, trials),
            prune_after=prune_after,
            prune_warmup=prune_warmup,
            seed=seed,
            job_options=dict(job_options or {}),
        )

    def better(self, a: float, b: float) -> bool:
        """``a`` is a better objective value than ``b``."""
        return a > b if self.mode == "max" else a < b

    def grid_settings(self) -> list[dict[str, Any]]:
        """The settings a grid runs, in the order the lists were written (the first name
        varies slowest); ``trials`` fewer than the grid: a random sample of them (by
        ``seed``), in that order. Empty for a sampler that draws.

        A grid's settings are queued in the study (Optuna's ``enqueue_trial``) when the
        sweep starts, so they run in this order and the views list them from the start.
        """
        if self.sampler != "grid":
            return []
        names = [p.name for p in self.params]
        combos = [
            dict(zip(names, c, strict=True)) for c in product(*(p.choices for p in self.params))
        ]
        if self.trials < len(combos):
            keep = sorted(random.Random(self.seed).sample(range(len(combos)), self.trials))
            combos = [combos[i] for i in keep]
        return combos

    def distributions(self) -> dict[str, Any]:
        return {p.name: p.distribution() for p in self.params}

    def make_sampler(self) -> Any:
        import optuna

        if self.sampler in ("grid", "random"):  # a grid's settings are queued: grid_settings
            return optuna.samplers.RandomSampler(seed=self.seed)
        return optuna.samplers.TPESampler(seed=self.seed)

    def make_pruner(self) -> Any:
        import optuna

        if self.pruner == "median":
            return optuna.pruners.MedianPruner(
                n_startup_trials=self.prune_after, n_warmup_steps=self.prune_warmup
            )
        if self.pruner == "halving":
            return optuna.pruners.SuccessiveHalvingPruner(min_early_stopping_rate=0)
        if self.pruner == "hyperband":
            return optuna.pruners.HyperbandPruner()
        return optuna.pruners.NopPruner()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "params": [p.to_dict() for p in self.params],
            "objective": self.objective,
            "mode": self.mode,
            "sampler": self.sampler,
            "pruner": self.pruner,
            "trials": self.trials,
            "parallel": self.parallel,
            "prune_after": self.prune_after,
            "prune_warmup": self.prune_warmup,
            "seed": self.seed,
            "job_options": self.job_options,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepSpec:
        """The spec of ``sweep.json`` (its other keys, ``created`` and ``owner``, left out)."""
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["params"] = [Param.from_dict(p) for p in data["params"]]
        return cls(**fields)
