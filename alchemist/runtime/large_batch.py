"""Large-batch training: learning-rate scaling, gradual warmup, LARS and LAMB.

- :func:`scale_lr`: the learning rate for a global batch from one tuned at a reference
  batch, with the *linear* rule (Goyal et al. 2017, "Accurate, Large Minibatch SGD":
  multiply by k = B / B_ref) or the *square-root* rule (Krizhevsky 2014; Hoffer et al.
  2017: multiply by √k).
- :func:`gradual_warmup` / :func:`large_batch_schedule`: Goyal et al.'s gradual warmup,
  which starts at the reference rate η and raises it linearly to k·η over the warmup
  steps, then hands over to an optional scheduler. Built from torch's own ``LinearLR``
  and ``SequentialLR``, so it composes with any torch scheduler.
- :class:`LARS` (You, Gitman & Ginsburg 2017, "Large Batch Training of Convolutional
  Networks", Algorithm 1) and :class:`LAMB` (You et al. 2019/ICLR 2020, "Large Batch
  Optimization for Deep Learning: Training BERT in 76 minutes", Algorithm 2). torch
  ships neither; the implementations follow the papers' update rules line by line and
  keep each tensor's last trust ratio in ``optimizer.state[p]["trust_ratio"]``.

"Layer" in both papers is one parameter tensor here (a weight or a bias). To leave a
group out of the layer-wise adaptation (common for biases and normalisation
parameters), give that param group ``"adapt": False``;
:func:`layerwise_param_groups` builds the usual two groups from a model. A group that
is not adapted gets no weight decay unless a weight decay is given for it (in the group,
or to the optimizer's constructor). In LARS it steps at ``lr · trust_coefficient``, the
scale of the adapted layers' rates, not at the bare global rate (see :class:`LARS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR, LinearLR, LRScheduler, SequentialLR

from alchemist.errors import SpecError

SCALING_RULES = ("linear", "sqrt", "none")


def scale_factor(batch_size: int, reference_batch: int = 256, rule: str = "linear") -> float:
    """The factor a learning rate tuned at ``reference_batch`` is multiplied by.

    Args:
        batch_size: the global batch (all workers together).
        reference_batch: the batch the base learning rate was tuned for.
        rule: ``linear`` (k = B / B_ref), ``sqrt`` (√k) or ``none`` (1).

    Raises:
        SpecError: an unknown rule or a non-positive batch.
    """
    if rule not in SCALING_RULES:
        raise SpecError(f"learning-rate scaling rule {rule!r} is unknown; use linear, sqrt or none")
    if batch_size <= 0 or reference_batch <= 0:
        raise SpecError(
            f"batch sizes must be positive, got batch_size={batch_size}, reference_batch={reference_batch}"
        )
    k = batch_size / reference_batch
    return {"linear": k, "sqrt": math.sqrt(k), "none": 1.0}[rule]


def scale_lr(
    base_lr: float, batch_size: int, reference_batch: int = 256, rule: str = "linear"
) -> float:
    """``base_lr`` (tuned at ``reference_batch``) scaled to ``batch_size`` by ``rule``.

    >>> scale_lr(0.1, 8192, 256)        # Goyal et al.: 0.1 per 256 -> 3.2 at 8k
    3.2
    """
    return base_lr * scale_factor(batch_size, reference_batch, rule)


def gradual_warmup(
    optimizer: torch.optim.Optimizer,
    warmup_steps: int,
    start_factor: float,
    after: LRScheduler | None = None,
) -> LRScheduler:
    """Raise every group's lr linearly from ``start_factor``·lr to lr over ``warmup_steps``.

    The learning rate at step ``t`` (the number of ``scheduler.step()`` calls so far) is
    ``lr · (s + (1 − s) · min(t, T) / T)`` with ``s = start_factor``, ``T =
    warmup_steps``; Goyal et al. use ``s = 1/k`` so warmup starts at the reference rate.
    Afterwards ``after`` (built on the same optimizer) takes over, if given.

    Raises:
        SpecError: ``warmup_steps`` < 0 or ``start_factor`` not in (0, 1].
    """
    if warmup_steps < 0:
        raise SpecError(f"warmup_steps must be 0 or more, got {warmup_steps}")
    if not 0 < start_factor <= 1:
        raise SpecError(f"warmup start_factor must be in (0, 1], got {start_factor}")
    if warmup_steps == 0:
        return after if after is not None else LambdaLR(optimizer, lambda _step: 1.0)
    warm = LinearLR(optimizer, start_factor=start_factor, end_factor=1.0, total_iters=warmup_steps)
    if after is None:
        return warm
    return SequentialLR(optimizer, [warm, after], milestones=[warmup_steps])


def warmup_length(
    batch_size: int, reference_batch: int = 256, rule: str = "linear", warmup_steps: int = 0
) -> int:
    """The steps :func:`large_batch_schedule` warms up for: ``warmup_steps`` if k > 1, else 0."""
    return warmup_steps if scale_factor(batch_size, reference_batch, rule) > 1 else 0


def large_batch_schedule(
    optimizer: torch.optim.Optimizer,
    *,
    base_lr: float,
    batch_size: int,
    reference_batch: int = 256,
    rule: str = "linear",
    warmup_steps: int = 0,
    after: Callable[[torch.optim.Optimizer], LRScheduler] | None = None,
) -> LRScheduler:
    """Set the scaled learning rate on ``optimizer`` and return its warmup scheduler.

    Every group's lr becomes ``scale_lr(base_lr, batch_size, reference_batch, rule)``;
    with ``warmup_steps`` > 0 and a factor k > 1, the lr starts at ``base_lr`` and
    reaches k·``base_lr`` after ``warmup_steps`` scheduler steps (Goyal et al.'s gradual
    warmup). Call ``scheduler.step()`` once per optimizer step.

    Args:
        after: builds the scheduler used after warmup from the optimizer (e.g.
            ``lambda o: CosineAnnealingLR(o, T_max=...)``), created once the lr is set.
            It takes over after ``warmup_steps`` steps when k > 1, and from the first
            step when k ≤ 1 (no warmup then): size it with :func:`warmup_length`.
    """
    k = scale_factor(batch_size, reference_batch, rule)
    for group in optimizer.param_groups:
        group["lr"] = base_lr * k
        group["initial_lr"] = base_lr * k
    then = after(optimizer) if after is not None else None
    steps = warmup_length(batch_size, reference_batch, rule, warmup_steps)
    return gradual_warmup(optimizer, steps, min(1.0, 1.0 / k), then)


#: Module types whose parameters are normalisation parameters (scales and shifts).
_NORM_TYPES: tuple[type[torch.nn.Module], ...] = (
    torch.nn.modules.batchnorm._NormBase,  # BatchNorm*, SyncBatchNorm, InstanceNorm*
    torch.nn.LayerNorm,
    torch.nn.GroupNorm,
    torch.nn.RMSNorm,
)


def layerwise_param_groups(
    model: torch.nn.Module, weight_decay: float | None = None, **excluded: Any
) -> list[dict[str, Any]]:
    """``model``'s parameters as the usual two param groups for :class:`LARS` / :class:`LAMB`.

    Weights (every parameter of two or more dimensions that is not a bias and not in a
    normalisation layer) get weight decay and the layer-wise adaptation. Biases and
    normalisation parameters (every parameter with fewer than two dimensions, every one
    named ``bias``, every one of a BatchNorm, InstanceNorm, LayerNorm, GroupNorm or
    RMSNorm) get neither: ``"weight_decay": 0.0, "adapt": False``, as in You et al.'s
    and most later large-batch recipes. Parameters that do not require a gradient are
    left out; an empty group is left out.

    >>> opt = LARS(layerwise_param_groups(model, weight_decay=5e-4), lr=2.0)  # doctest: +SKIP

    Args:
        model: the model (its modules tell which parameters are normalisation ones).
        weight_decay: the weights' weight decay; None leaves it to the optimizer's
            default.
        **excluded: further settings of the biases-and-norms group, e.g.
            ``trust_coefficient=0.01`` gives them their own LARS rate ``lr · 0.01``,
            which follows the same schedule as the weights' rate.

    Returns:
        ``[{"params": weights, "adapt": True, ...}, {"params": others, "adapt": False,
        "weight_decay": 0.0, ...}]``. The groups also suit torch's own optimizers
        (``AdamW`` keeps and ignores ``adapt``).

    Raises:
        SpecError: ``weight_decay`` < 0, or ``excluded`` sets ``params``,
            ``weight_decay`` or ``adapt``.
    """
    if weight_decay is not None and weight_decay < 0:
        raise SpecError(f"weight_decay must be 0 or more, got {weight_decay}")
    clash = sorted({"params", "weight_decay", "adapt"} & set(excluded))
    if clash:
        raise SpecError(
            f"layerwise_param_groups sets {', '.join(clash)} of the excluded group itself;"
            " edit the returned groups to change it"
        )
    in_norm = {
        id(p)
        for module in model.modules()
        if isinstance(module, _NORM_TYPES)
        for p in module.parameters(recurse=False)
    }
    adapted: list[torch.nn.Parameter] = []
    plain: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_bias = name.rsplit(".", 1)[-1] == "bias"
        (plain if p.ndim < 2 or is_bias or id(p) in in_norm else adapted).append(p)
    groups: list[dict[str, Any]] = []
    if adapted:
        group: dict[str, Any] = {"params": adapted, "adapt": True}
        if weight_decay is not None:
            group["weight_decay"] = weight_decay
        groups.append(group)
    if plain:
        groups.append({"params": plain, "adapt": False, "weight_decay": 0.0, **excluded})
    return groups


def _resolve_weight_decay(group: dict[str, Any], adapted_default: float) -> None:
    """An unset (None) weight decay: ``adapted_default`` in an adapted group, else 0."""
    if group["weight_decay"] is None:
        group["weight_decay"] = adapted_default if group["adapt"] else 0.0
    elif group["weight_decay"] < 0:
        raise SpecError(f"weight_decay must be 0 or more, got {group['weight_decay']}")


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, or 1 where either is 0 (the update is then left unscaled)."""
    ok = (numerator > 0) & (denominator > 0)
    return torch.where(
        ok, numerator / torch.where(ok, denominator, 1.0), torch.ones_like(numerator)
    )


