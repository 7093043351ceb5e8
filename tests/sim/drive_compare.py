"""Semantic comparison of two drives: what a drive recomputed on another CPU must still equal.

Floats are not bit-identical across CPU models (numpy's SIMD transcendentals and libm differ by an
ulp), so a drive regenerated elsewhere is compared message by message, decoded, at tolerances the
format justifies -- not byte for byte:

* **exact**: the header, schemas, channels, metadata records, and for every message (in file order)
  its topic, ``log_time``, ``publish_time``, ``sequence``; every integer, enum, bool, string and
  timestamp inside the messages; repeated-field lengths (so the number of points, of objects);
  bytes other than point data and images.
* **doubles** (poses, ground-truth boxes, velocities, quaternions, intrinsics): within
  ``DOUBLE_ATOL`` = 2e-6 (plus ``DOUBLE_RTOL`` = 1e-12 of the value). The simulator rounds the doubles
  it writes to a 1 µm / 1e-8 rad / 1e-9 grid (``perception/sim/_precision.py``), so an ulp-level
  difference changes a value only at a rounding tie, and then by one grid step (1e-6); the rig's
  doubles are exact decimal inputs through a couple of sin/cos (ulp-level). Two grid steps pass; a
  real change (1e-3 m is 500 times the tolerance) fails. Ground-truth ``yaw`` (a ``repr()`` string in
  the entity metadata) is compared as a number modulo 2 pi, quaternions up to sign (``q`` and ``-q``
  are the same rotation: a yaw at +pi vs -pi).
* **point data** (packed float32): within ``FLOAT32_RTOL`` = 2**-20 (8 float32 ulps) of the value plus
  ``FLOAT32_ATOL`` = 1e-6 (m, m/s, dB or intensity). The float64 math is rounded to float32 when
  written, so a few-ulp float64 difference moves a float32 by one ulp at most; non-finite values and
  their positions must match exactly.
* **JPEG images**: equal bytes, or decoded pixels that differ in at most ``IMAGE_CHANGED_FRACTION``
  = 0.5 % of the values and by at most ``IMAGE_MAX_LEVELS`` = 16 levels. The renderer rounds its floats
  to uint8 before encoding, so an ulp-level difference flips at most a pixel that sat on a rounding
  tie, by one level; JPEG spreads that over its 16x16 block (a few levels, measured: 4 for 3 flipped
  pixels at quality 80). Moving an object or changing the exposure changes far more, or by far more.

A discrete flip (a lidar ray grazing an edge by less than an ulp, a value exactly on a rounding tie
of both float32 and the grid) would show here, named; its probability is ~1e-7 per value or less.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from mcap.reader import make_reader
from PIL import Image

from perception.drives import _codec as codec

DOUBLE_ATOL = 2e-6
DOUBLE_RTOL = 1e-12
FLOAT32_RTOL = 2.0**-20
FLOAT32_ATOL = 1e-6
IMAGE_CHANGED_FRACTION = 0.005
IMAGE_MAX_LEVELS = 16

#: entity metadata values that are numbers written with repr(); compared as doubles
FLOAT_METADATA = frozenset({"yaw", "vx", "vy"})
ANGLE_METADATA = frozenset({"yaw"})


@dataclass(frozen=True, slots=True)
class _Message:
    topic: str
    schema: str
    log_time: int
    publish_time: int
    sequence: int
    data: bytes


def _messages(path: Path) -> tuple[dict[str, Any], list[_Message]]:
    """The file-level records (header, schemas, channels, metadata) and every message in file order."""
    with path.open("rb") as f:
        reader = make_reader(f)
        header = reader.get_header()
        summary = reader.get_summary()
        assert summary is not None, f"{path}: no summary"
        records: dict[str, Any] = {
            "header": (header.profile, header.library),
            "schemas": sorted((s.name, s.encoding, bytes(s.data)) for s in summary.schemas.values()),
            "channels": sorted(
                (c.id, c.topic, c.message_encoding, summary.schemas[c.schema_id].name,
                 tuple(sorted(c.metadata.items())))
                for c in summary.channels.values()
            ),
            "metadata": [(m.name, tuple(sorted(m.metadata.items()))) for m in reader.iter_metadata()],
        }
        msgs = [
            _Message(c.topic, s.name if s else "", m.log_time, m.publish_time, m.sequence, bytes(m.data))
            for s, c, m in reader.iter_messages(log_time_order=False)
        ]
    return records, msgs


def _close(a: float, b: float, *, angle: bool = False) -> bool:
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return (math.isnan(a) and math.isnan(b)) or a == b
    d = abs(a - b)
    if angle:
        d = abs(math.remainder(a - b, 2 * math.pi))
    return d <= DOUBLE_ATOL + DOUBLE_RTOL * max(abs(a), abs(b))


def point_data_differences(a: bytes, b: bytes) -> str | None:
    """``None`` if two packed float32 buffers agree within the float32 tolerance, else the worst point."""
    if len(a) != len(b) or len(a) % 4:
        return f"{len(a)} vs {len(b)} bytes"
    x, y = np.frombuffer(a, np.float32), np.frombuffer(b, np.float32)
    fx, fy = np.isfinite(x), np.isfinite(y)
    if not np.array_equal(fx, fy) or x[~fx].tobytes() != y[~fy].tobytes():
        return "non-finite values differ"
    xd, yd = np.where(fx, x, 0).astype(np.float64), np.where(fy, y, 0).astype(np.float64)
    err = np.abs(xd - yd) - (FLOAT32_ATOL + FLOAT32_RTOL * np.maximum(np.abs(xd), np.abs(yd)))
    worst = int(np.argmax(err))
    if err[worst] > 0:
        return f"float {worst}: {x[worst]!r} vs {y[worst]!r}"
    return None


def image_differences(a: bytes, b: bytes) -> str | None:
    """``None`` if two encoded images are equal or decode within the JPEG tolerance."""
    if a == b:
        return None
    x = np.asarray(Image.open(io.BytesIO(a)).convert("RGB"), np.int16)
    y = np.asarray(Image.open(io.BytesIO(b)).convert("RGB"), np.int16)
    if x.shape != y.shape:
        return f"image shape {x.shape} vs {y.shape}"
    d = np.abs(x - y)
    changed, worst = float((d > 0).mean()), int(d.max())
    if changed > IMAGE_CHANGED_FRACTION or worst > IMAGE_MAX_LEVELS:
        return f"{changed:.2%} of pixel values differ, by up to {worst} levels"
    return None


def repeated(fd: FieldDescriptor) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 5.28; ``label`` before (deprecated since)
    return bool(flag) if flag is not None else fd.label == FieldDescriptor.LABEL_REPEATED


def _fields(msg: Any) -> Iterator[tuple[FieldDescriptor, Any]]:
    for fd in msg.DESCRIPTOR.fields:
        yield fd, getattr(msg, fd.name)


def _walk(path: str, a: Any, b: Any, bytes_cmp: Callable[[str, bytes, bytes], str | None], out: list[str]) -> None:
    """Every field of two messages of one type, recursively."""
    kind = a.DESCRIPTOR.full_name
    if kind == "foxglove.Quaternion":
        qa, qb = (a.x, a.y, a.z, a.w), (b.x, b.y, b.z, b.w)
        if not (all(map(_close, qa, qb)) or all(_close(p, -q) for p, q in zip(qa, qb, strict=True))):
            out.append(f"{path}: quaternion {qa} vs {qb}")
        return
    if kind == "foxglove.KeyValuePair" and a.key == b.key and a.key in FLOAT_METADATA:
        if not _close(float(a.value), float(b.value), angle=a.key in ANGLE_METADATA):
            out.append(f"{path} ({a.key}): {a.value} vs {b.value}")
        return
    for (fd, va), (_, vb) in zip(_fields(a), _fields(b), strict=True):
        name = f"{path}.{fd.name}"
        if repeated(fd):
            if len(va) != len(vb):
                out.append(f"{name}: {len(va)} vs {len(vb)} items")
                continue
            pairs = [(f"{name}[{i}]", x, y) for i, (x, y) in enumerate(zip(va, vb, strict=True))]
        else:
            if fd.type == FieldDescriptor.TYPE_MESSAGE and a.HasField(fd.name) != b.HasField(fd.name):
                out.append(f"{name}: set in one drive only")
                continue
            pairs = [(name, va, vb)]
        for where, x, y in pairs:
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                _walk(where, x, y, bytes_cmp, out)
            elif fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
                if not _close(x, y):
                    out.append(f"{where}: {x!r} vs {y!r}")
            elif fd.type == FieldDescriptor.TYPE_BYTES:
                why = bytes_cmp(f"{kind}.{fd.name}", x, y)
                if why:
                    out.append(f"{where}: {why}")
            elif x != y:
                out.append(f"{where}: {x!r} vs {y!r}")


def _bytes_cmp(field: str, a: bytes, b: bytes) -> str | None:
    if field == "foxglove.PointCloud.data":  # the layout (fields, stride) is compared exactly alongside
        return point_data_differences(a, b)
    if field == "foxglove.CompressedImage.data":
        return image_differences(a, b)
    return None if a == b else f"{len(a)} vs {len(b)} bytes, not equal"


def drive_differences(a: Path, b: Path, *, limit: int = 20) -> list[str]:
    """What differs between drives ``a`` and ``b`` beyond the tolerances above (empty: equivalent)."""
    rec_a, msgs_a = _messages(a)
    rec_b, msgs_b = _messages(b)
    out = [f"{key}: {rec_a[key]!r:.200} vs {rec_b[key]!r:.200}" for key in rec_a if rec_a[key] != rec_b[key]]
    if len(msgs_a) != len(msgs_b):
        out.append(f"{len(msgs_a)} vs {len(msgs_b)} messages")
    for i, (x, y) in enumerate(zip(msgs_a, msgs_b, strict=False)):
        if len(out) >= limit:
            break
        where = f"message {i} ({x.topic} t={x.log_time})"
        head_a = (x.topic, x.schema, x.log_time, x.publish_time, x.sequence)
        head_b = (y.topic, y.schema, y.log_time, y.publish_time, y.sequence)
        if head_a != head_b:
            out.append(f"{where}: {head_a} vs {head_b}")
            continue
        if x.data == y.data:
            continue
        cls = codec.SCHEMAS[x.schema]
        _walk(where, cls.FromString(x.data), cls.FromString(y.data), _bytes_cmp, out)
    return out[:limit]
