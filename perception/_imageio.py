"""JPEG/PNG encode and decode (Pillow), with errors that name the sensor."""

from __future__ import annotations

import io
import math

import numpy as np
import numpy.typing as npt

from perception.errors import InputError

__all__ = ["decode_image", "decode_image_scaled", "encode_jpeg", "letterbox_size"]

#: Images larger than this many pixels are refused rather than decoded (decompression bombs).
MAX_PIXELS = 64_000_000
_FORMATS = ("JPEG", "PNG")


def decode_image(data: bytes, *, sensor: str | None = None) -> npt.NDArray[np.uint8]:
    """Decode JPEG/PNG bytes to ``[H,W,3]`` uint8 RGB."""
    return decode_image_scaled(data, sensor=sensor)[0]


def letterbox_size(width: int, height: int, fit: tuple[int, int]) -> tuple[int, int] | None:
    """Size of a ``width x height`` image scaled (aspect kept) to fit in ``fit = (w, h)``, rounded up;
    ``None`` when it fits already (no downscaling needed)."""
    scale = min(fit[0] / width, fit[1] / height)
    if scale >= 1.0:
        return None
    return max(1, math.ceil(width * scale)), max(1, math.ceil(height * scale))


def decode_image_scaled(
    data: bytes, *, sensor: str | None = None, fit: tuple[int, int] | None = None
) -> tuple[npt.NDArray[np.uint8], tuple[int, int]]:
    """Decode JPEG/PNG bytes to ``[H,W,3]`` uint8 RGB, and the encoded image's ``(width, height)``
    (a 16-bit grey PNG, such as a thermal camera's, becomes the grey of its top 8 bits).

    With ``fit = (w, h)`` (a model's input size) a JPEG is decoded at the smallest DCT scale (1/1, 1/2,
    1/4 or 1/8: libjpeg's scaled IDCT, Pillow's ``draft``) whose image still covers the image's
    letterbox into ``fit``: never smaller than what the model looks at, and several times cheaper
    than a full decode followed by a resize. PNGs (and JPEGs already that small) decode at full size.
    """
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
            target = letterbox_size(w, h, fit) if fit is not None else None
            if target is not None and img.format == "JPEG":
                img.draft("RGB", target)
            if img.mode.startswith("I;16") or img.mode == "I":  # 16-bit grey (thermal): its top 8 bits
                grey = (np.asarray(img, dtype=np.int64) >> 8).clip(0, 255).astype(np.uint8)
                return np.repeat(grey[..., None], 3, axis=2), (w, h)
            return np.asarray(img.convert("RGB"), dtype=np.uint8), (w, h)
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
