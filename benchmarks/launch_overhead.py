"""Launch overhead: the same DDP training through Alchemist and under plain torchrun.

Both run the same work (an MLP on synthetic data, gloo on CPU, 2 processes):

- plain: a hand-written DDP script under ``torchrun --standalone --nproc-per-node 2``;
- alchemist (cold): the same loop as a notebook cell, ``alchemist.submit(cell,
  workers=2, no_warm=True)``, waited on from the client (what ``%%alchemist_distributed
  -n 2 --no-warm`` does): fresh interpreters under torchrun;
- alchemist (warm, with ``--warm``): the same, its ranks forked from the user's warm
  pool (what a user's second and later cells get by default). The pool is started
  once before the runs, and that start-up is reported as its own cost.

For each, it measures the wall clock from launch until the caller sees the job end,
and the time to first step (launch until rank 0 finishes its first optimizer step).
Runs alternate (plain, cold, warm, plain, ...) so that machine load hits all alike;
it prints medians and the ratios Alchemist / plain. Targets: cold wall <= 1.10 and
time to first step <= 1.2; warm wall <= 0.5 (at 300 steps) and time to first step
<= 0.15. A run of any arm that fails (torch's teardown abort under plain torchrun,
say) is counted and reported beside the ratios, not a crash; the medians are over the
runs that succeeded.

    python benchmarks/launch_overhead.py [--repeats 5] [--steps 300] [--warm] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TRAIN = """
import os, time, torch
import torch.distributed as dist
STEPS = {steps}
MARK = {mark!r}
torch.manual_seed(0)
x = torch.randn(4096, 256)
y = torch.randint(0, 10, (4096,))
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
{setup}
step = 0
while step < STEPS:
    for xb, yb in loader:
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 0 and rank == 0:
            with open(MARK, "w") as f:
                f.write(repr(time.time()))
        step += 1
        if step >= STEPS:
            break
"""

PLAIN_SETUP = """
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(model)
ds = torch.utils.data.TensorDataset(x, y)
sampler = torch.utils.data.DistributedSampler(ds)
loader = torch.utils.data.DataLoader(ds, batch_size=32, sampler=sampler)
"""

ALCHEMIST_SETUP = """
import alchemist
rank = alchemist.context().rank
model, opt = alchemist.distribute(model, opt)
loader = alchemist.shard(torch.utils.data.TensorDataset(x, y), batch_size=32)
"""


class RunFailed(Exception):
    """One run of an arm failed; the message says how."""


def run_plain(workdir: Path, steps: int) -> tuple[float, float]:
    mark = workdir / "plain.mark"
    mark.unlink(missing_ok=True)
    script = workdir / "plain_ddp.py"
    script.write_text(
        TRAIN.format(steps=steps, mark=str(mark), setup=PLAIN_SETUP)
        + "\ndist.destroy_process_group()\n"
    )
    t0, wall = torchrun(script)
    return wall, float(mark.read_text()) - t0


def torchrun(script: Path) -> tuple[float, float]:
    """Run ``script`` under ``torchrun --standalone --nproc-per-node=2`` (one thread a
    rank) to its end: ``(t0, wall)``, ``t0`` the ``time.time()`` just before the launch.

    Raises:
        RunFailed: torchrun exited non-zero (its last line of stderr says why).
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0 = time.time()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(script),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.time() - t0
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or [""])[-1]
        raise RunFailed(f"torchrun exited {done.returncode}: {tail[:200]}")
    return t0, wall


def run_alchemist(workdir: Path, steps: int, warm: bool = False) -> tuple[float, float]:

    mark = workdir / "alchemist.mark"
    mark.unlink(missing_ok=True)
    cell = TRAIN.format(steps=steps, mark=str(mark), setup=ALCHEMIST_SETUP)
    _, t0, wall = submit_and_wait(cell, "bench", warm)
    return wall, float(mark.read_text()) - t0


def submit_and_wait(
    cell: str, name: str, warm: bool, follow: Callable[[Any], Any] | None = None
) -> tuple[Any, float, float]:
    """Run ``cell`` as a 2-worker job to its end: ``(job, t0, wall)``, ``t0`` the
    ``time.time()`` just before the submit. ``follow(job)`` waits for the job's end and
    returns its final status (default ``job.wait(poll=0.02)``; a ``JobMonitor``'s
    ``follow``, say, to pay what a kernel showing the monitor pays).

    Raises:
        RunFailed: the job did not succeed, or did not start as asked (warm or cold).
    """
    import alchemist

    t0 = time.time()
    job = alchemist.submit(cell, namespace={}, workers=2, name=name, no_warm=not warm)
    status = job.wait(poll=0.02) if follow is None else follow(job)
    wall = time.time() - t0
    if status.state.value != "succeeded":
        raise RunFailed(f"job {job.id} {status.state.value}: {status.reason}")
    started = "warm" if "warm start:" in job.job_dir.launcher_log.read_text() else "cold"
    if started != ("warm" if warm else "cold"):
        raise RunFailed(f"job {job.id} started {started}, not {'warm' if warm else 'cold'}")
    return job, t0, wall


