"""Every benchmark runs in its smoke mode (tiny sizes), so none can silently break.

These check that each benchmark runs both arms to the end and prints its figures; the
figures themselves are measured by running the benchmarks in full, never asserted here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _smoke(name: str, timeout: float = 240, args: tuple[str, ...] = ()) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), "--smoke", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, f"{name} --smoke exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def test_every_benchmark_has_a_smoke_test() -> None:
    tested = {
        "launch_overhead.py",
        "metrics_latency.py",
        "algorithms.py",
        "reliability.py",
        "queue_makespan.py",
        "diagnose.py",
        "interactive.py",
        "scale.py",
        "notebook_launchers.py",
        "sweep_pruning.py",
        "step_overhead.py",
    }
    assert {p.name for p in BENCHMARKS.glob("*.py")} == tested


def test_launch_overhead_smoke_runs_every_arm() -> None:
    out = _smoke("launch_overhead.py", args=("--warm",))
    assert "ratio alchemist / plain: wall" in out
    assert "ratio warm / plain: wall" in out
    assert re.search(r"warm pool start-up: [0-9.]+ s", out), out
    plain, cold, warm = next(ln for ln in out.splitlines() if "failed runs" in ln).split()[-3:]
    # Alchemist's arms must not fail (a warm run that started cold counts as failed);
    # plain torchrun may (its known teardown abort, about 1 run in 20 here), and then
    # the benchmark says so instead of crashing.
    assert (cold, warm) == ("0", "0"), out
    assert out.count("  plain failed: ") == int(plain), out


def test_metrics_latency_smoke_measures_cost_and_latency() -> None:
    out = _smoke("metrics_latency.py")
    assert "cost of alchemist.log(" in out
    assert "TensorBoard writer process" in out
    assert "MetricsReader polling every 20 ms: p50" in out


@pytest.mark.slow
def test_algorithms_smoke_runs_each_chosen_algorithm() -> None:
    out = _smoke("algorithms.py", timeout=400)
    assert "failed runs: 0 of 2" in out, out
    assert "sync exchange, hidden 64" in out
    assert out.count("steps/s") == 2


def test_reliability_smoke_counts_both_arms() -> None:
    out = _smoke("reliability.py")
    lines = out.splitlines()
    alchemist = next(ln for ln in lines if ln.strip().startswith("alchemist ")).split()
    plain = next(ln for ln in lines if ln.strip().startswith("plain torchrun")).split()
    # Alchemist's runs all finish and none is reported failed; the plain arm's two runs
    # finish too (its teardown abort, when it hits, shows in the middle column).
    assert alchemist[1:] == ["2", "0", "0"], out
    assert plain[2] == "2" and plain[4] == "0", out
    assert "finished work reported failed: alchemist 0 of 2" in out
    # What the user is told of injected faults (a killed rank's restart, a stopped rank).
    assert "succeeded 1 of 1, restart cause names the killed rank 1 of 1" in out, out
    assert "a rank stopped inside DDP: the headline names it 1 of 1" in out, out


def test_queue_makespan_smoke_runs_both_arms() -> None:
    out = _smoke("queue_makespan.py")
    assert "not succeeded: queued 0, all at once 0" in out, out
    assert "ratio queued / all at once:" in out


def test_diagnose_smoke_times_both_paths_and_the_hooks() -> None:
    out = _smoke("diagnose.py")
    assert (
        "local (socket, then signal + request)" in out and "request file only (kubernetes)" in out
    )
    assert "ratio with / without hooks " in out
    assert "flight recorder (across processes, noisier): ratio on / off " in out
    # the job's diagnoses say missing_rank; a step-loop run may fail and is then counted
    failed = next(ln for ln in out.splitlines() if ln.startswith("failed runs: "))
    assert "diagnose local (socket, then signal + request) 0" in failed, out
    assert "diagnose request file only (kubernetes) 0" in failed, out


def test_interactive_smoke_runs_both_arms() -> None:
    out = _smoke("interactive.py")
    assert (
        "failed runs: session cold 0 of 1, batch cold 0 of 1, session warm 0 of 1,"
        " batch warm 0 of 1" in out
    ), out
    assert re.search(r"round trip \(one small all_reduce\), 10 cells: p50 [0-9.]+ ms, p95", out), (
        out
    )
    assert re.search(r"ratio session / batch first result: [0-9.]+ \(target <= 1.5\)", out), out
    assert re.search(r"ratio session / batch first result, warm: [0-9.]+", out), out
    assert re.search(r"warm pool start-up \(once, with a first job\): [0-9.]+ s", out), out


def test_scale_smoke_runs_every_part_and_prints_the_growth_table() -> None:
    out = _smoke("scale.py", timeout=600)
    assert "parts failed: 0 of 5" in out, out
    assert "| cost | sizes | at the largest size | exponent | target |" in out, out
    for cost in (
        "GET /jobs?limit=20",
        "panel poll: GET /jobs",
        "GET /jobs/<id>/metrics?view=summary",
        "GET /jobs/<id>/logs?tail=100",
        "users at once: REST errors",
        "job processes left (supervisors, ranks)",
    ):
        assert re.search(rf"^\| {re.escape(cost)}.* \| -?[0-9.]+ \|", out, re.M), (cost, out)


def test_notebook_launchers_smoke_runs_every_arm() -> None:
    out = _smoke("notebook_launchers.py", timeout=400)
    for lib, launcher in (("accelerate", "notebook_launcher"), ("lightning", "ddp_notebook")):
        for arm in ("cold", "warm", "preload"):
            assert f"ratio {lib} alchemist {arm} / {launcher}: time to first step" in out, out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith(("accelerate ", "lightning "))]
    # Every arm ran (a failure would be counted in the last column, not crash the run),
    # and every Alchemist arm left a loss curve in its job's metrics.
    assert len(rows) == 8 and all(row[-1] == "0" for row in rows), out
    assert all(int(row[-2]) > 0 for row in rows if row[1] == "alchemist"), out


def test_sweep_pruning_smoke_runs_both_arms() -> None:
    out = _smoke("sweep_pruning.py")
    assert "failed trials: grid 0, pruned 0; failed arms: none" in out, out
    rows = {
        row[0]: row[2:6]  # trials, complete, pruned, failed
        for row in (ln.split() for ln in out.splitlines())
        if row[:2] in (["grid", "(none)"], ["pruned", "(median)"])
    }
    # The grid arm trains every setting to its last epoch; the pruned arm runs every
    # setting too, each one complete or pruned.
    assert rows["grid"] == ["3", "3", "0", "0"], out
    assert rows["pruned"][0] == "3" and rows["pruned"][3] == "0", out
    assert re.search(r"trial-seconds saved by pruning: -?[0-9.]+ of [0-9.]+ \(", out), out
    assert re.search(r"ratio pruned / grid: trial-seconds [0-9.]+, epochs [0-9.]+, wall", out)
    assert re.search(r"best val_acc: grid [0-9.]+, pruned [0-9.]+, difference [-+][0-9.]+;", out)
    assert re.search(r"noise: val_acc of the best setting over 2 seeds: .* within noise: ", out)


def test_step_overhead_smoke_runs_every_arm_and_samples_the_threads() -> None:
    out = _smoke("step_overhead.py", timeout=400)
    # the table's rows: (step, arm) -> steps, steps/s, spread, ms/step, [ratios,] failed
    rows = {
        (ln[:7].strip(), ln[7:29].strip()): ln[29:].split()
        for ln in out.splitlines()
        if ln.startswith(("small ", "large "))
    }
    heads = ("alchemist cold", "alchemist warm", "warm + log", "warm + log + monitor")
    for size in ("small", "large"):
        assert (size, "plain torchrun") in rows, out
        for head in heads:
            # Alchemist's arms ran (a failed run is counted in the last column, and the
            # arm then has no steps/s); plain torchrun may fail at its teardown.
            assert rows[(size, head)][-1] == "0", out
            assert float(rows[(size, head)][1]) > 0, out
    for size, target in (("small", "0.95"), ("large", "0.98")):
        for head in ("warm + log", "warm + log + monitor"):
            assert re.search(
                rf"ratio {re.escape(head)} / plain torchrun, {size} step \(.* ms here\)"
                rf" \(target >= {target}\): after warm-up [0-9.]+ .*, second half [0-9.]+",
                out,
            ), out
        assert re.search(
            rf"alchemist.log\(\) on the training thread, warm \+ log, {size} step:"
            r" p50 [0-9.]+ us, p99 [0-9.]+ us over [1-9][0-9]* calls",
            out,
        ), out
    # The table of rank 0's threads and processes: the logging job's own threads and its
    # TensorBoard writer process, each with its wake-ups/s and CPU s/min.
    for name in ("thread alchemist-metrics", "child: alchemist.metrics.tbwriter"):
        assert re.search(rf"^  {re.escape(name)}.* [0-9.]+ +[0-9.]+ +[0-9.]+$", out, re.M), out
    assert "rank 0 of plain torchrun, small step" in out, out
    # the reference for log()'s cost: a minimal logger timed under plain torchrun (its
    # mark is written before torchrun's teardown, which may fail)
    assert re.search(r"minimal logger .* p50 [0-9.]+ us, p99 [0-9.]+ us over [1-9]", out), out
