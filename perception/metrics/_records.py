"""One JSON record per frame (``detections.jsonl``): written by :func:`frame_record`, read back as a
:class:`FrameRecord` by :func:`read_frame_records`, the one reader (viz, the fleet's baseline gate),
which validates what it reads like :meth:`RunReport.from_json`: anything malformed is a
:class:`ConfigError` naming the file, the line and the key."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perception.errors import ConfigError
from perception.metrics._run_report import _Reader
from perception.types import Detection3D, FrameResult, FrameStatus, SensorStatus

__all__ = ["FrameRecord", "SensorRecord", "detection_json", "frame_record", "read_frame_records"]

log = logging.getLogger(__name__)


def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


def _f(x: float, nd: int = 3) -> float | None:
    return None if not math.isfinite(x) else round(float(x), nd)


def _fs(xs: tuple[float, ...]) -> list[float | None]:
    """``[_f(x) for x in xs]`` without a call per value (a frame's records hold hundreds of them)."""
    isfinite = math.isfinite
    return [round(float(x), 3) if isfinite(x) else None for x in xs]


def detection_json(d: Detection3D) -> dict[str, Any]:
    return {
        "id": d.id,
        "label": d.label,
        "score": _f(d.score, 4),
        "center": _fs(d.center),
        "size": _fs(d.size),
        "yaw": _f(d.yaw, 4),
        "velocity": _fs(d.velocity),
        "uncertainty": _fs(d.uncertainty),
        "sources": list(d.sources),
    }


def _array_json(arr: Any) -> Any:
    """Nested lists; non-finite floats become ``null`` (JSON has no NaN)."""
    a = np.asarray(arr)
    if a.dtype.kind != "f":
        return a.tolist()
    out = np.round(a.astype(np.float64), 4).astype(object)
    out[~np.isfinite(a)] = None
    return out.tolist()


def _server_json(r: FrameResult, latency: dict[str, Any]) -> None:
    """Triton's time per model, the reasons where it is unknown, and for each sensor whose split is
    missing, why (its model's reason, or a request shared with others of the frame)."""
    latency["server"] = {
        m: {k: (v if k == "requests" else _ms(v)) for k, v in e.items()} for m, e in r.latency.server.items()
    }
    if r.latency.server_unavailable:
        latency["server_unavailable"] = dict(r.latency.server_unavailable)
    sensors = latency.setdefault("sensors", {})
    for name, s in r.sensors.items():
        if s.status is not SensorStatus.OK or s.model is None or "server_total" in r.latency.sensors.get(name, {}):
            continue
        why = r.latency.server_unavailable.get(s.model)
        entry = r.latency.server.get(s.model)
        if why is None and entry is not None and entry.get("requests", 0) > 1:
            why = f"{entry['requests']} requests to {s.model} in this frame: only their sum is known (server.{s.model})"
        if why is not None:
            sensors.setdefault(name, {})["server_unavailable"] = why


def frame_record(r: FrameResult, *, include_outputs: bool = False) -> dict[str, Any]:
    """The JSON record of one frame: status, per-sensor status/latency/error, detections, latency tree."""
    sensors: dict[str, Any] = {}
    for name, s in r.sensors.items():
        entry: dict[str, Any] = {"status": s.status.value, "latency_ms": _ms(s.latency_ns)}
        if s.model:
            entry["model"] = s.model
            if s.model_version:
                entry["model_version"] = s.model_version
        if s.error:
            entry["error"] = s.error
        if s.sample_t_ns is not None:
            entry["sample_t_ns"] = s.sample_t_ns
        if s.reused_age_ns is not None:
            entry["reused_age_ms"] = _ms(s.reused_age_ns)
        if include_outputs and s.outputs:
            entry["outputs"] = {k: _array_json(v) for k, v in s.outputs.items()}
        sensors[name] = entry
    latency: dict[str, Any] = {"total": _ms(r.latency.total_ns)}
    latency.update({k: _ms(v) for k, v in r.latency.stages.items()})
    if r.latency.sensors:
        latency["sensors"] = {s: {k: _ms(v) for k, v in st.items()} for s, st in r.latency.sensors.items()}
    if r.latency.server or r.latency.server_unavailable:
        _server_json(r, latency)
    rec: dict[str, Any] = {
        "frame_id": r.frame_id,
        "t_ns": r.t_ns,
        "status": r.status.value,
        "deadline_missed": r.deadline_missed,
        "sensors": sensors,
        "detections": [detection_json(d) for d in r.detections],
        "latency_ms": latency,
    }
    if r.reason:
        rec["reason"] = r.reason
    if r.predicted:
        rec["predicted"] = True
    return rec


# -- reading ------------------------------------------------------------------------------------------------
_FRAME_STATUS = frozenset(s.value for s in FrameStatus)
_SENSOR_STATUS = frozenset(s.value for s in SensorStatus)


@dataclass(frozen=True, slots=True)
class SensorRecord:
    """A sensor's entry of a frame record (``sensors.NAME``)."""

    status: str  # a SensorStatus value
    latency_ms: float
    model: str | None = None
    model_version: str | None = None
    error: str | None = None
    #: The time of the sample the frame used (absent when it had none).
    sample_t_ns: int | None = None
    #: The model's raw outputs as nested lists (None unless the replay kept them).
    outputs: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class FrameRecord:
    """One line of ``detections.jsonl`` (:func:`frame_record` writes it), typed.

    ``latency_ms`` is the frame's latency tree as written; ``total_ms``, ``stage_ms`` (a stage's time:
    every number beside ``total``) and ``sensor_total_ms`` (each sensor's ``total``) are its timings.
    Detections read back are rounded as written, non-finite values ``nan``.
    """

    frame_id: int
    t_ns: int
    status: str  # a FrameStatus value
    deadline_missed: bool
    sensors: Mapping[str, SensorRecord]
    detections: tuple[Detection3D, ...]
    latency_ms: Mapping[str, Any]
    total_ms: float
    stage_ms: Mapping[str, float]
    sensor_total_ms: Mapping[str, float]
    reason: str | None = None

    @classmethod
    def from_json(cls, data: Any, *, file: str | None = None, line: int | None = None) -> FrameRecord:
        """The record of one decoded line; anything malformed is a :class:`ConfigError` naming
        ``file``, ``line`` and the key."""
        r = _LineReader(file, line)
        rec = r.obj(data, "record")
        status = r.text(r.required(rec, "status"), "status")
        if status not in _FRAME_STATUS:
            raise r.error(f"unknown frame status {status!r}", "status")
        deadline = rec.get("deadline_missed", False)
        if not isinstance(deadline, bool):
            raise r.error(f"expected true or false, got {deadline!r}", "deadline_missed")
        reason = rec.get("reason")
        latency = r.obj(r.required(rec, "latency_ms"), "latency_ms")
        sensor_totals = {}
        for name, entry in r.obj(latency.get("sensors", {}), "latency_ms.sensors").items():
            stages = r.obj(entry, f"latency_ms.sensors.{name}")
            if "total" in stages:
                sensor_totals[name] = r.number(stages["total"], f"latency_ms.sensors.{name}.total")
        return cls(
            frame_id=r.integer(r.required(rec, "frame_id"), "frame_id"),
            t_ns=r.integer(r.required(rec, "t_ns"), "t_ns"),
            status=status,
            deadline_missed=deadline,
            sensors={
                name: _sensor(r, entry, f"sensors.{name}")
                for name, entry in r.obj(rec.get("sensors", {}), "sensors").items()
            },
            detections=tuple(
                _detection(r, d, f"detections[{i}]")
                for i, d in enumerate(_list(r, r.required(rec, "detections"), "detections"))
            ),
            latency_ms=latency,
            total_ms=r.number(r.required(latency, "total", "latency_ms."), "latency_ms.total"),
            stage_ms={
                k: r.number(v, f"latency_ms.{k}")
                for k, v in latency.items()
                if k != "total" and isinstance(v, int | float) and not isinstance(v, bool)
            },
            sensor_total_ms=sensor_totals,
            reason=None if reason is None else r.text(reason, "reason"),
        )


class _LineReader(_Reader):
    """:class:`RunReport`'s typed reads, each failure a :class:`ConfigError` naming file, line and key."""

    def __init__(self, file: str | None, line: int | None) -> None:
        super().__init__(file)
        self.line = line

    def error(self, message: str, key: str | None = None) -> ConfigError:  # type: ignore[override]
        where = f"line {self.line}: " if self.line is not None else ""
        return ConfigError(f"{where}{message}", file=self.file, key=key)


def _list(r: _LineReader, value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise r.error(f"expected a list, got {type(value).__name__}", key)
    return value


def _floats(r: _LineReader, d: Mapping[str, Any], name: str, key: str, n: int) -> list[float]:
    """``n`` numbers, ``null`` read as ``nan`` (how non-finite values are written)."""
    items = _list(r, r.required(d, name, key + "."), f"{key}.{name}")
    if len(items) != n:
        raise r.error(f"expected {n} numbers, got {len(items)}", f"{key}.{name}")
    return [math.nan if v is None else r.number(v, f"{key}.{name}[{i}]") for i, v in enumerate(items)]


def _sensor(r: _LineReader, value: Any, key: str) -> SensorRecord:
    entry = r.obj(value, key)
    status = r.text(r.required(entry, "status", key + "."), key + ".status")
    if status not in _SENSOR_STATUS:
        raise r.error(f"unknown sensor status {status!r}", key + ".status")
    t = entry.get("sample_t_ns")
    outputs = entry.get("outputs")

    def opt_text(name: str) -> str | None:
        v = entry.get(name)
        return None if v is None else r.text(v, f"{key}.{name}")

    return SensorRecord(
        status=status,
        latency_ms=r.number(entry.get("latency_ms", 0.0), key + ".latency_ms"),
        model=opt_text("model"),
        model_version=opt_text("model_version"),
        error=opt_text("error"),
        sample_t_ns=None if t is None else r.integer(t, key + ".sample_t_ns"),
        outputs=None if outputs is None else r.obj(outputs, key + ".outputs"),
    )


def _detection(r: _LineReader, value: Any, key: str) -> Detection3D:
    d = r.obj(value, key)
    score, yaw = r.required(d, "score", key + "."), r.required(d, "yaw", key + ".")
    sources = _list(r, r.required(d, "sources", key + "."), key + ".sources")
    cx, cy, cz = _floats(r, d, "center", key, 3)
    sx, sy, sz = _floats(r, d, "size", key, 3)
    vx, vy = _floats(r, d, "velocity", key, 2)
    ux, uy = _floats(r, d, "uncertainty", key, 2)
    return Detection3D(
        id=r.integer(r.required(d, "id", key + "."), key + ".id"),
        label=r.text(r.required(d, "label", key + "."), key + ".label"),
        score=math.nan if score is None else r.number(score, key + ".score"),
        center=(cx, cy, cz),
        size=(sx, sy, sz),
        yaw=math.nan if yaw is None else r.number(yaw, key + ".yaw"),
        velocity=(vx, vy),
        uncertainty=(ux, uy),
        sources=tuple(r.text(s, f"{key}.sources[{i}]") for i, s in enumerate(sources)),
    )


def read_frame_records(path: str | Path) -> list[FrameRecord]:
    """The records of a ``detections.jsonl``, in file order, validated (:meth:`FrameRecord.from_json`).

    An unreadable *last* line (a write cut short: the replay was killed) is skipped with a warning;
    any other unreadable line, a malformed record or a frame recorded twice is a :class:`ConfigError`
    naming the file and the line (and the key).
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the frame records: {getattr(e, 'strerror', None) or e}", file=str(path)) from e
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    out: list[FrameRecord] = []
    seen: set[int] = set()
    for i, (n, line) in enumerate(numbered):
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(numbered) - 1:
                log.warning("%s:%d: unreadable last record skipped (a write cut short)", path, n)
                continue
            raise ConfigError(f"line {n}: not valid JSON ({e.msg})", file=str(path)) from e
        rec = FrameRecord.from_json(data, file=str(path), line=n)
        if rec.frame_id in seen:
            raise ConfigError(f"line {n}: frame {rec.frame_id} recorded twice", file=str(path), key="frame_id")
        seen.add(rec.frame_id)
        out.append(rec)
    return out
