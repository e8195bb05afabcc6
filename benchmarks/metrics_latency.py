"""Metrics pipeline benchmark: end-to-end latency and the cost of ``alchemist.log()``.

1. Latency: a real 2-worker job on the local backend (torchrun, the real runtime with
   its reporter and TensorBoard thread) calls ``alchemist.log()`` every 5 ms; this
   process tails every rank's metrics file with :class:`MetricsReader` (every 20 ms,
   and through a :class:`JobMonitor` at its default update interval) and records, per
   event, the time it was seen minus the time it was logged (the event's ``time``).
   Same machine, same clock.
2. Cost: a training loop whose step is ~5 ms of torch work (one thread), with and
   without ``alchemist.log(step, loss=..., lr=...)`` every step through the job
   reporter of rank 0 (its jsonl file, and its TensorBoard writer process). Reported:
   the wall and CPU time inside ``log()`` per call as a share of the step, the whole
   loop's time per step with and without (interleaved blocks), and the writer
   process's CPU.

Targets (issue 3): latency p95 ≤ 200 ms; logging every step costs ≤ 1 % of a 5 ms step.

Run: ``.venv/bin/python benchmarks/metrics_latency.py [--events N]``; ``--smoke`` runs
tiny sizes (the test suite does, so the benchmark cannot silently break).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def latency(events: int) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["ALCHEMIST_HOME"] = tempfile.mkdtemp(prefix="alchemist-bench-")
    from alchemist import client
    from alchemist.metrics.reader import MetricsReader
    from alchemist.widgets import JobMonitor
    from alchemist.widgets.monitor import DEFAULT_INTERVAL

    code = (
        "import time, alchemist\n"
        f"for i in range({events}):\n"
        "    alchemist.log(i, loss=1.0 / (i + 1))\n"
        "    time.sleep(0.005)\n"
    )
    job = client.submit(code, workers=2, name="latency")
    reader = MetricsReader(job.job_dir)
    monitor = JobMonitor(job)
    log_time: dict[tuple[int, int], float] = {}
    tail_lat: list[float] = []
    mon_lat: list[float] = []
    cursor = ""
    shown = {0: 0, 1: 0}
    next_monitor = time.monotonic()
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            got, cursor = reader.read(cursor)
            now = time.time()
            for e in got:
                tail_lat.append(now - e["time"])
                log_time[(e["rank"], e["step"])] = e["time"]
            if time.monotonic() >= next_monitor:
                monitor.update()
                now = time.time()
                got, cursor = reader.read(cursor)  # events the monitor saw first
                for e in got:
                    tail_lat.append(now - e["time"])
                    log_time[(e["rank"], e["step"])] = e["time"]
                for rank in shown:
                    series = monitor.data.series.get(("loss", rank))
                    if series is None:
                        continue
                    new_steps = series.x[shown[rank] :].astype(int).tolist()
                    mon_lat.extend(now - log_time[(rank, s)] for s in new_steps)
                    shown[rank] = len(series)
                next_monitor = time.monotonic() + DEFAULT_INTERVAL
            if len(tail_lat) >= 2 * events and sum(shown.values()) >= 2 * events:
                break
            time.sleep(0.02)
    finally:
        job.cancel()
    print(f"latency, alchemist.log() in a worker -> seen here ({len(tail_lat)} events, 2 ranks)")
    for label, lat in (
        ("MetricsReader polling every 20 ms", tail_lat),
        (f"JobMonitor.update() every {DEFAULT_INTERVAL * 1000:.0f} ms (its default)", mon_lat),
    ):
        ms = [x * 1000 for x in lat]
        print(
            f"  {label}: p50 {pct(ms, 50):.1f} ms  p95 {pct(ms, 95):.1f} ms"
            f"  p99 {pct(ms, 99):.1f} ms  max {max(ms):.1f} ms"
        )


def cost(steps: int, rounds: int) -> None:
    import torch

    from alchemist.job.jobdir import JobDir
    from alchemist.metrics.reporter import Reporter

    torch.set_num_threads(1)
    a = torch.randn(256, 256)

    def run(reps: int) -> float:
        x = a
        for _ in range(reps):
            x = a @ a
        return float(x[0, 0])

    def median_time(reps: int) -> float:
        times = []
        for _ in range(15):
            t0 = time.perf_counter()
            run(reps)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    # Calibrate a ~5 ms step of real torch work (the median, as the machine is shared).
    reps = 1
    for _ in range(4):
        reps = max(1, round(reps * 0.005 / median_time(reps)))

    def step() -> float:
        return run(reps)

    import psutil

    root = Path(tempfile.mkdtemp(prefix="alchemist-bench-")) / "jcost"
    reporter = Reporter(JobDir(root).create(), rank=0)  # jsonl + TensorBoard writer, as in a job
    # Rank 0 starts its TensorBoard writer when it first writes events (not at start-up):
    # write one before measuring, so the writer's start is not part of the cost.
    reporter.log(-1, loss=0.0, lr=0.1)
    reporter.flush()
    if reporter._tb is None:
        raise SystemExit("the reporter started no TensorBoard writer after its first events")
    writer = psutil.Process(reporter._tb.pid)
    time.sleep(2)  # let the writer process import its libraries
    writer_cpu0 = sum(writer.cpu_times()[:2])
    log_wall: list[float] = []
    log_cpu: list[float] = []
    blocks: dict[bool, list[float]] = {False: [], True: []}
    for r in range(rounds * 2):
        with_log = r % 2 == 1  # interleave blocks so machine load hits both alike
        w0 = time.perf_counter()
        for i in range(steps):
            loss = step()
            if with_log:
                t0, tc0 = time.perf_counter(), time.thread_time()
                reporter.log(i, loss=loss, lr=0.1)
                log_cpu.append(time.thread_time() - tc0)
                log_wall.append(time.perf_counter() - t0)
        blocks[with_log].append((time.perf_counter() - w0) / steps * 1000)
    n = {k: len(v) * steps for k, v in blocks.items()}
    writer_cpu = sum(writer.cpu_times()[:2]) - writer_cpu0
    reporter.close()
    step_ms = statistics.median(blocks[False])
    us = [x * 1e6 for x in log_wall]
    cus = [x * 1e6 for x in log_cpu]
    print(
        f"cost of alchemist.log(step, loss=, lr=) every step ({n[True]} steps,"
        f" step ~{step_ms:.2f} ms)"
    )
    print(
        f"  inside log(), wall: median {statistics.median(us):.1f} us  p95 {pct(us, 95):.1f} us"
        f"  -> {statistics.median(us) / 10 / step_ms:.2f} % of this step,"
        f" {statistics.median(us) / 50:.2f} % of 5 ms"
    )
    print(
        f"  inside log(), thread CPU: median {statistics.median(cus):.1f} us"
        f"  p95 {pct(cus, 95):.1f} us -> {statistics.median(cus) / 10 / step_ms:.2f} % of this"
        f" step, {statistics.median(cus) / 50:.2f} % of 5 ms"
    )
    for label, pick in (("median", statistics.median), ("least disturbed", min)):
        off, on = pick(blocks[False]), pick(blocks[True])
        print(
            f"  whole loop, {label} block: {off:.3f} ms/step without, {on:.3f} with"
            f" ({(on - off) / off * 100:+.2f} %)"
        )
    print(
        f"  TensorBoard writer process (another core): {writer_cpu / n[True] * 1e6:.1f} us CPU"
        " per logged step"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1000, help="events per rank (latency)")
    p.add_argument("--steps", type=int, default=100, help="steps per block (cost)")
    p.add_argument("--rounds", type=int, default=20, help="blocks with and without (cost)")
    p.add_argument("--skip-latency", action="store_true")
    p.add_argument("--skip-cost", action="store_true")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: check that it runs")
    args = p.parse_args(argv)
    if args.smoke:
        args.events, args.steps, args.rounds = 20, 5, 2
    if not args.skip_cost:
        cost(args.steps, args.rounds)
    if not args.skip_latency:
        latency(args.events)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
