"""Intervals, tests, the knee and the noise scale of ``alchemist.analysis`` on inputs
whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sstats

from alchemist.analysis import knee as knee_mod
from alchemist.analysis.noise_scale import estimate_noise_scale, simple_noise_scale
from alchemist.analysis.stats import (
    bootstrap_accuracy,
    bootstrap_paired,
    paired_t,
    t_interval,
    welch,
    welch_of_differences,
)


def test_t_interval_covers_the_mean_of_a_normal_about_95_percent() -> None:
    rng = np.random.default_rng(0)
    hits = sum(t_interval(rng.normal(3.0, 2.0, 5)).contains(3.0) for _ in range(2000))
    assert 0.93 < hits / 2000 < 0.97


def test_bootstrap_accuracy_covers_the_true_accuracy_with_test_set_error() -> None:
    # 5 seeds, each with its own accuracy around 0.9, on 360 examples drawn afresh:
    # the truth is the population accuracy, which both error sources move.
    rng = np.random.default_rng(1)
    hits, widths_seed_only, widths = 0, [], []
    for _ in range(150):
        p = np.clip(rng.normal(0.9, 0.01, 5), 0, 1)
        correct = (rng.random((5, 360)) < p[:, None]).astype(float)
        iv = bootstrap_accuracy(correct, n_boot=300, seed=2)
        hits += iv.contains(0.9)
        widths.append(iv.hi - iv.lo)
        widths_seed_only.append(np.ptp(np.quantile(correct.mean(1), [0.025, 0.975])))
    assert hits / 150 > 0.85  # a percentile bootstrap on 5 seeds runs a bit narrow
    assert np.mean(widths) > 0.01  # it carries the test-set error (SE ~0.016/sqrt(5)... )


def test_bootstrap_paired_finds_a_real_difference_and_not_a_null_one() -> None:
    rng = np.random.default_rng(3)
    base = (rng.random((5, 2000)) < 0.9).astype(float)
    same = (rng.random(base.shape) < 0.9).astype(float)  # another arm, equally accurate
    better = np.maximum(base, (rng.random(base.shape) < 0.3).astype(float))
    assert bootstrap_paired(same, base, n_boot=400).contains(0.0)
    iv = bootstrap_paired(better, base, n_boot=400)
    assert iv.excludes_zero() and iv.lo > 0
    with pytest.raises(ValueError):
        bootstrap_paired(base, base[:, :10])


def test_welch_and_paired_t_match_scipy() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.normal(0, 1, 8), rng.normal(1, 2, 8)
    r = welch(a, b)
    assert r.p == pytest.approx(sstats.ttest_ind(a, b, equal_var=False).pvalue)
    assert r.difference.value == pytest.approx(a.mean() - b.mean())
    assert r.difference.lo < r.difference.value < r.difference.hi
    assert paired_t(a, b).p == pytest.approx(sstats.ttest_rel(a, b).pvalue)
    d = welch_of_differences(a, a - 1, b, b - 1)  # both lose exactly 1
    assert d.difference.value == pytest.approx(0.0)


def test_knee_by_tolerance_on_a_synthetic_curve() -> None:
    batches = [32, 64, 128, 256, 512, 1024]
    means = [0.900, 0.899, 0.897, 0.892, 0.880, 0.850]
    assert knee_mod.knee(batches, means, 0.005) == 128
    assert knee_mod.knee(batches, means, 0.01) == 256
    assert knee_mod.knee(batches, means, 0.03) == 512
    assert knee_mod.knee(batches, means, 0.1) == 1024
    assert knee_mod.knee(batches[::-1], means[::-1], 0.01) == 256  # any order
    # a dip that recovers does not extend the knee past it
    assert knee_mod.knee(batches, [0.9, 0.85, 0.9, 0.9, 0.9, 0.9], 0.01) == 32


def test_knee_with_seeds_and_the_breakdown_of_a_rule() -> None:
    rng = np.random.default_rng(5)
    batches = [32, 64, 128, 256, 512]
    truth = [0.90, 0.899, 0.897, 0.885, 0.86]
    per_seed = {b: list(m + rng.normal(0, 0.001, 6)) for b, m in zip(batches, truth, strict=True)}
    assert knee_mod.knee_by_tolerance(per_seed, [0.005, 0.01, 0.05]) == {
        0.005: 128,
        0.01: 128,
        0.05: 512,
    }
    by_k = knee_mod.knee_by_seed_count(per_seed, 0.01, [2, 6])
    assert by_k[6]["knees"] == [128] and by_k[6]["agree"] == 1.0
    assert by_k[2]["mode"] == 128 and len(by_k[2]["knees"]) == 15
    tuned = [0.9, 0.9, 0.9, 0.88, 0.86]
    rule = [0.9, 0.9, 0.895, 0.80, 0.1]
    assert knee_mod.breakdown(batches, rule, tuned, 0.01) == (128, 256)
    assert knee_mod.breakdown(batches, tuned, tuned, 0.01) == (512, None)


def test_noise_scale_recovers_a_known_gradient_noise() -> None:
    # per-example gradients g_i = G + e_i, e_i ~ N(0, diag(s^2)): B_simple = sum(s^2)/|G|^2
    rng = np.random.default_rng(6)
    d, n = 20, 50_000
    G = np.full(d, 0.1)
    s = np.linspace(0.2, 1.0, d)
    per_example = G + rng.normal(0, 1, (n, d)) * s
    truth = float((s**2).sum() / (G**2).sum())

    def gradient(idx: np.ndarray) -> np.ndarray:
        return per_example[idx].mean(0)

    est = estimate_noise_scale(gradient, n, 8, 256, draws=400, seed=7, n_boot=300)
    assert est.b_simple.contains(truth), (est, truth)
    assert est.b_simple.value == pytest.approx(truth, rel=0.25)
    g2, trace, b = simple_noise_scale(1.0 + 10 / 8, 1.0 + 10 / 64, 8, 64)  # exact means
    assert (g2, trace, b) == pytest.approx((1.0, 10.0, 10.0))
    with pytest.raises(ValueError):
        simple_noise_scale(1, 1, 64, 8)
