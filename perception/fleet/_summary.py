"""What a fleet worker reports for one drive: :class:`DriveSummary`, from the worker to the driver, the
fleet report and the CLI (and ``OUT/<drive>/fleet_drive.json``); and what the fleet report totals over
them: :class:`FleetTotals`, from the report to the CLI (``fleet.json``'s ``totals``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perception.metrics import RunCounters

__all__ = ["BudgetResult", "DriveSummary", "FleetTotals"]

#: A drive's status, worst first (the fleet report's order): it failed, is damaged, was interrupted, or ran.
STATUSES = ("failed", "damaged", "interrupted", "ok")


@dataclass(frozen=True, slots=True)
class BudgetResult:
    """The drive's latency budget verdict (``--budget-ms``)."""

    budget_ms: float
    percentile: float
    passed: bool
    violations: tuple[str, ...] = ()


#: The report's counters a summary carries: the frame counts, and the sensors' statuses and why frames were
#: dropped, which a budget verdict over its frames states (:func:`perception.metrics.incomplete_note`; the
#: first errors stay in its report.json).
COUNTERS = (
    "frames",
    "usable",
    "ok",
    "degraded",
    "dropped",
    "deadline_ms",
    "deadline_misses",
    "sensor_status",
    "drop_reasons",
)
#: The counters the fleet's totals pool over its drives (:class:`FleetTotals`): all but the deadline, which
#: each drive's misses were counted against.
POOLED = tuple(k for k in COUNTERS if k != "deadline_ms")


