"""Sample -> request tensors, and batched response -> per-sensor outputs.

What a sample of each kind becomes is the kind's own (:attr:`perception.kinds.SensorKindDef.prepare`);
this module adds the batch dimension of a batching kind and the scheduling helpers around it. Tensor
names follow the kinds' contracts (checked at start by :func:`perception.triton.check_contract`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from perception._imageio import image_size
from perception.errors import ConfigError, InputError
from perception.kinds import SensorKindDef, camera_input, encoded_input, kind_def
from perception.types import ImageSample, Sample

__all__ = [
    "INLINE_DECODE_PIXELS",
    "batch_groups",
    "camera_input",
    "decode_inline",
    "image_size",
    "output_names",
    "prepare_inputs",
    "prepare_sample",
    "scale_camera_boxes",
    "sensor_kind",
    "split_batch",
]


def sensor_kind(kind: str, sensor: str | None = None) -> SensorKindDef:
    """The definition of ``kind``; :class:`InputError` naming the sensor when it is not registered."""
    try:
        return kind_def(kind)
    except ConfigError as exc:
        raise InputError(exc.message, sensor=sensor) from None


def output_names(kind: str) -> tuple[str, ...]:
    """Output tensors requested from a ``kind`` model (its contract's outputs)."""
    return kind_def(kind).contract.output_names


#: Images of at most this many pixels are decoded on the event loop, larger ones in a worker thread.
#: A small image decodes in ~0.2 ms (48x64) to ~0.6 ms (this size), while a worker-thread round trip
#: costs ~0.2 ms on an idle host and 1.5-8 ms on a busy 2-core one (the thread waits for a core and
#: for the GIL while the loop serialises the other sensors' requests). Large images stay off the loop:
#: a 640x360 JPEG takes ~3 ms, a decompression bomb far longer, and the join's deadline timer must
#: never wait behind a decode.
INLINE_DECODE_PIXELS = 65_536


def prepare_sample(
    defn: SensorKindDef, sample: Sample, input_size: tuple[int, int] | None, decode: str = "client"
) -> tuple[dict[str, npt.NDArray[Any]], tuple[float, float]]:
    """A sample's request tensors (no batch dimension) and its box factors, as its sensor's ``decode``
    (:data:`perception.config.Decode`) says: the kind's own (an image decoded here, at the model's scale),
    or with ``server`` the bytes as recorded in the kind's ``encoded`` input (the model decodes them)."""
    if decode == "server":
        encoded = defn.contract.encoded
        if encoded is None:  # the config refuses it; a kind registered since cannot take it either
            raise InputError(f"decode: server, but a {defn.name} model takes no encoded input", sensor=sample.sensor)
        return encoded_input(sample, encoded)
    return defn.prepare(sample, input_size)


def prepare_inputs(
    kind: str, sample: Sample, *, input_size: tuple[int, int] | None = None, decode: str = "client"
) -> dict[str, npt.NDArray[Any]]:
    """Input tensors of one sample sent alone: the kind's own tensors, with a batch dimension of 1 for a
    batching kind (camera: a ``[1,H,W,3]`` image, decoded at the scale of a model whose network input
    is ``input_size``: see :func:`camera_input`; with ``decode: server`` its bytes, see :func:`prepare_sample`)."""
    defn = sensor_kind(kind, sample.sensor)
    tensors, _ = prepare_sample(defn, sample, input_size, decode)
    if defn.contract.batched:
        return {name: t[None] for name, t in tensors.items()}
    return tensors


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
    :data:`INLINE_DECODE_PIXELS`), judged from its header. An unreadable header, or data that is not
    ``bytes`` (a ``memoryview``; not bytes at all), answers False: the worker thread's prepare takes it or
    reports the problem."""
    if not isinstance(sample.data, bytes | bytearray):
        return False
    size = image_size(sample.data)
    return size is not None and size[0] * size[1] <= INLINE_DECODE_PIXELS


def batch_groups(rows: Sequence[Mapping[str, npt.NDArray[Any]]]) -> list[list[int]]:
    """Group the indices of request rows whose tensors share their shapes (one batched request per group)."""
    groups: dict[tuple[tuple[str, tuple[int, ...]], ...], list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(tuple((name, tuple(t.shape)) for name, t in sorted(row.items())), []).append(i)
    return list(groups.values())


def split_batch(outputs: Mapping[str, npt.NDArray[Any]], index: int) -> dict[str, npt.NDArray[Any]]:
    """Outputs of batch element ``index`` (batch dimension removed)."""
    return {name: np.asarray(arr[index]) for name, arr in outputs.items()}
