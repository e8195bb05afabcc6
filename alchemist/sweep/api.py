"""Sweeps from Python: :func:`start` runs a cell once per setting; :class:`Sweep` follows it.

``%%alchemist_sweep``, ``alchemist sweep`` and the REST API are thin layers over this
module. A sweep is a folder (:class:`~alchemist.job.sweepdir.SweepDir`) and a driver
process (:mod:`alchemist.sweep.driver`); each trial is an ordinary job.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alchemist import client
from alchemist.backends import get_backend
from alchemist.errors import AlchemistError, JobNotFoundError, PermissionDeniedError, SpecError
from alchemist.job import config
from alchemist.job.jobdir import atomic_write_json
from alchemist.job.sweepdir import SweepDir
from alchemist.sweep.cell import check_swept_names, with_values
from alchemist.sweep.driver import driver_running, start_driver
from alchemist.sweep.space import Param, choice, parse_params
from alchemist.sweep.spec import SweepSpec

_SWEEP_ID = re.compile(r"w[0-9a-f]{10}")
#: The longest sweep name: trial names (``<name>-t<n>``) are job names (63 characters).
MAX_NAME = 55
#: Settings a dry run lists.
DRY_RUN_SETTINGS = 10


def new_sweep_id() -> str:
    return "w" + secrets.token_hex(5)


def _params(params: Any) -> list[Param]:
    """``--param`` texts, :class:`Param` objects, or a mapping name → list of values."""
    if isinstance(params, dict):
        out = []
        for name, values in params.items():
            if isinstance(values, Param):
                out.append(values)
            elif isinstance(values, str):
                out.extend(parse_params([f"{name}={values}"]))
            else:
                out.append(choice(name, list(values)))
        return out or parse_params([])
    params = list(params or [])
    if all(isinstance(p, Param) for p in params) and params:
        return params
    return parse_params([str(p) for p in params])


@dataclass
class SweepDryRun:
    """What a sweep would run: its trials, and the first trial's job as a dry run shows it."""

    spec: SweepSpec
    settings: list[dict[str, Any]]
    first: client.DryRun

    @property
    def text(self) -> str:
        s = self.spec
        lines = [
            f"sweep {s.name}: {s.trials} trials ({s.sampler} search), {s.parallel} at once,"
            f" {s.mode}imise {s.objective}, pruner {s.pruner}",
            "swept: " + "  ".join(p.describe() for p in s.params),
        ]
        if self.settings:
            lines.append(
                f"settings ({'first ' if len(self.settings) < s.trials else ''}"
                f"{len(self.settings)} of {s.trials}):"
            )
            lines += [
                "  t{}: {}".format(i, ", ".join(f"{k}={v!r}" for k, v in st.items()))
                for i, st in enumerate(self.settings)
            ]
        else:
            lines.append("settings: drawn by the sampler as the sweep runs")
        lines.append(f"each trial is a job like this one ({_describe(self.settings, s)}):")
        lines.append(self.first.text)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text)


def _describe(settings: list[dict[str, Any]], spec: SweepSpec) -> str:
    values = settings[0] if settings else _middle(spec.params)
    return "with " + ", ".join(f"{k}={v!r}" for k, v in values.items())


def _middle(params: list[Param]) -> dict[str, Any]:
    """One setting for a dry run of a sweep that draws: each draw's middle."""
    out: dict[str, Any] = {}
    for p in params:
        if p.is_grid:
            out[p.name] = p.choices[0]
        elif p.kind.startswith("log"):
            mid = math.sqrt(p.low * p.high)
            out[p.name] = round(mid) if p.kind == "logint" else mid
        else:
            mid = (p.low + p.high) / 2
            out[p.name] = round(mid) if p.kind == "int" else mid
    return out


