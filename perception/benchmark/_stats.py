"""Ratios and throughput shared by every benchmark (latency summaries: :func:`perception.metrics.percentiles`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["ratio", "ratio_interval", "throughput"]


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` rounded to 3 decimals; ``None`` when either is missing or zero."""
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, 3)


def throughput(frames: int, wall_ns: int) -> float:
    """Frames per second over ``wall_ns`` nanoseconds of work."""
    return round(frames / (wall_ns / 1e9), 3) if wall_ns > 0 else 0.0


def ratio_interval(
    numerator: Sequence[int],
    denominator: Sequence[int],
    statistic: str,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[float] | None:
    """Paired bootstrap confidence interval of a ratio between two variants measured on the same units.

    ``numerator[i]`` and ``denominator[i]`` are the two variants' samples for the same unit (frame or
    chunk), so each resample draws units, keeping the pairs: the interval reflects how much the ratio
    depends on which frames happened to be measured (and the load they met). ``statistic``:
    ``"p50"``/``"p99"`` (ratio of percentiles) or ``"sum"`` (ratio of totals; for throughput pass the
    denominator's wall times as ``numerator``). ``None`` when the samples are not paired or too few.
    """
    a = np.asarray(numerator, dtype=np.float64)
    b = np.asarray(denominator, dtype=np.float64)
    if a.size != b.size or a.size < 2:
        return None
    idx = np.random.default_rng(seed).integers(0, a.size, size=(resamples, a.size))
    if statistic == "sum":
        num, den = a[idx].sum(axis=1), b[idx].sum(axis=1)
    else:
        q = float(statistic.removeprefix("p"))
        num, den = np.percentile(a[idx], q, axis=1), np.percentile(b[idx], q, axis=1)
    ratios = num[den > 0] / den[den > 0]
    if ratios.size == 0:
        return None
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(ratios, (tail, 100 - tail))
    return [round(float(lo), 3), round(float(hi), 3)]
