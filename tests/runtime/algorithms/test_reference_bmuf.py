"""``bmuf`` step by step against an independent re-implementation of Chen & Huo (2016).

The reference below is written from the paper's equations in plain torch, on a flat
parameter vector, with the workers' momentum SGD written out by hand (no
``torch.optim``): local steps from ``W_g(t−1)``, then

    G(t) = W̄(t) − W_g(t−1);  Δ(t) = η Δ(t−1) + ζ G(t);  W(t) = W(t−1) + Δ(t)
    W_g(t) = W(t) + η Δ(t)  (Nesterov)  or  W(t)  (classical)

with the local momentum zeroed at each block start (CNTK's default) or kept. Alchemist
runs on 2 real gloo ranks; every rank's parameters after every step, and the final
model (the global model W(T), not the look-ahead W_g(T)), must match.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from algo_harness import RankCtx, ok, run_ranks

from alchemist.runtime import algorithms

TAU, ETA, ZETA, LR, MU = 3, 0.6, 0.8, 0.2, 0.5
WORLD = 2

#: (name, wrap options, steps): each is run on the ranks and by the reference.
CASES: list[tuple[str, dict[str, Any], int]] = [
    ("nesterov-reset", {"nesterov": True, "local_momentum": "reset"}, 2 * TAU + 1),
    ("nesterov-keep", {"nesterov": True, "local_momentum": "keep"}, 2 * TAU + 1),
    ("classical-reset", {"nesterov": False, "local_momentum": "reset"}, 2 * TAU + 1),
    ("classical-keep", {"nesterov": False, "local_momentum": "keep"}, 2 * TAU + 1),
    ("nesterov-reset-whole-blocks", {"nesterov": True, "local_momentum": "reset"}, 2 * TAU),
]


def data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    return torch.randn(16, 5, generator=gen), torch.randint(0, 3, (16,), generator=gen)


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s mini-batch at local step ``step``: 4 of its 8 rows, alternating."""
    x, y = data()
    start = rank * 8 + (step % 2) * 4
    return x[start : start + 4], y[start : start + 4]


