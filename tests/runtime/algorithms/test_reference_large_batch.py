"""LARS and LAMB step by step against independent re-implementations of the papers.

The references below are written from the papers' equations in plain torch, one
tensor at a time, on copies of a tiny model's parameters (gradients by autograd through
``torch.func.functional_call``, no optimizer): LARS is You, Gitman & Ginsburg (2017),
Algorithm 1; LAMB is You et al. (2019), Algorithm 2. The parameters come in the groups
:func:`layerwise_param_groups` builds (weights adapted with weight decay; biases and
norms neither), and the rate is scheduled as in a large-batch run, so every step
checks the adapted rule, the excluded rule and the schedule together.
"""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

from alchemist.errors import SpecError
from alchemist.runtime.large_batch import (
    LAMB,
    LARS,
    large_batch_schedule,
    layerwise_param_groups,
)

STEPS = 5


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Tanh(), torch.nn.Linear(5, 3)
    )


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)


def reference_grads(
    model: torch.nn.Module, params: dict[str, torch.Tensor], step: int
) -> dict[str, torch.Tensor]:
    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    x, y = batch(step)
    loss = torch.nn.functional.cross_entropy(functional_call(model, leaves, (x,)), y)
    grads = torch.autograd.grad(loss, list(leaves.values()))
    return dict(zip(leaves, grads, strict=True))


def run(
    model: torch.nn.Module, opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LRScheduler
) -> list[tuple[float, dict[str, torch.Tensor]]]:
    """Alchemist's optimizer: (the rate used, the parameters after) at every step."""
    out = []
    for step in range(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        lr = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        out.append((lr, {k: v.detach().clone() for k, v in model.named_parameters()}))
    return out


def is_excluded(name: str) -> bool:
    """Biases and the LayerNorm's scale (module "1") are the excluded parameters here."""
    return name.endswith("bias") or name.startswith("1.")


def test_layerwise_groups_split_weights_from_biases_and_norms() -> None:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 2, 3),
        torch.nn.BatchNorm2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
        torch.nn.LayerNorm(4),
        torch.nn.GroupNorm(2, 4),
        torch.nn.Linear(4, 2, bias=False),
    )
    model[6].weight.requires_grad_(False)  # frozen: left out
    weights, others = layerwise_param_groups(model, weight_decay=1e-4, trust_coefficient=0.02)
    names = {id(p): n for n, p in model.named_parameters()}
    assert [names[id(p)] for p in weights["params"]] == ["0.weight", "3.weight"]
    assert sorted(names[id(p)] for p in others["params"]) == [
        "0.bias", "1.bias", "1.weight", "3.bias", "4.bias", "4.weight", "5.bias", "5.weight",
    ]  # fmt: skip
    assert (weights["adapt"], weights["weight_decay"]) == (True, 1e-4)
    assert (others["adapt"], others["weight_decay"], others["trust_coefficient"]) == (
        False,
        0.0,
        0.02,
    )
    # weight_decay=None leaves the adapted group's decay to the optimizer's default
    groups = layerwise_param_groups(model)
    assert "weight_decay" not in groups[0]
    opt = LARS(groups, lr=1.0)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.0005, 0.0]
    assert [g["weight_decay"] for g in LAMB(layerwise_param_groups(model)).param_groups] == [
        0.01,
        0.0,
    ]
    # a model of biases only: one group, no empty one
    assert len(layerwise_param_groups(torch.nn.LayerNorm(3))) == 1


def test_layerwise_groups_refuse_what_they_set_themselves() -> None:
    with pytest.raises(SpecError, match="sets adapt, params of the excluded group"):
        layerwise_param_groups(tiny_model(), adapt=True, params=[])
    with pytest.raises(SpecError, match="weight_decay must be 0 or more"):
        layerwise_param_groups(tiny_model(), weight_decay=-1.0)


def test_unadapted_groups_get_no_weight_decay_unless_it_is_given() -> None:
    w, b, c = (torch.nn.Parameter(torch.ones(2, 2)) for _ in range(3))
    opt = LARS(
        [
            {"params": [w]},
            {"params": [b], "adapt": False},
            {"params": [c], "adapt": False, "weight_decay": 0.3},  # set for the group
        ]
    )
    assert [g["weight_decay"] for g in opt.param_groups] == [0.0005, 0.0, 0.3]
    given = LAMB([{"params": [w]}, {"params": [b], "adapt": False}], weight_decay=0.2)
    assert [g["weight_decay"] for g in given.param_groups] == [0.2, 0.2]
    with pytest.raises(SpecError, match="weight_decay must be 0 or more"):
        LARS([{"params": [w], "weight_decay": -0.1}])


