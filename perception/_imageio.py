"""JPEG/PNG encode and decode (Pillow), with errors that name the sensor."""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt

from perception.errors import InputError

__all__ = ["decode_image", "encode_jpeg"]

#: Images larger than this many pixels are refused rather than decoded (decompression bombs).
MAX_PIXELS = 64_000_000
_FORMATS = ("JPEG", "PNG")


def decode_image(data: bytes, *, sensor: str | None = None) -> npt.NDArray[np.uint8]:
    """Decode JPEG/PNG bytes to ``[H,W,3]`` uint8 RGB."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise InputError("empty image data", sensor=sensor, tensor="image")
    try:
        # Only the formats drives carry: every other decoder Pillow has is attack surface for no use.
        with Image.open(io.BytesIO(data), formats=_FORMATS) as img:
            w, h = img.size
            if w == 0 or h == 0:
                raise InputError(f"image has zero size {w}x{h}", sensor=sensor, tensor="image")
            if w * h > MAX_PIXELS:
                raise InputError(
                    f"image of {w}x{h} exceeds the {MAX_PIXELS} pixel limit", sensor=sensor, tensor="image"
                )
            return np.asarray(img.convert("RGB"), dtype=np.uint8)
    except Image.DecompressionBombError as exc:  # a header claiming > 2x Pillow's pixel limit
        raise InputError(f"image exceeds the {MAX_PIXELS} pixel limit: {exc}", sensor=sensor, tensor="image") from exc
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise InputError(f"cannot decode image: {exc}", sensor=sensor, tensor="image") from exc


def encode_jpeg(image: npt.NDArray[np.uint8], quality: int = 85) -> bytes:
    """Encode ``[H,W,3]`` uint8 RGB as baseline JPEG (deterministic for equal input)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8), mode="RGB").save(
        buf, format="JPEG", quality=quality, optimize=False
    )
    return buf.getvalue()
