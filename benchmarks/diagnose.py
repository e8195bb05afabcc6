"""Hang diagnosis: time from "Diagnose" to headline, and what the hooks cost a step.

Two measurements:

- **diagnose to headline**, world size 2: a real local job (torchrun, gloo, 2 ranks)
  where rank 1 sleeps in ``load_batch`` while rank 0 waits in ``all_reduce``;
  ``job.diagnose()`` is timed (the ranks' sockets, then signal + request file: the local path) and so is the
  request-file path alone (what a Kubernetes job gets: ``report.diagnose(...,
  backend="kubernetes")``, the local ranks standing in for pods). Target: <= 3 s.
  A diagnosis that raises or does not say ``missing_rank`` is counted as failed.
- **hook cost per step**: a process runs a ~5 ms step (matmuls and an ``all_reduce``
  on a 1-rank gloo group) in blocks of ``--steps`` steps that alternate without and
  with the hooks' threads running (the watchdog and the request responder of
  :mod:`alchemist.runtime.hooks`, ``rearm`` each step as ``alchemist.log`` does), so
  that machine load hits both alike: the median of the with/without ratios of
  adjacent blocks is printed. Target: <= 1.005. The flight recorder is set when a
  process group is made, so its cost is measured across processes instead (runs
  alternate recorder off, on, off, ...), which a shared machine makes noisier.
  A run that fails is counted and reported, not a crash.

    python benchmarks/diagnose.py [--repeats 5] [--steps 40] [--blocks 20] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HUNG = """
import time, torch, torch.distributed as dist
def load_batch():
    time.sleep(600)
rank = dist.get_rank()
dist.all_reduce(torch.ones(3))
print(f"rank {rank} ready", flush=True)
if rank == 1:
    load_batch()
dist.all_reduce(torch.ones(3))
"""

#: The step loop of the hook-cost measurement (``python -c STEP_LOOP BLOCKS STEPS DIR``):
#: blocks of ``STEPS`` steps alternate without and with the hooks running, in one
#: process, so that machine load hits both alike; prints ``REPS`` then one line per pair
#: of blocks: ``median step without, median step with`` (seconds).
STEP_LOOP = """
import os, statistics, sys, time
from pathlib import Path
blocks, steps, where = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
import torch, torch.distributed as dist
from alchemist.runtime import hooks
from alchemist.job.jobdir import JobDir
torch.set_num_threads(1)
store = dist.FileStore(str(where / "store"), 1)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
a = torch.randn(192, 192)
def work():
    x = a
    for _ in range(REPS):
        x = torch.tanh(x @ a)
    dist.all_reduce(x[:1])
def step_s():
    spent = []
    for _ in range(5):
        t0 = time.perf_counter(); work(); spent.append(time.perf_counter() - t0)
    return statistics.median(spent)
REPS = 1
step_s()  # warm up
if "BENCH_REPS" in os.environ:
    REPS = int(os.environ["BENCH_REPS"])
else:  # calibrate to about 5 ms a step
    for _ in range(6):
        REPS = max(1, round(REPS * 0.005 / max(step_s(), 1e-6)))
print(REPS, flush=True)
job_dir = JobDir(where)
(where / "debug").mkdir(mode=0o700, exist_ok=True)
noop = lambda: None
def block(on):
    # the hooks' two threads, as hooks.install starts them in a rank; rearm per step
    if on:
        dog = hooks._Watchdog(open(os.devnull, "w"), hooks.WATCHDOG_FLOOR_S)
        responder = hooks._Responder(hooks.requests_dir(job_dir), 0)
        rearm = dog.rearm
    else:
        rearm = noop
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        work()
        rearm()
        times.append(time.perf_counter() - t0)
    if on:
        dog.stop(); responder.stop()
    return statistics.median(times)
block(False)
for _ in range(blocks):
    print(block(False), block(True), flush=True)
