"""The sweep's driver: one detached process per running sweep, the only writer of its study.

It asks Optuna for a trial's values, submits the cell with them as an ordinary job
(:func:`alchemist.client.submit_template`), follows each running trial's logged
objective, reports every new value to Optuna's pruner at its step, cancels a trial
the pruner stops (the job's reason says why), tells Optuna each result, and keeps at
most ``parallel`` trials running until ``trials`` have run. It runs apart from the
kernel and the Jupyter server (its own session, as a job's supervisor does), so a
sweep outlives both; ``python -m alchemist.sweep SWEEP_DIR`` starts it, and starting it
again on a sweep whose driver died resumes it from the study (Optuna's journal file):
the running trials' jobs are followed again, nothing is run twice.

One driver at a time: it holds an ``flock`` on ``driver.lock``; a second one exits.
What it writes for the readers: ``trials.json`` (every trial: settings, state, last
step and value, job, reason; the best) and ``state.json``.

Rules a user relies on:

- a trial's result is the **last** value of the objective that rank 0 logged;
- a trial that ends without ever logging the objective stops the sweep (every trial
  runs the same cell: the objective is misnamed or never logged), and so does a trial
  that fails before any trial has succeeded; later failures (one setting running out of
  memory, say) are recorded and the sweep goes on;
- ``cancel-requested`` (``alchemist sweep cancel``) cancels the running trials.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import statistics
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alchemist import client
from alchemist.errors import AlchemistError
from alchemist.job import config
from alchemist.job.jobdir import atomic_write_json
from alchemist.job.spec import JobState
from alchemist.job.sweepdir import SweepDir
from alchemist.metrics.reader import MetricsReader
from alchemist.sweep import hparams
from alchemist.sweep.cell import with_values
from alchemist.sweep.spec import SweepSpec

POLL_S = 0.5
#: The readers' view is written when a trial changes, and at least this often.
VIEW_EVERY_S = 2.0
#: The study's name in the journal (one study per sweep directory).
STUDY = "sweep"
#: How many of a trial's objective points the view keeps (the widget's curve).
CURVE_POINTS = 200


def open_study(sd: SweepDir, spec: SweepSpec) -> Any:
    """The sweep's Optuna study, created on first use, in the sweep's journal file."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(sd.journal)))
    return optuna.create_study(
        study_name=STUDY,
        storage=storage,
        sampler=spec.make_sampler(),
        pruner=spec.make_pruner(),
        direction="maximize" if spec.mode == "max" else "minimize",
        load_if_exists=True,
    )


@dataclass
class Followed:
    """A running trial: its Optuna trial, its job, and what was read of its metrics."""

    trial: Any
    job: client.Job
    cursor: str | None = None
    last: tuple[int, float] | None = None
    logged: set[str] = field(default_factory=set)
    pruned: bool = False


