"""The simple gradient noise scale of McCandlish et al. (2018), "An Empirical Model of
Large-Batch Training", appendix A.1.

For a mini-batch gradient G_B of size B, E|G_B|^2 = |G|^2 + tr(Sigma)/B. Measuring
|G_B|^2 at two sizes B_small < B_big gives unbiased estimates

    |G|^2     = (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    tr(Sigma) = (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big)

and B_simple = tr(Sigma) / |G|^2, the batch around which larger batches stop paying:
below it, doubling the batch nearly halves the steps; above it, it saves little.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from alchemist.analysis.stats import Interval


def simple_noise_scale(
    sq_small: float, sq_big: float, b_small: int, b_big: int
) -> tuple[float, float, float]:
    """(|G|^2, tr(Sigma), B_simple) from mean squared gradient norms at two sizes."""
    if not b_small < b_big:
        raise ValueError(f"need b_small < b_big, got {b_small} and {b_big}")
    g2 = (b_big * sq_big - b_small * sq_small) / (b_big - b_small)
    trace = (sq_small - sq_big) / (1 / b_small - 1 / b_big)
    return float(g2), float(trace), float(trace / g2) if g2 > 0 else float("inf")


@dataclass(frozen=True)
class NoiseScale:
    b_simple: Interval
    g2: float
    trace: float
    b_small: int
    b_big: int
    draws: int


def estimate_noise_scale(
    gradient: Callable[[np.ndarray], np.ndarray],
    n: int,
    b_small: int,
    b_big: int,
    draws: int = 64,
    seed: int = 0,
    n_boot: int = 1000,
) -> NoiseScale:
    """B_simple at one point of training, with a bootstrap interval over draws.

    Args:
        gradient: maps an index array (the examples of a batch) to the flat gradient
            of the mean loss over them.
        n: how many training examples there are.
        b_small, b_big: the two batch sizes.
        draws: batches drawn at each size (without replacement inside a batch).
        seed: the sampling seed.
        n_boot: bootstrap draws for the interval (the ratio is biased for few draws).
    """
    rng = np.random.default_rng(seed)

    def norms(b: int) -> np.ndarray:
        return np.array(
            [float(np.sum(gradient(rng.choice(n, b, replace=False)) ** 2)) for _ in range(draws)]
        )

    small, big = norms(b_small), norms(b_big)
    g2, trace, value = simple_noise_scale(small.mean(), big.mean(), b_small, b_big)
    boots = []
    for _ in range(n_boot):
        s = small[rng.integers(0, draws, draws)].mean()
        g = big[rng.integers(0, draws, draws)].mean()
        boots.append(simple_noise_scale(s, g, b_small, b_big)[2])
    lo, hi = np.quantile(np.asarray(boots), [0.025, 0.975])
    return NoiseScale(Interval(value, float(lo), float(hi)), g2, trace, b_small, b_big, draws)


def noise_scale_from_norms(
    sq_small: Sequence[float], sq_big: Sequence[float], b_small: int, b_big: int
) -> float:
    """B_simple from lists of squared norms (their means are used)."""
    return simple_noise_scale(float(np.mean(sq_small)), float(np.mean(sq_big)), b_small, b_big)[2]
