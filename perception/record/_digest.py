"""Stable digests of a frame's fusion: its inputs, its decisions, its fused output and the tracker state.

A digest is SHA-256 over a canonical serialisation: keys sorted, integers as they are, and every float
quantised to :data:`RESOLUTION` (``round(x / RESOLUTION)`` as a 64-bit integer; NaN, +inf and -inf as
their own markers). Why quantise: the same computation on the same inputs on the same machine gives the
same bits, so there two runs' digests are equal exactly; but floats are NOT bit-identical across CPU
models (fused multiply-add, vector widths, libm), so a recording made on the vehicle and replayed on a
workstation can differ in the last bits. Quantised, such runs still agree -- except where a value lies
within a rounding error of a quantisation boundary: cross-machine comparison holds within the resolution,
not bit for bit. Values beyond +-9e14 (never a position, score or covariance) are clipped.

Who computes them: a recording of formats 1-3 holds the digests its run computed (the run's writer thread,
per frame). A recording of format 4 holds none: it holds every value they cover bit for bit (the
detections' values, the raw outputs' bytes, the decisions, the tracker state), and its reader digests
those with these very functions (``perception.record._format.fusion_digests``) -- the digest the run
would have computed, at no cost to the run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.types import Detection3D, EgoPose, SensorResult, SensorStatus

__all__ = [
    "RESOLUTION",
    "Layout",
    "decisions_digest",
    "detection_values",
    "detections_digest",
    "outputs_digest",
    "recorded_arrays",
    "recorded_outputs",
    "recorded_outputs_digest",
    "tracker_difference",
    "tracker_digest",
]

#: Floats are compared to this resolution (metres, radians, m/s, scores, variances).
RESOLUTION = 1e-4
_LIMIT = 9e14  # |x| / RESOLUTION stays well inside int64
_Buffer = bytes | memoryview


def _quantised(x: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int8]]:
    """The quantised values (``<i8``) and the marks (``i1``: 0 finite, 1 NaN, 2 +inf, 3 -inf) of ``x``."""
    if not x.size or (x.min() >= -_LIMIT and x.max() <= _LIMIT):  # the common case: finite, within the limit
        # (a NaN fails both comparisons), nothing to clip or mark, in a third of the numpy calls (the same bits)
        return np.rint(x / RESOLUTION).astype("<i8"), np.zeros(x.shape, np.int8)
    finite = np.isfinite(x)
    q = np.where(finite, np.rint(np.clip(np.where(finite, x, 0.0), -_LIMIT, _LIMIT) / RESOLUTION), 0.0)
    marks = np.where(np.isnan(x), 1, np.where(x == np.inf, 2, np.where(x == -np.inf, 3, 0))).astype(np.int8)
    return q.astype("<i8"), marks


def _quantised_bytes(x: npt.NDArray[np.float64]) -> tuple[bytes, bytes]:
    """:func:`_quantised`'s arrays' bytes (the common case's marks, all 0, without an array)."""
    if not x.size or (x.min() >= -_LIMIT and x.max() <= _LIMIT):
        scaled = x / RESOLUTION
        return np.rint(scaled, out=scaled).astype("<i8").tobytes(), bytes(x.size)  # rounded in place
    q, marks = _quantised(x)
    return q.tobytes(), marks.tobytes()


def _quantise(a: npt.ArrayLike) -> bytes:
    q, marks = _quantised_bytes(np.asarray(a, dtype=np.float64))
    return q + marks


def _values(arrays: Sequence[npt.NDArray[Any]]) -> list[tuple[_Buffer, ...]]:
    """Each array's values as digested, as buffers (views: hashed as they are, not joined first): floats
    quantised (:func:`_quantise`; all of them at once: a frame's dozens of small arrays cost one
    quantisation, not one each), other dtypes little-endian."""
    floats = [a for a in arrays if a.dtype.kind == "f"]
    if floats:
        qb, mb = _quantised_bytes(np.concatenate([a.ravel() for a in floats]).astype(np.float64, copy=False))
        qv, mv = memoryview(qb), memoryview(mb)
    out: list[tuple[_Buffer, ...]] = []
    start = 0
    for a in arrays:
        if a.dtype.kind == "f":
            end = start + a.size
            out.append((qv[8 * start : 8 * end], mv[start:end]))
            start = end
        else:
            out.append((a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes(),))
    return out


def _arrays(h: Any, arrays: Sequence[tuple[str, npt.NDArray[Any]]], values: Sequence[tuple[_Buffer, ...]]) -> None:
    """Each array's header (``name:kind:shape|``) and values (:func:`_values`) into the hash ``h``."""
    for (name, a), v in zip(arrays, values, strict=True):
        h.update(_header(name, a.dtype.kind, a.shape))
        for buffer in v:
            h.update(buffer)


@functools.lru_cache(maxsize=1024)
def _header(name: str, kind: str, shape: tuple[int, ...]) -> bytes:
    return f"{name}:{kind}:{shape}|".encode()


def _floats(values: Sequence[float]) -> str:
    """:func:`_quantise`'s hex of a few floats; finite ones within the limit (the usual case) in plain
    Python: ``round`` is ``np.rint`` (half to even) of the same quotient, the same bits without numpy's calls."""
    if all(-_LIMIT <= v <= _LIMIT for v in values):  # a NaN fails the comparison
        n = len(values)
        return (_int64s(n).pack(*[round(float(v) / RESOLUTION) for v in values]) + bytes(n)).hex()
    return _quantise(np.asarray(values, np.float64)).hex()


@functools.lru_cache(maxsize=16)
def _int64s(n: int) -> struct.Struct:
    return struct.Struct(f"<{n}q")


#: json.dumps(value, sort_keys=True, separators=(",", ":")), without building an encoder per call.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def _json(h: Any, value: Any) -> None:
    h.update(_ENCODER.encode(value).encode())


def outputs_digest(results: Mapping[str, SensorResult]) -> str:
    """The model answers fusion consumed: each ok sensor's model, version and output tensors."""
    ok = [(name, results[name]) for name in sorted(results) if results[name].status.value == "ok"]
    arrays = [[(key, np.asarray(r.outputs[key])) for key in sorted(r.outputs)] for _, r in ok]
    values = iter(_values([a for sensor in arrays for _, a in sensor]))
    h = hashlib.sha256()
    for (name, r), sensor in zip(ok, arrays, strict=True):
        _json(h, [name, r.model, r.model_version])
        _arrays(h, sensor, [next(values) for _ in sensor])
    return h.hexdigest()


#: A sensor's outputs' layout in a recording: (key, dtype, shape) of each array, keys sorted.
Layout = tuple[tuple[str, str, tuple[int, ...]], ...]


def recorded_outputs(results: Mapping[str, SensorResult]) -> tuple[dict[str, Layout], bytes]:
    """The model answers fusion consumed, as a recording (formats 3 and 4) holds them: each ok sensor's
    outputs' layout (``{sensor: ((key, dtype, shape), ...)}``, sensors and keys sorted; the record's JSON has
    it as ``{key: [dtype, shape]}``) and the arrays' bytes in that order (little-endian, C order, each padded
    to 8 bytes: read back aligned) -- what the recording holds is what it was given, bit for bit."""
    layout: dict[str, Layout] = {}
    parts: list[bytes] = []
    for name in sorted(results):
        r = results[name]
        if r.status is not SensorStatus.OK:
            continue
        outputs = r.outputs
        arrays: list[tuple[str, str, tuple[int, ...]]] = []
        for key in sorted(outputs):
            a = outputs[key]
            if type(a) is not np.ndarray:
                a = np.asarray(a)
            dtype = a.dtype
            code = _CODES.get(dtype)
            if code is None:
                if dtype.byteorder == ">":
                    a = a.astype(dtype.newbyteorder("<"))
                code = _code(a.dtype)
            raw = a.tobytes()
            arrays.append((key, code, a.shape))
            parts.append(raw)
            pad = -len(raw) % 8
            if pad:
                parts.append(_PAD[:pad])
        layout[name] = tuple(arrays)
    return layout, b"".join(parts)


#: Little-endian (or byte-order-less) dtypes -> their ``str`` (an attribute numpy builds anew each time).
_CODES: dict[np.dtype[Any], str] = {}


def _code(dtype: np.dtype[Any]) -> str:
    """``dtype``'s ``str`` (a little-endian or byte-order-less one), remembered."""
    code: str = dtype.str
    if len(_CODES) < 256:
        _CODES[dtype] = code
    return code


def recorded_outputs_digest(results: Mapping[str, SensorResult]) -> str:
    """The model answers fusion consumed, exactly (formats 3 and 4): the SHA-256 of the ok sensors' models,
    versions and layouts (JSON) followed by :func:`recorded_outputs`' bytes (no quantisation: the bytes are
    the bytes; :func:`outputs_digest` compares answers across machines). A recording of format 3 holds it
    as the run computed it; one of format 4 is digested when read (of the recorded bytes: the same)."""
    layout, data = recorded_outputs(results)
    models = [_model_json(n, results[n].model, results[n].model_version, shapes) for n, shapes in layout.items()]
    h = hashlib.sha256(("[" + ",".join(models) + "]").encode())
    h.update(data)
    return h.hexdigest()


def recorded_arrays(arrays: Mapping[str, npt.NDArray[Any]]) -> tuple[Layout, list[_Buffer]]:
    """Arrays as a recording (format 4: the tracker state) holds them: their layout (keys sorted) and their
    buffers in that order, each little-endian in C order and padded to 8 bytes (views of the arrays when
    they are so already: they must not change until written)."""
    layout: list[tuple[str, str, tuple[int, ...]]] = []
    parts: list[_Buffer] = []
    for key in sorted(arrays):
        a = np.asarray(arrays[key])
        if a.dtype.byteorder == ">" or not a.flags.c_contiguous:
            a = np.ascontiguousarray(a, a.dtype.newbyteorder("<"))
        layout.append((key, a.dtype.str, a.shape))
        parts.append(a.data.cast("B") if a.size else b"")
        pad = -a.nbytes % 8
        if pad:
            parts.append(_PAD[:pad])
    return tuple(layout), parts


@functools.lru_cache(maxsize=256)
def _model_json(name: str, model: str | None, version: str, layout: Layout) -> str:
    """``[name, model, version, {key: [dtype, shape]}]`` as :data:`_ENCODER` writes it, remembered."""
    return _ENCODER.encode([name, model, version, {k: [d, list(shape)] for k, d, shape in layout}])


_PAD = bytes(8)


def detection_values(detections: Sequence[Detection3D]) -> npt.NDArray[np.float64]:
    """The detections' float fields, one row each (``(n, 12)``): score, center, size, yaw, velocity,
    uncertainty -- what :func:`detections_digest` quantises and a recording (format 3) writes as is."""
    # packed as C doubles (what numpy makes of each number too), not a list of rows numpy has to explore: the
    # same bits at half the cost
    flat: list[float] = []
    for d in detections:
        flat.append(d.score)
        flat += d.center
        flat += d.size
        flat.append(d.yaw)
        flat += d.velocity
        flat += d.uncertainty
    if len(flat) != 12 * len(detections):
        raise ValueError("a detection's center, size, velocity or uncertainty has the wrong length")
    return np.frombuffer(_doubles(len(flat)).pack(*flat), np.float64).reshape(len(detections), 12)


@functools.lru_cache(maxsize=64)
def _doubles(n: int) -> struct.Struct:
    return struct.Struct(f"={n}d")


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


def detections_digest(detections: Sequence[Detection3D], values: npt.NDArray[np.float64] | None = None) -> str:
    """The fused output: every detection's id, label, sources and (quantised) values, in output order
    (``values``: :func:`detection_values` of them, when already taken)."""
    h = hashlib.sha256()
    if not detections:
        return h.hexdigest()
    # Each detection is its JSON ``[id, label, sources, values]`` (values: ``_floats``'s hex), all of them
    # quantised at once and written without an encoder call per detection: the same bytes, a third the cost.
    if values is None:
        values = detection_values(detections)
    qb, mb = _quantised_bytes(values)
    qhex, mhex = qb.hex(), mb.hex()
    nq, nm = 16 * values.shape[1], 2 * values.shape[1]  # hex digits of a row's quantised values and marks
    rows = [qhex[i : i + nq] for i in range(0, len(qhex), nq)]
    marks = [mhex[i : i + nm] for i in range(0, len(mhex), nm)]
    text = "".join([
        f'[{int(d.id)},{_encoded(d.label, d.sources)},"{q}{m}"]'
        for d, q, m in zip(detections, rows, marks, strict=True)
    ])  # fmt: skip
    h.update(text.encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=1024)
def _encoded(label: str, sources: tuple[str, ...]) -> str:
    """A detection's label and sources in its JSON (``label,sources`` as :func:`_json` writes them in a
    list), remembered."""
    return f"{_ENCODER.encode(label)},{_ENCODER.encode(list(sources))}"


def tracker_digest(state: Mapping[str, npt.NDArray[Any]]) -> str:
    """The tracker's state after a frame (``perception.fusion.Fuser.tracker_state``)."""
    arrays = [(key, np.asarray(state[key])) for key in sorted(state)]
    h = hashlib.sha256()
    _arrays(h, arrays, _values([a for _, a in arrays]))
    return h.hexdigest()


def tracker_difference(then: Mapping[str, npt.NDArray[Any]], now: Mapping[str, npt.NDArray[Any]]) -> str | None:
    """Where two tracker states first differ as :func:`tracker_digest` sees them (arrays by name, sorted;
    floats quantised): the array and its first differing element (a table's row first), with both values;
    None when the digests would be equal."""
    for key in sorted(set(then) | set(now)):
        if key not in now:
            return f"{key!r} recorded, not in today's state"
        if key not in then:
            return f"{key!r} in today's state, not recorded"
        a, b = np.asarray(then[key]), np.asarray(now[key])
        if (a.dtype.kind, a.shape) != (b.dtype.kind, b.shape):
            return f"{key!r}: {a.dtype.kind}{list(a.shape)} recorded, {b.dtype.kind}{list(b.shape)} today"
        if a.dtype.kind == "f":
            (qa, ma), (qb, mb) = _quantised(a.astype(np.float64)), _quantised(b.astype(np.float64))
            differ = (qa != qb) | (ma != mb)
        else:
            differ = a != b
        if a.ndim == 0:
            a, b, differ = a.reshape(1), b.reshape(1), differ.reshape(1)
        where = np.argwhere(differ)
        if where.size:
            at = tuple(int(i) for i in where[0])
            place = f" row {at[0]}, column {', '.join(map(str, at[1:]))}" if len(at) >= 2 else f"{list(at)}"
            return f"{key!r}{place}: {a[at].item()!r} recorded, {b[at].item()!r} today"
    return None