def start(
    cell: str,
    params: Any,
    objective: str,
    *,
    namespace: dict[str, Any] | None = None,
    mode: str = "max",
    sampler: str | None = None,
    pruner: str = "median",
    trials: int | None = None,
    parallel: int = 1,
    prune_after: int | None = None,
    prune_warmup: int = 0,
    seed: int | None = None,
    dry_run: bool = False,
    **job_options: Any,
) -> Any:
    """Run ``cell`` once per setting of ``params``, each time as a job, and keep the best.

    Args:
        cell: the cell's source; each swept name is one of its top-level assignments.
        params: ``["lr=loguniform(1e-4,1e-1)", "batch_size=32,64"]`` (the ``--param``
            forms, :mod:`alchemist.sweep.space`), or ``{"batch_size": [32, 64]}``.
        objective: the metric the cell logs with ``alchemist.log`` that judges a trial
            (its last value logged by rank 0).
        namespace: where the cell's free names are looked up (default: the notebook's).
        mode: ``max`` or ``min``.
        sampler: ``grid``, ``random`` or ``tpe`` (default: grid when every name is a
            list, else tpe).
        pruner: ``median``, ``halving``, ``hyperband`` or ``none``.
        trials: how many trials (default: the whole grid, or 10 draws).
        parallel: trials at once (their jobs wait in the queue like any job).
        prune_after: finished trials before the median pruner stops any.
        prune_warmup: steps a trial runs before it may be stopped.
        seed: the sampler's seed.
        dry_run: return a :class:`SweepDryRun`; start nothing.
        **job_options: every trial's job options (:func:`alchemist.client.make_spec`).

    Returns:
        A :class:`Sweep` (its driver runs apart from this process), or a
        :class:`SweepDryRun`.

    Raises:
        SpecError, BundleError: one line naming what is wrong; nothing is started.
    """
    swept = _params(params)
    check_swept_names(cell, [p.name for p in swept])
    if objective and objective not in cell:
        raise SpecError(
            f"--objective {objective}: the cell never mentions {objective}, so no trial"
            f" would log it: log it with alchemist.log(step, {objective}=...)"
        )
    name = job_options.pop("name", None) or "sweep"
    if len(name) > MAX_NAME:
        raise SpecError(f"name {name!r} is too long for a sweep (at most {MAX_NAME} characters)")
    spec = SweepSpec.make(
        name,
        swept,
        objective,
        mode=mode,
        sampler=sampler,
        pruner=pruner,
        trials=trials,
        parallel=parallel,
        prune_after=prune_after,
        prune_warmup=prune_warmup,
        seed=seed,
        job_options=job_options,
    )
    job_spec = client.make_spec(entry="cell", name=f"{name}-t0", **job_options)
    limit = get_backend(job_spec.backend).concurrent_limit(job_spec)
    if limit is not None and spec.parallel > limit:
        raise SpecError(
            f"--parallel {spec.parallel}: this machine's queue runs at most {limit} trial"
            f"{'s' if limit != 1 else ''} of {job_spec.world_size} rank"
            f"{'s' if job_spec.world_size != 1 else ''} at once: use --parallel {max(1, limit)}"
            + (" or fewer ranks per trial" if limit else "")
        )
    if limit is not None and "OMP_NUM_THREADS" not in (job_options.get("env") or {}):
        # One machine: the trials running at once share its cores (torch would give
        # each rank all of a worker's cores, and parallel trials would oversubscribe).
        share = max(1, len(os.sched_getaffinity(0)) // (spec.parallel * job_spec.world_size))
        job_options["env"] = {**(job_options.get("env") or {}), "OMP_NUM_THREADS": str(share)}
        spec.job_options = dict(job_options)
    settings = spec.grid_settings()[:DRY_RUN_SETTINGS]
    if dry_run:
        values = settings[0] if settings else _middle(swept)
        first = client.submit(
            with_values(cell, values),
            namespace=namespace,
            dry_run=True,
            name=f"{name}-t0",
            **job_options,
        )
        return SweepDryRun(spec, settings, first)
    sd = SweepDir(config.sweeps_root() / new_sweep_id()).create()
    try:
        client.save_template(cell, sd.template, namespace=namespace, **job_options)
    except BaseException:
        import shutil

        shutil.rmtree(sd.root, ignore_errors=True)
        raise
    record = {**spec.to_dict(), "created": time.time(), "owner": config.current_user()}
    atomic_write_json(sd.config, record)
    sd.write_state(state="running", reason=None)
    start_driver(sd)
    return Sweep(sd)


class Sweep:
    """A sweep: its definition, its trials (each a job) and the best of them."""

    def __init__(self, sd: SweepDir) -> None:
        self.dir = sd
        self._record = sd.read_json(sd.config) or {}
        self.spec = SweepSpec.from_dict(self._record)

    @property
    def id(self) -> str:
        return self.dir.sweep_id

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def created(self) -> float:
        return float(self._record.get("created") or 0.0)

    def __repr__(self) -> str:
        return f"<Sweep {self.id} {self.name!r} {self.state()['state']}>"

    def view(self) -> dict[str, Any]:
        """The driver's last view: ``{"trials": [...], "best": {...} | None}``, each
        trial's ``params`` in the order the sweep names them."""
        view = self.dir.read_json(self.dir.trials) or {"trials": [], "best": None}
        names = [p.name for p in self.spec.params]
        for t in [*view["trials"], view.get("best") or {}]:
            if "params" in t:
                t["params"] = {n: t["params"][n] for n in names if n in t["params"]}
        return view

    def trials(self) -> list[dict[str, Any]]:
        """Every trial: number, params, state (queued, running, complete, pruned,
        failed), job_id, value, step, started, finished, reason."""
        return list(self.view()["trials"])

    def best(self) -> dict[str, Any] | None:
        """The best finished trial (as in :meth:`trials`), or None."""
        best: dict[str, Any] | None = self.view().get("best")
        return best

    def state(self) -> dict[str, Any]:
        """``{"state": running|succeeded|failed|cancelled, "reason", "driver": bool}``;
        a running sweep whose driver is gone says so (``resume()`` goes on with it)."""
        st = dict(self.dir.read_state())
        st["driver"] = driver_running(self.dir)
        if st["state"] == "running" and not st["driver"]:
            st["reason"] = (
                "its driver is not running (the machine restarted?): resume it with"
                f" alchemist sweep resume {self.id}"
            )
        return st

    @property
    def done(self) -> bool:
        return self.state()["state"] != "running"

    def resume(self) -> bool:
        """Start the driver again if the sweep is not over (or its driver crashed) and
        none runs; True if started. The study's journal says where it was."""
        st = self.dir.read_state()
        if driver_running(self.dir) or not (st["state"] == "running" or st.get("driver_crashed")):
            return False
        start_driver(self.dir)
        return True

    def wait(self, timeout: float | None = None, poll: float = 0.5) -> dict[str, Any]:
        """Block until the sweep ends (or ``timeout``); returns :meth:`state`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = self.state()
            if st["state"] != "running" or not st["driver"]:
                return st
            if deadline is not None and time.monotonic() > deadline:
                return st
            time.sleep(poll)

    def cancel(self) -> None:
        """Cancel the sweep and its running trials. Idempotent."""
        if self.dir.read_state()["state"] != "running":
            return
        self.dir.cancel_marker.touch()
        deadline = time.monotonic() + 20
        while driver_running(self.dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        if driver_running(self.dir):  # it is stopping the trials: it records the end
            return
        if self.dir.read_state()["state"] == "running":  # no driver: cancel its trials here
            for t in self.trials():
                if t["job_id"] and t["state"] in ("pending", "queued", "running"):
                    try:
                        client.attach(t["job_id"]).cancel(reason="the sweep was cancelled")
                    except AlchemistError:
                        pass
            self.dir.write_state(
                state="cancelled", reason="cancelled by the user", finished=time.time()
            )

    def job(self, number: int) -> client.Job:
        """Trial ``number``'s job."""
        for t in self.trials():
            if t["number"] == number and t["job_id"]:
                return client.attach(t["job_id"])
        raise JobNotFoundError(f"sweep {self.id} has no trial {number} with a job")

    def outputs(self) -> dict[str, Any]:
        """The best trial's outputs (the names of ``outputs=``/``-o``), or {}."""
        best = self.best()
        if best is None or not best.get("job_id"):
            return {}
        return client.attach(best["job_id"]).outputs()

    def to_dict(self) -> dict[str, Any]:
        st = self.state()
        view = self.view()
        return {
            "id": self.id,
            "name": self.name,
            "created": self.created,
            "state": st["state"],
            "reason": st.get("reason"),
            "driver": st["driver"],
            "spec": self.spec.to_dict(),
            "trials": view["trials"],
            "best": view.get("best"),
        }


def attach(sweep_id: str) -> Sweep:
    """The sweep ``sweep_id`` (also after a kernel restart).

    Raises:
        JobNotFoundError: no such sweep of this user.
    """
    if not _SWEEP_ID.fullmatch(str(sweep_id)):
        raise JobNotFoundError(f"{sweep_id!r} is not a sweep id (they look like w1a2b3c4d5e)")
    sd = SweepDir(config.sweeps_root() / sweep_id)
    if not sd.config.is_file():
        raise JobNotFoundError(f"no sweep {sweep_id} (see alchemist sweep list)")
    sweep = _read(sd)
    if sweep._record.get("owner") not in (None, config.current_user()):
        raise PermissionDeniedError(f"sweep {sweep_id!r} belongs to another user")
    return sweep


def _read(sd: SweepDir) -> Sweep:
    """The sweep of ``sd``; a ``sweep.json`` that cannot be read is one clear error."""
    try:
        return Sweep(sd)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise AlchemistError(
            f"sweep {sd.sweep_id}: its {sd.config.name} cannot be read ({type(e).__name__}:"
            f" {e}); its trials are ordinary jobs (alchemist jobs)"
        ) from None


def sweeps() -> list[Sweep]:
    """This user's sweeps, newest first."""
    root = config.sweeps_root()
    found = []
    for entry in os.scandir(root):
        if _SWEEP_ID.fullmatch(entry.name) and Path(entry.path, "sweep.json").is_file():
            try:
                found.append(_read(SweepDir(Path(entry.path))))
            except AlchemistError:
                continue  # unreadable: skipped here, named by attach
    return sorted(found, key=lambda s: s.created, reverse=True)
