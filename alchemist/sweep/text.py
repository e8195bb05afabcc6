"""Sweeps as text: the tables ``alchemist sweep list`` and ``alchemist sweep show`` print
(and the notebook's magic may print), and the summary of a sweep the REST listing
returns.

Everything here reads a :class:`~alchemist.sweep.api.Sweep` (its ``sweep.json``,
``state.json`` and the driver's ``trials.json``); nothing asks a backend or imports
Optuna, so listing many sweeps stays cheap.

Rules the views share:

- trials sort best first by the objective (``spec.mode``: highest first for ``max``,
  lowest first for ``min``): the complete trials (their final values) first, then the
  others that logged a value (their last value so far, or when they were stopped),
  then those without one, each group in the objective's order and ties by number;
  the first row is then the sweep's best whenever it has one;
- a setting is ``name=value`` pairs, floats to 4 significant digits;
- a trial is *done* once it is complete, pruned or failed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alchemist.sweep.api import Sweep

#: A trial's states once it has ended (as ``trials.json`` writes them).
DONE_STATES = ("complete", "pruned", "failed")
#: A trial's states while its job waits or runs (a grid's settings not started yet are
#: ``waiting``).
LIVE_STATES = ("pending", "queued", "running")


def _finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def value_text(value: Any) -> str:
    """An objective value as the tables show it (4 significant digits), or ``-``."""
    v = _finite(value)
    return "-" if v is None else f"{v:.4g}"


def setting(params: dict[str, Any]) -> str:
    """``lr=0.001, act='relu'``: a trial's values, floats to 4 significant digits."""
    return ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v!r}" for k, v in params.items()
    )


