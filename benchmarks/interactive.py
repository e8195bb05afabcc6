"""Interactive sessions: a cell's round trip, and a session's start against a batch job's.

Four arms, alternated (session cold, batch cold, session warm, batch warm, ...) so
machine load hits them alike:

- session: ``%alchemist_session start -n 2`` then ``%%alchemist_px`` cells in a real
  IPython shell (the magics' whole path: parsing, the health check when due, the
  transcript, output streamed from the ranks' logs). It measures the time from the
  start until the first cell's result is back in the notebook (a cell doing one small
  ``all_reduce``), then the round trip of ``--cells`` more such cells, then stops.
  Cold (``--no-warm``): the engines are fresh interpreters; warm: forked from the
  user's warm pool;
- batch: the same ``all_reduce`` as the first step of a batch job, ``alchemist.submit(
  cell, workers=2)``, cold (``no_warm=True``: fresh interpreters under torchrun) or warm:
  the time from the submit until rank 0 has finished its first step (rank 0 writes the
  time; the notebook learns it later, so this favours the batch arm slightly).

The warm pool is started once before the timed runs (its start-up is printed as its
own cost). It prints the round trip's p50 and p95 over every session's cells (targets:
p50 <= 50 ms, p95 <= 150 ms), the medians of the start-up times and the ratios session
/ batch, cold with cold (target <= 1.5) and warm with warm. A run of any arm that fails
is counted and reported beside the figures, not a crash; the figures are over the runs
that succeeded.

    python benchmarks/interactive.py [--repeats 3] [--cells 100] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: What each cell (and the batch job's first step) does: one small all_reduce on 2 ranks.
ALL_REDUCE = """
import torch, torch.distributed as dist
t = torch.ones(4)
dist.all_reduce(t)
print('sum', t[0].item())
"""

BATCH = (
    ALL_REDUCE
    + """
import time, alchemist
if alchemist.context().rank == 0:
    with open({mark!r}, "w") as f:
        f.write(repr(time.time()))
