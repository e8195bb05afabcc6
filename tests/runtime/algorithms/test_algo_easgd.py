"""``easgd`` (Zhang, Choromanska & LeCun 2015) on real gloo ranks and a real centre server."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from algo_harness import RankCtx, ok, run_ranks, train_digits

from alchemist.runtime import algorithms

TAU, ALPHA = 3, 0.3


def fixed_problem() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    gen = torch.Generator().manual_seed(42)
    return model, torch.randn(8, 5, generator=gen), torch.randint(0, 3, (8,), generator=gen)


def shard(x: torch.Tensor, y: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x[rank * 4 : (rank + 1) * 4], y[rank * 4 : (rank + 1) * 4]


def vec(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def local_steps(
    model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> None:
    for _ in range(TAU):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def easgd_worker(ctx: RankCtx, data: Path) -> dict[str, Any]:
    model, x, y = fixed_problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.5)
    model, opt = algorithms.get("easgd").wrap(
        model, opt, ctx, moving_rate=ALPHA, communication_period=TAU
    )
    xs, ys = shard(x, y, ctx.rank)
    # The exchange happens inside the τ-th step; order it: rank 0 first, then rank 1.
    if ctx.rank == 0:
        local_steps(model, opt, xs, ys)
    dist.barrier()
    if ctx.rank == 1:
        local_steps(model, opt, xs, ys)
    dist.barrier()
    result: dict[str, Any] = {
        "worker": vec(model),
        "centre": opt.centre(),
        "exchanges": opt.exchanges,
    }
    opt.finish()
    result["after_finish"] = vec(model)
    _, defaults = algorithms.get("easgd").wrap(
        torch.nn.Linear(1, 1), torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1), ctx
    )
    result["defaults"] = (defaults.moving_rate, defaults.communication_period)
    defaults.finish()
    result["digits"] = train_digits(ctx, "easgd", data)
    return result


def test_easgd_elastic_exchange_follows_the_paper_and_learns_digits(
    tmp_path: Path, digits_path: Path
) -> None:
    """After τ local steps each worker's exchange is x_i ← x_i − α(x_i − x̃), x̃ ← x̃ +
    α(x_i − x̃); rank 0 ends with the centre; defaults α = 0.9/p, τ = 10; digits >= 90 %."""
    values = ok(run_ranks(easgd_worker, 2, tmp_path, digits_path))

    base, x, y = fixed_problem()
    centre = vec(base)
    workers = []
    for r in range(2):
        m = fixed_problem()[0]
        local_steps(m, torch.optim.SGD(m.parameters(), lr=0.2, momentum=0.5), *shard(x, y, r))
        xi = vec(m)
        diff = ALPHA * (xi - centre)
        workers.append(xi - diff)
        centre = centre + diff
    for r in range(2):
        torch.testing.assert_close(values[r]["worker"], workers[r], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(values[r]["centre"], centre, atol=1e-5, rtol=1e-5)
        assert values[r]["exchanges"] == 1
    torch.testing.assert_close(values[0]["after_finish"], centre, atol=1e-5, rtol=1e-5)
    assert values[0]["defaults"] == (pytest.approx(0.45), 10)
    assert values[0]["digits"]["accuracy"] >= 0.90, values[0]["digits"]


# -- a crashing worker -------------------------------------------------------------------


def position(rank: int, round_: int) -> torch.Tensor:
    return torch.full((2, 3), float(rank + 1)) * (round_ + 1) + torch.arange(6.0).reshape(2, 3)


def easgd_crash_worker(ctx: RankCtx) -> dict[str, Any]:
    """Exchanges in a fixed order; rank 2 dies halfway through sending its second one."""
    pair = dist.new_group([0, 1])
    w = torch.nn.Parameter(torch.zeros(2, 3))
    _, opt = algorithms.get("easgd").wrap(
        torch.nn.Linear(1, 1),
        torch.optim.SGD([w], lr=0.1),
        ctx,
        moving_rate=ALPHA,
        finish_timeout=60,
    )
    for r in range(3):  # round 0: everyone exchanges once, in rank order
        if ctx.rank == r:
            with torch.no_grad():
                w.copy_(position(r, 0))
            opt.exchange()
        dist.barrier()
    if ctx.rank == 2:
        conn = opt.conn.conn
        os.write(conn.fileno(), struct.pack("!i", 4096) + b"\xff" * 2048)
        os._exit(3)
    result: dict[str, Any] = {}
    if ctx.rank == 0:
        deadline = time.monotonic() + 60
        while 2 not in opt.server.lost:
            assert time.monotonic() < deadline, "the server never noticed rank 2's crash"
            time.sleep(0.02)
        result["centre_after_crash"] = opt.centre()
    dist.barrier(group=pair)
    for r in (1, 0):  # round 1: the survivors go on, rank 1 first
        if ctx.rank == r:
            with torch.no_grad():
                w.copy_(position(r, 1))
            opt.exchange()
        dist.barrier(group=pair)
    opt.finish()
    result["final"] = w.detach().clone()
    return result


def test_easgd_crashed_worker_does_not_corrupt_the_centre(tmp_path: Path) -> None:
    """A worker dying mid-exchange leaves the centre as it was; the others go on and the
    final centre is exactly the formula over the complete exchanges."""
    results = run_ranks(easgd_crash_worker, 3, tmp_path, timeout=180)
    assert results[2].exitcode == 3
    ok(results, ranks=[1])
    (value,) = ok(results, ranks=[0])

    centre = torch.zeros(2, 3)
    for r in range(3):
        centre = centre + ALPHA * (position(r, 0) - centre)
    torch.testing.assert_close(value["centre_after_crash"], centre.reshape(-1))
    for r in (1, 0):
        centre = centre + ALPHA * (position(r, 1) - centre)
    assert torch.isfinite(value["final"]).all()
    torch.testing.assert_close(value["final"], centre)
