"""Learning-rate scaling, gradual warmup, LARS and LAMB against the papers' formulas."""

from __future__ import annotations

import pytest
import torch

from alchemist.errors import SpecError
from alchemist.runtime.large_batch import (
    LAMB,
    LARS,
    gradual_warmup,
    large_batch_schedule,
    scale_lr,
    warmup_length,
)


def test_scaling_rules_from_a_reference_batch() -> None:
    assert scale_lr(0.1, 8192, 256) == pytest.approx(3.2)  # Goyal et al.: k = 32
    assert scale_lr(0.1, 1024, 256, rule="sqrt") == pytest.approx(0.2)  # √4 = 2
    assert scale_lr(0.1, 64, 256) == pytest.approx(0.025)
    assert scale_lr(0.1, 1024, 256, rule="none") == pytest.approx(0.1)
    with pytest.raises(SpecError, match="linear, sqrt or none"):
        scale_lr(0.1, 512, rule="cubic")


def lrs(
    scheduler: torch.optim.lr_scheduler.LRScheduler, opt: torch.optim.Optimizer, n: int
) -> list[float]:
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return out


def test_goyal_warmup_rises_linearly_from_the_reference_rate_to_k_times_it() -> None:
    """Batch 1024 = 4 × 256: lr goes 0.1 → 0.4 linearly over 4 steps, then stays."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=123.0)
    sched = large_batch_schedule(
        opt, base_lr=0.1, batch_size=1024, reference_batch=256, warmup_steps=4
    )
    assert lrs(sched, opt, 7) == pytest.approx([0.1, 0.175, 0.25, 0.325, 0.4, 0.4, 0.4])


def test_warmup_then_hands_over_to_another_scheduler() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    after = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    sched = gradual_warmup(opt, warmup_steps=2, start_factor=0.5, after=after)
    assert lrs(sched, opt, 6) == pytest.approx([0.5, 0.75, 1.0, 1.0, 0.5, 0.5])


def test_no_warmup_below_the_reference_batch() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = large_batch_schedule(
        opt, base_lr=0.1, batch_size=128, reference_batch=256, warmup_steps=5
    )
    assert lrs(sched, opt, 3) == pytest.approx([0.05, 0.05, 0.05])


@pytest.mark.parametrize("batch, warm", [(128, 0), (256, 0), (1024, 5)])
def test_the_scheduler_after_warmup_starts_after_warmup_length(batch: int, warm: int) -> None:
    """Sizing ``after`` with warmup_length gives the same total schedule at every batch."""
    total = 12
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    assert warmup_length(batch, 256, "linear", warmup_steps=5) == warm
    sched = large_batch_schedule(
        opt,
        base_lr=0.1,
        batch_size=batch,
        warmup_steps=5,
        after=lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=total - warm),
    )
    seen = lrs(sched, opt, total + 1)
    peak = 0.1 * batch / 256
    assert seen[warm] == pytest.approx(peak)  # the cosine starts at the peak ...
    assert seen[total] == pytest.approx(0.0, abs=1e-9)  # ... and ends at the last step
    assert seen == sorted(seen[:warm], reverse=False) + sorted(seen[warm:], reverse=True)


def _problem() -> tuple[torch.nn.Parameter, torch.nn.Parameter, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    w = torch.nn.Parameter(torch.randn(4, 3, generator=gen))
    b = torch.nn.Parameter(torch.zeros(3))  # a zero-initialised bias: ‖w‖ = 0
    x = torch.randn(5, 4, generator=gen)
    return w, b, x


def _grads(w: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> None:
    ((x @ w + b) ** 2).sum().backward()


def test_lars_trust_ratio_and_update_follow_you_et_al_2017() -> None:
    """λ = η‖w‖/(‖g‖ + β‖w‖); v ← m v + γ λ (g + β w); w ← w − v (Algorithm 1)."""
    lr, m, beta, eta = 0.5, 0.9, 0.01, 0.02
    w, b, x = _problem()
    opt = LARS([w, b], lr=lr, momentum=m, weight_decay=beta, trust_coefficient=eta)
    v_ref = torch.zeros_like(w)
    w_ref = w.detach().clone()
    for _ in range(3):
        opt.zero_grad()
        _grads(w, b, x)
        g = w.grad.detach().clone()
        lam = eta * w_ref.norm() / (g.norm() + beta * w_ref.norm())
        v_ref = m * v_ref + lr * lam * (g + beta * w_ref)
        w_ref = w_ref - v_ref
        opt.step()
        assert float(opt.state[w]["trust_ratio"]) == pytest.approx(float(lam), rel=1e-5)
        torch.testing.assert_close(w.detach(), w_ref, rtol=1e-5, atol=1e-6)


def test_lars_zero_norm_layer_uses_ratio_one() -> None:
    b = torch.nn.Parameter(torch.zeros(3))
    opt = LARS([b], lr=0.1, momentum=0.0, weight_decay=0.0)
    b.grad = torch.ones(3)
    opt.step()
    assert float(opt.state[b]["trust_ratio"]) == 1.0
    torch.testing.assert_close(b.detach(), torch.full((3,), -0.1))


def test_lamb_trust_ratio_and_update_follow_you_et_al_2019() -> None:
    """m, v Adam moments with bias correction; r = m̂/(√v̂+ε); x ← x − η ‖x‖/‖r+λx‖ (r+λx)."""
    lr, (b1, b2), eps, wd = 0.05, (0.9, 0.999), 1e-6, 0.01
    w, b, x = _problem()
    opt = LAMB([w], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    m = torch.zeros_like(w)
    v = torch.zeros_like(w)
    x_ref = w.detach().clone()
    for t in range(1, 4):
        opt.zero_grad()
        _grads(w, b, x)
        g = w.grad.detach().clone()
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        r = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps)
        u = r + wd * x_ref
        ratio = x_ref.norm() / u.norm()
        x_ref = x_ref - lr * ratio * u
        opt.step()
        assert float(opt.state[w]["trust_ratio"]) == pytest.approx(float(ratio), rel=1e-5)
        torch.testing.assert_close(w.detach(), x_ref, rtol=1e-5, atol=1e-6)


def test_lamb_clamps_phi_and_excluded_groups_are_not_adapted() -> None:
    w = torch.nn.Parameter(torch.full((4,), 10.0))  # ‖w‖ = 20
    opt = LAMB([w], lr=0.1, weight_decay=0.0, clamp_value=2.0)
    w.grad = torch.ones(4)
    opt.step()
    # first step: r = g/(|g| + ε) ≈ 1 everywhere, ‖r‖ ≈ 2, φ = min(20, 2) = 2
    assert float(opt.state[w]["trust_ratio"]) == pytest.approx(1.0, rel=1e-4)
    torch.testing.assert_close(w.detach(), torch.full((4,), 9.9))
    u = torch.nn.Parameter(torch.full((4,), 10.0))
    opt2 = LARS([{"params": [u], "adapt": False}], lr=0.1, momentum=0.0, trust_coefficient=0.5)
    u.grad = torch.ones(4)
    opt2.step()
    # not adapted: λ = η (no norm ratio), no weight decay by default: 10 − 0.1·0.5·1
    assert float(opt2.state[u]["trust_ratio"]) == 0.5
    assert opt2.param_groups[0]["weight_decay"] == 0.0
    torch.testing.assert_close(u.detach(), torch.full((4,), 9.95))