@dataclass(frozen=True, slots=True)
class Replayed:
    """What a replay that ran reports (its :class:`perception.metrics.RunReport`'s frame counters,
    latency percentiles and mAP)."""

    counters: RunCounters = field(default_factory=RunCounters)
    #: ``total``: the frame totals' percentiles; ``stages``: per stage its p50 and p99 (ms).
    latency_ms: Mapping[str, Any] = field(default_factory=dict)
    mAP: float | None = None
    admission: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class DriveSummary:
    """One drive of a fleet run. ``status`` is one of :data:`STATUSES`; ``error`` (and ``error_type``)
    say why when it is not ok; ``replayed`` is None when the replay never ran. ``evaluated``: ``--eval``
    asked for the sensor modes' mAP (``modes``: None when the drive could not be scored).
    The driver adds how the task went: ``task_s``, ``ray_overhead_s``, ``attempts`` and ``retries``."""

    name: str
    drive: str = ""
    status: str = "ok"
    error: str | None = None
    error_type: str | None = None
    attempt: int = 1
    pid: int | None = None
    host: str | None = None
    ground_truth: bool | None = None
    urls: tuple[str, ...] | None = None
    replayed: Replayed | None = None
    budget: BudgetResult | None = None
    evaluated: bool = False
    modes: Mapping[str, float | None] | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    frames_per_s: float | None = None
    #: The drive's frame totals as a mergeable sketch (the fleet's pooled percentiles): in ``fleet_drive.json``
    #: (``to_json(sketch=True)``: a drive read back from it is pooled too), not in ``fleet.json``.
    total_sketch: Mapping[str, Any] | None = field(default=None, repr=False)
    task_s: float | None = None
    ray_overhead_s: float | None = None
    attempts: int | None = None
    retries: tuple[str, ...] | None = None

    @property
    def frames(self) -> int:
        return self.replayed.counters.frames if self.replayed is not None else 0

    @property
    def map(self) -> float | None:
        return self.replayed.mAP if self.replayed is not None else None

    @property
    def p99_ms(self) -> float:
        total = self.replayed.latency_ms.get("total", {}) if self.replayed is not None else {}
        return float(total.get("p99", 0.0))

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and not self.budget.passed

    def failed(self, error: BaseException | str, error_type: str | None = None) -> DriveSummary:
        """This summary with ``status`` failed and ``error``."""
        if isinstance(error, BaseException):
            error, error_type = str(error), type(error).__name__
        return dataclasses.replace(self, status="failed", error=error, error_type=error_type)

    def to_json(self, *, sketch: bool = False) -> dict[str, Any]:
        """The summary as ``fleet_drive.json`` and ``fleet.json``'s ``drives`` hold it (unset keys left out;
        ``error`` always there once a replay ran or failed, ``modes`` whenever evaluated); ``sketch``: with
        :attr:`total_sketch` (``fleet_drive.json``'s)."""
        out: dict[str, Any] = {"name": self.name, "drive": self.drive, "attempt": self.attempt}
        for key in ("pid", "host", "ground_truth"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.urls is not None:
            out["urls"] = list(self.urls)
        out["status"] = self.status
        if self.replayed is not None or self.error is not None:
            out["error"] = self.error
        if self.replayed is not None:
            r = self.replayed
            out.update({k: _plain(getattr(r.counters, k)) for k in COUNTERS})
            out.update(latency_ms=_plain(r.latency_ms), mAP=r.mAP, admission=_plain(r.admission))
        if self.budget is not None:
            out["budget"] = {**dataclasses.asdict(self.budget), "violations": list(self.budget.violations)}
        if self.error_type is not None:
            out["error_type"] = self.error_type
        if self.evaluated:
            out["modes"] = None if self.modes is None else dict(self.modes)
        for key in ("wall_s", "cpu_s", "frames_per_s", "task_s", "ray_overhead_s", "attempts"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.retries is not None:
            out["retries"] = list(self.retries)
        if sketch and self.total_sketch is not None:
            out["total_sketch"] = _plain(self.total_sketch)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DriveSummary:
        """A summary read back (a worker's published ``fleet_drive.json``)."""
        replayed = None
        if "frames" in data:
            replayed = Replayed(
                RunCounters(**{k: data[k] for k in COUNTERS if k in data}),
                data.get("latency_ms", {}),
                data.get("mAP"),
                data.get("admission"),
            )
        budget = data.get("budget")
        return cls(
            name=data["name"],
            drive=data.get("drive", ""),
            status=data.get("status", "failed"),
            error=data.get("error"),
            error_type=data.get("error_type"),
            attempt=data.get("attempt", 1),
            pid=data.get("pid"),
            host=data.get("host"),
            ground_truth=data.get("ground_truth"),
            urls=tuple(data["urls"]) if "urls" in data else None,
            replayed=replayed,
            budget=None if budget is None else BudgetResult(**{**budget, "violations": tuple(budget["violations"])}),
            evaluated="modes" in data,
            modes=data.get("modes"),
            wall_s=data.get("wall_s"),
            cpu_s=data.get("cpu_s"),
            frames_per_s=data.get("frames_per_s"),
            task_s=data.get("task_s"),
            ray_overhead_s=data.get("ray_overhead_s"),
            attempts=data.get("attempts"),
            retries=tuple(data["retries"]) if "retries" in data else None,
            total_sketch=data.get("total_sketch"),
        )


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True, slots=True)
class FleetTotals:
    """The fleet report's totals over its drives (``fleet.json``'s ``totals``, :meth:`to_json`): drives
    by status, frame counts (per sensor and status, and per drop reason too), every frame's latency pooled
    (``latency_ms``: the merged sketch's percentiles, within ``latency_percentile_relative_error``), the mean
    mAP over the drives with ground truth (each counting once) and per sensor mode (``--eval``), and where the
    time went."""

    drives: int
    by_status: Mapping[str, int]
    budget_broken: int
    retried: int
    frames: int
    usable: int
    ok: int
    degraded: int
    dropped: int
    deadline_misses: int
    sensor_status: Mapping[str, Mapping[str, int]]
    drop_reasons: Mapping[str, int]
    latency_ms: Mapping[str, float]
    latency_percentile_relative_error: float
    mean_drive_mAP: float | None
    drives_with_mAP: int
    drives_without_ground_truth: tuple[str, ...]
    mean_mode_mAP: Mapping[str, float | None] | None
    worker_s: float
    worker_cpu_s: float
    ray_overhead_s: float

    def counters(self) -> RunCounters:
        """The drives' frame counters pooled (no deadline: theirs may differ), as a budget verdict reads them."""
        return RunCounters(**{k: getattr(self, k) for k in POOLED})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out.update(
            by_status=dict(self.by_status),
            sensor_status=_plain(self.sensor_status),
            drop_reasons=dict(self.drop_reasons),
            latency_ms=dict(self.latency_ms),
            drives_without_ground_truth=list(self.drives_without_ground_truth),
            mean_mode_mAP=None if self.mean_mode_mAP is None else dict(self.mean_mode_mAP),
        )
        return out
