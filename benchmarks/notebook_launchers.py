"""Alchemist beside the notebook launchers people use today, on the same small training.

Two trainings (an MLP on synthetic data, 2 processes, gloo on CPU), each run three ways:

- accelerate: a training function using ``Accelerator`` (``prepare``, ``backward``,
  ``log``), through Accelerate's ``notebook_launcher(train, num_processes=2)``, and as a
  cell that calls ``train(...)`` under Alchemist;
- lightning: a ``LightningModule`` fitted by ``Trainer(devices=2)``, with
  ``strategy="ddp_notebook"`` in the kernel, and with ``strategy="ddp"`` as a cell under
  Alchemist.

The Alchemist arms are ``alchemist.submit(cell, workers=2)`` waited on from the client
(what ``%%alchemist_distributed -n 2`` does): cold (``no_warm``: fresh interpreters under
torchrun), warm (ranks forked from the user's warm pool, started once before the runs
and reported as its own cost) and preloaded (a warm pool started with
``ALCHEMIST_POOL_PRELOAD=lightning.pytorch,accelerate``: its ranks have imported the
library, as the kernel the launchers fork from has). Each launcher arm runs in a fresh Python process that has
already imported torch and the library, as the kernel had before the cell, and forks its
ranks from it. Measured from the cell's start: time to first step (rank 0 ends its first
optimizer step), wall (until the caller sees the training end), and steps/s (rank 0,
between its first and last step). Runs alternate between arms so load hits all alike;
medians, and the ratios Alchemist / launcher. A failed run of an arm is counted and
printed, never a crash. What each gives the user afterwards is printed with it: the
Alchemist arms' curves are counted in the job's metrics.

    python benchmarks/notebook_launchers.py [--repeats 3] [--steps 200] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from launch_overhead import RunFailed, submit_and_wait

MODEL = """
import json, time, torch
def data_and_model():
    torch.manual_seed(0)
    x = torch.randn(4096, 64)
    y = torch.randint(0, 10, (4096,))
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    return torch.utils.data.TensorDataset(x, y), model

def write_mark(mark, times):
    with open(mark, "w") as f:
        json.dump({"first": times[0], "last": times[-1], "steps": len(times)}, f)
"""

ACCELERATE = (
    MODEL
    + """
def train(steps, mark):
    from accelerate import Accelerator
    accelerator = Accelerator(cpu=True)
    ds, model = data_and_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    times, step = [], 0
    while step < steps:
        for xb, yb in loader:
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            accelerator.log({"loss": loss.item()}, step=step)
            times.append(time.time())
            step += 1
            if step >= steps:
                break
    if accelerator.is_main_process:
        write_mark(mark, times)
"""
)

LIGHTNING = (
    MODEL
    + """
def train(steps, mark, strategy):
    import lightning as L

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = data_and_model()[1]
        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
            self.log("loss", loss)
            return loss
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    times = []

    class Clock(L.Callback):
        def on_train_batch_end(self, *args, **kwargs):
            times.append(time.time())

        def on_train_end(self, trainer, module):  # in the rank itself (ddp_notebook forks)
            if trainer.global_rank == 0 and times:
                write_mark(mark, times)

    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy=strategy, max_steps=steps,
        log_every_n_steps=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[Clock()],
    )
    loader = torch.utils.data.DataLoader(data_and_model()[0], batch_size=32, shuffle=True)
    trainer.fit(Classifier(), loader)
