"""What ``/diagnostics`` says: one status per sensor and one for the frame budget (pure data; the node
turns it into ``diagnostic_msgs/DiagnosticArray``).

A sensor counts its frames by status (ok, late, error, missing, skipped) and the messages it could not
take (a malformed PointCloud2, an undecodable image: any message whose conversion failed, whatever the
exception); its level is WARN when at least ``warn_rate`` of its last ``diagnostics_window`` frames were
not ok (or when messages that came while the live runtime reopened were not taken, ``dropped_reopening``),
ERROR from ``error_rate`` (or when its input is failing). The odometry counts the messages it
could not take the same way, and the frames whose odometry was older than ``live.ego_max_age_ms``
(``ego_stale``: their ego motion unknown; WARN while new ones come). The frame budget counts deadline
misses the same way and reports the latency from the trigger message's arrival to the result (p50/p99, from
:meth:`perception.live.LiveRuntime.status`), the samples its intake dropped before any frame
(``samples_late``, ``samples_clock_jump``, ``samples_out_of_order``, ``samples_duplicate``,
``samples_intake_overflow``, ``samples_buffer_evicted``), what raised in the runtime (``failed``, per sensor
or stage), the results not published (``results_unpublished``), the trigger slots its assembly skipped past
its catch-up limit (``slots_skipped``: no frame opened) and, of the runtime's stream, the frames whose intake
waited for the results' consumer and the records it did not take (``intake_held``, ``undelivered``). A
sample the live intake refuses after the node took it (an image not of the calibration's size) is its
sensor's input error too. With ``--record``, the recording has a status of its own
(:meth:`DiagnosticsTracker.recording`): ERROR once it failed (a full disk), WARN while it drops items.

Every count is over the node's life (since configure): a live runtime's status counts from 0, and the node
replaces its runtime (a deactivate and activate; on simulated time a reopen as the ROS clock goes back), so
the counts said of the live runtime are the closed runtimes' (:meth:`DiagnosticsTracker.live_closed`) plus
the current one's (:meth:`DiagnosticsTracker.live_counts`). The latency is the current runtime's.

A failing input is logged at most once per :data:`INPUT_ERROR_LOG_PERIOD_NS` per sensor and kind of
error (:meth:`DiagnosticsTracker.input_error` says when, and how many it held back): a publisher of
malformed messages at 1 kHz is counted, not a flood of log lines.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perception.config import RosConfig
from perception.record import RunRecorder
from perception.types import FrameResult, SensorStatus

__all__ = ["ERROR", "INPUT_ERROR_LOG_PERIOD_NS", "OK", "WARN", "DiagnosticsTracker", "LiveCounts", "Status"]

OK, WARN, ERROR = 0, 1, 2  # diagnostic_msgs/DiagnosticStatus levels
#: A sensor's failing input of one kind is logged at most once in this period (the rest are counted).
INPUT_ERROR_LOG_PERIOD_NS = 10_000_000_000
_STATUSES = tuple(s.value for s in SensorStatus)
#: The live intake's counters of samples dropped before assembly (:class:`perception.live.LiveStats`).
_INTAKE_DROPS = ("late", "clock_jump", "out_of_order", "duplicate", "intake_overflow", "buffer_evicted")
#: The counts of a live runtime's status() that /diagnostics says: its own, and its intake's.
_RUNTIME_COUNTS = (
    "frames",
    "deadline_misses",
    "dropped",
    "shed",
    "callbacks_dropped",
    "callbacks_failed",
    "intake_held",
    "undelivered",
)
_INTAKE_COUNTS = (*_INTAKE_DROPS, "slots_skipped", "ego_stale")


@dataclass(frozen=True, slots=True)
class Status:
    name: str
    level: int
    message: str
    values: Mapping[str, str]


@dataclass(frozen=True)
class LiveCounts:
    """The counts /diagnostics says of a live runtime's status() (:meth:`of`), or of several runtimes (their
    sum, ``+``)."""

    runtime: Counter[str] = field(default_factory=Counter)  # _RUNTIME_COUNTS
    intake: Counter[str] = field(default_factory=Counter)  # _INTAKE_COUNTS (clock_jump: the samples dropped)
    failed: Counter[str] = field(default_factory=Counter)  # what raised, per sensor or stage
    refused: Counter[str] = field(default_factory=Counter)  # what the intake refused, per sensor

    @classmethod
    def of(cls, live_status: Mapping[str, Any]) -> LiveCounts:
        intake = live_status.get("intake", {})
        counts = {key: int(intake.get(key, 0)) for key in _INTAKE_COUNTS}
        # of the clock jumps, the samples dropped for one: a re-anchored one (time base estimate) was used
        counts["clock_jump"] = int(intake.get("clock_jump_dropped", intake.get("clock_jump", 0)))
        return cls(
            Counter({key: int(live_status.get(key, 0)) for key in _RUNTIME_COUNTS}),
            Counter(counts),
            Counter({k: int(v) for k, v in live_status.get("failed", {}).items()}),
            Counter({k: int(v) for k, v in intake.get("invalid_by_sensor", {}).items()}),
        )

    def __add__(self, other: LiveCounts) -> LiveCounts:
        return LiveCounts(
            self.runtime + other.runtime,
            self.intake + other.intake,
            self.failed + other.failed,
            self.refused + other.refused,
        )


@dataclass
class _SensorCounts:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_STATUSES, 0))
    recent: deque[str] = field(default_factory=deque)  # statuses of the last frames
    input_errors: int = 0
    recent_input_error: bool = False
    last_error: str = ""
    #: kind of input error -> (when it was last logged, how many since that line)
    logged: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: odometry only: frames with odometry past ``live.ego_max_age_ms`` (over the node's runtimes), as of the
    #: last status
    stale_seen: int = 0
    #: samples the live runtimes' intake refused after the node took them (an image not of the calibration's
    #: size...), as of the last status: counted in ``input_errors`` as they come
    refused_seen: int = 0
    #: messages that came while the live runtime reopened (the ROS clock went back) and were not taken (past
    #: the hold, or the reopen failed), and how many of them the last status said
    dropped_reopening: int = 0
    reopening_seen: int = 0


class DiagnosticsTracker:
    """Counts per sensor and per frame; :meth:`statuses` is what the next ``/diagnostics`` says."""

    def __init__(self, node: str, sensors: Sequence[str], ros: RosConfig) -> None:
        self._node = node
        self._ros = ros
        self._sensors = {s: _SensorCounts(recent=deque(maxlen=ros.diagnostics_window)) for s in sensors}
        self._odometry = _SensorCounts()
        self._misses: deque[bool] = deque(maxlen=ros.diagnostics_window)
        self.frames = 0
        #: Held by every method that counts or reads the counts: they are called from the executor, the live
        #: runtime's result thread and a reopen's thread (``+=`` is no atomic update).
        self._lock = threading.RLock()
        self._recording_dropped = 0  # items the recorder dropped, as of the last recording status
        self._closed = LiveCounts()  # the closed live runtimes' counts

    def live_closed(self, live_status: Mapping[str, Any]) -> None:
        """A live runtime closed (deactivated, or reopened as the ROS clock went back), ``live_status`` its last
        status(): its counts are kept (the next runtime counts from 0), and what its intake refused since the last
        status is counted now, as :meth:`statuses` counts it (its reasons are this status's)."""
        with self._lock:
            self._closed = self._closed + LiveCounts.of(live_status)
            intake = live_status.get("intake", {})
            for name, c in self._sensors.items():
                self._take_refused(name, c, self._closed.refused[name], intake)

    def live_counts(self, live_status: Mapping[str, Any]) -> LiveCounts:
        """The counts over the node's live runtimes: the closed ones' and the current one's (``live_status``)."""
        return self._closed + LiveCounts.of(live_status)

    def dropped_reopening(self, sensor: str | None) -> None:
        """A message of ``sensor`` (None: the odometry) that came while the live runtime reopened and was not
        taken (any thread)."""
        with self._lock:
            c = self._odometry if sensor is None else self._sensors.get(sensor)
            if c is not None:
                c.dropped_reopening += 1

    @staticmethod
    def _reopening(c: _SensorCounts, level: int, message: str) -> tuple[int, str]:
        """``level`` and ``message``, at least a WARN saying so if messages were dropped reopening since the last
        status."""
        new, c.reopening_seen = c.dropped_reopening - c.reopening_seen, c.dropped_reopening
        if new <= 0:
            return level, message
        said = f"{new} message(s) not taken while the live runtime reopened (the ROS clock went back)"
        return max(level, WARN), said if level == OK else f"{message}; {said}"

    def add(self, result: FrameResult) -> None:
        """Count one frame's result (any thread)."""
        with self._lock:
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

    def input_error(self, sensor: str, error: str, *, kind: str = "InputError", now_ns: int | None = None) -> int:
        """A message of ``sensor`` that could not be turned into a sample (``kind``: of error, e.g. the
        exception's type). Returns how many errors of this sensor and kind to log now, this one and those
        held back since the last line (0: none, one was logged less than the log period ago)."""
        with self._lock:
            return self._count(self._sensors[sensor], error, kind, now_ns)

    def odometry_error(self, error: str, *, kind: str = "InputError", now_ns: int | None = None) -> int:
        """An odometry message that could not be taken (as :meth:`input_error`)."""
        with self._lock:
            return self._count(self._odometry, error, kind, now_ns)

    @staticmethod
    def _count(c: _SensorCounts, error: str, kind: str, now_ns: int | None) -> int:
        c.input_errors += 1
        c.recent_input_error = True
        c.last_error = error
        now = time.monotonic_ns() if now_ns is None else now_ns
        last, held = c.logged.get(kind, (None, 0))
        if last is not None and now - last < INPUT_ERROR_LOG_PERIOD_NS:
            c.logged[kind] = (last, held + 1)
            return 0
        c.logged[kind] = (now, 0)
        return held + 1

    def recording(self, path: str, stats: Mapping[str, int], error: BaseException | None) -> Status:
        """The status of ``--record``'s recording (its recorder's ``stats`` and ``error``): ERROR once it failed
        (the node runs on unrecorded: only a log line said so), WARN while it drops items (its queue full, a
        sample the drive format refuses, a frame whose recording raised: :meth:`RunRecorder.gaps`; the
        recording has gaps, its replay names them), else OK."""
        with self._lock:
            dropped = sum(RunRecorder.gaps(stats).values())
            values = {
                "file": path,
                "frames": str(stats.get("frames", 0)),
                "fused": str(stats.get("fused", 0)),
                "samples": str(stats.get("samples", 0)),
                "segments": str(stats.get("segments", 0) - stats.get("segments_deleted", 0)),  # kept (max_segments)
                "dropped": str(dropped),
            }
            name = f"{self._node}: recording"
            if error is not None:
                return Status(name, ERROR, f"recording failed, the run goes on unrecorded: {error!s:.300}", values)
            new, self._recording_dropped = dropped - self._recording_dropped, dropped
            if new > 0:
                return Status(name, WARN, f"{new} item(s) not recorded: the recording has gaps", values)
            return Status(name, OK, "recording", values)

    def _level(self, bad: int, of: int) -> tuple[int, float]:
        if not of:
            return OK, 0.0
        rate = bad / of
        if rate >= self._ros.error_rate:
            return ERROR, rate
        if rate >= self._ros.warn_rate:
            return WARN, rate
        return OK, rate

    @staticmethod
    def _take_refused(name: str, c: _SensorCounts, refused: int, intake: Mapping[str, Any]) -> None:
        """What the live intake refused of what the node took (its own checks: the camera's calibration, the
        sensor's frame and point columns) since the last look (``refused``: in all, over the node's runtimes):
        the sensor's input errors, as the node's are; ``intake``: the runtime's that says why."""
        # fewer: a runtime replaced with no live_closed, its successor's counts from 0
        new = refused - c.refused_seen if refused >= c.refused_seen else refused
        c.refused_seen = refused
        if new > 0:
            c.input_errors += new
            c.recent_input_error = True
            c.last_error = f"{name}: {intake.get('invalid_reasons', {}).get(name, 'refused by the intake')}"

    def statuses(self, live_status: Mapping[str, Any] | None) -> list[Status]:
        """One status per sensor, then the frame budget; ``live_status``: the live runtime's status()."""
        with self._lock:
            out = []
            intake = live_status.get("intake", {}) if live_status is not None else {}
            total = self.live_counts(live_status) if live_status is not None else self._closed
            for name, c in self._sensors.items():
                if live_status is not None:  # (none open: a closing one's are counted by live_closed, once)
                    self._take_refused(name, c, total.refused[name], intake)
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
                level, message = self._reopening(c, level, message)
                values = {s: str(c.counts.get(s, 0)) for s in _STATUSES}
                values.update(
                    input_errors=str(c.input_errors),
                    last_error=c.last_error,
                    dropped_reopening=str(c.dropped_reopening),
                )
                out.append(Status(f"{self._node}: sensor {name}", level, message, values))
            odo = self._odometry
            level, message = (ERROR, f"input error: {odo.last_error}") if odo.recent_input_error else (OK, "ok")
            odo.recent_input_error = False
            level, message = self._reopening(odo, level, message)
            values = {
                "input_errors": str(odo.input_errors),
                "last_error": odo.last_error,
                "dropped_reopening": str(odo.dropped_reopening),
            }
            if live_status is not None:
                # frames whose odometry was older than live.ego_max_age_ms: their ego motion unknown
                stale = total.intake["ego_stale"]
                values["ego_stale"] = str(stale)
                if stale > odo.stale_seen and level == OK:
                    level, message = WARN, f"odometry older than the age limit in {stale - odo.stale_seen} frame(s)"
                odo.stale_seen = stale
            out.append(Status(f"{self._node}: odometry", level, message, values))
            misses = list(self._misses)
            level, rate = self._level(sum(misses), len(misses))
            values = {"frames": str(self.frames)}
            if live_status is not None:
                lat = live_status.get("latency_ms", {})
                runtime = total.runtime
                values.update(
                    frames=str(runtime["frames"]),
                    deadline_misses=str(runtime["deadline_misses"]),
                    latency_p50_ms=f"{float(lat.get('p50', 0.0)):.1f}",
                    latency_p99_ms=f"{float(lat.get('p99', 0.0)):.1f}",
                    dropped=str(runtime["dropped"]),
                    # frames shed under overload (among the dropped), each published as the tracker's prediction
                    shed_overload=str(runtime["shed"]),
                )
                # samples the live intake took in and dropped before any frame (a stamp too old, jumping, out
                # of order or repeated; a full queue or buffer): counted there, shown here, not silently lost
                values.update({f"samples_{key}": str(total.intake[key]) for key in _INTAKE_DROPS})
                # what raised in the runtime, per sensor or stage (an item dropped, a recorder's call...), and the
                # results not published (the callback queue full, or publishing raised): counted there, shown here
                values["failed"] = ", ".join(f"{k} {v}" for k, v in sorted(total.failed.items())) or "0"
                values["results_unpublished"] = str(runtime["callbacks_dropped"] + runtime["callbacks_failed"])
                # trigger slots the live assembly skipped past its catch-up limit (no frame opened for them); the
                # runtime's stream: frames whose intake waited for the results' consumer, records it did not take
                values["slots_skipped"] = str(total.intake["slots_skipped"])
                values.update({key: str(runtime[key]) for key in ("intake_held", "undelivered")})
            message = "ok" if level == OK else f"deadline missed in {rate:.0%} of the last {len(self._misses)} frames"
            out.append(Status(f"{self._node}: frame budget", level, message, values))
            return out