# skip the interpreter's teardown: torch's gloo teardown abort (ENVIRONMENT.md) is not
# what this measures
os._exit(0)
"""


class RunFailed(Exception):
    """One run of an arm failed; the message says how."""


def diagnose_once(job: Any, kubernetes: bool) -> float:
    """Seconds from asking to the headline, for one diagnosis of ``job``."""
    from alchemist.diagnosis import report

    t0 = time.perf_counter()
    if kubernetes:
        st = job.status()
        found = report.diagnose(
            job.job_dir,
            job_id=job.id,
            state=st.state.value,
            reason=st.reason,
            world_size=2,
            backend="kubernetes",
        )
    else:
        found = job.diagnose()
    elapsed = time.perf_counter() - t0
    if found["classification"] != "missing_rank" or not found["headline"]:
        raise RunFailed(f"{found['classification']}: {found['headline'][:160]}")
    return elapsed


def measure_diagnose(repeats: int) -> tuple[dict[str, list[float]], dict[str, list[str]]]:
    import alchemist

    arms = {"local (socket, then signal + request)": False, "request file only (kubernetes)": True}
    times: dict[str, list[float]] = {name: [] for name in arms}
    failures: dict[str, list[str]] = {name: [] for name in arms}
    job = alchemist.submit(HUNG, namespace={}, workers=2, name="bench-diagnose")
    try:
        deadline = time.monotonic() + 120
        while not all(
            job.job_dir.rank_log(r).exists()
            and f"rank {r} ready" in job.job_dir.rank_log(r).read_text(errors="replace")
            for r in (0, 1)
        ):
            if time.monotonic() > deadline or job.status().state.is_terminal:
                for name in arms:
                    failures[name].append(f"the job never got ready: {job.status().state.value}")
                return times, failures
            time.sleep(0.05)
        for i in range(repeats + 1):  # the first diagnosis may catch rank 0 on its way
            for name, kubernetes in arms.items():
                try:
                    elapsed = diagnose_once(job, kubernetes)
                except (RunFailed, OSError) as e:
                    if i:
                        failures[name].append(str(e))
                    continue
                if i:
                    times[name].append(elapsed)
    finally:
        job.cancel()
    return times, failures


def step_run(
    recorder_on: bool, blocks: int, steps: int, workdir: Path, reps: int | None
) -> tuple[int, list[tuple[float, float]]]:
    """One step-loop process: ``(REPS, [(median without, median with hooks), ...])``."""
    from alchemist.runtime import recorder

    where = workdir / f"steps-{time.monotonic_ns()}"
    where.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_FR_BUFFER_SIZE": "0"}
    if recorder_on:
        env.update(recorder.worker_variables())
    if reps is not None:
        env["BENCH_REPS"] = str(reps)
    done = subprocess.run(
        [sys.executable, "-c", STEP_LOOP, str(blocks), str(steps), str(where)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or [""])[-1]
        raise RunFailed(f"exited {done.returncode}: {tail[:200]}")
    first, *rest = done.stdout.split("\n")
    pairs = [(float(a), float(b)) for a, b in (ln.split() for ln in rest if ln.strip())]
    return int(first), pairs


def measure_hooks(
    repeats: int, blocks: int, steps: int, workdir: Path
) -> tuple[dict[str, list[Any]], dict[str, list[str]]]:
    """Hook pairs (in-process) and recorder off/on runs (across processes, alternating)."""
    results: dict[str, list[Any]] = {"recorder off": [], "recorder on": []}
    failures: dict[str, list[str]] = {"recorder off": [], "recorder on": []}
    reps: int | None = None  # calibrated by the first run, then the same work for all
    for i in range(repeats):
        line = []
        for name in ("recorder off", "recorder on"):
            try:
                got, pairs = step_run(name == "recorder on", blocks, steps, workdir, reps)
            except (RunFailed, subprocess.TimeoutExpired, ValueError) as e:
                failures[name].append(str(e))
                line.append(f"{name} FAILED ({e})")
                continue
            reps = got
            results[name].append(pairs)
            off = statistics.median(p[0] for p in pairs)
            on = statistics.median(p[1] for p in pairs)
            line.append(f"{name}: {off * 1e3:.3f} ms/step, hooks {on * 1e3:.3f}")
        print(f"step run {i + 1}: " + " | ".join(line), flush=True)
    return results, failures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40, help="steps per block")
    parser.add_argument("--blocks", type=int, default=20, help="block pairs per step run")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.steps, args.blocks = 1, 5, 2

    def med(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    with tempfile.TemporaryDirectory(prefix="alchemist-bench-") as tmp:
        workdir = Path(tmp)
        os.environ["ALCHEMIST_HOME"] = str(workdir / "home")
        diag, diag_failed = measure_diagnose(args.repeats)
        steps, step_failed = measure_hooks(args.repeats, args.blocks, args.steps, workdir)

    print(f"\ndiagnose to headline, world size 2, {args.repeats} diagnoses each (target <= 3 s):")
    for name, values in diag.items():
        worst = max(values) if values else float("nan")
        print(
            f"  {name:32s} median {med(values):.3f} s  max {worst:.3f} s"
            f"  failed {len(diag_failed[name])}"
        )
    pairs = [p for runs in steps.values() for run in runs for p in run]
    hook_ratio = med([on / off for off, on in pairs])
    base = med([off for off, _ in pairs])
    off_runs = [statistics.median(p[0] for p in run) for run in steps["recorder off"]]
    on_runs = [statistics.median(p[0] for p in run) for run in steps["recorder on"]]
    print(
        f"hooks on a ~{base * 1e3:.1f} ms step ({len(pairs)} pairs of {args.steps}-step blocks,"
        f" alternating in one process): ratio with / without hooks {hook_ratio:.4f}"
        " (target <= 1.005)"
    )
    print(
        f"flight recorder (across processes, noisier): ratio on / off"
        f" {med(on_runs) / med(off_runs):.4f} ({len(on_runs)} and {len(off_runs)} runs)"
    )
    failed = {**{f"diagnose {k}": v for k, v in diag_failed.items()}, **step_failed}
    print("failed runs: " + ", ".join(f"{k} {len(v)}" for k, v in failed.items()))
    for name, reasons in failed.items():
        for reason in reasons:
            print(f"  {name} failed: {reason}")


if __name__ == "__main__":
    main()