"""
)

TARGET_P50_MS, TARGET_P95_MS, TARGET_RATIO = 50.0, 150.0, 1.5


class RunFailed(Exception):
    """One run of an arm failed; the message says how."""


def shell() -> Any:
    """A real IPython shell with ``%load_ext alchemist`` done."""
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "alchemist")
    return ip


def run_session(ip: Any, cells: int, warm: bool) -> tuple[float, list[float]]:
    """``(start to first cell result, [round trip of each later cell])`` in seconds."""
    from alchemist.interactive import current_session

    out = io.StringIO()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out):
            ip.run_line_magic("alchemist_session", "start -n 2" + ("" if warm else " --no-warm"))
            ip.run_cell_magic("alchemist_px", "", ALL_REDUCE)
            first = time.perf_counter() - t0
            if out.getvalue().count("sum 2.0") != 2:
                raise RunFailed(f"the first cell's output is wrong: {out.getvalue()[-300:]!r}")
            trips = []
            for _ in range(cells):
                t1 = time.perf_counter()
                ip.run_cell_magic("alchemist_px", "", ALL_REDUCE)
                trips.append(time.perf_counter() - t1)
        if out.getvalue().count("sum 2.0") != 2 * (cells + 1):
            raise RunFailed("a cell's output was lost")
        return first, trips
    except RunFailed:
        raise
    except Exception as e:  # a UsageError from a magic: one line, counted
        raise RunFailed(f"{type(e).__name__}: {e}") from None
    finally:
        s = current_session()
        if s is not None:
            s.stop()


def run_batch(workdir: Path, warm: bool) -> float:
    """Seconds from the submit until rank 0 finished the first step."""
    import alchemist

    mark = workdir / "batch.mark"
    mark.unlink(missing_ok=True)
    t0 = time.time()
    job = alchemist.submit(
        BATCH.format(mark=str(mark)), namespace={}, workers=2, name="bench", no_warm=not warm
    )
    status = job.wait(poll=0.02)
    if status.state.value != "succeeded":
        raise RunFailed(f"job {job.id} {status.state.value}: {status.reason}")
    return float(mark.read_text()) - t0


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3, help="sessions and batch jobs each")
    parser.add_argument("--cells", type=int, default=100, help="timed cells per session")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.cells = 1, 5
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    arms = ("session cold", "batch cold", "session warm", "batch warm")
    starts: dict[str, list[float]] = {arm: [] for arm in arms}
    trips: list[float] = []
    failures: dict[str, list[str]] = {arm: [] for arm in arms}
    pool_start: float | None = None
    with tempfile.TemporaryDirectory(prefix="alchemist-bench-") as tmp:
        workdir = Path(tmp)
        os.environ["ALCHEMIST_HOME"] = str(workdir / "home")
        os.environ["ALCHEMIST_POOL_DIR"] = tempfile.mkdtemp(prefix="ap-")  # not the user's
        ip = shell()
        try:  # the first warm job starts the pool: its own cost, not the arms'
            t0 = time.perf_counter()
            run_batch(workdir, warm=True)
            pool_start = time.perf_counter() - t0
            print(f"warm pool started (with a first job) in {pool_start:.2f} s", flush=True)
        except RunFailed as e:
            failures["batch warm"].append(f"pool start: {e}")
        for i in range(args.repeats):
            for arm in arms:
                warm = arm.endswith("warm")
                try:
                    if arm.startswith("session"):
                        first, cell_trips = run_session(ip, args.cells, warm)
                        trips.extend(cell_trips)
                    else:
                        first = run_batch(workdir, warm)
                    starts[arm].append(first)
                    print(f"{arm} {i + 1}: first result after {first:.2f} s", flush=True)
                except RunFailed as e:
                    failures[arm].append(str(e))
        from alchemist.backends.local.pool import client

        client.stop()
    report(args, starts, trips, failures, pool_start)


def report(
    args: argparse.Namespace,
    starts: dict[str, list[float]],
    trips: list[float],
    failures: dict[str, list[str]],
    pool_start: float | None,
) -> None:
    print()
    print(
        f"2 ranks, gloo on CPU; {args.repeats} sessions of each kind, {args.cells} timed cells each"
    )
    if trips:
        p50, p95 = percentile(trips, 0.5) * 1000, percentile(trips, 0.95) * 1000
        print(
            f"%%alchemist_px round trip (one small all_reduce), {len(trips)} cells:"
            f" p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {max(trips) * 1000:.1f} ms"
        )
        print(
            f"ratio to target: p50 {p50 / TARGET_P50_MS:.2f} (of {TARGET_P50_MS:g} ms),"
            f" p95 {p95 / TARGET_P95_MS:.2f} (of {TARGET_P95_MS:g} ms)"
        )
    else:
        print("%%alchemist_px round trip: no session succeeded")
    if pool_start is not None:
        print(f"warm pool start-up (once, with a first job): {pool_start:.2f} s")
    med = {arm: statistics.median(v) for arm, v in starts.items() if v}
    for arm, value in med.items():
        what = "start to first cell result" if arm.startswith("session") else "submit to first step"
        print(f"{arm}: {what}: median {value:.2f} s")
    if "session cold" in med and "batch cold" in med:
        ratio = med["session cold"] / med["batch cold"]
        print(f"ratio session / batch first result: {ratio:.2f} (target <= {TARGET_RATIO:g})")
    if "session warm" in med and "batch warm" in med:
        ratio = med["session warm"] / med["batch warm"]
        print(f"ratio session / batch first result, warm: {ratio:.2f}")
    if "session warm" in med and "session cold" in med:
        ratio = med["session warm"] / med["session cold"]
        print(f"ratio session warm / cold: {ratio:.2f}")
    print(
        "failed runs: "
        + ", ".join(f"{arm} {len(failures[arm])} of {args.repeats}" for arm in failures)
    )
    for arm, why in failures.items():
        for line in why:
            print(f"  {arm} failed: {line}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