class Driver:
    def __init__(self, sd: SweepDir) -> None:
        self.sd = sd
        self.spec = SweepSpec.from_dict(sd.read_json(sd.config))
        self.source = (sd.template / "source.py").read_text()
        self.study = open_study(sd, self.spec)
        if not self.study.get_trials(deepcopy=False):
            for setting in self.spec.grid_settings():
                self.study.enqueue_trial(setting)
            self._hparams(hparams.write_experiment, self.sd.tensorboard, self.spec)
        self.followed: dict[int, Followed] = {}
        self.stop_reason: str | None = None
        self.viewed = 0.0

    # -- the loop --------------------------------------------------------------------
    def run(self) -> str:
        """Drive the sweep to its end; returns its final state."""
        self.sd.write_state(
            state="running",
            reason=None,
            driver_pid=os.getpid(),
            finished=None,
            driver_crashed=False,
        )
        self._resume()
        self._write_view()
        while True:
            if self.sd.cancel_marker.exists():
                self._cancel_running("the sweep was cancelled")
                return self._finish("cancelled", "cancelled by the user")
            changed = self._poll()
            if self.stop_reason is not None:
                self._cancel_running(f"the sweep stopped: {self.stop_reason}")
                return self._finish("failed", self.stop_reason)
            changed |= self._start_more()
            if self.stop_reason is not None:
                continue
            if changed or time.monotonic() - self.viewed > VIEW_EVERY_S:
                self._write_view()  # also for a trial's job going from queued to running
            if not self.followed and self._submitted() >= self.spec.trials:
                complete = self._trials("COMPLETE")
                if complete:
                    return self._finish("succeeded", None)
                return self._finish("failed", "no trial finished with a value")
            time.sleep(POLL_S)

    def _finish(self, state: str, reason: str | None) -> str:
        self._write_view(ended=True)
        self.sd.write_state(state=state, reason=reason, finished=time.time())
        print(f"[alchemist] sweep {self.sd.sweep_id} {state}" + (f": {reason}" if reason else ""))
        return state

    # -- trials ----------------------------------------------------------------------
    def _trials(self, *states: str) -> list[Any]:
        from optuna.trial import TrialState

        wanted = tuple(TrialState[s] for s in states) if states else None
        return self.study.get_trials(deepcopy=False, states=wanted)

    def _submitted(self) -> int:
        return sum(1 for t in self._trials() if t.user_attrs.get("submitted"))

    def _resume(self) -> None:
        """Follow again the trials a previous driver left running."""
        import optuna
        from optuna.trial import TrialState

        for frozen in self._trials("RUNNING"):
            trial = optuna.trial.Trial(self.study, frozen._trial_id)
            job_id = frozen.user_attrs.get("job_id")
            try:
                job = client.attach(job_id) if frozen.user_attrs.get("submitted") else None
            except AlchemistError:
                job = None
            if job is None:  # the driver stopped between asking and submitting
                self._set(frozen, reason="not run: the sweep's driver stopped before submitting")
                self.study.tell(trial, state=TrialState.FAIL)
                continue
            self.followed[frozen.number] = Followed(trial, job)
            print(f"[alchemist] following trial {frozen.number} (job {job.id}) again")

    def _start_more(self) -> bool:
        from optuna.trial import TrialState

        started = False
        while len(self.followed) < self.spec.parallel and self._submitted() < self.spec.trials:
            trial = self.study.ask(self.spec.distributions())
            job_id = client.new_job_id()
            trial.set_user_attr("job_id", job_id)
            values = dict(trial.params)
            try:
                job = client.submit_template(
                    self.sd.template,
                    with_values(self.source, values),
                    job_id=job_id,
                    **{**self.spec.job_options, "name": f"{self.spec.name}-t{trial.number}"},
                )
            except AlchemistError as e:
                trial.set_user_attr("reason", f"not submitted: {e}")
                self.study.tell(trial, state=TrialState.FAIL)
                self.stop_reason = f"trial {trial.number} could not be submitted: {e}"
                return True
            trial.set_user_attr("submitted", True)
            self.followed[trial.number] = Followed(trial, job)
            print(f"[alchemist] trial {trial.number}: job {job.id} {values}", flush=True)
            started = True
        return started

    def _poll(self) -> bool:
        changed = False
        for number, f in list(self.followed.items()):
            # The state first: a job that has ended is judged by its result, never pruned
            # (its last events may arrive in the same read as its first).
            status = f.job.status()
            changed |= self._read_objective(f, may_prune=not status.state.is_terminal)
            if f.pruned:
                del self.followed[number]
                continue
            if status.state.is_terminal:
                self._ended(f, status)
                del self.followed[number]
                changed = True
        return changed

    def _read_objective(self, f: Followed, may_prune: bool = True) -> bool:
        """Report the objective's new values (rank 0's) to Optuna, at their steps, and
        ask the pruner after each (a trial is stopped at the first step it should be)."""
        try:
            events, f.cursor = MetricsReader(f.job.job_dir).read(f.cursor, max_bytes=4 << 20)
        except (OSError, AlchemistError):
            return False
        new = False
        for e in events:
            if e["rank"] != 0:
                continue
            f.logged.update(e["values"])
            value, step = e["values"].get(self.spec.objective), e["step"]
            if value is None or step is None or not math.isfinite(value) or step < 0:
                continue
            step = int(step)
            if f.last is None or step != f.last[0]:
                with contextlib.suppress(Exception):  # a step reported before: kept as it was
                    f.trial.report(float(value), step)
            f.last = (step, float(value))
            new = True
            if may_prune and self.spec.pruner != "none" and f.trial.should_prune():
                if self._prune(f):
                    return True
                may_prune = False  # it finished first: read on, it ends with its result
        return new

    def _prune(self, f: Followed) -> bool:
        """Cancel the trial's job with the pruner's reason; False if the job had
        succeeded by then (a result, not a pruned trial)."""
        from optuna.trial import TrialState

        assert f.last is not None
        step, value = f.last
        why = self._prune_reason(step, value)
        f.job.cancel(reason=why)
        status = f.job.status()
        if status.state == JobState.SUCCEEDED:
            return False
        self._times(f, status)
        self._set(f.trial, reason=why)
        self.study.tell(f.trial, state=TrialState.PRUNED)
        self._record(f, value, ok=False)
        print(f"[alchemist] trial {f.trial.number} {why}", flush=True)
        f.pruned = True
        return True

    def _prune_reason(self, step: int, value: float) -> str:
        objective = self.spec.objective
        base = f"pruned by sweep {self.sd.sweep_id} at step {step}: {objective}={value:.4g}"
        if self.spec.pruner != "median":
            return f"{base}, among the worst of the trials at this step ({self.spec.pruner})"
        at_step = [
            t.intermediate_values[step]
            for t in self._trials("COMPLETE")
            if step in t.intermediate_values
        ]
        if not at_step:
            return f"{base}, worse than the median of the finished trials"
        return f"{base}, worse than the median {statistics.median(at_step):.4g} of the" + (
            f" {len(at_step)} finished trials at this step"
        )

    def _ended(self, f: Followed, status: Any) -> None:
        from optuna.trial import TrialState

        number = f.trial.number
        state = status.state
        self._times(f, status)
        if state == JobState.SUCCEEDED and f.last is not None:
            self.study.tell(f.trial, f.last[1])
            self._record(f, f.last[1], ok=True)
            print(f"[alchemist] trial {number} {self.spec.objective}={f.last[1]:.4g}", flush=True)
            return
        if state == JobState.SUCCEEDED:
            logged = ", ".join(sorted(f.logged)) or "nothing"
            reason = (
                f"the objective {self.spec.objective} was never logged (it logged: {logged}):"
                f" log it with alchemist.log(step, {self.spec.objective}=...) or name a logged"
                " metric with --objective"
            )
            self.stop_reason = f"trial {number}: {reason}"
        elif state == JobState.FAILED:
            reason = f"failed: {status.reason}"
            if not self._trials("COMPLETE"):
                self.stop_reason = (
                    f"trial {number} {reason} (no trial has succeeded: every trial runs the"
                    f" same cell; see %alchemist_logs {f.job.id})"
                )
        else:
            reason = f"{state.value}: {status.reason}"
        self._set(f.trial, reason=reason)
        self.study.tell(f.trial, state=TrialState.FAIL)
        self._record(f, None, ok=False)
        print(f"[alchemist] trial {number} {reason}", flush=True)

    def _cancel_running(self, why: str) -> None:
        from optuna.trial import TrialState

        for f in self.followed.values():
            with contextlib.suppress(AlchemistError, OSError):
                f.job.cancel(reason=why)
            self._set(f.trial, reason=why)
            self.study.tell(f.trial, state=TrialState.FAIL)
        self.followed.clear()

    def _hparams(self, write: Any, *args: Any) -> None:
        """Write TensorBoard's HParams records; a failure there never stops the sweep."""
        try:
            write(*args)
        except Exception as e:
            print(f"[alchemist] TensorBoard HParams not written: {e}", flush=True)

    def _record(self, f: Followed, value: float | None, ok: bool) -> None:
        number, params = f.trial.number, dict(f.trial.params)
        self._hparams(
            hparams.write_trial, self.sd.tensorboard, self.spec, number, params, value, ok
        )

    def _times(self, f: Followed, status: Any) -> None:
        """The trial's time is its job's ``status``: from its start to its end (after a
        cancel: once its processes stopped), not the driver's asking and telling."""
        self._set(f.trial, job_started=status.started, job_finished=status.finished)

    def _set(self, trial: Any, **attrs: Any) -> None:
        """Set user attributes of a trial, a live ``Trial`` or a ``FrozenTrial`` (one a
        resumed driver found running: Optuna gives those no setter, so the storage's)."""
        for key, value in attrs.items():
            self.study._storage.set_trial_user_attr(trial._trial_id, key, value)

    # -- the readers' view -----------------------------------------------------------
    def _write_view(self, ended: bool = False) -> None:
        view = build_view(self.sd, self.spec, self.study, self.followed, ended=ended)
        atomic_write_json(self.sd.trials, view)
        self.viewed = time.monotonic()


