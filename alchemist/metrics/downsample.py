"""Downsampling long series for display, keeping what the eye needs.

A learning curve of a long job has millions of points; a chart a few hundred pixels
wide shows at most a few thousand. :func:`minmax_downsample` keeps the first and last
point and, per bucket of consecutive points, the first, smallest, largest and last
(the "M4" idea: Jugel et al., VLDB 2014), so spikes, divergence and the final value
stay visible. NaN values are kept (one per bucket), since a NaN loss is news.

:class:`Series` stores every point of one curve in growable numpy arrays (complete,
amortised O(1) appends) and caches its downsampled view until new points arrive. A
series seeded from a summary (:meth:`Series.seed`: a long history, already downsampled)
stores the summary's points and every point after them, and counts every point logged.
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


def minmax_downsample(
    x: FloatArray, y: FloatArray, max_points: int
) -> tuple[FloatArray, FloatArray]:
    """At most about ``max_points`` points of ``(x, y)`` keeping first/last/extremes.

    Args:
        x: x values (steps), in the order they were logged.
        y: y values, same length.
        max_points: the budget (at least 8); series this short are returned unchanged.

    Returns:
        ``(x, y)`` subsets in the original order; the first and last points and each
        bucket's minimum and maximum are always included.
    """
    n = len(x)
    max_points = max(8, max_points)
    if n <= max_points:
        return x, y
    buckets = max(1, (max_points - 2) // 4)
    edges = np.linspace(1, n - 1, buckets + 1).astype(np.int64)
    keep = [np.array([0, n - 1], dtype=np.int64)]
    nan = np.isnan(y)
    filled_hi = np.where(nan, -np.inf, y)
    filled_lo = np.where(nan, np.inf, y)
    for lo, hi in itertools.pairwise(edges.tolist()):
        if hi <= lo:
            continue
        seg_nan = nan[lo:hi]
        idx = [
            lo,
            hi - 1,
            lo + int(np.argmin(filled_lo[lo:hi])),
            lo + int(np.argmax(filled_hi[lo:hi])),
        ]
        if seg_nan.any():
            idx.append(lo + int(np.argmax(seg_nan)))
        keep.append(np.array(idx, dtype=np.int64))
    index = np.unique(np.concatenate(keep))
    return x[index], y[index]


class Series:
    """Every point of one curve, with a cached display view.

    Args:
        max_points: the display budget of :meth:`view`.
    """

    def __init__(self, max_points: int = 2000) -> None:
        self.max_points = max_points
        self._x: FloatArray = np.empty(256, dtype=np.float64)
        self._y: FloatArray = np.empty(256, dtype=np.float64)
        self._n = 0
        self._unstored = 0  # points logged but not stored (summarised away)
        self._view: tuple[FloatArray, FloatArray] | None = None

    def __len__(self) -> int:
        return self._n

    @property
    def count(self) -> int:
        """How many points were logged (a seeded series stores fewer)."""
        return self._n + self._unstored

    def seed(self, x: list[float], y: list[float], count: int) -> None:
        """Replace the contents with a downsampled history of ``count`` points."""
        n = len(x)
        size = max(256, n)
        self._x, self._y = np.empty(size, dtype=np.float64), np.empty(size, dtype=np.float64)
        self._x[:n], self._y[:n] = x, y
        self._n = n
        self._unstored = max(0, count - n)
        self._view = None

    def append(self, x: float, y: float) -> None:
        """Add one point (kept forever; the display view is recomputed lazily)."""
        if self._n == len(self._x):
            self._x = np.concatenate([self._x, np.empty_like(self._x)])
            self._y = np.concatenate([self._y, np.empty_like(self._y)])
        self._x[self._n] = x
        self._y[self._n] = y
        self._n += 1
        self._view = None

    def drop_from(self, x0: float) -> bool:
        """Remove the points at ``x >= x0`` (steps a restarted attempt redoes).

        Returns:
            Whether any point was removed.
        """
        keep = self.x < x0
        n = int(keep.sum())
        if n == self._n:
            return False
        # a seeded history loses its unstored points in the same proportion
        self._unstored = self._unstored * n // self._n
        self._x[:n] = self.x[keep]
        self._y[:n] = self.y[keep]
        self._n = n
        self._view = None
        return True

    @property
    def x(self) -> FloatArray:
        return self._x[: self._n]

    @property
    def y(self) -> FloatArray:
        return self._y[: self._n]

    @property
    def last(self) -> tuple[float, float] | None:
        if not self._n:
            return None
        return float(self._x[self._n - 1]), float(self._y[self._n - 1])

    def view(self) -> tuple[FloatArray, FloatArray]:
        """The downsampled points to draw (at most about ``max_points``)."""
        if self._view is None:
            self._view = minmax_downsample(self.x, self.y, self.max_points)
        return self._view
