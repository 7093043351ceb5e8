"""One JSON record per frame (``detections.jsonl``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from perception.types import Detection3D, FrameResult, SensorStatus

__all__ = ["detection_json", "frame_record"]


def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


def _f(x: float, nd: int = 3) -> float | None:
    return None if not math.isfinite(x) else round(float(x), nd)


def detection_json(d: Detection3D) -> dict[str, Any]:
    return {
        "id": d.id,
        "label": d.label,
        "score": _f(d.score, 4),
        "center": [_f(v) for v in d.center],
        "size": [_f(v) for v in d.size],
        "yaw": _f(d.yaw, 4),
        "velocity": [_f(v) for v in d.velocity],
        "uncertainty": [_f(v) for v in d.uncertainty],
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