def lars_reference(
    model: torch.nn.Module, lrs: list[float], *, m: float, beta: float, eta: float
) -> list[dict[str, torch.Tensor]]:
    """You, Gitman & Ginsburg (2017), Algorithm 1, per tensor; excluded tensors: λ = η
    (no norm ratio) and no weight decay."""
    w = {k: v.detach().clone() for k, v in model.named_parameters()}
    v = {k: torch.zeros_like(t) for k, t in w.items()}
    out = []
    for step, gamma in enumerate(lrs):
        g = reference_grads(model, w, step)
        for k in w:
            if is_excluded(k):
                local_lr, decay = torch.tensor(eta), 0.0
            else:
                local_lr = eta * w[k].norm() / (g[k].norm() + beta * w[k].norm())
                decay = beta
            v[k] = m * v[k] + gamma * local_lr * (g[k] + decay * w[k])
            w[k] = w[k] - v[k]
        out.append({k: t.clone() for k, t in w.items()})
    return out


def test_lars_follows_you_et_al_2017_at_a_large_batch_rate() -> None:
    """The issue's setting: global rate 1.0 at batch 32 scaled to batch 1436 (γ = 44.9)
    with Goyal warmup; the weights follow Algorithm 1 and the biases and the norm's
    scale step at γη with no weight decay, not at the bare 44.9."""
    model = tiny_model()
    m, beta, eta = 0.9, 5e-4, 0.001
    opt = LARS(
        layerwise_param_groups(model, weight_decay=beta),
        lr=1.0,
        momentum=m,
        trust_coefficient=eta,
    )
    sched = large_batch_schedule(
        opt, base_lr=1.0, batch_size=1436, reference_batch=32, warmup_steps=3
    )
    reference_model = tiny_model()
    got = run(model, opt, sched)
    lrs = [lr for lr, _ in got]
    assert lrs[0] == pytest.approx(1.0) and lrs[-1] == pytest.approx(44.875)
    want = lars_reference(reference_model, lrs, m=m, beta=beta, eta=eta)
    for step, ((_, mine), ref) in enumerate(zip(got, want, strict=True)):
        for k in ref:
            torch.testing.assert_close(mine[k], ref[k], rtol=1e-5, atol=1e-6, msg=f"{k} @ {step}")
    # the excluded tensors moved by about γη|g|, nowhere near γ|g| = 44.9|g|
    final = dict(model.named_parameters())
    start = dict(tiny_model().named_parameters())
    assert (final["0.bias"] - start["0.bias"]).abs().max() < 1.0


def lamb_reference(
    model: torch.nn.Module, lrs: list[float], *, b1: float, b2: float, eps: float, wd: float
) -> list[dict[str, torch.Tensor]]:
    """You et al. (2019), Algorithm 2, per tensor (φ the identity); excluded tensors:
    trust ratio 1 and no weight decay."""
    x = {k: v.detach().clone() for k, v in model.named_parameters()}
    m = {k: torch.zeros_like(t) for k, t in x.items()}
    v = {k: torch.zeros_like(t) for k, t in x.items()}
    out = []
    for step, eta in enumerate(lrs):
        t = step + 1
        g = reference_grads(model, x, step)
        for k in x:
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
            r = (m[k] / (1 - b1**t)) / ((v[k] / (1 - b2**t)).sqrt() + eps)
            if is_excluded(k):
                x[k] = x[k] - eta * r
            else:
                u = r + wd * x[k]
                x[k] = x[k] - eta * x[k].norm() / u.norm() * u
        out.append({k: t_.clone() for k, t_ in x.items()})
    return out


def test_lamb_follows_you_et_al_2019_with_excluded_biases_and_norms() -> None:
    model = tiny_model()
    b1, b2, eps, wd = 0.9, 0.999, 1e-6, 0.01
    opt = LAMB(layerwise_param_groups(model, weight_decay=wd), lr=0.01, betas=(b1, b2), eps=eps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    reference_model = tiny_model()
    got = run(model, opt, sched)
    lrs = [lr for lr, _ in got]
    assert lrs == pytest.approx([0.01 / (1 + s) for s in range(STEPS)])
    want = lamb_reference(reference_model, lrs, b1=b1, b2=b2, eps=eps, wd=wd)
    for step, ((_, mine), ref) in enumerate(zip(got, want, strict=True)):
        for k in ref:
            torch.testing.assert_close(mine[k], ref[k], rtol=1e-5, atol=1e-6, msg=f"{k} @ {step}")
