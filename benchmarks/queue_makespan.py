"""Queue makespan: N two-worker jobs submitted at once, with the local queue and without.

Both arms submit the same N short DDP jobs (2 workers, gloo, CPU) at once through
``alchemist.submit`` and wait for all of them; the makespan is submit-to-last-finish.

- queued: the machine's CPU slots are its cores (the default), so jobs wait their
  turn (``queued``) and run a few at a time;
- all at once: slots are unlimited (``ALCHEMIST_LOCAL_CPU_SLOTS=100000``), as before
  the queue: every job starts at once and they share the cores.

Printed: each arm's makespan, jobs that did not succeed, and the ratio queued / all at
once (target <= 1.0). Arms alternate over ``--repeats``.

    python benchmarks/queue_makespan.py [--jobs 12] [--repeats 1] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

CELL = """
import torch, alchemist
model = torch.nn.Linear(64, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
model, opt = alchemist.distribute(model, opt)
for step in range({steps}):
    loss = model(torch.randn(32, 64)).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def run_arm(jobs: int, steps: int, slots: str | None, home: Path) -> tuple[float, int]:
    """Submit ``jobs`` jobs at once; (makespan in s, jobs that did not succeed)."""
    import alchemist

    os.environ["ALCHEMIST_HOME"] = str(home)
    os.environ["ALCHEMIST_ADMISSION_DIR"] = str(home / "admission")
    if slots is None:
        os.environ.pop("ALCHEMIST_LOCAL_CPU_SLOTS", None)
    else:
        os.environ["ALCHEMIST_LOCAL_CPU_SLOTS"] = slots
    t0 = time.monotonic()
    submitted = [
        alchemist.submit(CELL.format(steps=steps), namespace={}, workers=2, name=f"j{i}")
        for i in range(jobs)
    ]
    failed = 0
    for job in submitted:
        status = job.wait(timeout=3600, poll=0.1)
        failed += status.state.value != "succeeded"
    return time.monotonic() - t0, failed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.jobs, args.steps, args.repeats = 3, 5, 1
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    arms = {"queued": None, "all at once": "100000"}
    spans: dict[str, list[float]] = {name: [] for name in arms}
    failed = dict.fromkeys(arms, 0)
    with tempfile.TemporaryDirectory(prefix="alchemist-bench-") as tmp:
        for r in range(args.repeats):
            for name, slots in arms.items():
                try:
                    span, bad = run_arm(args.jobs, args.steps, slots, Path(tmp) / f"{r}-{name}")
                except Exception as e:  # counted and reported, not a crash
                    print(f"{name}: FAILED ({type(e).__name__}: {e})", flush=True)
                    failed[name] += args.jobs
                    continue
                spans[name].append(span)
                failed[name] += bad
                print(f"run {r + 1}: {name} makespan {span:.1f} s, {bad} not succeeded", flush=True)
    med = {n: statistics.median(v) if v else float("nan") for n, v in spans.items()}
    print(
        f"queue makespan, {args.jobs} two-worker jobs at once, {os.cpu_count()} cores:"
        f" queued {med['queued']:.1f} s, all at once {med['all at once']:.1f} s;"
        f" not succeeded: queued {failed['queued']}, all at once {failed['all at once']}"
    )
    print(f"ratio queued / all at once: {med['queued'] / med['all at once']:.2f} (target <= 1.0)")


if __name__ == "__main__":
    main()