"""
)

#: The launcher arms: run in a fresh process (the "kernel"), timed from the cell's start.
LAUNCHER = """
import json, sys, time
import torch, {library}               # what the kernel had imported before the cell
{train}
STEPS, MARK = {steps}, {mark!r}
t0 = time.time()
{call}
print(json.dumps({{"t0": t0, "end": time.time()}}))
"""

CALLS = {
    "accelerate": (
        "from accelerate import notebook_launcher\n"
        "notebook_launcher(train, args=(STEPS, MARK), num_processes=2)"
    ),
    "lightning": 'train(STEPS, MARK, "ddp_notebook")',
}
CELLS = {
    "accelerate": (ACCELERATE, "train(STEPS, MARK)"),
    "lightning": (LIGHTNING, 'train(STEPS, MARK, "ddp")'),
}
LAUNCHER_NAMES = {"accelerate": "notebook_launcher", "lightning": "ddp_notebook"}

#: What each way leaves the user once the training ended (the Alchemist arms' curves are
#: also counted in each run's job metrics).
GIVES = {
    "alchemist": (
        "live curves in the monitor (metrics files, TensorBoard), every rank's log kept,"
        " -o values copied back, a job that outlives the kernel (attach, logs, cancel)"
    ),
    "notebook_launcher": (
        "ranks' output in the cell only; curves only through a tracker you configure;"
        " nothing returned (write files yourself); the ranks die with the kernel"
    ),
    "ddp_notebook": (
        "ranks' output in the cell only; curves in the logger's files (none with"
        " logger=False); rank 0's weights back in the kernel's model; the ranks die with"
        " the kernel"
    ),
}


def _mark(path: Path, t0: float) -> tuple[float, float]:
    """(time to first step, steps/s) from rank 0's mark file."""
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RunFailed(f"rank 0 wrote no step times ({e})") from None
    rate = (m["steps"] - 1) / (m["last"] - m["first"]) if m["steps"] > 1 else float("nan")
    return m["first"] - t0, rate


def run_launcher(workdir: Path, library: str, steps: int) -> dict[str, float]:
    mark = workdir / f"{library}-launcher.mark"
    mark.unlink(missing_ok=True)
    train = ACCELERATE if library == "accelerate" else LIGHTNING
    script = workdir / f"{library}_launcher.py"
    script.write_text(
        LAUNCHER.format(
            library=library, train=train, steps=steps, mark=str(mark), call=CALLS[library]
        )
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ALCHEMIST_JOB_ID", None)
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=workdir,
        )
    except subprocess.TimeoutExpired:
        raise RunFailed("timed out after 600 s") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or [""])[-1]
        raise RunFailed(f"exited {done.returncode}: {tail[:200]}")
    times = json.loads(done.stdout.strip().splitlines()[-1])
    first, rate = _mark(mark, times["t0"])
    return {"wall": times["end"] - times["t0"], "first": first, "rate": rate, "curves": 0.0}


def run_alchemist(workdir: Path, library: str, steps: int, warm: bool) -> dict[str, float]:

    mark = workdir / f"{library}-alchemist.mark"
    mark.unlink(missing_ok=True)
    train, call = CELLS[library]
    cell = f"{train}\nSTEPS, MARK = {steps}, {str(mark)!r}\n{call}\n"
    job, t0, wall = submit_and_wait(cell, f"bench-{library}", warm)
    first, rate = _mark(mark, t0)
    curves = sum(1 for e in job.metrics() if e["rank"] == 0 and "loss" in e["values"])
    if curves == 0:
        raise RunFailed(f"job {job.id}: no 'loss' curve in its metrics")
    return {"wall": wall, "first": first, "rate": rate, "curves": float(curves)}


#: The warm pools: one as it comes, one whose zygote has imported the libraries too.
POOLS: dict[str, dict[str, str]] = {}


def use_pool(arm: str) -> None:
    """Point this process's jobs at the pool of ``arm`` (``warm`` or ``preload``)."""
    os.environ.update(POOLS[arm])
    if arm == "warm":
        os.environ.pop("ALCHEMIST_POOL_PRELOAD", None)


def start_pool(workdir: Path, arm: str) -> float | str:
    """Start the warm pool (a one-step job starts it); its start-up in seconds, or why not."""
    from alchemist.backends.local.pool import state

    use_pool(arm)
    try:
        run_alchemist(workdir, "accelerate", 2, warm=True)
        run_alchemist(workdir, "lightning", 2, warm=True)
    except RunFailed as e:
        return str(e)
    info = state.read_info(state.pool_dir())
    if info is None or info.ready is None:
        return "the pool is not running after its first job"
    return float(info.ready - info.started)


ARMS = ("cold", "warm", "preload", "launcher")


