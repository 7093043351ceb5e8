"""Stable digests of a frame's fusion: its inputs, its decisions, its fused output and the tracker state.

A digest is SHA-256 over a canonical serialisation: keys sorted, integers as they are, and every float
quantised to :data:`RESOLUTION` (``round(x / RESOLUTION)`` as a 64-bit integer; NaN, +inf and -inf as
their own markers). Why quantise: the same computation on the same inputs on the same machine gives the
same bits, so there two runs' digests are equal exactly; but floats are NOT bit-identical across CPU
models (fused multiply-add, vector widths, libm), so a recording made on the vehicle and replayed on a
workstation can differ in the last bits. Quantised, such runs still agree -- except where a value lies
within a rounding error of a quantisation boundary: cross-machine comparison holds within the resolution,
not bit for bit. Values beyond +-9e14 (never a position, score or covariance) are clipped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.types import Detection3D, EgoPose, SensorResult

__all__ = [
    "RESOLUTION",
    "decisions_digest",
    "detections_digest",
    "outputs_digest",
    "tracker_digest",
]

#: Floats are compared to this resolution (metres, radians, m/s, scores, variances).
RESOLUTION = 1e-4
_LIMIT = 9e14  # |x| / RESOLUTION stays well inside int64


def _quantise(a: npt.ArrayLike) -> bytes:
    x = np.asarray(a, dtype=np.float64)
    finite = np.isfinite(x)
    q = np.where(finite, np.rint(np.clip(np.where(finite, x, 0.0), -_LIMIT, _LIMIT) / RESOLUTION), 0.0)
    marks = np.where(np.isnan(x), 1, np.where(x == np.inf, 2, np.where(x == -np.inf, 3, 0))).astype(np.int8)
    return q.astype("<i8").tobytes() + marks.tobytes()


def _array(h: Any, name: str, a: npt.NDArray[Any]) -> None:
    h.update(f"{name}:{a.dtype.kind}:{a.shape}|".encode())
    if a.dtype.kind == "f":
        h.update(_quantise(a))
    else:
        h.update(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes())


def _floats(values: Sequence[float]) -> str:
    return _quantise(np.asarray(values, np.float64)).hex()


def _json(h: Any, value: Any) -> None:
    h.update(json.dumps(value, sort_keys=True, separators=(",", ":")).encode())


def outputs_digest(results: Mapping[str, SensorResult]) -> str:
    """The model answers fusion consumed: each ok sensor's model, version and output tensors."""
    h = hashlib.sha256()
    for name in sorted(results):
        r = results[name]
        if r.status.value != "ok":
            continue
        _json(h, [name, r.model, r.model_version])
        for key in sorted(r.outputs):
            _array(h, key, np.asarray(r.outputs[key]))
    return h.hexdigest()


def decisions_digest(
    seq: int, frame_id: int, t_ns: int, statuses: Mapping[str, str], stamps: Mapping[str, int | None],
    ego: EgoPose | None,
) -> str:  # fmt: skip
    """The runtime's decisions for one frame reaching fusion: its place in the fusion order, each sensor's
    status and the sample stamp it used, and the ego pose the frame carried."""
    h = hashlib.sha256()
    _json(h, [seq, frame_id, t_ns, dict(sorted(statuses.items())), dict(sorted(stamps.items()))])
    if ego is not None:
        pose = ego.pose
        _json(h, [ego.t_ns, _floats([*pose.translation, *pose.rotation, *ego.linear_velocity, ego.yaw_rate])])
    return h.hexdigest()


def detections_digest(detections: Sequence[Detection3D]) -> str:
    """The fused output: every detection's id, label, sources and (quantised) values, in output order."""
    h = hashlib.sha256()
    for d in detections:
        values = [d.score, *d.center, *d.size, d.yaw, *d.velocity, *d.uncertainty]
        _json(h, [d.id, d.label, list(d.sources), _floats(values)])
    return h.hexdigest()


def tracker_digest(state: Mapping[str, npt.NDArray[Any]]) -> str:
    """The tracker's state after a frame (``perception.fusion.Fuser.tracker_state``)."""
    h = hashlib.sha256()
    for key in sorted(state):
        _array(h, key, np.asarray(state[key]))
    return h.hexdigest()