class LARS(torch.optim.Optimizer):
    r"""Layer-wise Adaptive Rate Scaling (You, Gitman & Ginsburg 2017, Algorithm 1).

    For each layer (parameter tensor) ``w`` with gradient ``g``::

        λ = η · ‖w‖ / (‖g‖ + β‖w‖ + eps)      # local lr; η trust coefficient, β weight decay
        v ← m · v + γ · λ · (g + β w)         # γ the global lr (the group's lr)
        w ← w − v

    ``λ`` is stored as ``state[p]["trust_ratio"]``. Where ``‖w‖`` or ``‖g‖`` is 0 (e.g.
    a zero-initialised bias) λ is undefined and 1 is used, as in NVIDIA's LARC.

    Groups with ``adapt=False`` (biases, norms: see :func:`layerwise_param_groups`) drop
    the norm ratio but keep the coefficient: λ = η, so they take momentum SGD steps at
    ``γ · η``. The global rate γ of LARS is not an SGD rate: it is meant to be multiplied
    by λ (η = 0.001 and ‖w‖/‖g‖ of order 1–100), and linear scaling takes it far above
    any rate plain SGD survives (1.0 at batch 32 is 44.9 at batch 1436). ``γ · η`` keeps
    the excluded parameters on the adapted layers' scale and on the same schedule; give
    their group its own ``trust_coefficient`` to set their rate apart. Their weight decay
    is 0 unless given (see ``weight_decay``).

    Args:
        params: parameters or param groups.
        lr: γ, the global learning rate (schedule it with a torch scheduler).
        momentum: m (paper: 0.9).
        weight_decay: β (paper: 0.0005 for AlexNet-BN, 0.0001 for ResNet). None (the
            default): 0.0005 in adapted groups and 0 in groups with ``adapt=False``; a
            value given here or in a group applies to that group as given.
        trust_coefficient: η (paper: 0.001).
        eps: added to the denominator for stability (0 = the paper's formula).
        adapt: the default of the groups' ``adapt``.
    """

    #: β where none is given, in adapted groups (You et al.'s AlexNet-BN setting).
    DEFAULT_WEIGHT_DECAY = 0.0005

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 0.1,
        momentum: float = 0.9,
        weight_decay: float | None = None,
        trust_coefficient: float = 0.001,
        eps: float = 0.0,
        adapt: bool = True,
    ) -> None:
        negative_decay = weight_decay is not None and weight_decay < 0
        if lr < 0 or momentum < 0 or negative_decay or trust_coefficient <= 0 or eps < 0:
            raise SpecError(
                "LARS needs lr, momentum, weight_decay, eps >= 0 and trust_coefficient > 0"
            )
        defaults = dict(
            lr=lr,
            momentum=momentum,
            weight_decay=weight_decay,
            trust_coefficient=trust_coefficient,
            eps=eps,
            adapt=adapt,
        )
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        _resolve_weight_decay(self.param_groups[-1], self.DEFAULT_WEIGHT_DECAY)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, m, beta = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if group["adapt"]:
                    w_norm = torch.linalg.vector_norm(p)
                    g_norm = torch.linalg.vector_norm(g)
                    trust = _ratio(
                        group["trust_coefficient"] * w_norm, g_norm + beta * w_norm + group["eps"]
                    )
                    trust = torch.where((w_norm > 0) & (g_norm > 0), trust, torch.ones_like(trust))
                else:
                    trust = torch.full(
                        (), group["trust_coefficient"], device=p.device, dtype=p.dtype
                    )
                state["trust_ratio"] = trust
                update = g.add(p, alpha=beta).mul_(trust * lr)
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = update.clone()
                else:
                    state["momentum_buffer"].mul_(m).add_(update)
                p.sub_(state["momentum_buffer"])
        return loss


