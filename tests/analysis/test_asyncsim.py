"""The async/sync simulator of ``alchemist.analysis.asyncsim``: it reduces to sequential
SGD at one worker, staleness grows with the workers, and it reproduces the staleness
the real ``--algorithm async`` jobs of ``notebooks/02_algorithms.ipynb`` measured."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from alchemist.analysis.asyncsim import MLP, Timing, simulate


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    d = load_digits()
    X, y = (d.data / 16.0).astype(np.float32), d.target
    return X[:1437], y[:1437], X[1437:], y[1437:]


TIMING = Timing(compute_s=2e-4, step_cv=0.2, worker_cv=0.05, push_s=5e-5, pull_s=5e-5, apply_s=3e-5)


def test_one_worker_is_sequential_momentum_sgd(digits) -> None:
    X, y, Xe, ye = digits
    a = simulate("async", 1, TIMING, X, y, Xe, ye, lr=0.05, epochs=2, seed=3)
    s = simulate("sync", 1, TIMING, X, y, Xe, ye, lr=0.05, epochs=2, seed=3)
    assert a.mean_staleness == 0 and a.max_staleness == 0
    assert np.array_equal(a.final_correct, s.final_correct)
    # the same run written out by hand
    model = MLP()
    w, v = model.init(3), np.zeros(model.n, np.float32)
    rng = np.random.default_rng(3)
    for _ in range(2):
        perm = rng.permutation(len(X))
        for k in range(len(perm) // 32):
            idx = perm[k * 32 : (k + 1) * 32]
            v = np.float32(0.9) * v + model.grad(w, X[idx], y[idx])
            w = w - np.float32(0.05) * v
    assert np.array_equal(model.correct(w, Xe, ye), a.final_correct)
    assert a.updates == 2 * (1437 // 32)
    assert a.final_accuracy > 0.85


def test_staleness_grows_with_workers_and_sync_has_none(digits) -> None:
    X, y, Xe, ye = digits
    stale = [
        simulate("async", n, TIMING, X, y, Xe, ye, lr=0.01, epochs=1).mean_staleness
        for n in (1, 2, 4, 8)
    ]
    assert stale == sorted(stale) and stale[0] == 0
    for n, s in zip(
        (2, 4, 8), stale[1:], strict=True
    ):  # equal workers: about N - 1 updates between
        assert 0.7 * (n - 1) < s < n, stale  # less at the start, when all begin at once
    sync = simulate("sync", 4, TIMING, X, y, Xe, ye, lr=0.04, epochs=1)
    assert sync.mean_staleness == 0 and sync.updates == (1437 // 4) // 32


def test_allreduce_cost_model() -> None:
    t = Timing(compute_s=1.0, alpha_s=1e-4, beta_s_per_byte=1e-9)
    assert t.allreduce_s(1, 10**6) == 0
    assert t.allreduce_s(2, 10**6) == pytest.approx(2e-4 + 1e-3)
    assert t.allreduce_s(32, 10**6) == pytest.approx(62e-4 + 2 * 31 / 32 * 1e-3)


def test_expected_slowest_is_what_a_simulated_sync_step_waits_for(digits) -> None:
    """The notebook fits sync's all-reduce as a real step minus this: it must be the
    simulator's own mean wait for the slowest worker, or the fit is off by the gap."""
    X, y, Xe, ye = digits
    assert Timing(compute_s=1e-3, step_cv=0.0).expected_slowest_s(4) == pytest.approx(1e-3)
    t = Timing(compute_s=1e-3, step_cv=0.8, worker_cv=0.2)
    assert t.expected_slowest_s(4) > t.expected_slowest_s(2) > t.expected_slowest_s(1)
    runs = [simulate("sync", 4, t, X, y, Xe, ye, lr=0.05, epochs=3, seed=s) for s in range(8)]
    per_step = np.mean([r.total_s / r.updates for r in runs])
    assert per_step == pytest.approx(t.expected_slowest_s(4), rel=0.05)


def test_measured_per_worker_timings_replace_the_drawn_speeds(digits) -> None:
    """A replayed job: the worker that exchanges fastest (the server's own, on rank 0)
    ends first, so the mean staleness falls below N - 1, as in the real jobs."""
    X, y, Xe, ye = digits
    even = Timing(
        compute_s=4e-4,
        worker_compute_s=(4e-4,) * 4,
        worker_step_cv=(0.1,) * 4,
        worker_exchange_s=(2e-3,) * 4,
    )
    skewed = Timing(
        compute_s=4e-4,
        worker_compute_s=(4e-4,) * 4,
        worker_step_cv=(0.1,) * 4,
        worker_exchange_s=(0.7e-3, 2e-3, 2e-3, 2e-3),
    )
    a = simulate("async", 4, even, X, y, Xe, ye, lr=0.01, epochs=2)
    b = simulate("async", 4, skewed, X, y, Xe, ye, lr=0.01, epochs=2)
    assert a.mean_staleness == pytest.approx(3.0, abs=0.15)
    assert b.mean_staleness < a.mean_staleness - 0.3
    with pytest.raises(ValueError, match="one per worker"):
        simulate("async", 2, even, X, y, Xe, ye, lr=0.01, epochs=1)


def test_staleness_aware_rate_keeps_many_workers_stable(digits) -> None:
    X, y, Xe, ye = digits
    plain = simulate("async", 8, TIMING, X, y, Xe, ye, lr=0.05, epochs=4)
    aware = simulate("async", 8, TIMING, X, y, Xe, ye, lr=0.05, epochs=4, staleness_aware=True)
    assert aware.final_accuracy > plain.final_accuracy + 0.2, (aware, plain)


# Recorded from the real async jobs of notebooks/02_algorithms.ipynb (the saved run of
# 2026-12, no evaluation during training): mean staleness over 5 seeds.
REAL_STALENESS = {2: 0.97, 4: 2.78}


@pytest.mark.parametrize("workers", [2, 4])
def test_simulated_staleness_matches_the_real_jobs(digits, workers: int) -> None:
    X, y, Xe, ye = digits
    # the timings the real jobs showed: workers of nearly equal speed, an exchange
    # (push + apply + pull) comparable with a step's compute
    timing = Timing(
        compute_s=2.5e-4, step_cv=0.3, worker_cv=0.1, push_s=6e-5, pull_s=6e-5, apply_s=4e-5
    )
    got = np.mean(
        [
            simulate(
                "async", workers, timing, X, y, Xe, ye, lr=0.01, epochs=2, seed=s
            ).mean_staleness
            for s in range(3)
        ]
    )
    assert got == pytest.approx(REAL_STALENESS[workers], abs=0.4)
