"""Sweep pruning: the trial-seconds the median pruner saves against the full grid.

Both arms run the same sweep (``alchemist.sweep.start``) of the same cell over the same
grid, one after the other in this run: a small torch MLP (two hidden layers) trained
on scikit-learn's handwritten digits (``load_digits``, as notebooks/01_quickstart.ipynb),
``lr`` x ``batch_size``, each trial a 1-rank job (``workers=1``) logging
``alchemist.log(epoch, val_acc=...)`` every epoch, ``--parallel`` trials at once (2:
two 1-rank trials fit a 2-core machine):

- grid: every setting trained to its last epoch (``pruner="none"``);
- pruned: the same grid with Optuna's median pruner (``pruner="median"``): a trial whose
  best ``val_acc`` so far is below the median of the finished trials' ``val_acc`` at the
  same epoch is cancelled there.

The pruner's settings (``--prune-after``, ``--prune-warmup``):

- ``prune_after=2``: nothing is pruned before two trials have finished. The "median" of
  one finished trial is that trial's curve alone, and one strong first trial would
  then prune every setting that starts slower; with two trials at once the first two
  run side by side anyway (the second is nearly done when the first finishes), so
  waiting for both costs almost nothing.
- ``prune_warmup`` = a third of the epochs (3 of 10): no trial is judged on its first
  epochs, where the curves still cross. lr 0.03 with batch 64 is at 0.76 after its
  first epoch, below the median (0.79) of the first two finished trials (lr 0.003 with
  batch 16 and 32) there, so it would be stopped at once; it ends at 0.96, 0.02 below
  the best. From the fourth epoch on the ranking holds, and stopping a trial there still
  saves most of its epochs.

Every trial seeds torch with the cell's ``seed`` (0) and runs on one thread, so the same
setting gives the same curve in both arms: where the pruned sweep finds the grid's best
setting its best is the same to the last digit. The noise that a difference of the bests
is judged against is the spread of ``val_acc`` over seeds: the grid's best setting is run
again with ``--seeds`` other seeds (a third sweep, over ``seed`` only). The difference is
"within noise" when it is at most that spread (max - min over the seeds, seed 0 included).

Printed: each trial of each arm (setting, state, last epoch, val_acc, seconds); per arm
the trials run, complete, pruned and failed, the trial-seconds (the sum over trials of
finished - started: from the trial's submission until its result or its pruning, as the
sweep records them), the epochs trained (the sum of each trial's last epoch + 1), the
wall time (start to the sweep's end), the best setting and its ``val_acc``; the
fraction of trial-seconds and of epochs saved, and the ratios pruned / grid; the
difference of the bests against the noise. Seconds are wall seconds, so other work on
the machine slows both arms' trials (the 1-minute load average at the end of each sweep
is printed with it); the epochs are the same whatever the load. A failure of any arm (a
sweep that fails, times out or cannot start) or of any trial is counted and reported,
not a crash.

Every sweep runs in a throw-away ``ALCHEMIST_HOME``, with a queue
(``ALCHEMIST_ADMISSION_DIR``) of its own, so other jobs on the machine do not queue its
trials, and a warm pool of its own, started with a first job before the arms (its
start-up is printed as its own cost) and stopped at the end.

    python benchmarks/sweep_pruning.py [--epochs 10] [--hidden 1024] [--parallel 2]
        [--lrs 0.003,0.03,0.3] [--batch-sizes 16,32,64] [--seeds 4] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The cell every trial runs (the quickstart's training cell, with a validation accuracy
#: logged each epoch). ``lr``, ``batch_size`` and ``seed`` are the names a sweep sets.
CELL = """
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import TensorDataset
import alchemist