def build_view(
    sd: SweepDir,
    spec: SweepSpec,
    study: Any,
    followed: dict[int, Followed] | None = None,
    ended: bool = False,
) -> dict[str, Any]:
    """Every trial as the views show it, and the best (see ``trials.json``); once the
    sweep has ended, a grid's settings that never started are ``not run``."""
    followed = followed or {}
    rows: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    for t in study.get_trials(deepcopy=False):
        job_id = t.user_attrs.get("job_id") if t.user_attrs.get("submitted") else None
        state = {
            "COMPLETE": "complete",
            "PRUNED": "pruned",
            "FAIL": "failed",
            "WAITING": "not run" if ended else "waiting",
        }.get(t.state.name, "running")
        f = followed.get(t.number)
        last = f.last if f is not None else None
        if last is None and t.intermediate_values:
            step = max(t.intermediate_values)
            last = (step, t.intermediate_values[step])
        value = t.value if t.state.name == "COMPLETE" else (last[1] if last else None)
        row_started = t.user_attrs.get("job_started")
        if state == "running" and f is not None:
            with contextlib.suppress(Exception):
                status = f.job.status()
                state = status.state.value  # queued, pending, running
                row_started = status.started
        row = {
            "number": t.number,
            # a grid's setting not started yet is in the queued trial's fixed values
            "params": dict(t.params or t.system_attrs.get("fixed_params") or {}),
            "state": state,
            "job_id": job_id,
            "value": value,
            "step": last[0] if last else None,
            "started": row_started,
            "finished": t.user_attrs.get("job_finished"),
            "reason": t.user_attrs.get("reason"),
        }
        rows.append(row)
        if (
            state == "complete"
            and value is not None
            and (best is None or spec.better(value, best["value"]))
        ):
            best = row
    return {"sweep_id": sd.sweep_id, "updated": time.time(), "trials": rows, "best": best}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m alchemist.sweep SWEEP_DIR", file=sys.stderr)
        return 2
    sd = SweepDir(Path(args[0]))
    os.umask(0o077)  # the study's journal, the view, TensorBoard files: the owner's alone
    with _open_lock(sd) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print(f"[alchemist] sweep {sd.sweep_id}: a driver already runs it")
            return 0
        try:
            Driver(sd).run()
        except Exception as e:  # the sweep says why it stopped; the trials' jobs go on
            traceback.print_exc()
            sd.write_state(
                state="failed",
                reason=f"the sweep's driver stopped: {e} (see {sd.driver_log})",
                finished=time.time(),
                driver_crashed=True,
            )
            return 1
    return 0


