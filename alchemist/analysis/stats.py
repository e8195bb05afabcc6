"""Intervals and tests for paired seeded experiments.

An accuracy measured on a finite test set has two sources of error: the seed (model
initialisation, data order) and the test examples themselves (360 digits images give a
standard error of about 0.5-1 point). ``bootstrap_accuracy`` and ``bootstrap_paired``
resample both: seeds with replacement, and test examples with replacement, the same
examples for both arms of a paired comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _stats

ArrayLike = Sequence[float] | np.ndarray


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided interval at ``level``."""

    value: float
    lo: float
    hi: float
    level: float = 0.95

    def contains(self, x: float) -> bool:
        return self.lo <= x <= self.hi

    def excludes_zero(self) -> bool:
        return not self.contains(0.0)

    def fmt(self, spec: str = ".3f", scale: float = 1.0) -> str:
        """``0.977 [0.973, 0.981]``; ``scale=100`` turns fractions into points."""
        v, lo, hi = self.value * scale, self.lo * scale, self.hi * scale
        if not np.isfinite(lo):
            return f"{v:{spec}}"
        return f"{v:{spec}} [{lo:{spec}}, {hi:{spec}}]"

    def as_dict(self) -> dict[str, float]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "level": self.level}


def t_interval(values: ArrayLike, level: float = 0.95) -> Interval:
    """Mean and the t-interval of the mean (NaN bounds for fewer than 2 values)."""
    v = np.asarray(values, dtype=float)
    if len(v) == 0:
        return Interval(float("nan"), float("nan"), float("nan"), level)
    m = float(v.mean())
    if len(v) < 2:
        return Interval(m, float("nan"), float("nan"), level)
    half = float(_stats.t.ppf(0.5 + level / 2, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))
    return Interval(m, m - half, m + half, level)


def _two_level_means(correct: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap means of a (seeds x examples) 0/1 array, seeds and examples resampled."""
    s, n = correct.shape
    out = np.empty(n_boot)
    for i in range(n_boot):
        seeds = rng.integers(0, s, s)
        examples = rng.integers(0, n, n)
        out[i] = correct[np.ix_(seeds, examples)].mean()
    return out


def bootstrap_accuracy(
    correct: np.ndarray | Sequence[Sequence[float]],
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Accuracy over seeds with a percentile interval that includes test-set error.

    Args:
        correct: (seeds, test examples) array, 1 where the seed's model got the example
            right (or any per-example score).
        n_boot: bootstrap draws.
        level: the interval's coverage.
        seed: the bootstrap's random seed (the result is deterministic).

    Returns:
        The mean accuracy and its interval; each draw resamples seeds and examples.
    """
    c = np.atleast_2d(np.asarray(correct, dtype=float))
    boots = _two_level_means(c, n_boot, np.random.default_rng(seed))
    a = (1 - level) / 2
    lo, hi = np.quantile(boots, [a, 1 - a])
    return Interval(float(c.mean()), float(lo), float(hi), level)


def bootstrap_paired(
    correct_a: np.ndarray | Sequence[Sequence[float]],
    correct_b: np.ndarray | Sequence[Sequence[float]],
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Accuracy of A minus B, paired by seed and by test example, with its interval.

    Row i of both arrays is seed i, column j test example j. Each draw takes the same
    seeds and the same examples for both arms, so shared difficulty cancels and the
    interval still carries both the seed and the test-set error.
    """
    a = np.atleast_2d(np.asarray(correct_a, dtype=float))
    b = np.atleast_2d(np.asarray(correct_b, dtype=float))
    if a.shape != b.shape:
        raise ValueError(f"paired arrays need one shape, got {a.shape} and {b.shape}")
    boots = _two_level_means(a - b, n_boot, np.random.default_rng(seed))
    q = (1 - level) / 2
    lo, hi = np.quantile(boots, [q, 1 - q])
    return Interval(float((a - b).mean()), float(lo), float(hi), level)


@dataclass(frozen=True)
class TestResult:
    """A two-sample test: the statistic, its p-value and the difference of means."""

    name: str
    statistic: float
    p: float
    difference: Interval

    def fmt(self, spec: str = "+.3f", scale: float = 1.0) -> str:
        return f"{self.difference.fmt(spec, scale)}, {self.name} p = {self.p:.2g}"


def welch(a: ArrayLike, b: ArrayLike, level: float = 0.95) -> TestResult:
    """Welch's unequal-variance t-test of mean(a) - mean(b), with the Welch interval."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    t, p = _stats.ttest_ind(x, y, equal_var=False)
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se = np.sqrt(vx + vy)
    dof = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1)) if se > 0 else 1.0
    d = float(x.mean() - y.mean())
    half = float(_stats.t.ppf(0.5 + level / 2, dof) * se)
    return TestResult("Welch", float(t), float(p), Interval(d, d - half, d + half, level))


def paired_t(a: ArrayLike, b: ArrayLike, level: float = 0.95) -> TestResult:
    """Paired t-test of a - b (same seeds in the same order)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    t, p = _stats.ttest_rel(x, y)
    return TestResult("paired t", float(t), float(p), t_interval(x - y, level))


def welch_of_differences(
    a_small: ArrayLike, a_large: ArrayLike, b_small: ArrayLike, b_large: ArrayLike
) -> TestResult:
    """Does arm A lose less than arm B between two settings? Welch on the paired drops."""
    da = np.asarray(a_large, float) - np.asarray(a_small, float)
    db = np.asarray(b_large, float) - np.asarray(b_small, float)
    return welch(da, db)