def initial() -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def vec(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


# -- on the ranks ---------------------------------------------------------------------------


def run_case(ctx: RankCtx, options: dict[str, Any], steps: int) -> dict[str, Any]:
    model = torch.nn.Linear(5, 3)
    torch.nn.utils.vector_to_parameters(initial(), model.parameters())
    if ctx.rank == 1:
        with torch.no_grad():  # rank 0's initial model must be broadcast
            for p in model.parameters():
                p.add_(1.0)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MU)
    model, opt = algorithms.get("bmuf").wrap(model, opt, ctx, block_size=TAU, **options)
    trajectory = []
    for step in range(steps):
        x, y = batch(ctx.rank, step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        trajectory.append(vec(model))
    opt.finish()
    return {"trajectory": trajectory, "final": vec(model), "blocks": opt.blocks}


def adam_state_after_a_block(ctx: RankCtx, local_momentum: str) -> dict[str, float]:
    """Adam's first moment is what ``reset`` zeroes; its second moment and step stay."""
    model = torch.nn.Linear(5, 3)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model, opt = algorithms.get("bmuf").wrap(
        model, opt, ctx, block_size=2, local_momentum=local_momentum
    )
    for step in range(2):
        x, y = batch(ctx.rank, step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    state = opt.state[model.weight]
    result = {
        "exp_avg": float(state["exp_avg"].abs().sum()),
        "exp_avg_sq": float(state["exp_avg_sq"].abs().sum()),
        "step": float(state["step"]),
    }
    opt.finish()
    return result


def worker(ctx: RankCtx) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, options, steps in CASES:
        result[name] = run_case(ctx, {"block_momentum": ETA, "block_lr": ZETA, **options}, steps)
    result["defaults"] = run_case(ctx, {}, 2 * TAU + 1)
    for mode in ("reset", "keep"):
        result[f"adam-{mode}"] = adam_state_after_a_block(ctx, mode)
    return result


# -- the reference ----------------------------------------------------------------------------


def gradient(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    theta = theta.detach().requires_grad_(True)
    weight, bias = theta[:15].view(3, 5), theta[15:]
    loss = torch.nn.functional.cross_entropy(x @ weight.T + bias, y)
    (grad,) = torch.autograd.grad(loss, theta)
    return grad


def reference(
    steps: int, *, eta: float, zeta: float, nesterov: bool, reset: bool
) -> tuple[list[list[torch.Tensor]], torch.Tensor]:
    """Every worker's parameters after every step, and the final model W(T)."""
    w = w_g = initial()  # W(0) = W_g(0)
    delta = torch.zeros_like(w)
    local = [w_g.clone() for _ in range(WORLD)]
    velocity = [torch.zeros_like(w) for _ in range(WORLD)]
    trajectories: list[list[torch.Tensor]] = [[] for _ in range(WORLD)]

    def close_block() -> None:
        nonlocal w, w_g, delta, local, velocity
        g = sum(local) / WORLD - w_g  # G(t)
        delta = eta * delta + zeta * g  # Δ(t)
        w = w + delta  # W(t)
        w_g = w + eta * delta if nesterov else w  # W_g(t)
        local = [w_g.clone() for _ in range(WORLD)]
        if reset:
            velocity = [torch.zeros_like(w) for _ in range(WORLD)]

    for step in range(steps):
        for r in range(WORLD):
            velocity[r] = MU * velocity[r] + gradient(local[r], *batch(r, step))
            local[r] = local[r] - LR * velocity[r]
        if (step + 1) % TAU == 0:
            close_block()
        for r in range(WORLD):
            trajectories[r].append(local[r])
    if steps % TAU:
        close_block()  # finish(): the incomplete last block
    return trajectories, w


def check(got: dict[str, Any], steps: int, **settings: Any) -> None:
    trajectories, final = reference(steps, **settings)
    assert got["blocks"] == -(-steps // TAU)
    for step, (mine, want) in enumerate(
        zip(got["trajectory"], trajectories[got["rank"]], strict=True)
    ):
        torch.testing.assert_close(mine, want, atol=1e-6, rtol=1e-5, msg=f"step {step + 1}")
    torch.testing.assert_close(got["final"], final, atol=1e-6, rtol=1e-5)


def test_bmuf_matches_the_papers_equations_step_by_step(tmp_path: Path) -> None:
    """Nesterov and classical block momentum, local momentum reset and kept, a last block
    closed by finish() or not: every step of both ranks equals the reference, and the
    model ends on the global model W(T); the defaults are η = 1 − 1/N, ζ = 1, Nesterov,
    reset."""
    values = ok(run_ranks(worker, WORLD, tmp_path, timeout=180))
    for rank, value in enumerate(values):
        for name, options, steps in CASES:
            got = {**value[name], "rank": rank}
            check(
                got,
                steps,
                eta=ETA,
                zeta=ZETA,
                nesterov=options["nesterov"],
                reset=options["local_momentum"] == "reset",
            )
        got = {**value["defaults"], "rank": rank}
        check(got, 2 * TAU + 1, eta=1 - 1 / WORLD, zeta=1.0, nesterov=True, reset=True)
        # with Adam, reset zeroes the first moment only; keep leaves it
        assert value["adam-reset"]["exp_avg"] == 0.0
        assert value["adam-reset"]["exp_avg_sq"] > 0.0
        assert value["adam-reset"]["step"] == 2.0
        assert value["adam-keep"]["exp_avg"] > 0.0


def test_reset_and_keep_give_different_models() -> None:
    """The option matters: the reference with momentum kept differs from the reset one
    (so the step-by-step test above can tell the two apart)."""
    _, reset = reference(2 * TAU + 1, eta=ETA, zeta=ZETA, nesterov=True, reset=True)
    _, keep = reference(2 * TAU + 1, eta=ETA, zeta=ZETA, nesterov=True, reset=False)
    assert (reset - keep).abs().max() > 1e-3
    # and the final model is not the look-ahead point: W(T) and W_g(T) differ by ηΔ(T)
    trajectories, final = reference(2 * TAU, eta=ETA, zeta=ZETA, nesterov=True, reset=True)
    assert (trajectories[0][-1] - final).abs().max() > 1e-3
