"""Vectorised ``sensor_msgs/msg/PointCloud2`` decoding.

The cloud's bytes are viewed through one numpy structured dtype built from the message's own
``fields`` (name, offset, datatype), ``point_step`` and ``is_bigendian``, with ``row_step`` as the
row stride, so organised clouds with row padding decode without copying a byte per point. Each
wanted field is then cast to float32 column by column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["POINTFIELD_TYPES", "decode_point_cloud2", "point_fields"]

#: ``sensor_msgs/msg/PointField`` datatype constants -> numpy type codes (without byte order).
POINTFIELD_TYPES: dict[int, str] = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 8: "f8"}


def point_fields(msg: Any) -> tuple[str, ...]:
    """Names of the fields a PointCloud2 message declares."""
    return tuple(str(f.name) for f in msg.fields)


def _as_bytes(data: Any) -> npt.NDArray[np.uint8]:
    if isinstance(data, bytes | bytearray | memoryview):
        return np.frombuffer(data, dtype=np.uint8)
    arr = np.asarray(data)
    if arr.dtype != np.uint8:
        arr = arr.astype(np.uint8)
    return np.ascontiguousarray(arr.reshape(-1))


def decode_point_cloud2(msg: Any, names: Sequence[str]) -> npt.NDArray[np.float32]:
    """The ``names`` fields of every point of a PointCloud2 as ``[height * width, len(names)]`` float32.

    Handles any PointField datatype (cast to float32, so float64 beyond its range becomes inf; for
    ``count > 1`` the first element),
    big-endian clouds, ``row_step`` padding, and organised (``height > 1``) clouds. Invalid points
    (NaN, as in non-dense clouds) are kept; filtering is the caller's choice. Raises ``ValueError``
    naming the problem for a field that is missing, of unknown type or outside ``point_step``, and
    for data shorter than the declared layout.
    """
    height, width = int(msg.height), int(msg.width)
    point_step, row_step = int(msg.point_step), int(msg.row_step)
    wanted = list(dict.fromkeys(names))
    if height < 0 or width < 0:
        raise ValueError(f"negative cloud size {height}x{width}")
    by_name: dict[str, Any] = {}
    for f in msg.fields:
        by_name.setdefault(str(f.name), f)
    order = ">" if msg.is_bigendian else "<"
    formats: list[str] = []
    offsets: list[int] = []
    for name in wanted:
        f = by_name.get(name)
        if f is None:
            raise ValueError(f"point field {name!r} missing (cloud has {', '.join(by_name) or 'no fields'})")
        code = POINTFIELD_TYPES.get(int(f.datatype))
        if code is None:
            raise ValueError(f"point field {name!r} has unknown datatype {f.datatype}")
        size = np.dtype(code).itemsize
        if int(f.offset) < 0 or int(f.offset) + size > point_step:
            raise ValueError(f"point field {name!r} at offset {f.offset} overruns point_step {point_step}")
        formats.append(order + code)
        offsets.append(int(f.offset))
    n = height * width
    if n == 0:
        return np.empty((0, len(names)), dtype=np.float32)
    if row_step < width * point_step:
        raise ValueError(f"row_step {row_step} is shorter than width {width} x point_step {point_step}")
    data = _as_bytes(msg.data)
    needed = (height - 1) * row_step + width * point_step
    if data.size < needed:
        raise ValueError(f"data has {data.size} bytes, the {height}x{width} layout needs {needed}")
    # Allocated only once the data is known to hold every point (each at least one byte: point_step
    # covers a field), so a header declaring billions of points costs nothing.
    out: npt.NDArray[np.float32] = np.empty((n, len(names)), dtype=np.float32)
    dtype = np.dtype({"names": wanted, "formats": formats, "offsets": offsets, "itemsize": point_step})
    # A strided view over the raw bytes: rows row_step apart, points point_step apart (no copy).
    rec: npt.NDArray[np.void] = np.ndarray(
        shape=(height, width), dtype=dtype, buffer=data, offset=0, strides=(row_step, point_step)
    )
    with np.errstate(over="ignore"):  # float64 beyond the float32 range becomes +-inf, as a cast does
        for i, name in enumerate(names):
            out[:, i] = rec[name].reshape(n)
    return out