lr = 0.03
batch_size = 32
seed = 0
torch.set_num_threads(1)  # trials run side by side, one core each
torch.manual_seed(seed)
digits = load_digits()
X = torch.tensor(digits.data / 16.0, dtype=torch.float32)
y = torch.tensor(digits.target)
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.25, random_state=0)
model = torch.nn.Sequential(
    torch.nn.Linear(64, {hidden}),
    torch.nn.ReLU(),
    torch.nn.Linear({hidden}, {hidden}),
    torch.nn.ReLU(),
    torch.nn.Linear({hidden}, 10),
)
optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
model, optimizer = alchemist.distribute(model, optimizer)
loader = alchemist.shard(TensorDataset(X_train, y_train), batch_size=batch_size, seed=seed)
for epoch in range({epochs}):
    loader.sampler.set_epoch(epoch)
    for xb, yb in loader:
        loss = F.cross_entropy(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        val_acc = (model(X_val).argmax(1) == y_val).float().mean().item()
    alchemist.log(epoch, val_acc=val_acc, loss=loss.item(), total_steps={epochs})
"""

#: A job of one line: it starts the warm pool before the arms (its own cost).
WARM_UP = "import torch, sklearn, alchemist\n"


class ArmFailed(Exception):
    """A sweep that did not succeed (the message says why)."""


@dataclass
class Arm:
    """One sweep's outcome: its trials as the sweep recorded them, and its wall time."""

    trials: list[dict[str, Any]] = field(default_factory=list)
    wall: float = float("nan")
    best: dict[str, Any] | None = None

    def count(self, state: str) -> int:
        return sum(1 for t in self.trials if t["state"] == state)

    @property
    def epochs(self) -> int:
        return sum(t["step"] + 1 for t in self.trials if t["step"] is not None)

    @property
    def trial_seconds(self) -> float:
        return sum(
            t["finished"] - t["started"] for t in self.trials if t["started"] and t["finished"]
        )


def setting(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def run_sweep(
    label: str,
    cell: str,
    params: dict[str, list[Any]],
    pruner: str,
    args: argparse.Namespace,
) -> Arm:
    """Run one sweep to its end; its trials. Raises :class:`ArmFailed` when it fails."""
    from alchemist import sweep

    t0 = time.monotonic()
    s = sweep.start(
        cell,
        params,
        "val_acc",
        namespace={},
        mode="max",
        pruner=pruner,
        parallel=args.parallel,
        prune_after=args.prune_after,
        prune_warmup=args.prune_warmup,
        seed=0,
        workers=1,
        name=label,
    )
    state = s.wait(timeout=args.timeout, poll=0.2)
    wall = time.monotonic() - t0
    arm = Arm(trials=sorted(s.trials(), key=lambda t: t["number"]), wall=wall, best=s.best())
    if state["state"] == "running":
        s.cancel()
        raise ArmFailed(f"still running after {args.timeout:g} s (cancelled)")
    if state["state"] != "succeeded":
        raise ArmFailed(f"sweep {s.id} {state['state']}: {state.get('reason')}")
    return arm


def print_trials(name: str, arm: Arm) -> None:
    for t in arm.trials:
        secs = t["finished"] - t["started"] if t["started"] and t["finished"] else float("nan")
        value = f"{t['value']:.4f}" if t["value"] is not None else "-"
        epoch = t["step"] if t["step"] is not None else "-"
        line = (
            f"  {name} t{t['number']}: {setting(t['params'])}: {t['state']} at epoch {epoch},"
            f" val_acc {value}, {secs:.1f} s"
        )
        if t["state"] == "failed":
            line += f" ({t.get('reason')})"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=1024, help="the MLP's hidden width")
    parser.add_argument("--lrs", default="0.003,0.03,0.3")
    parser.add_argument("--batch-sizes", default="16,32,64")
    parser.add_argument("--parallel", type=int, default=2, help="trials at once")
    parser.add_argument("--prune-after", type=int, default=2)
    parser.add_argument(
        "--prune-warmup", type=int, default=None, help="default: a third of the epochs"
    )
    parser.add_argument("--seeds", type=int, default=4, help="other seeds of the best setting")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per sweep")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.epochs, args.hidden, args.lrs, args.batch_sizes = 3, 64, "0.003,0.03,0.3", "32"
        args.seeds, args.timeout = 1, 180
    if args.prune_warmup is None:
        args.prune_warmup = args.epochs // 3
    args.parallel = max(1, min(args.parallel, os.cpu_count() or 1))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    grid: dict[str, list[Any]] = {
        "lr": [float(v) for v in args.lrs.split(",")],
        "batch_size": [int(v) for v in args.batch_sizes.split(",")],
    }
    cell = CELL.format(hidden=args.hidden, epochs=args.epochs)
    arms = {"grid": "none", "pruned": "median"}
    results: dict[str, Arm] = {}
    failures: dict[str, str] = {}
    noise: list[float] = []
    noise_failure: str | None = None
    pool_start: float | str | None = None
    with tempfile.TemporaryDirectory(prefix="alchemist-bench-") as tmp:
        workdir = Path(tmp)
        os.environ["ALCHEMIST_HOME"] = str(workdir / "home")
        os.environ["ALCHEMIST_ADMISSION_DIR"] = str(workdir / "admission")
        os.environ["ALCHEMIST_POOL_DIR"] = str(workdir / "pool")  # not the user's
        try:
            pool_start = start_pool()
            for name, pruner in arms.items():
                try:
                    results[name] = arm = run_sweep(name, cell, grid, pruner, args)
                except Exception as e:  # counted and reported, not a crash
                    failures[name] = f"{type(e).__name__}: {e}"
                    print(f"{name}: FAILED ({failures[name]})", flush=True)
                    continue
                print(
                    f"{name} ({pruner} pruner): {len(arm.trials)} trials in {arm.wall:.1f} s"
                    f" (load average {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
                print_trials(name, arm)
            noise, noise_failure = measure_noise(cell, results, args)
        finally:
            from alchemist.backends.local.pool import client

            client.stop()
    report(args, grid, arms, results, failures, noise, noise_failure, pool_start)


def start_pool() -> float | str:
    """Start this run's warm pool with a first job; its seconds, or why it failed."""
    import alchemist

    t0 = time.monotonic()
    try:
        status = alchemist.submit(WARM_UP, namespace={}, workers=1, name="warm-up").wait(
            timeout=300, poll=0.1
        )
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    if status.state.value != "succeeded":
        return f"the first job {status.state.value}: {status.reason}"
    return time.monotonic() - t0


def measure_noise(
    cell: str, results: dict[str, Arm], args: argparse.Namespace
) -> tuple[list[float], str | None]:
    """``val_acc`` of the best setting (the grid's, else the pruned sweep's) over seeds:
    its seed-0 value from the arm, and ``args.seeds`` more from a sweep over ``seed``."""
    source = next((arm.best for arm in results.values() if arm.best), None)
    if source is None:
        return [], "no arm has a best setting"
    values = [float(source["value"])]
    if args.seeds < 1:
        return values, None
    params = {k: [v] for k, v in source["params"].items()}
    params["seed"] = list(range(1, args.seeds + 1))
    try:
        arm = run_sweep("noise", cell, params, "none", args)
    except Exception as e:  # counted and reported, not a crash
        print(f"noise: FAILED ({type(e).__name__}: {e})", flush=True)
        return values, f"{type(e).__name__}: {e}"
    print(f"noise (seeds of {setting(source['params'])}): {len(arm.trials)} trials", flush=True)
    print_trials("noise", arm)
    values += [float(t["value"]) for t in arm.trials if t["state"] == "complete"]
    failed = len(arm.trials) - (len(values) - 1)
    return values, (f"{failed} of {len(arm.trials)} seeds failed" if failed else None)


def report(
    args: argparse.Namespace,
    grid: dict[str, list[Any]],
    arms: dict[str, str],
    results: dict[str, Arm],
    failures: dict[str, str],
    noise: list[float],
    noise_failure: str | None,
    pool_start: float | str | None,
) -> None:
    size = len(grid["lr"]) * len(grid["batch_size"])
    print()
    print(
        f"sweep pruning, digits MLP (hidden {args.hidden}, {args.epochs} epochs),"
        f" lr {len(grid['lr'])} x batch_size {len(grid['batch_size'])} = {size} trials,"
        f" {args.parallel} at once, 1 rank each, {os.cpu_count()} cores;"
        f" median pruner: prune_after {args.prune_after}, prune_warmup {args.prune_warmup}"
    )
    if isinstance(pool_start, float):
        print(f"warm pool start-up (once, with a first job, not in the arms): {pool_start:.2f} s")
    elif pool_start is not None:
        print(f"warm pool start-up FAILED: {pool_start}")
    print(
        f"  {'arm':16s} {'trials':>6s} {'complete':>8s} {'pruned':>6s} {'failed':>6s}"
        f" {'epochs':>6s} {'trial-s':>8s} {'wall-s':>7s}  best setting, val_acc"
    )
    for name, pruner in arms.items():
        label = f"{name} ({pruner})"
        arm = results.get(name)
        if arm is None:
            print(f"  {label:16s} FAILED: {failures[name]}")
            continue
        best = f"{setting(arm.best['params'])}, {arm.best['value']:.4f}" if arm.best else "none"
        print(
            f"  {label:16s} {len(arm.trials):6d} {arm.count('complete'):8d}"
            f" {arm.count('pruned'):6d} {arm.count('failed'):6d} {arm.epochs:6d}"
            f" {arm.trial_seconds:8.1f} {arm.wall:7.1f}  {best}"
        )
    a, b = results.get("grid"), results.get("pruned")
    if a is not None and b is not None and a.trial_seconds > 0:
        saved = a.trial_seconds - b.trial_seconds
        print(
            f"trial-seconds saved by pruning: {saved:.1f} of {a.trial_seconds:.1f}"
            f" ({saved / a.trial_seconds:.0%})"
        )
        if a.epochs:
            print(
                f"epochs saved by pruning: {a.epochs - b.epochs} of {a.epochs}"
                f" ({(a.epochs - b.epochs) / a.epochs:.0%})"
            )
        print(
            f"ratio pruned / grid: trial-seconds {b.trial_seconds / a.trial_seconds:.2f},"
            f" epochs {b.epochs / max(1, a.epochs):.2f}, wall {b.wall / a.wall:.2f}"
        )
    if a is not None and b is not None and a.best and b.best:
        diff = a.best["value"] - b.best["value"]
        same = a.best["params"] == b.best["params"]
        print(
            f"best val_acc: grid {a.best['value']:.4f}, pruned {b.best['value']:.4f},"
            f" difference {diff:+.4f}; same best setting: {'yes' if same else 'no'}"
        )
        if len(noise) >= 2:
            spread = max(noise) - min(noise)
            print(
                f"noise: val_acc of the best setting over {len(noise)} seeds:"
                f" {min(noise):.4f} to {max(noise):.4f} (spread {spread:.4f},"
                f" stdev {statistics.stdev(noise):.4f});"
                f" difference within noise: {'yes' if abs(diff) <= spread else 'no'}"
            )
        else:
            print(f"noise: not measured ({noise_failure or 'no other seed'})")
    if noise_failure and len(noise) >= 2:
        print(f"noise: {noise_failure}")
    print(
        "failed trials: "
        + ", ".join(
            f"{name} {results[name].count('failed') if name in results else 'n/a'}" for name in arms
        )
        + "; failed arms: "
        + (", ".join(f"{name} ({why})" for name, why in failures.items()) or "none")
    )


if __name__ == "__main__":
    main()