class LAMB(torch.optim.Optimizer):
    r"""Layer-wise Adaptive Moments for Batch training (You et al. 2019, Algorithm 2).

    For each layer (parameter tensor) ``x`` with gradient ``g`` at step ``t``::

        m ← β1 m + (1 − β1) g ;   v ← β2 v + (1 − β2) g²
        m̂ = m / (1 − β1^t) ;      v̂ = v / (1 − β2^t)          # bias_correction=True
        r = m̂ / (√v̂ + ε)
        x ← x − η · φ(‖x‖) / ‖r + λx‖ · (r + λx)

    with φ the identity, or ``min(‖x‖, clamp_value)`` when ``clamp_value`` is set (the
    paper's φ(z) = min(max(z, γ_l), γ_u) with γ_l = 0). The trust ratio
    ``φ(‖x‖) / ‖r + λx‖`` is stored as ``state[p]["trust_ratio"]``; where either norm
    is 0 it is 1. Groups with ``adapt=False`` use 1: Adam steps at η (LAMB's η is an
    Adam rate, so unlike in LARS that is not a blow-up), with no weight decay unless
    given (see ``weight_decay``).

    Args:
        params: parameters or param groups.
        lr: η (schedule it with a torch scheduler).
        betas: (β1, β2) (paper: 0.9, 0.999).
        eps: ε (paper: 1e-6).
        weight_decay: λ (paper: 0.01). None (the default): 0.01 in adapted groups and 0
            in groups with ``adapt=False``; a value given here or in a group applies to
            that group as given.
        bias_correction: divide the moments by (1 − β^t) as in the paper's Algorithm 2.
        clamp_value: upper bound of φ, or None.
        adapt: the default of the groups' ``adapt``.
    """

    #: λ where none is given, in adapted groups (You et al.'s BERT setting).
    DEFAULT_WEIGHT_DECAY = 0.01

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float | None = None,
        bias_correction: bool = True,
        clamp_value: float | None = None,
        adapt: bool = True,
    ) -> None:
        negative_decay = weight_decay is not None and weight_decay < 0
        if lr < 0 or eps < 0 or negative_decay or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise SpecError("LAMB needs lr, eps, weight_decay >= 0 and betas in [0, 1)")
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            bias_correction=bias_correction,
            clamp_value=clamp_value,
            adapt=adapt,
        )
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        _resolve_weight_decay(self.param_groups[-1], self.DEFAULT_WEIGHT_DECAY)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                if group["bias_correction"]:
                    m_hat = m / (1 - beta1**t)
                    v_hat = v / (1 - beta2**t)
                else:
                    m_hat, v_hat = m, v
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                if group["adapt"]:
                    x_norm = torch.linalg.vector_norm(p)
                    if group["clamp_value"] is not None:
                        x_norm = x_norm.clamp(max=group["clamp_value"])
                    trust = _ratio(x_norm, torch.linalg.vector_norm(update))
                else:
                    trust = torch.ones((), device=p.device, dtype=p.dtype)
                state["trust_ratio"] = trust
                p.sub_(update.mul_(trust * group["lr"]))
        return loss


__all__ = [
    "LAMB",
    "LARS",
    "SCALING_RULES",
    "gradual_warmup",
    "large_batch_schedule",
    "layerwise_param_groups",
    "scale_factor",
    "scale_lr",
]
