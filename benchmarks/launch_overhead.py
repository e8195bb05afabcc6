"""Launch overhead: the same DDP training through Alchemist and under plain torchrun.

Both run the same work (an MLP on synthetic data, gloo on CPU, 2 processes):

- plain: a hand-written DDP script under ``torchrun --standalone --nproc-per-node 2``;
- alchemist: the same loop as a notebook cell, ``alchemist.submit(cell, workers=2)``,
  waited on from the client (what ``%%alchemist_distributed -n 2`` does).

For each, it measures the wall clock from launch until the caller sees the job end,
and the time to first step (launch until rank 0 finishes its first optimizer step).
Runs alternate (plain, alchemist, plain, ...) so that machine load hits both alike;
it prints medians and the ratios Alchemist / plain. Targets: wall <= 1.10, time to
first step <= 1.2. A run of either arm that fails (torch's teardown abort under plain
torchrun, say) is counted and reported beside the ratios, not a crash; the medians are
over the runs that succeeded.

    python benchmarks/launch_overhead.py [--repeats 5] [--steps 300] [--smoke]
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
from pathlib import Path

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
    return wall, float(mark.read_text()) - t0


def run_alchemist(workdir: Path, steps: int) -> tuple[float, float]:
    import alchemist

    mark = workdir / "alchemist.mark"
    mark.unlink(missing_ok=True)
    cell = TRAIN.format(steps=steps, mark=str(mark), setup=ALCHEMIST_SETUP)
    t0 = time.time()
    job = alchemist.submit(cell, namespace={}, workers=2, name="bench")
    status = job.wait(poll=0.02)
    wall = time.time() - t0
    if status.state.value != "succeeded":
        raise RunFailed(f"job {job.id} {status.state.value}: {status.reason}")
    return wall, float(mark.read_text()) - t0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300, help="training steps per run")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.steps = 1, 5

    arms = {"plain": run_plain, "alchemist": run_alchemist}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    failures: dict[str, list[str]] = {name: [] for name in arms}
    with tempfile.TemporaryDirectory(prefix="alchemist-bench-") as tmp:
        workdir = Path(tmp)
        os.environ["ALCHEMIST_HOME"] = str(workdir / "home")
        try:
            run_plain(workdir, 5)  # warm the page cache for both
        except RunFailed:
            pass
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

    def med(name: str, k: int) -> float:
        runs = results[name]
        return statistics.median(r[k] for r in runs) if runs else float("nan")

    wall_ratio = med("alchemist", 0) / med("plain", 0)
    ttfs_ratio = med("alchemist", 1) / med("plain", 1)
    print(
        textwrap.dedent(f"""
        launch overhead, {args.repeats} runs each, {args.steps} steps, 2 processes (gloo, CPU), medians of the runs that succeeded:
                            plain torchrun   alchemist
          wall clock        {med("plain", 0):10.2f} s   {med("alchemist", 0):8.2f} s
          time to 1st step  {med("plain", 1):10.2f} s   {med("alchemist", 1):8.2f} s
          failed runs       {len(failures["plain"]):10d}     {len(failures["alchemist"]):8d}
        ratio alchemist / plain: wall {wall_ratio:.3f} (target <= 1.10), time to first step {ttfs_ratio:.3f} (target <= 1.2)
    """).rstrip()
    )
    for name, reasons in failures.items():
        for reason in reasons:
            print(f"  {name} failed: {reason}")


if __name__ == "__main__":
    main()
