"""scripts/gpu-check.sh where there is no GPU: its --cpu mode runs every check's
plumbing (real jobs, the warm pool, a real zygote, both throughput arms, the queue), so
the script works when a GPU machine is first lent; without --cpu it says in one line
that it needs a GPU."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECKS = ["nccl", "metrics", "warm-pool", "zygote", "throughput", "queue"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALCHEMIST_")}
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu-check.sh"), *args],
        capture_output=True, text=True, timeout=400, env=env, cwd=REPO,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(450)
def test_every_check_runs_on_the_cpu_and_prints_one_line() -> None:
    proc = run("--cpu", "--repeats", "1")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("gpu-check: ")]
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert [ln.split()[1] for ln in lines[:-1]] == CHECKS, lines
    verdicts = dict(ln.split()[1:3] for ln in lines[:-1])
    assert verdicts.pop("metrics") == "skipped"  # NVML needs a GPU
    assert set(verdicts.values()) == {"ok"}, lines
    assert "ratio " in next(ln for ln in lines if " throughput " in ln)
    assert lines[-1] == "gpu-check: 0 failed"


def test_without_a_gpu_it_says_so_in_one_line() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = run()
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "no CUDA GPU" in proc.stderr, proc.stderr
