"""What every part of the scale benchmark shares: a measured series, its growth
exponent, percentiles, and the table ``scale.py`` prints."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Series:
    """One cost measured at several sizes.

    Attributes:
        cost: what was measured, e.g. ``"GET /jobs (first page)"``.
        unit: what a size counts, e.g. ``"jobs"``.
        sizes: the sizes, ascending.
        values: the figure at each size (seconds, unless ``value_unit`` says otherwise).
        target: the target in words, e.g. ``"p95 <= 100 ms at 1e5"``.
        met: whether the figure at the largest size meets the target (None: no target).
        value_unit: ``"s"`` (printed in ms) or another unit printed as is.
        notes: extra lines printed under the series.
    """

    cost: str
    unit: str
    sizes: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    target: str = ""
    met: bool | None = None
    value_unit: str = "s"
    notes: list[str] = field(default_factory=list)

    def add(self, size: int, value: float) -> None:
        self.sizes.append(size)
        self.values.append(value)

    @property
    def exponent(self) -> float | None:
        return growth_exponent(self.sizes, self.values)


def restore_env(saved: dict[str, str | None]) -> None:
    """Put back the environment variables ``saved`` holds (None: unset)."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def growth_exponent(sizes: list[int], values: list[float]) -> float | None:
    """The least-squares slope of log(value) on log(size): 0 is flat, 1 linear.

    Values below a microsecond count as a microsecond (a flat cost that rounds to 0
    must not read as a steep one). None with fewer than two sizes.
    """
    pts = [
        (math.log(s), math.log(max(v, 1e-6))) for s, v in zip(sizes, values, strict=True) if s > 0
    ]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    if den == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in pts) / den


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    """Wall seconds of ``repeat`` calls of ``fn``."""
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def fmt_value(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1000:.1f} ms" if value < 10 else f"{value:.1f} s"
    return f"{value:g} {unit}"


def size_label(n: int) -> str:
    """``100`` -> ``1e2``; sizes that are not powers of ten as they are."""
    exp = math.log10(n) if n > 0 else 0
    return f"1e{round(exp)}" if n > 0 and abs(exp - round(exp)) < 1e-9 else str(n)


def print_series(series: Series) -> None:
    """One line per size, then the exponent and whether the target is met."""
    print(f"{series.cost} ({series.unit}):", flush=True)
    for size, value in zip(series.sizes, series.values, strict=True):
        print(f"  {size_label(size):>6} {series.unit}: {fmt_value(value, series.value_unit)}")
    exp = series.exponent
    verdict = "" if series.met is None else (" met" if series.met else " NOT MET")
    print(
        f"  growth exponent: {'n/a' if exp is None else f'{exp:.2f}'}"
        f"; target: {series.target or 'none'}{verdict}"
    )
    for note in series.notes:
        print(f"  {note}")


def print_table(all_series: list[Series]) -> None:
    """The growth table (the README's): cost, sizes, largest figure, exponent, target."""
    print("\n| cost | sizes | at the largest size | exponent | target |")
    print("|---|---|---|---|---|")
    for s in all_series:
        sizes = ", ".join(size_label(n) for n in s.sizes) + f" {s.unit}"
        last = fmt_value(s.values[-1], s.value_unit) if s.values else "-"
        exp = s.exponent
        verdict = "" if s.met is None else (" (met)" if s.met else " (NOT MET)")
        print(
            f"| {s.cost} | {sizes} | {last} | {'n/a' if exp is None else f'{exp:.2f}'} |"
            f" {s.target or '-'}{verdict} |"
        )
