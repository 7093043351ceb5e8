"""Latency aggregation: per-frame latency trees -> percentiles per stage and per sensor.

A long-lived runtime (a vehicle shift, a fleet) must not keep a value per frame, so the accumulator
keeps each statistic as a :class:`LatencySketch`: a log-bucket histogram of fixed relative accuracy
(DDSketch's mapping: bucket ``i`` holds the values in ``(gamma**(i-1), gamma**i]``). Its memory is
bounded by the range of the values, not by their number (at most ~230 buckets per decade of
nanoseconds: 1 us .. 1000 s is < 2,100), and two sketches merge by adding their buckets, so per-drive
summaries add up to exact-enough fleet totals. Percentiles are within :data:`RELATIVE_ERROR` of the
exact ones (``numpy.percentile``'s linear interpolation); ``n``, ``min``, ``max`` and ``mean`` are
exact. (No dependency: ``ddsketch`` would do the same but brings protobuf-generated code for a
60-line mapping, and ``hdrhistogram`` is a C extension with its own encoding.)
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.metrics._run_report import LatencyStats, LatencySummary, RunCounters, RunReport
from perception.types import FrameResult, FrameStatus, SensorStatus

__all__ = ["RELATIVE_ERROR", "LatencyAccumulator", "LatencySketch", "percentiles"]

PCTS = (50, 95, 99)

#: Relative error of every percentile a :class:`LatencySketch` gives (0.5 %: within 1 % as stated in
#: the README and checked by tests/metrics/test_latency_sketch.py against the exact computation).
RELATIVE_ERROR = 0.005
_GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
_LOG_GAMMA = math.log(_GAMMA)

#: Spare buckets allocated on each side when a sketch's count array grows.
_SLACK = 16

#: Frames kept for the per-frame plots of report.md (a decimated reservoir over the whole run).
SERIES_MAX = 4096

_EMPTY: dict[str, float] = {"n": 0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0, "min": 0.0}


def percentiles(values_ns: Iterable[int]) -> dict[str, float]:
    """``n`` and p50/p95/p99/max/mean/min of nanosecond values, in milliseconds (empty: zeros, ``n`` = 0).

    The exact summary of a list of values (benchmarks); the accumulator gives the same keys from a
    :class:`LatencySketch` (:meth:`LatencySketch.percentiles`), so reports and benchmarks compare."""
    arr = np.fromiter(values_ns, dtype=np.float64)
    if arr.size == 0:
        return dict(_EMPTY)
    ms = arr / 1e6
    out: dict[str, float] = {"n": int(arr.size)}
    for p, v in zip(PCTS, np.percentile(ms, PCTS), strict=True):
        out[f"p{p}"] = round(float(v), 3)
    out["max"] = round(float(ms.max()), 3)
    out["mean"] = round(float(ms.mean()), 3)
    out["min"] = round(float(ms.min()), 3)
    return out


class LatencySketch:
    """Fixed-size, mergeable summary of nanosecond values (module docstring).

    Positive values go to log buckets (a dense count array up to the largest bucket seen, so a
    percentile is a cumulative sum and a binary search, whatever the count), zero to its own
    count, negative ones (a clock step) to mirrored buckets; each bucket's value is the one within
    :data:`RELATIVE_ERROR` of all it holds.
    """

    __slots__ = ("_neg", "_pos", "count", "max", "min", "sum", "zeros")

    def __init__(self) -> None:
        #: Count of bucket ``i`` at ``_pos[i]`` (a value of 1 ns is bucket 0; 1 s is ~2,070, 1000 s
        #: ~2,760): it only grows at the top, so a reader on another thread always sees a consistent array.
        self._pos: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._neg: dict[int, int] = {}
        self.zeros = 0
        self.count = 0
        self.sum = 0
        self.min = 0
        self.max = 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def _grow(self, i: int) -> None:
        """Make room for bucket ``i`` (with slack): a new, longer array replaces the old one."""
        if i >= len(self._pos):
            self._pos = np.concatenate([self._pos, np.zeros(i - len(self._pos) + 1 + _SLACK, dtype=np.int64)])

    def add(self, ns: int) -> None:
        ns = int(ns)
        if self.count == 0:
            self.min = self.max = ns
        elif ns < self.min:
            self.min = ns
        elif ns > self.max:
            self.max = ns
        self.count += 1
        self.sum += ns
        if ns > 0:
            j = math.ceil(math.log(ns) / _LOG_GAMMA)
            if j >= len(self._pos):
                self._grow(j)
            self._pos[j] += 1
        elif ns < 0:
            i = math.ceil(math.log(-ns) / _LOG_GAMMA)
            self._neg[i] = self._neg.get(i, 0) + 1
        else:
            self.zeros += 1

    def merge(self, other: LatencySketch) -> None:
        """Add ``other``'s values to this one (the result is what adding them one by one gives)."""
        if other.count == 0:
            return
        if self.count == 0:
            self.min, self.max = other.min, other.max
        else:
            self.min, self.max = min(self.min, other.min), max(self.max, other.max)
        self.count += other.count
        self.sum += other.sum
        self.zeros += other.zeros
        for i, n in other._neg.items():
            self._neg[i] = self._neg.get(i, 0) + n
        idx = np.flatnonzero(other._pos)
        if idx.size:
            self._grow(int(idx[-1]))
            self._pos[idx] += other._pos[idx]

    @property
    def buckets(self) -> int:
        """Buckets in use: bounded by the values' range, not their number (the count array holds
        every bucket up to the largest seen: < 2,800 for values up to 1000 s)."""
        return int(np.count_nonzero(self._pos)) + len(self._neg) + (1 if self.zeros else 0)

    def quantiles(self, qs: Iterable[float]) -> list[float]:
        """Percentiles ``qs`` (0..100) in ns, as ``numpy.percentile`` (linear) would give them, within
        :data:`RELATIVE_ERROR` (each order statistic is its bucket's value; the extremes are exact).

        Its cost is one cumulative sum over the count array (bounded by the values' range) and a
        binary search per order statistic, whatever the count: ~15 us, so a live ``status()`` that
        calls it from a host thread holds the GIL for little longer than a dict copy."""
        qs = list(qs)
        if self.count == 0:
            return [0.0 for _ in qs]
        # A reader on another thread (status()) while the event loop adds: the array reference is
        # read once (a longer one replaces it, never resized in place) and the cumulative sum is a
        # snapshot, at worst one add behind; the negative buckets (a clock step, rare) are copied.
        ends = np.cumsum(self._pos)  # cumulative count at the end of each positive bucket
        negs = dict(self._neg) if self._neg else {}
        neg = sorted(negs, reverse=True)  # the most negative first
        neg_ends = np.cumsum([negs[i] for i in neg]) if neg else np.zeros(0, dtype=np.int64)
        n_neg = int(neg_ends[-1]) if neg else 0
        zeros = self.zeros
        n = n_neg + zeros + (int(ends[-1]) if ends.size else 0)  # == count (or one less, racing a writer)
        if n == 0:
            return [float(self.min) for _ in qs]
        lo_v, hi_v = float(self.min), float(self.max)
        ranks = [q / 100.0 * (n - 1) for q in qs]
        floors = [math.floor(r) for r in ranks]
        # every order statistic needed (each rank's two neighbours), found in one search
        ks = np.array(floors + [f + 1 for f in floors], dtype=np.int64)
        pos_j = np.minimum(np.searchsorted(ends, ks - n_neg - zeros, side="right"), max(ends.size - 1, 0))
        pos_v = 2.0 * _GAMMA ** pos_j.astype(np.float64) / (_GAMMA + 1)

        def order_stat(idx: int) -> float:
            k = int(ks[idx])
            if k <= 0:
                return lo_v
            if k >= n - 1:
                return hi_v
            if k < n_neg:
                i = neg[int(np.searchsorted(neg_ends, k, side="right"))]
                v = -2.0 * _GAMMA**i / (_GAMMA + 1)
            elif k < n_neg + zeros:
                v = 0.0
            else:
                v = float(pos_v[idx])
            return min(max(v, lo_v), hi_v)

        out = []
        m = len(floors)
        for i, (rank, lo) in enumerate(zip(ranks, floors, strict=True)):
            frac = rank - lo
            v = order_stat(i)
            if frac > 0:
                v += frac * (order_stat(m + i) - v)
            out.append(v)
        return out

    def quantile(self, q: float) -> float:
        return self.quantiles((q,))[0]

    def percentiles(self) -> dict[str, float]:
        """The same keys as :func:`percentiles`, in milliseconds."""
        if self.count == 0:
            return dict(_EMPTY)
        out: dict[str, float] = {"n": self.count}
        for p, v in zip(PCTS, self.quantiles(PCTS), strict=True):
            out[f"p{p}"] = round(v / 1e6, 3)
        out["max"] = round(self.max / 1e6, 3)
        out["mean"] = round(self.sum / self.count / 1e6, 3)
        out["min"] = round(self.min / 1e6, 3)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON, Ray): ``from_dict`` gives the sketch back."""
        idx = np.flatnonzero(self._pos)
        return {
            "count": self.count,
            "sum": self.sum,
            "min": self.min,
            "max": self.max,
            "zeros": self.zeros,
            "pos": {str(int(i)): int(self._pos[i]) for i in idx},
            "neg": {str(i): n for i, n in sorted(self._neg.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencySketch:
        s = cls()
        s.count, s.sum, s.min, s.max = int(data["count"]), int(data["sum"]), int(data["min"]), int(data["max"])
        s.zeros = int(data.get("zeros", 0))
        pos = {int(i): int(n) for i, n in data.get("pos", {}).items()}
        if pos:
            s._grow(max(pos))
            for i, n in pos.items():
                s._pos[i] += n
        s._neg = {int(i): int(n) for i, n in data.get("neg", {}).items()}
        return s


def _sketches() -> defaultdict[str, LatencySketch]:
    return defaultdict(LatencySketch)


def _nested() -> defaultdict[str, defaultdict[str, LatencySketch]]:
    return defaultdict(_sketches)


@dataclass
class LatencyAccumulator:
    """Collects every frame's result into fixed-size summaries; :meth:`summary` gives the report's
    counters and percentiles. Its memory and the cost of :meth:`summary` do not grow with the frames
    (only with the stages, sensors and models seen, and the values' range); :attr:`series` keeps a
    decimated reservoir of at most :data:`SERIES_MAX` frames for the plots."""

    budget_ns: int
    frames: int = 0
    #: Frames in which at least one sensor answered ok: a run without any produced nothing to use.
    usable: int = 0
    status: Counter[str] = field(default_factory=Counter)
    deadline_misses: int = 0
    total_ns: LatencySketch = field(default_factory=LatencySketch)
    stage_ns: defaultdict[str, LatencySketch] = field(default_factory=_sketches)
    sensor_ns: defaultdict[str, defaultdict[str, LatencySketch]] = field(default_factory=_nested)
    sensor_status: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    drop_reasons: Counter[str] = field(default_factory=Counter)
    #: Per sensor: the first error it reported (what a run in which nothing worked has to say).
    first_errors: dict[str, str] = field(default_factory=dict)
    #: Triton's time per model and stage, over the frames it could be attributed to (ServerSplitter).
    server_ns: defaultdict[str, defaultdict[str, LatencySketch]] = field(default_factory=_nested)
    #: Per model: why its server time was unknown, frames per reason (the text before any " (").
    server_unavailable: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    #: (frame, total, stages) of every ``series_stride``-th timed frame: when the reservoir is full,
    #: every other entry is dropped and the stride doubles, so it spans the whole run.
    series: list[tuple[int, int, dict[str, int]]] = field(default_factory=list)
    series_stride: int = 1
    _timed: int = 0

    def add(self, r: FrameResult) -> None:
        self.frames += 1
        self.status[r.status.value] += 1
        if r.status is FrameStatus.DROPPED:
            self.drop_reasons[(r.reason or "unknown").split(" (")[0]] += 1
            return
        if r.deadline_missed:
            self.deadline_misses += 1
        self.total_ns.add(r.latency.total_ns)
        for stage, ns in r.latency.stages.items():
            self.stage_ns[stage].add(ns)
        if any(res.status is SensorStatus.OK for res in r.sensors.values()):
            self.usable += 1
        for sensor, res in r.sensors.items():
            self.sensor_status[sensor][res.status.value] += 1
            if res.status is SensorStatus.ERROR and sensor not in self.first_errors:
                self.first_errors[sensor] = res.error or "error"
        for sensor, stages in r.latency.sensors.items():
            for stage, ns in stages.items():
                self.sensor_ns[sensor][stage].add(ns)
        for model, entry in r.latency.server.items():
            for stage, ns in entry.items():
                if stage != "requests":
                    self.server_ns[model][stage].add(ns)
        for model, reason in r.latency.server_unavailable.items():
            self.server_unavailable[model][reason.split(" (")[0]] += 1
        if self._timed % self.series_stride == 0:
            self.series.append((r.frame_id, r.latency.total_ns, dict(r.latency.stages)))
            if len(self.series) >= SERIES_MAX:
                del self.series[1::2]
                self.series_stride *= 2
        self._timed += 1

    def merge(self, other: LatencyAccumulator) -> None:
        """Add ``other``'s frames (another drive's) to this one: counters add, sketches merge."""
        self.frames += other.frames
        self.usable += other.usable
        self.status.update(other.status)
        self.deadline_misses += other.deadline_misses
        self.total_ns.merge(other.total_ns)
        for stage, sk in other.stage_ns.items():
            self.stage_ns[stage].merge(sk)
        for mine, theirs in ((self.sensor_ns, other.sensor_ns), (self.server_ns, other.server_ns)):
            for key, stages in theirs.items():
                for stage, sk in stages.items():
                    mine[key][stage].merge(sk)
        for sensor, c in other.sensor_status.items():
            self.sensor_status[sensor].update(c)
        self.drop_reasons.update(other.drop_reasons)
        for sensor, err in other.first_errors.items():
            self.first_errors.setdefault(sensor, err)
        for model, c in other.server_unavailable.items():
            self.server_unavailable[model].update(c)

    def server_split(self) -> dict[str, dict[str, Any]]:
        """Per model: frames with Triton's time attributed, and frames without it by reason."""
        models = sorted(set(self.server_ns) | set(self.server_unavailable))
        return {
            m: {
                "frames": len(next(iter(self.server_ns[m].values()), LatencySketch())) if m in self.server_ns else 0,
                "unavailable": dict(self.server_unavailable.get(m, {})),
            }
            for m in models
        }

    def counters(self) -> RunCounters:
        """The frame counters of :meth:`summary`, without any percentile (cheap: a live status)."""
        return RunCounters(
            frames=self.frames,
            usable=self.usable,
            ok=self.status.get("ok", 0),
            degraded=self.status.get("degraded", 0),
            dropped=self.status.get("dropped", 0),
            deadline_ms=self.budget_ns / 1e6,
            deadline_misses=self.deadline_misses,
            sensor_status={s: dict(c) for s, c in sorted(self.sensor_status.items())},
            drop_reasons=dict(self.drop_reasons),
            first_errors=dict(sorted(self.first_errors.items())),
        )

    def latency_summary(self) -> LatencySummary:
        """The percentiles of the total, each stage, each sensor's stages and Triton's time per model."""
        return LatencySummary(
            total=LatencyStats.of(self.total_ns.percentiles()),
            stages={k: LatencyStats.of(v.percentiles()) for k, v in sorted(self.stage_ns.items())},
            sensors={
                s: {stage: LatencyStats.of(v.percentiles()) for stage, v in sorted(st.items())}
                for s, st in sorted(self.sensor_ns.items())
            },
            server={
                m: {stage: LatencyStats.of(v.percentiles()) for stage, v in st.items()}
                for m, st in sorted(self.server_ns.items())
            },
        )

    def report(self) -> RunReport:
        """The run's report with its counters and percentiles (a replay adds the rest)."""
        return RunReport(self.counters(), self.latency_summary())

    def summary(self) -> dict[str, Any]:
        """:meth:`report` as report.json's data."""
        return self.report().to_json()
