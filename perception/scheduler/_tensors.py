"""Sample -> request tensors, and batched response -> per-sensor outputs, by sensor kind.

Tensor names follow the contracts in ``models/README.md`` (checked at start by
:func:`perception.triton.check_contract`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.errors import InputError
from perception.types import ImageSample, PointCloudSample, Sample, SensorSpec

__all__ = [
    "INLINE_DECODE_PIXELS",
    "OUTPUTS",
    "camera_batch",
    "camera_input",
    "decode_inline",
    "image_size",
    "prepare_inputs",
    "scale_camera_boxes",
    "split_batch",
    "warmup_inputs",
]

#: Output tensors requested from each kind of model.
OUTPUTS: Mapping[str, tuple[str, ...]] = {
    "lidar": ("BOXES", "LABELS", "SCORES"),
    "radar": ("POSITIONS", "RADIAL_VELOCITY", "VELOCITY", "RCS", "SCORES"),
    "camera": ("BOXES", "SCORES", "LABELS", "COUNT"),
}

_POINT_COLUMNS = {"lidar": 4, "radar": 5}

#: Images of at most this many pixels are decoded on the event loop, larger ones in a worker thread.
#: A small image decodes in ~0.2 ms (48x64) to ~0.6 ms (this size), while a worker-thread round trip
#: costs ~0.2 ms on an idle host and 1.5-8 ms on a busy 2-core one (the thread waits for a core and
#: for the GIL while the loop serialises the other sensors' requests). Large images stay off the loop:
#: a 640x360 JPEG takes ~3 ms, a decompression bomb far longer, and the join's deadline timer must
#: never wait behind a decode.
INLINE_DECODE_PIXELS = 65_536


def prepare_inputs(
    kind: str, sample: Sample, *, input_size: tuple[int, int] | None = None
) -> dict[str, npt.NDArray[Any]]:
    """Input tensors of one sample (camera: an unbatched ``[1,H,W,3]`` image, decoded at the scale of a
    model whose network input is ``input_size``: see :func:`camera_input`)."""
    if kind in _POINT_COLUMNS:
        if not isinstance(sample, PointCloudSample):
            raise InputError(f"expected a point cloud for a {kind}, got {type(sample).__name__}", sensor=sample.sensor)
        need = _POINT_COLUMNS[kind]
        pts = sample.points
        if pts.shape[1] < need:
            raise InputError(
                f"{kind} points need at least {need} columns, got {pts.shape[1]}", sensor=sample.sensor, tensor="POINTS"
            )
        cols = pts[:, :need] if kind == "lidar" else pts
        return {"POINTS": np.ascontiguousarray(cols, dtype=np.float32)}
    if kind == "camera":
        if not isinstance(sample, ImageSample):
            raise InputError(f"expected an image for a camera, got {type(sample).__name__}", sensor=sample.sensor)
        return {"IMAGE": camera_input(sample, input_size)[0][None]}
    raise InputError(f"unknown sensor kind {kind!r}", sensor=sample.sensor)


def camera_input(
    sample: Sample, input_size: tuple[int, int] | None = None
) -> tuple[npt.NDArray[np.uint8], tuple[float, float]]:
    """A camera sample's ``IMAGE`` row ``[H, W, 3]`` and the factors ``(sx, sy)`` from its pixels to
    the original image's (:func:`scale_camera_boxes` applies them to the model's ``BOXES``).

    With the model's network input ``input_size = (width, height)`` (its config's ``input_width`` /
    ``input_height`` parameters) a JPEG is decoded at the smallest DCT scale that still covers the
    letterbox the model makes of it (``decode_image_scaled``): a 1600x900 camera for a 416x416 network
    decodes at 800x450, in about half the time of a full decode, and the model resizes a quarter of
    the pixels. Without it (or for a PNG) the image is decoded at full size and the factors are 1.
    """
    from perception._imageio import decode_image_scaled

    if not isinstance(sample, ImageSample):
        raise InputError(f"expected an image for a camera, got {type(sample).__name__}", sensor=sample.sensor)
    image, (width, height) = decode_image_scaled(sample.data, sensor=sample.sensor, fit=input_size)
    return image, (width / image.shape[1], height / image.shape[0])


def scale_camera_boxes(outputs: Mapping[str, npt.NDArray[Any]], scale: tuple[float, float]) -> dict[str, Any]:
    """One camera's outputs with ``BOXES`` (``x1, y1, x2, y2`` rows) scaled by ``(sx, sy)``: from the
    pixels of the image sent to those of the original image. Padding rows stay zero."""
    out = dict(outputs)
    if scale != (1.0, 1.0) and "BOXES" in out:
        sx, sy = scale
        factors = np.array([sx, sy, sx, sy], dtype=np.float32)
        out["BOXES"] = np.asarray(out["BOXES"], dtype=np.float32) * factors
    return out


def decode_inline(sample: ImageSample) -> bool:
    """True when ``sample`` is small enough to decode on the event loop (see
    :data:`INLINE_DECODE_PIXELS`), judged from its header. An unreadable header answers False: the
    worker thread's decode then reports the problem."""
    size = image_size(sample.data)
    return size is not None and size[0] * size[1] <= INLINE_DECODE_PIXELS


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: JPEG start-of-frame markers (SOF0-SOF15 but DHT, JPG and DAC, which share the range).
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: JPEG markers without a length field: TEM, RST0-RST7, SOI.
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(height, width)`` from a JPEG's start-of-frame or a PNG's IHDR header, without decoding;
    ``None`` when the header is not one of those. (Pillow's ``Image.open`` parses every JPEG segment
    in Python, ~90 us: as long as decoding a small image.)"""
    if data.startswith(_PNG_SIGNATURE):
        if len(data) < 24 or data[12:16] != b"IHDR":
            return None
        return int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")
    if not data.startswith(b"\xff\xd8"):
        return None
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _JPEG_STANDALONE:
            i += 2
            continue
        if marker in _JPEG_SOF:
            if i + 9 > n:
                return None
            return int.from_bytes(data[i + 5 : i + 7], "big"), int.from_bytes(data[i + 7 : i + 9], "big")
        if marker == 0xDA:  # start of scan before any frame header
            return None
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None


def camera_batch(images: Sequence[npt.NDArray[np.uint8]]) -> list[list[int]]:
    """Group camera indices whose images share a shape (one batched request per group)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, img in enumerate(images):
        groups.setdefault(tuple(img.shape), []).append(i)
    return list(groups.values())


def split_batch(outputs: Mapping[str, npt.NDArray[Any]], index: int) -> dict[str, npt.NDArray[Any]]:
    """Outputs of batch element ``index`` (batch dimension removed)."""
    return {name: np.asarray(arr[index]) for name, arr in outputs.items()}


def warmup_inputs(kind: str, spec: SensorSpec | None) -> dict[str, npt.NDArray[Any]]:
    """Representative, deterministic inputs for a warm-up request of a ``kind`` model."""
    rng = np.random.default_rng(0)
    if kind == "camera":
        cal = spec.calibration if spec is not None else None
        h, w = (cal.height, cal.width) if cal is not None else (360, 640)
        return {"IMAGE": rng.integers(0, 256, (1, h, w, 3), dtype=np.uint8)}
    cols = _POINT_COLUMNS.get(kind, 4)
    pts = rng.uniform(-40.0, 40.0, (2000 if kind == "lidar" else 50, cols)).astype(np.float32)
    pts[:, 2] = rng.uniform(-1.5, 1.0, len(pts))
    return {"POINTS": pts}
