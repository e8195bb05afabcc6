"""``easgd``'s moving rate under a learning-rate schedule, against the paper's equations.

Zhang, Choromanska & LeCun (2015) write the moving rate as α = η ρ. The reference
below re-implements their asynchronous EASGD (Algorithm 1) in plain torch on a flat
parameter vector, with plain SGD local steps written out by hand, and with ρ held fixed
while η is scheduled: an exchange after a local step taken at rate η_t uses
α_t = α · min(1, η_t / η_0). Alchemist runs on 2 real gloo ranks with the exchanges put
in a fixed order; each worker and the centre must match after every round.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from algo_harness import RankCtx, ok, run_ranks

from alchemist.runtime import algorithms

TAU, ALPHA, LR0, ROUNDS, WORLD = 2, 0.4, 0.3, 2, 2

#: name → (the factor of LR0 at local step s (0-based), follow_lr)
CASES: dict[str, tuple[Callable[[int], float], bool]] = {
    "decay": (lambda s: 1.0 / (1 + s), True),
    "decay-fixed-alpha": (lambda s: 1.0 / (1 + s), False),
    "above-base": (lambda s: 2.0, True),  # a rate above its base never pulls more than α
}


def data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    return torch.randn(8, 5, generator=gen), torch.randint(0, 3, (8,), generator=gen)


def shard(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = data()
    return x[rank * 4 : (rank + 1) * 4], y[rank * 4 : (rank + 1) * 4]


def initial() -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def vec(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


# -- on the ranks ---------------------------------------------------------------------------


def run_case(ctx: RankCtx, factor: Callable[[int], float], follow_lr: bool) -> dict[str, Any]:
    model = torch.nn.Linear(5, 3)
    torch.nn.utils.vector_to_parameters(initial(), model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=LR0)
    model, opt = algorithms.get("easgd").wrap(
        model, opt, ctx, moving_rate=ALPHA, communication_period=TAU, follow_lr=follow_lr
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)  # after wrap: initial_lr = LR0
    x, y = shard(ctx.rank)
    rounds = []
    for _ in range(ROUNDS):
        for r in range(WORLD):  # exchanges in a fixed order: rank 0, then rank 1
            if ctx.rank == r:
                for _ in range(TAU):  # the exchange happens inside the τ-th step
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    opt.step()
                    sched.step()
            dist.barrier()
        rounds.append((vec(model), opt.centre(), opt.last_moving_rate))
        dist.barrier()  # every rank has read the centre before the next round changes it
    opt.finish()
    return {"rounds": rounds}


def worker(ctx: RankCtx) -> dict[str, Any]:
    return {name: run_case(ctx, factor, follow) for name, (factor, follow) in CASES.items()}


# -- the reference ----------------------------------------------------------------------------


def gradient(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    theta = theta.detach().requires_grad_(True)
    weight, bias = theta[:15].view(3, 5), theta[15:]
    loss = torch.nn.functional.cross_entropy(x @ weight.T + bias, y)
    (grad,) = torch.autograd.grad(loss, theta)
    return grad


def reference(
    factor: Callable[[int], float], follow_lr: bool
) -> list[list[tuple[torch.Tensor, torch.Tensor, float]]]:
    """Per round, per worker: (its parameters, the centre, α used) after that round."""
    rho = ALPHA / LR0  # the elastic coefficient, fixed: α = η ρ at the base rate
    centre = initial()
    workers = [initial() for _ in range(WORLD)]
    steps = [0] * WORLD
    out = []
    for _ in range(ROUNDS):
        used = [0.0] * WORLD
        for r in range(WORLD):
            x, y = shard(r)
            for _ in range(TAU):
                eta = LR0 * factor(steps[r])
                workers[r] = workers[r] - eta * gradient(workers[r], x, y)
                steps[r] += 1
            alpha = min(ALPHA, eta * rho) if follow_lr else ALPHA
            diff = alpha * (workers[r] - centre)  # Algorithm 1, lines 5-8
            workers[r] = workers[r] - diff
            centre = centre + diff
            used[r] = alpha
        out.append([(workers[r].clone(), centre.clone(), used[r]) for r in range(WORLD)])
    return out


def test_easgd_moving_rate_follows_the_learning_rate(tmp_path: Path) -> None:
    """α_t = α · min(1, η_t/η_0) with follow_lr (the default), α without; every worker
    and the centre match the reference after every round."""
    values = ok(run_ranks(worker, WORLD, tmp_path, timeout=180))
    for name, (factor, follow) in CASES.items():
        want = reference(factor, follow)
        for rank, value in enumerate(values):
            for i, (params, centre, alpha) in enumerate(value[name]["rounds"]):
                ref_params, _, ref_alpha = want[i][rank]
                assert alpha == pytest.approx(ref_alpha, rel=1e-9), (name, rank, i)
                torch.testing.assert_close(params, ref_params, atol=1e-6, rtol=1e-5)
                # the centre after the whole round (both exchanges)
                torch.testing.assert_close(centre, want[i][-1][1], atol=1e-6, rtol=1e-5)
    # the schedule really changed α: at the 2nd and 4th step the rate is η0/2 and η0/4
    decay = reference(*CASES["decay"])
    assert [decay[i][0][2] for i in range(ROUNDS)] == pytest.approx([ALPHA / 2, ALPHA / 4])
