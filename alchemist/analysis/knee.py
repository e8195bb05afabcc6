"""The large-batch knee, defined by a tolerance, and how it moves.

The knee is the largest batch B such that every batch up to B reaches within ``tol``
of the best mean accuracy of the sweep. Unlike "inside the smallest batch's
interval", it does not move when more seeds shrink the interval.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np


def knee(batches: Sequence[int], means: Sequence[float], tol: float) -> int:
    """Largest batch whose mean, and every smaller batch's, is within ``tol`` of the best.

    Args:
        batches: the batch sizes, any order.
        means: mean accuracy at each batch (same order).
        tol: the tolerance, in accuracy units (0.01 = 1 point).

    Returns:
        The knee; the smallest batch when even the second falls short.
    """
    order = np.argsort(batches)
    b = np.asarray(batches)[order]
    m = np.asarray(means, dtype=float)[order]
    best = np.nanmax(m)
    ok = np.nan_to_num(m, nan=-np.inf) >= best - tol - 1e-12
    k = 0
    while k + 1 < len(b) and ok[k + 1] and ok[: k + 1].all():
        k += 1
    return int(b[k])


def knee_by_tolerance(
    per_seed: Mapping[int, Sequence[float]], tolerances: Sequence[float]
) -> dict[float, int]:
    """The knee at each tolerance, from per-seed accuracies at each batch."""
    batches = sorted(per_seed)
    means = [float(np.mean(per_seed[b])) for b in batches]
    return {t: knee(batches, means, t) for t in tolerances}


def knee_by_seed_count(
    per_seed: Mapping[int, Sequence[float]], tol: float, counts: Sequence[int]
) -> dict[int, dict[str, object]]:
    """How the knee moves with the number of seeds: every subset of ``k`` seeds.

    Returns, for each ``k``: the knees over all subsets (``knees``), their ``min``,
    ``max`` and most common value (``mode``) and the share of subsets giving the
    all-seed knee (``agree``).
    """
    batches = sorted(per_seed)
    arr = np.array([list(per_seed[b]) for b in batches], dtype=float)  # batches x seeds
    full = knee(batches, arr.mean(1), tol)
    out: dict[int, dict[str, object]] = {}
    for k in counts:
        knees = [
            knee(batches, arr[:, list(sub)].mean(1), tol)
            for sub in itertools.combinations(range(arr.shape[1]), k)
        ]
        values, counts_ = np.unique(knees, return_counts=True)
        out[k] = {
            "knees": knees,
            "min": int(min(knees)),
            "max": int(max(knees)),
            "mode": int(values[np.argmax(counts_)]),
            "agree": float(np.mean(np.asarray(knees) == full)),
        }
    return out


def breakdown(
    batches: Sequence[int], rule: Sequence[float], tuned: Sequence[float], tol: float
) -> tuple[int, int | None]:
    """Where a rate rule stops matching the tuned rate.

    Returns ``(last_ok, first_bad)``: the largest batch up to which the rule's mean
    accuracy stays within ``tol`` of the tuned rate's at the same batch, and the next
    batch of the grid (None when the rule holds everywhere). The breakdown lies between
    them: the grid cannot place it closer.
    """
    order = np.argsort(batches)
    b = np.asarray(batches)[order]
    gap = np.asarray(tuned, float)[order] - np.asarray(rule, float)[order]
    bad = np.nonzero(~(np.nan_to_num(gap, nan=np.inf) <= tol + 1e-12))[0]
    if len(bad) == 0:
        return int(b[-1]), None
    i = int(bad[0])
    return int(b[max(0, i - 1)]), int(b[i])
