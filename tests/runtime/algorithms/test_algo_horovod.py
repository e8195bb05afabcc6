"""``horovod``: two real ranks started by a real ``horovodrun`` (gloo controller, CPU).

Skips when Horovod is not installed (scripts/setup.d/50-horovod.sh builds it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
HOROVODRUN = Path(sys.executable).with_name("horovodrun")

try:
    import horovod.torch  # noqa: F401

    HAVE_HOROVOD = HOROVODRUN.exists()
except ImportError:
    HAVE_HOROVOD = False

pytestmark = pytest.mark.skipif(
    not HAVE_HOROVOD,
    reason="Horovod is not installed: run scripts/setup.d/50-horovod.sh (its build failed or was not run)",
)


def test_horovod_matches_single_process_sgd_and_learns_digits(
    tmp_path: Path, digits_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    argv = [
        str(HOROVODRUN), "-np", "2", "-H", "localhost:2", "--gloo", "--start-timeout", "60",
        sys.executable, str(HERE / "hvd_worker.py"), str(digits_path), str(out),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[2])}
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 0, output.decode(errors="replace")[-3000:]

    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    gen = torch.Generator().manual_seed(42)
    x, y = torch.randn(8, 5, generator=gen), torch.randint(0, 3, (8,), generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    for rank in range(2):
        value = torch.load(out / f"rank-{rank}.pt", weights_only=False)
        for got, want in zip(value["params"], model.parameters(), strict=True):
            torch.testing.assert_close(got, want.detach(), atol=1e-6, rtol=1e-5)
    rank0 = torch.load(out / "rank-0.pt", weights_only=False)
    assert rank0["digits"]["accuracy"] >= 0.90, rank0["digits"]
