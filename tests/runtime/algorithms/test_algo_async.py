"""``async`` (parameter server on rank 0) on real gloo ranks talking to a real server."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from algo_harness import RankCtx, ok, run_ranks, train_digits

from alchemist.runtime import algorithms

STEPS = 5


def fixed_problem() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    gen = torch.Generator().manual_seed(42)
    return model, torch.randn(8, 5, generator=gen), torch.randint(0, 3, (8,), generator=gen)


def train_steps(
    model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, n: int
) -> None:
    for _ in range(n):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def async_worker(ctx: RankCtx, data: Path) -> dict[str, Any]:
    # 1. One worker (rank 1) trains, rank 0 only hosts the server: plain momentum SGD.
    model, x, y = fixed_problem()
    if ctx.rank == 1:
        with torch.no_grad():  # a different start: the server's (rank 0's) must win
            for p in model.parameters():
                p.add_(1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, opt = algorithms.get("async").wrap(model, opt, ctx, log_every=0)
    if ctx.rank == 1:
        train_steps(model, opt, x, y, STEPS)
    one_worker = [p.detach().clone() for p in model.parameters()]
    one_worker_staleness = opt.mean_staleness
    dist.barrier()
    # 2. Staleness: rank 0 pulled at version 0 and pushes 3 updates while rank 1 holds
    #    version 5; rank 1's next push is then 3 updates stale.
    if ctx.rank == 0:
        train_steps(model, opt, x, y, 3)
    dist.barrier()
    if ctx.rank == 1:
        train_steps(model, opt, x, y, 1)
    result = {
        "one_worker": one_worker,
        "one_worker_staleness": one_worker_staleness,
        "staleness": opt.staleness,
        "max_staleness": opt.max_staleness,
    }
    opt.finish()
    # 3. Both ranks train the digits classifier asynchronously.
    result["digits"] = train_digits(ctx, "async", data, lr=0.05, log_every=5)
    from alchemist.metrics.reporter import get_reporter  # in memory: no job directory here

    result["logged"] = [
        e["values"]["async_staleness"]
        for e in get_reporter().events()
        if "async_staleness" in e["values"]
    ]
    return result


def test_async_one_worker_is_plain_sgd_staleness_and_digits(
    tmp_path: Path, digits_path: Path
) -> None:
    """One async worker takes exactly the steps of plain momentum SGD; staleness counts the
    updates applied between a worker's pull and its push; two workers learn digits."""
    values = ok(run_ranks(async_worker, 2, tmp_path, digits_path))

    model, x, y = fixed_problem()
    train_steps(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), x, y, STEPS)
    for got, want in zip(values[1]["one_worker"], model.parameters(), strict=True):
        torch.testing.assert_close(got, want.detach(), atol=1e-6, rtol=1e-5)
    assert values[1]["one_worker_staleness"] == 0

    assert values[0]["max_staleness"] == STEPS  # its first push came after rank 1's 5
    assert values[1]["staleness"] == 3
    assert values[0]["digits"]["accuracy"] >= 0.90, values[0]["digits"]
    for value in values:  # the staleness metric went through alchemist.log every 5 steps
        digits = value["digits"]
        assert len(value["logged"]) == digits["steps"] // 5
        assert all(0 <= s <= digits["max_staleness"] for s in value["logged"])


# -- a crashing worker -------------------------------------------------------------------

LR = 0.1
FULL_STEPS = {0: 4, 1: 3, 2: 2}


def coefficients(rank: int) -> torch.Tensor:
    return torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.01 + rank


def crash_worker(ctx: RankCtx) -> dict[str, Any]:
    """Loss (w · c_rank).sum(): the gradient c_rank does not depend on w, so the server's
    final parameters are w0 − lr Σ c over the updates it applied, in any order."""
    pair = dist.new_group([0, 1])
    w = torch.nn.Parameter(torch.ones(2, 3))
    opt = torch.optim.SGD([w], lr=LR)
    _, opt = algorithms.get("async").wrap(
        torch.nn.Linear(1, 1), opt, ctx, log_every=0, finish_timeout=60
    )
    c = coefficients(ctx.rank)

    def step() -> None:
        opt.zero_grad()
        (w * c).sum().backward()
        opt.step()

    if ctx.rank == 2:
        for _ in range(FULL_STEPS[2]):
            step()
        # Die in the middle of a push: announce a frame, send half of it (NaNs), exit.
        conn = opt.conn.conn
        frame_len = 4096
        os.write(conn.fileno(), struct.pack("!i", frame_len) + b"\xff" * (frame_len // 2))
        os._exit(3)
    if ctx.rank == 0:
        deadline = time.monotonic() + 60
        while 2 not in opt.server.lost:
            assert time.monotonic() < deadline, "the server never noticed rank 2's crash"
            time.sleep(0.02)
    dist.barrier(group=pair)  # ranks 0 and 1 go on only once rank 2 is gone
    for _ in range(FULL_STEPS[ctx.rank]):
        step()
    opt.finish()
    return {"w": w.detach().clone()}


def test_async_crashed_worker_does_not_corrupt_the_others(tmp_path: Path) -> None:
    """Rank 2 dies halfway through sending an update: the server discards that update,
    keeps every complete one, and ranks 0 and 1 finish training with exact parameters."""
    results = run_ranks(crash_worker, 3, tmp_path, timeout=180)
    assert results[2].exitcode == 3
    (final,) = ok(results, ranks=[0])
    ok(results, ranks=[1])

    expected = torch.ones(2, 3) - LR * sum(n * coefficients(r) for r, n in FULL_STEPS.items())
    assert torch.isfinite(final["w"]).all()
    torch.testing.assert_close(final["w"], expected, atol=1e-5, rtol=1e-5)


def mismatch_worker(ctx: RankCtx) -> None:
    model = torch.nn.Linear(5, 3 if ctx.rank == 0 else 4)
    algorithms.get("async").wrap(
        model, torch.optim.SGD(model.parameters(), lr=0.1), ctx, finish_timeout=60
    )


def test_async_different_models_fail_with_one_clear_line(tmp_path: Path) -> None:
    """A rank whose model differs from the server's is refused at wrap time; every rank
    stops with one line naming the rank and why (none is left hanging in a collective)."""
    results = run_ranks(mismatch_worker, 2, tmp_path)
    reason = "rank 1 has 24 parameter elements, the server rank 18"
    for r in results:
        assert r.exitcode != 0
        assert reason in (r.error or "")
    assert "every rank must wrap the same model and optimizer" in (results[1].error or "")
    assert "rank 1 could not join the parameter server" in (results[0].error or "")
