"""What ``/diagnostics`` says: one status per sensor and one for the frame budget (pure data; the node
turns it into ``diagnostic_msgs/DiagnosticArray``).

A sensor counts its frames by status (ok, late, error, missing, skipped) and the messages it could not
take (a malformed PointCloud2, an undecodable image); its level is WARN when at least ``warn_rate`` of
its last ``diagnostics_window`` frames were not ok, ERROR from ``error_rate`` (or when its input is
failing). The frame budget counts deadline misses the same way and reports the latency from the trigger
message's arrival to the result (p50/p99, from :meth:`perception.live.LiveRuntime.status`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perception.config import RosConfig
from perception.types import FrameResult, SensorStatus

__all__ = ["ERROR", "OK", "WARN", "DiagnosticsTracker", "Status"]

OK, WARN, ERROR = 0, 1, 2  # diagnostic_msgs/DiagnosticStatus levels
_STATUSES = tuple(s.value for s in SensorStatus)


@dataclass(frozen=True, slots=True)
class Status:
    name: str
    level: int
    message: str
    values: Mapping[str, str]


@dataclass
class _SensorCounts:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_STATUSES, 0))
    recent: deque[str] = field(default_factory=deque)  # statuses of the last frames
    input_errors: int = 0
    recent_input_error: bool = False
    last_error: str = ""


class DiagnosticsTracker:
    """Counts per sensor and per frame; :meth:`statuses` is what the next ``/diagnostics`` says."""

    def __init__(self, node: str, sensors: Sequence[str], ros: RosConfig) -> None:
        self._node = node
        self._ros = ros
        self._sensors = {s: _SensorCounts(recent=deque(maxlen=ros.diagnostics_window)) for s in sensors}
        self._misses: deque[bool] = deque(maxlen=ros.diagnostics_window)
        self.frames = 0

    def add(self, result: FrameResult) -> None:
        """Count one frame's result (any thread; the GIL keeps these updates whole)."""
        self.frames += 1
        self._misses.append(result.deadline_missed)
        for name, sr in result.sensors.items():
            c = self._sensors.get(name)
            if c is None:
                continue
            c.counts[sr.status.value] = c.counts.get(sr.status.value, 0) + 1
            c.recent.append(sr.status.value)
            if sr.error:
                c.last_error = sr.error

    def input_error(self, sensor: str, error: str) -> None:
        """A message of ``sensor`` that could not be turned into a sample."""
        c = self._sensors[sensor]
        c.input_errors += 1
        c.recent_input_error = True
        c.last_error = error

    def _level(self, bad: int, of: int) -> tuple[int, float]:
        if not of:
            return OK, 0.0
        rate = bad / of
        if rate >= self._ros.error_rate:
            return ERROR, rate
        if rate >= self._ros.warn_rate:
            return WARN, rate
        return OK, rate

    def statuses(self, live_status: Mapping[str, Any] | None) -> list[Status]:
        """One status per sensor, then the frame budget; ``live_status``: the live runtime's status()."""
        out = []
        for name, c in self._sensors.items():
            recent = list(c.recent)
            bad = [s for s in recent if s != "ok"]
            level, rate = self._level(len(bad), len(recent))
            if c.recent_input_error:
                level, message = ERROR, f"input error: {c.last_error}"
            elif level == OK:
                message = "ok"
            else:
                worst = max(set(bad), key=bad.count)
                message = f"{worst} in {rate:.0%} of the last {len(recent)} frames"
            c.recent_input_error = False
            values = {s: str(c.counts.get(s, 0)) for s in _STATUSES}
            values.update(input_errors=str(c.input_errors), last_error=c.last_error)
            out.append(Status(f"{self._node}: sensor {name}", level, message, values))
        misses = list(self._misses)
        level, rate = self._level(sum(misses), len(misses))
        values = {"frames": str(self.frames)}
        if live_status is not None:
            lat = live_status.get("latency_ms", {})
            values.update(
                frames=str(live_status.get("frames", self.frames)),
                deadline_misses=str(live_status.get("deadline_misses", 0)),
                latency_p50_ms=f"{float(lat.get('p50', 0.0)):.1f}",
                latency_p99_ms=f"{float(lat.get('p99', 0.0)):.1f}",
                dropped=str(live_status.get("dropped", 0)),
                # frames shed under overload (among the dropped), each published as the tracker's prediction
                shed_overload=str(live_status.get("shed", 0)),
            )
        message = "ok" if level == OK else f"deadline missed in {rate:.0%} of the last {len(self._misses)} frames"
        out.append(Status(f"{self._node}: frame budget", level, message, values))
        return out
