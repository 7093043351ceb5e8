"""Latency aggregation: per-frame latency trees -> percentiles per stage and per sensor."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perception.types import FrameResult, FrameStatus, SensorStatus

__all__ = ["LatencyAccumulator", "percentiles"]

PCTS = (50, 95, 99)


def percentiles(values_ns: Iterable[int]) -> dict[str, float]:
    """``n`` and p50/p95/p99/max/mean/min of nanosecond values, in milliseconds (empty: zeros, ``n`` = 0).

    The one latency summary of the package: reports, budgets and every benchmark use it, so their
    numbers compare."""
    arr = np.fromiter(values_ns, dtype=np.float64)
    if arr.size == 0:
        return {"n": 0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0, "min": 0.0}
    ms = arr / 1e6
    out: dict[str, float] = {"n": int(arr.size)}
    for p, v in zip(PCTS, np.percentile(ms, PCTS), strict=True):
        out[f"p{p}"] = round(float(v), 3)
    out["max"] = round(float(ms.max()), 3)
    out["mean"] = round(float(ms.mean()), 3)
    out["min"] = round(float(ms.min()), 3)
    return out


@dataclass
class LatencyAccumulator:
    """Collects every frame's result; :meth:`summary` gives the report's counters and percentiles."""

    budget_ns: int
    frames: int = 0
    #: Frames in which at least one sensor answered ok: a run without any produced nothing to use.
    usable: int = 0
    status: Counter[str] = field(default_factory=Counter)
    deadline_misses: int = 0
    total_ns: list[int] = field(default_factory=list)
    stage_ns: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    sensor_ns: dict[str, dict[str, list[int]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    sensor_status: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    drop_reasons: Counter[str] = field(default_factory=Counter)
    #: Per sensor: the first error it reported (what a run in which nothing worked has to say).
    first_errors: dict[str, str] = field(default_factory=dict)
    #: Triton's time per model and stage, one value per frame it could be attributed to (ServerSplitter).
    server_ns: dict[str, dict[str, list[int]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    #: Per model: why its server time was unknown, frames per reason (the text before any " (").
    server_unavailable: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    series: list[tuple[int, int, dict[str, int]]] = field(default_factory=list)  # frame, total, stages

    def add(self, r: FrameResult) -> None:
        self.frames += 1
        self.status[r.status.value] += 1
        if r.status is FrameStatus.DROPPED:
            self.drop_reasons[(r.reason or "unknown").split(" (")[0]] += 1
            return
        if r.deadline_missed:
            self.deadline_misses += 1
        self.total_ns.append(r.latency.total_ns)
        for stage, ns in r.latency.stages.items():
            self.stage_ns[stage].append(ns)
        if any(res.status is SensorStatus.OK for res in r.sensors.values()):
            self.usable += 1
        for sensor, res in r.sensors.items():
            self.sensor_status[sensor][res.status.value] += 1
            if res.status is SensorStatus.ERROR and sensor not in self.first_errors:
                self.first_errors[sensor] = res.error or "error"
        for sensor, stages in r.latency.sensors.items():
            for stage, ns in stages.items():
                self.sensor_ns[sensor][stage].append(ns)
        for model, entry in r.latency.server.items():
            for stage, ns in entry.items():
                if stage != "requests":
                    self.server_ns[model][stage].append(ns)
        for model, reason in r.latency.server_unavailable.items():
            self.server_unavailable[model][reason.split(" (")[0]] += 1
        self.series.append((r.frame_id, r.latency.total_ns, dict(r.latency.stages)))

    def server_split(self) -> dict[str, dict[str, Any]]:
        """Per model: frames with Triton's time attributed, and frames without it by reason."""
        models = sorted(set(self.server_ns) | set(self.server_unavailable))
        return {
            m: {
                "frames": len(next(iter(self.server_ns[m].values()), [])) if m in self.server_ns else 0,
                "unavailable": dict(self.server_unavailable.get(m, {})),
            }
            for m in models
        }

    def summary(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "usable": self.usable,
            "ok": self.status.get("ok", 0),
            "degraded": self.status.get("degraded", 0),
            "dropped": self.status.get("dropped", 0),
            "deadline_ms": self.budget_ns / 1e6,
            "deadline_misses": self.deadline_misses,
            "latency_ms": {
                "total": percentiles(self.total_ns),
                "stages": {k: percentiles(v) for k, v in sorted(self.stage_ns.items())},
                "sensors": {
                    s: {stage: percentiles(v) for stage, v in sorted(st.items())}
                    for s, st in sorted(self.sensor_ns.items())
                },
                "server": {
                    m: {stage: percentiles(v) for stage, v in st.items()} for m, st in sorted(self.server_ns.items())
                },
            },
            "sensor_status": {s: dict(c) for s, c in sorted(self.sensor_status.items())},
            "drop_reasons": dict(self.drop_reasons),
            "first_errors": dict(sorted(self.first_errors.items())),
        }
