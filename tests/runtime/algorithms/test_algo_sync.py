"""``sync`` (DistributedDataParallel) on 2 real gloo ranks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from algo_harness import RankCtx, ok, run_ranks, train_digits

from alchemist.runtime import algorithms

STEPS = 3


def fixed_problem() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    gen = torch.Generator().manual_seed(42)
    return model, torch.randn(8, 5, generator=gen), torch.randint(0, 3, (8,), generator=gen)


def sgd_steps(
    model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> None:
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def sync_worker(ctx: RankCtx, data: Path) -> dict[str, Any]:
    model, x, y = fixed_problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ddp, opt = algorithms.get("sync").wrap(model, opt, ctx)
    half = len(x) // ctx.world_size
    sl = slice(ctx.rank * half, (ctx.rank + 1) * half)
    sgd_steps(ddp, opt, x[sl], y[sl])
    params = [p.detach().clone() for p in model.parameters()]
    return {"params": params, "digits": train_digits(ctx, "sync", data)}


def test_sync_matches_single_process_sgd_and_learns_digits(
    tmp_path: Path, digits_path: Path
) -> None:
    """Two ranks on halves of a batch take the steps one process takes on the whole batch;
    the same wrapper trains the digits classifier to >= 90 % test accuracy."""
    values = ok(run_ranks(sync_worker, 2, tmp_path, digits_path))

    model, x, y = fixed_problem()
    sgd_steps(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), x, y)
    for value in values:
        for got, want in zip(value["params"], model.parameters(), strict=True):
            torch.testing.assert_close(got, want.detach(), atol=1e-6, rtol=1e-5)

    assert values[0]["digits"]["accuracy"] >= 0.90, values[0]["digits"]