def sorted_trials(trials: Sequence[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    """The trials best first by the objective (``mode`` max or min): complete trials,
    then the others with a value, then those without one (see the module's rules)."""
    sign = -1.0 if mode == "max" else 1.0

    def key(t: dict[str, Any]) -> tuple[int, float, int]:
        v = _finite(t.get("value"))
        number = int(t.get("number") or 0)
        if v is None:
            return (2, 0.0, number)
        return (0 if t.get("state") == "complete" else 1, sign * v, number)

    return sorted(trials, key=key)


def counts(trials: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many trials are in each state, and ``done`` (complete, pruned or failed)."""
    out: dict[str, int] = {}
    for t in trials:
        state = str(t.get("state"))
        out[state] = out.get(state, 0) + 1
    out["done"] = sum(out.get(s, 0) for s in DONE_STATES)
    return out


def summary(sweep: Sweep) -> dict[str, Any]:
    """One sweep in a listing (``GET .../sweeps``, ``alchemist sweep list --json``): its
    definition in short, its state, how many trials are done of how many, and the best
    trial (as in ``trials.json``; None until one is complete)."""
    st = sweep.state()
    view = sweep.view()
    per_state = counts(view.get("trials") or [])
    done = per_state.pop("done")
    spec = sweep.spec
    return {
        "id": sweep.id,
        "name": sweep.name,
        "created": sweep.created,
        "state": st["state"],
        "reason": st.get("reason"),
        "driver": st["driver"],
        "objective": spec.objective,
        "mode": spec.mode,
        "sampler": spec.sampler,
        "pruner": spec.pruner,
        "params": [p.describe() for p in spec.params],
        "trials_total": spec.trials,
        "trials_done": done,
        "counts": per_state,
        "best": view.get("best"),
    }


def _when(stamp: float | None) -> str:
    if not stamp:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell, two spaces apart; the last one not padded
    (a long reason or setting does not widen the others)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        ("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]).rstrip()
        for r in rows
    )


def format_sweeps_table(sweeps: Sequence[Sweep]) -> str:
    """The sweeps as a text table, one line each, in the order given (``sweeps()`` is
    newest first): id, name, state, trials done/total, created, the best value and its
    setting."""
    if not sweeps:
        return "no sweeps yet"
    rows = [("ID", "NAME", "STATE", "TRIALS", "CREATED", "BEST", "SETTING")]
    for s in sweeps:
        info = summary(s)
        best = info["best"]
        rows.append(
            (
                info["id"],
                info["name"],
                info["state"],
                f"{info['trials_done']}/{info['trials_total']}",
                _when(info["created"]),
                f"{info['objective']}={value_text(best['value'])}" if best else "-",
                setting(best["params"]) if best else "",
            )
        )
    return _table(rows)


def trials_table(trials: Sequence[dict[str, Any]], objective: str, mode: str) -> str:
    """The trials best first (:func:`sorted_trials`): number, setting, state, the last
    step and the objective's value, the job, why it ended (pruned, failed)."""
    if not trials:
        return "no trials yet"
    rows = [("#", "SETTING", "STATE", "STEP", objective.upper(), "JOB", "REASON")]
    for t in sorted_trials(trials, mode):
        step = t.get("step")
        rows.append(
            (
                str(t.get("number")),
                setting(t.get("params") or {}) or "-",
                str(t.get("state")),
                "-" if step is None else str(step),
                value_text(t.get("value")),
                t.get("job_id") or "-",
                _one_line(t.get("reason") or ""),
            )
        )
    return _table(rows)


def best_line(best: dict[str, Any] | None, objective: str) -> str:
    """The answer in one line: the best setting (``Sweep.best()``), its value of the
    ``objective``, its trial and job."""
    if best is None:
        return f"best: none yet (no trial has finished with a value of {objective})"
    step = best.get("step")
    return (
        f"best: {setting(best.get('params') or {})} ({objective}={value_text(best.get('value'))}"
        + ("" if step is None else f" at step {step}")
        + f", trial {best.get('number')}, job {best.get('job_id') or '-'})"
    )


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _options(options: dict[str, Any]) -> str:
    """The trials' job options that differ from the defaults; ``env`` by its names only
    (its values are often keys)."""
    from alchemist.job.options import defaults

    unset = defaults()
    parts = []
    for k, v in sorted(options.items()):
        if v == unset.get(k) or v in (None, [], {}):
            continue
        if k == "env" and isinstance(v, dict):
            parts.append(f"env={','.join(sorted(v))} (values not shown)")
        else:
            parts.append(f"{k}={v!r}")
    return ", ".join(parts) or "the defaults"


def _pruner(spec: Any) -> str:
    if spec.pruner == "median":
        return (
            f"median (stops a trial worse than the median of the finished trials at its step,"
            f" once {spec.prune_after} finished, from step {spec.prune_warmup})"
        )
    return str(spec.pruner)


def format_sweep(sweep: Sweep) -> str:
    """One sweep in full (``alchemist sweep show``): its definition, state and reason,
    the trials best first, and the best setting as a one-line answer."""
    spec = sweep.spec
    st = sweep.state()
    view = sweep.view()
    trials = list(view.get("trials") or [])
    done = counts(trials)
    order = [*DONE_STATES, *LIVE_STATES, "waiting"]
    order += sorted(set(done) - {*order, "done"})
    by_state = ", ".join(f"{done[s]} {s}" for s in order if done.get(s))
    state = st["state"] + (f": {_one_line(st['reason'])}" if st.get("reason") else "")
    lines = [
        f"sweep {sweep.id} ({sweep.name})",
        f"  state:     {state}",
        f"  objective: {spec.mode}imise {spec.objective}",
        "  swept:     " + "  ".join(p.describe() for p in spec.params),
        f"  search:    {spec.sampler}, {spec.trials} trial{'s' if spec.trials != 1 else ''},"
        f" {spec.parallel} at once" + (f", seed {spec.seed}" if spec.seed is not None else ""),
        f"  pruner:    {_pruner(spec)}",
        f"  each job:  {_options(spec.job_options)}",
        f"  created:   {_when(sweep.created)}",
        f"  trials:    {done['done']} of {spec.trials} done"
        + (f" ({by_state})" if by_state else ""),
        "",
        trials_table(trials, spec.objective, spec.mode),
        "",
        best_line(view.get("best"), spec.objective),
    ]
    return "\n".join(lines)
