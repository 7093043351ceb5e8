"""Summary statistics and ratios shared by every benchmark (one definition, so numbers compare)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["latency_stats", "ratio", "throughput"]


def latency_stats(samples_ns: Sequence[int]) -> dict[str, float]:
    """``n``, p50/p90/p99/mean/min/max of nanosecond samples, in milliseconds (empty: ``n`` = 0 only)."""
    if not samples_ns:
        return {"n": 0}
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    p50, p90, p99 = np.percentile(ms, (50, 90, 99))
    return {
        "n": int(ms.size),
        "p50_ms": round(float(p50), 3),
        "p90_ms": round(float(p90), 3),
        "p99_ms": round(float(p99), 3),
        "mean_ms": round(float(ms.mean()), 3),
        "min_ms": round(float(ms.min()), 3),
        "max_ms": round(float(ms.max()), 3),
    }


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` rounded to 3 decimals; ``None`` when either is missing or zero."""
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, 3)


def throughput(frames: int, wall_ns: int) -> float:
    """Frames per second over ``wall_ns`` nanoseconds of work."""
    return round(frames / (wall_ns / 1e9), 3) if wall_ns > 0 else 0.0