def run_arm(workdir: Path, library: str, arm: str, steps: int) -> dict[str, float]:
    if arm == "launcher":
        return run_launcher(workdir, library, steps)
    if arm in POOLS:
        use_pool(arm)
    return run_alchemist(workdir, library, steps, warm=arm != "cold")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200, help="training steps per run")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.steps = 1, 5
    results: dict[tuple[str, str], list[dict[str, float]]] = {
        (lib, arm): [] for lib in CELLS for arm in ARMS
    }
    failures: dict[tuple[str, str], list[str]] = {key: [] for key in results}
    with tempfile.TemporaryDirectory(prefix="alchemist-bench-") as tmp:
        workdir = Path(tmp)
        os.environ["ALCHEMIST_HOME"] = str(workdir / "home")
        # This run's own pools, stopped at the end (not the user's).
        POOLS["warm"] = {"ALCHEMIST_POOL_DIR": tempfile.mkdtemp(prefix="ap-")}
        POOLS["preload"] = {
            "ALCHEMIST_POOL_DIR": tempfile.mkdtemp(prefix="ap-"),
            "ALCHEMIST_POOL_PRELOAD": "lightning.pytorch,accelerate",
        }
        pool_startup = {arm: start_pool(workdir, arm) for arm in POOLS}
        try:
            for i in range(args.repeats):
                line = []
                for lib in CELLS:
                    for arm in ARMS:
                        try:
                            r = run_arm(workdir, lib, arm, args.steps)
                        except RunFailed as e:
                            failures[(lib, arm)].append(str(e))
                            line.append(f"{lib} {arm} FAILED")
                            continue
                        results[(lib, arm)].append(r)
                        line.append(f"{lib} {arm} {r['wall']:.2f}/{r['first']:.2f} s")
                print(f"run {i + 1} (wall/first step): " + " | ".join(line), flush=True)
        finally:
            from alchemist.backends.local.pool import client

            for arm in POOLS:
                use_pool(arm)
                client.stop()
    report(args, results, failures, pool_startup)


def report(
    args: argparse.Namespace,
    results: dict[tuple[str, str], list[dict[str, float]]],
    failures: dict[tuple[str, str], list[str]],
    pool_startup: dict[str, float | str],
) -> None:
    def med(key: tuple[str, str], what: str) -> float:
        runs = results[key]
        return statistics.median(r[what] for r in runs) if runs else float("nan")

    print(
        f"\nnotebook launchers, {args.repeats} runs each, {args.steps} steps, 2 processes"
        " (gloo, CPU), medians of the runs that succeeded:"
    )
    head = f"{'training':<11}{'arm':<20}{'time to 1st step':>17}{'wall':>9}{'steps/s':>9}{'curves':>8}{'failed':>8}"
    print(head)
    for lib in CELLS:
        for arm in ARMS:
            key = (lib, arm)
            name = {
                "cold": "alchemist cold",
                "warm": "alchemist warm",
                "preload": "alchemist preloaded",
            }.get(arm, LAUNCHER_NAMES[lib])
            print(
                f"{lib:<11}{name:<20}{med(key, 'first'):15.2f} s{med(key, 'wall'):7.2f} s"
                f"{med(key, 'rate'):9.1f}{med(key, 'curves'):8.0f}{len(failures[key]):8d}"
            )
    for lib in CELLS:
        launcher = (lib, "launcher")
        for arm in ("cold", "warm", "preload"):
            key = (lib, arm)
            print(
                f"ratio {lib} alchemist {arm} / {LAUNCHER_NAMES[lib]}: time to first step"
                f" {med(key, 'first') / med(launcher, 'first'):.2f}, wall"
                f" {med(key, 'wall') / med(launcher, 'wall'):.2f}, steps/s"
                f" {med(key, 'rate') / med(launcher, 'rate'):.2f}"
            )
    for arm, startup in pool_startup.items():
        what = "warm pool" if arm == "warm" else "warm pool preloading lightning, accelerate"
        if isinstance(startup, float):
            print(
                f"{what} start-up: {startup:.2f} s (once per user and environment; not in the runs)"
            )
        else:
            print(f"{what} start-up FAILED: {startup}")
    print("what each gives the user afterwards:")
    for name, text in GIVES.items():
        print(f"  {name}: {text}")
    for (lib, arm), reasons in failures.items():
        for reason in reasons:
            print(f"  {lib} {arm} failed: {reason}")


if __name__ == "__main__":
    main()
