"""Reproducibility of ``perception bench``: the headline ratios of repeated runs side by side.

Two runs agree within noise on a ratio when their 95 % paired-bootstrap intervals overlap: the
difference between the runs is then no larger than what each run's own frame-to-frame variation
already allows. The relative spread (max - min over the mean) is given alongside, so a reader can
apply a stricter tolerance of their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["compare_runs", "headline_ratios"]

_KEYS = (("latency_p50", "latency p50"), ("latency_p99", "latency p99"), ("throughput", "throughput"))


def headline_ratios(sections: Mapping[str, Any]) -> dict[str, tuple[float | None, list[float] | None]]:
    """The acceptance ratios of one run: concurrent / sequential (latency p50, p99, throughput) and
    shm / gRPC round trip (p50, p99) per tensor size, each as ``(value, 95 % interval)``."""
    out: dict[str, tuple[float | None, list[float] | None]] = {}
    for key, r in sections.get("dispatch", {}).get("ratios", {}).items():
        variant = key.removesuffix("_over_sequential")
        label = "concurrent" if variant == "concurrent" else "concurrent, all gRPC"
        for k, name in _KEYS:
            out[f"{label} / sequential, {name}"] = (r.get(k), r.get(f"{k}_ci95"))
    for case in sections.get("transport", {}).get("cases", ()):
        for q in ("p50", "p99"):
            key = f"shm_over_grpc_{q}"
            out[f"shm / gRPC, {case['points']} points, {q}"] = (case.get(key), case.get(f"{key}_ci95"))
    return out


def compare_runs(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per headline ratio: its value and interval in each run, the relative spread and whether
    the runs agree within noise (intervals overlap); ``agree`` is ``None`` when an interval is missing."""
    per_run = [headline_ratios(r) for r in runs]
    rows = []
    for label in per_run[0] if per_run else ():
        values = [p.get(label, (None, None)) for p in per_run]
        numbers = [v for v, _ in values if v is not None]
        spread = None
        if len(numbers) == len(values) and numbers and sum(numbers) > 0:
            spread = round((max(numbers) - min(numbers)) / (sum(numbers) / len(numbers)), 3)
        intervals = [ci for _, ci in values]
        agree = None
        if all(ci for ci in intervals):
            agree = max(ci[0] for ci in intervals if ci) <= min(ci[1] for ci in intervals if ci)
        rows.append(
            {
                "ratio": label,
                "values": [v for v, _ in values],
                "ci95": intervals,
                "relative_spread": spread,
                "agree_within_noise": agree,
            }
        )
    return rows