def run_warm(workdir: Path, steps: int) -> tuple[float, float]:
    return run_alchemist(workdir, steps, warm=True)


def start_pool(workdir: Path) -> float | str:
    """Start the warm pool (a job of one step starts it); its start-up in seconds, as its
    daemon measured it, or why it failed."""
    from alchemist.backends.local.pool import state

    try:
        run_alchemist(workdir, 1, warm=True)
    except RunFailed as e:
        return str(e)
    info = state.read_info(state.pool_dir())
    if info is None or info.ready is None:
        return "the pool is not running after its first job"
    return info.ready - info.started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300, help="training steps per run")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that it runs")
    parser.add_argument(
        "--warm", action="store_true", help="add the warm arm: ranks forked from the warm pool"
    )
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.steps = 1, 5

    arms = {"plain": run_plain, "alchemist": run_alchemist}
    if args.warm:
        arms["warm"] = run_warm
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    failures: dict[str, list[str]] = {name: [] for name in arms}
    pool_startup: float | str | None = None
    with tempfile.TemporaryDirectory(prefix="alchemist-bench-") as tmp:
        workdir = Path(tmp)
        os.environ["ALCHEMIST_HOME"] = str(workdir / "home")
        # A pool of this run's own, stopped at the end (not the user's).
        os.environ["ALCHEMIST_POOL_DIR"] = tempfile.mkdtemp(prefix="ap-")
        try:
            run_plain(workdir, 5)  # warm the page cache for both
        except RunFailed:
            pass
        if args.warm:
            pool_startup = start_pool(workdir)
        try:
            run_repeats(args, arms, workdir, results, failures)
        finally:
            from alchemist.backends.local.pool import client

            client.stop()
    report(args, results, failures, pool_startup)


def run_repeats(
    args: argparse.Namespace,
    arms: dict[str, Any],
    workdir: Path,
    results: dict[str, list[tuple[float, float]]],
    failures: dict[str, list[str]],
) -> None:
    for i in range(args.repeats):
        line = []
        for name, arm in arms.items():
            try:
                wall, first = arm(workdir, args.steps)
            except RunFailed as e:
                failures[name].append(str(e))
                line.append(f"{name} FAILED ({e})")
                continue
            results[name].append((wall, first))
            line.append(f"{name} wall {wall:.2f} s first step {first:.2f} s")
        print(f"run {i + 1}: " + " | ".join(line), flush=True)


def report(
    args: argparse.Namespace,
    results: dict[str, list[tuple[float, float]]],
    failures: dict[str, list[str]],
    pool_startup: float | str | None,
) -> None:
    def med(name: str, k: int) -> float:
        runs = results.get(name, [])
        return statistics.median(r[k] for r in runs) if runs else float("nan")

    names = [n for n in ("plain", "alchemist", "warm") if n in results]
    heads = {"plain": "plain torchrun", "alchemist": "alchemist cold", "warm": "alchemist warm"}
    cols = "".join(f"{heads[n]:>16}" for n in names)
    wall = "".join(f"{med(n, 0):14.2f} s" for n in names)
    first = "".join(f"{med(n, 1):14.2f} s" for n in names)
    failed = "".join(f"{len(failures[n]):16d}" for n in names)
    print(
        textwrap.dedent(f"""
        launch overhead, {args.repeats} runs each, {args.steps} steps, 2 processes (gloo, CPU), medians of the runs that succeeded:
                          {cols}
          wall clock      {wall}
          time to 1st step{first}
          failed runs     {failed}
        ratio alchemist / plain: wall {med("alchemist", 0) / med("plain", 0):.3f} (target <= 1.10), time to first step {med("alchemist", 1) / med("plain", 1):.3f} (target <= 1.2)
    """).rstrip()
    )
    if "warm" in results:
        print(
            f"ratio warm / plain: wall {med('warm', 0) / med('plain', 0):.3f} (target <= 0.5"
            f" at 300 steps), time to first step {med('warm', 1) / med('plain', 1):.3f}"
            " (target <= 0.15)"
        )
        if isinstance(pool_startup, float):
            print(
                f"warm pool start-up: {pool_startup:.2f} s (once per user and environment,"
                " paid by the first job; not in the warm runs)"
            )
        else:
            print(f"warm pool start-up FAILED: {pool_startup}")
    for name, reasons in failures.items():
        for reason in reasons:
            print(f"  {name} failed: {reason}")


if __name__ == "__main__":
    main()