def _open_lock(sd: SweepDir) -> Any:
    return os.fdopen(os.open(sd.driver_lock, os.O_RDWR | os.O_CREAT, 0o600), "r+")


def driver_running(sd: SweepDir) -> bool:
    """True while a driver holds the sweep's lock."""
    try:
        with _open_lock(sd) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(lock, fcntl.LOCK_UN)
            return False
    except OSError:
        return True


def start_driver(sd: SweepDir) -> int:
    """Start the sweep's driver as a process of its own (its own session: it outlives
    the kernel and the Jupyter server); returns its pid once it holds the sweep."""
    import subprocess

    config.home()
    log = os.fdopen(os.open(sd.driver_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "alchemist.sweep", str(sd.root)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            umask=0o077,
            cwd=str(sd.root),
        )
    finally:
        log.close()
    # Return once it holds the lock (or has ended), so a caller that looks at once sees
    # it running, not a sweep without a driver.
    deadline = time.monotonic() + 30
    while proc.poll() is None and not driver_running(sd) and time.monotonic() < deadline:
        time.sleep(0.02)
    # Reaped by a thread while this process lives; adopted by init after it ends.
    threading.Thread(target=proc.wait, name=f"sweep-driver-{sd.sweep_id}", daemon=True).start()
    return proc.pid
