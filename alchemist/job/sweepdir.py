"""The sweep directory: the one place a sweep's files live.

Layout of ``<ALCHEMIST_HOME>/sweeps/<sweep_id>/`` (0700, like a job directory)::

    sweep.json         what the sweep was started with: the swept names, the objective,
                       sampler, pruner, trial and parallel counts, the trials' job options
    template/          the cell's bundle as built in the notebook (each trial's bundle is
                       a copy of it with the trial's values set in source.py)
    journal.log        Optuna's journal: the study (trials, their values, reported
                       steps, states); the sweep's truth, from which a driver resumes
    trials.json        the driver's last view of the trials, for the readers (widget,
                       CLI, REST) that should not replay the journal or import Optuna
    state.json         the sweep's state (running, succeeded, failed, cancelled), reason
    driver.lock        held (flock) by the one driver process while it runs
    driver.log         the driver's output
    cancel-requested   asks the driver to cancel the sweep (its running trials with it)
    tensorboard/       one run per finished trial with its settings and result (HParams)

Each trial is an ordinary job (its own job directory under ``jobs/``), named
``<sweep name>-t<number>``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alchemist.job.jobdir import atomic_write_json, make_private_dir

#: The states of a sweep; the last three are final.
SWEEP_STATES = ("running", "succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class SweepDir:
    root: Path

    @property
    def sweep_id(self) -> str:
        return self.root.name

    def create(self) -> SweepDir:
        make_private_dir(self.root)
        return self

    @property
    def config(self) -> Path:
        return self.root / "sweep.json"

    @property
    def template(self) -> Path:
        return self.root / "template"

    @property
    def journal(self) -> Path:
        return self.root / "journal.log"

    @property
    def trials(self) -> Path:
        return self.root / "trials.json"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def driver_lock(self) -> Path:
        return self.root / "driver.lock"

    @property
    def driver_log(self) -> Path:
        return self.root / "driver.log"

    @property
    def cancel_marker(self) -> Path:
        return self.root / "cancel-requested"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    def read_json(self, path: Path) -> Any:
        """``path``'s JSON, or None when it is missing or half-made."""
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def read_state(self) -> dict[str, Any]:
        return self.read_json(self.state) or {"state": "running", "reason": None}

    def write_state(self, **fields: Any) -> None:
        state = self.read_state()
        state.update(fields)
        atomic_write_json(self.state, state)
