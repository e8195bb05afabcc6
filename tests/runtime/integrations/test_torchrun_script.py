"""An unmodified torchrun script (``init_process_group``, ``RANK``/``LOCAL_RANK``/
``WORLD_SIZE``, argparse) runs with ``alchemist submit script.py -n 2 -- ARGS``: a real
2-rank job through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

import alchemist
from alchemist import cli
from alchemist.job.spec import JobState

SCRIPT = """
import argparse, os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    print(f"argv={sys.argv} rank={rank}/{world} local={local} steps={args.steps}")
    if rank == 0:
        torch.save(model.module.state_dict(), args.out)
    dist.destroy_process_group()
    print(f"group kept for the worker={dist.is_initialized()}")

if __name__ == "__main__":
    main()
"""


def test_an_unmodified_torchrun_script_runs_with_its_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "weights.pt"
    code = cli.main(["submit", str(script), "-n", "2", "--", "--steps", "3", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    [job] = alchemist.jobs()
    assert job.status().state == JobState.SUCCEEDED
    argv = f"argv=['train.py', '--steps', '3', '--out', '{out}']"
    assert f"[rank 0] {argv} rank=0/2 local=0 steps=3" in printed
    assert f"[rank 1] {argv} rank=1/2 local=1 steps=3" in printed
    # The script's closing destroy_process_group() leaves the job's group to the worker,
    # which destroys it after the rank recorded its outcome: a warm rank could block for
    # ever in a destroy made while its peer exits, holding the job as running.
    assert printed.count("group kept for the worker=True") == 2, printed
    import torch

    assert torch.load(out)["weight"].shape == (1, 4)


def test_arguments_for_a_notebook_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nb = tmp_path / "train.ipynb"
    nb.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    assert cli.main(["submit", str(nb), "--", "--steps", "3"]) == 2
    assert "arguments after -- are for a .py script" in capsys.readouterr().err
    assert alchemist.jobs() == []
