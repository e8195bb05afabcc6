"""``bmuf`` (Chen & Huo 2016) on 2 real gloo ranks against the paper's formulas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from algo_harness import RankCtx, ok, run_ranks, train_digits

from alchemist.runtime import algorithms

TAU, ETA, ZETA = 3, 0.6, 0.8
STEPS = 2 * TAU + 1  # two full blocks and a last, incomplete one closed by finish()


def fixed_problem() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    gen = torch.Generator().manual_seed(42)
    return model, torch.randn(8, 5, generator=gen), torch.randint(0, 3, (8,), generator=gen)


def shard(x: torch.Tensor, y: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x[rank * 4 : (rank + 1) * 4], y[rank * 4 : (rank + 1) * 4]


def local_step(
    model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> None:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def vec(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def bmuf_worker(ctx: RankCtx, data: Path) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for nesterov in (True, False):
        model, x, y = fixed_problem()
        if ctx.rank == 1:
            with torch.no_grad():  # rank 0's initial model must be broadcast
                for p in model.parameters():
                    p.mul_(-3.0)
        opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.5)
        model, opt = algorithms.get("bmuf").wrap(
            model,
            opt,
            ctx,
            block_size=TAU,
            block_momentum=ETA,
            block_lr=ZETA,
            nesterov=nesterov,
            local_momentum="keep",  # the reset is checked in test_reference_bmuf.py
        )
        xs, ys = shard(x, y, ctx.rank)
        for _ in range(STEPS):
            local_step(model, opt, xs, ys)
        opt.finish()
        result[f"nesterov={nesterov}"] = (vec(model), opt.blocks)
    _, defaults = algorithms.get("bmuf").wrap(
        *fixed_problem()[:1], torch.optim.SGD(fixed_problem()[0].parameters(), lr=0.1), ctx
    )
    result["defaults"] = (
        defaults.block_size,
        defaults.block_momentum,
        defaults.block_lr,
        defaults.nesterov,
        defaults.local_momentum,
    )
    defaults.finish()
    result["digits"] = train_digits(ctx, "bmuf", data)
    return result


def bmuf_reference(nesterov: bool) -> torch.Tensor:
    """The paper's update, with both workers simulated in this process; the final model
    is the global model W(t), not the block start W_g(t)."""
    base, x, y = fixed_problem()
    workers = [fixed_problem()[0] for _ in range(2)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.2, momentum=0.5) for m in workers]
    w = w_g = vec(base)  # W(0) = W_g(0)
    delta = torch.zeros_like(w)
    done = 0
    while done < STEPS:
        n = min(TAU, STEPS - done)
        locals_ = []
        for r, (m, o) in enumerate(zip(workers, opts, strict=True)):
            torch.nn.utils.vector_to_parameters(w_g.clone(), m.parameters())
            for _ in range(n):
                local_step(m, o, *shard(x, y, r))
            locals_.append(vec(m))
        done += n
        g = sum(locals_) / 2 - w_g  # G(t) = W̄(t) − W_g(t−1)
        delta = ETA * delta + ZETA * g  # Δ(t)
        w = w + delta  # W(t)
        w_g = w + ETA * delta if nesterov else w
    return w


def test_bmuf_blocks_follow_the_paper_and_learn_digits(tmp_path: Path, digits_path: Path) -> None:
    """Each block update (NBM and CBM, momentum and block lr set) equals Chen & Huo's
    formula computed in one process and the model ends on the global model; defaults are
    η = 1 − 1/N, ζ = 1, Nesterov, local momentum reset; two workers learn digits to >= 90 %."""
    values = ok(run_ranks(bmuf_worker, 2, tmp_path, digits_path))
    for nesterov in (True, False):
        want = bmuf_reference(nesterov)
        for value in values:
            got, blocks = value[f"nesterov={nesterov}"]
            assert blocks == 3
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert values[0]["defaults"] == (16, pytest.approx(0.5), 1.0, True, "reset")
    assert values[0]["digits"]["accuracy"] >= 0.90, values[0]["digits"]
