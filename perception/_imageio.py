"""JPEG/PNG encode and decode (Pillow), with errors that name the sensor."""

from __future__ import annotations

import io
import math
import re
from typing import Literal

import numpy as np
import numpy.typing as npt

from perception.errors import InputError

__all__ = [
    "MAX_IMAGE_SIDE",
    "MAX_PIXELS",
    "decode_image",
    "decode_image_scaled",
    "encode_jpeg",
    "image_format",
    "image_size",
    "letterbox_size",
    "size_problem",
    "truncation_problem",
]

#: Images larger than this many pixels, or this many per side, are refused rather than decoded
#: (decompression bombs; an 8K camera is 7680x4320 = 33 Mpx). The one limit of the client, the intake
#: check (:func:`perception.kinds.sample_problem`) and the camera model (:mod:`perception.modelkit`).
MAX_PIXELS = 40_000_000
MAX_IMAGE_SIDE = 8192
_FORMATS = ("JPEG", "PNG")


def size_problem(width: int, height: int) -> str | None:
    """Why an image of ``width x height`` is refused (over :data:`MAX_PIXELS` or :data:`MAX_IMAGE_SIDE`), or None."""
    if width > MAX_IMAGE_SIDE or height > MAX_IMAGE_SIDE or width * height > MAX_PIXELS:
        return f"image of {width}x{height} exceeds the limit of {MAX_IMAGE_SIDE} px per side and {MAX_PIXELS} pixels"
    return None


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
    # The size its header claims, refused before Pillow reads it: Pillow would warn (DecompressionBombWarning,
    # over ~89 Mpx) and only refuse past twice that. The check inside ``open`` covers headers this misses.
    claimed = image_size(data)
    if claimed is not None and (problem := size_problem(*claimed)) is not None:
        raise InputError(problem, sensor=sensor, tensor="image")
    try:
        # Only the formats drives carry: every other decoder Pillow has is attack surface for no use.
        with Image.open(io.BytesIO(data), formats=_FORMATS) as img:
            w, h = img.size
            if w == 0 or h == 0:
                raise InputError(f"image has zero size {w}x{h}", sensor=sensor, tensor="image")
            if (problem := size_problem(w, h)) is not None:
                raise InputError(problem, sensor=sensor, tensor="image")
            target = letterbox_size(w, h, fit) if fit is not None else None
            if target is not None and img.format == "JPEG":
                img.draft("RGB", target)
            if img.mode.startswith("I;16") or img.mode == "I":  # 16-bit grey (thermal): its top 8 bits
                grey = (np.asarray(img, dtype=np.int64) >> 8).clip(0, 255).astype(np.uint8)
                return np.repeat(grey[..., None], 3, axis=2), (w, h)
            return np.asarray(img.convert("RGB"), dtype=np.uint8), (w, h)
    except Image.DecompressionBombError as exc:  # a header claiming > 2x Pillow's pixel limit
        raise InputError(f"image exceeds the {MAX_PIXELS} pixel limit: {exc}", sensor=sensor, tensor="image") from exc
    # SyntaxError: Pillow's plugins raise it for a damaged file found while decoding ("broken PNG file")
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise InputError(f"cannot decode image: {exc}", sensor=sensor, tensor="image") from exc


def encode_jpeg(image: npt.NDArray[np.uint8], quality: int = 85) -> bytes:
    """Encode ``[H,W,3]`` uint8 RGB as baseline JPEG (deterministic for equal input)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8), mode="RGB").save(
        buf, format="JPEG", quality=quality, optimize=False
    )
    return buf.getvalue()


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_JPEG_SIGNATURE = b"\xff\xd8\xff"  # start of image, then the next marker's 0xFF
#: JPEG start-of-frame markers (SOF0-SOF15 but DHT, JPG and DAC, which share the range).
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: JPEG markers without a length field: TEM, RST0-RST7, SOI.
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})
#: Segments walked before the frame header at most (real files have a dozen; more is not a JPEG we read),
#: and fill bytes skipped between two of them (encoders write a few).
_JPEG_MAX_SEGMENTS = 256
_JPEG_MAX_FILL = 65_536
_NOT_FILL = re.compile(rb"[^\xff]")
#: What a whole image ends with: a JPEG its end-of-image marker, a PNG its IEND chunk (length 0, type, CRC).
_ENDS = {
    "jpeg": (b"\xff\xd9", "its end-of-image marker (FF D9)"),
    "png": (b"\x00\x00\x00\x00IEND\xaeB`\x82", "an IEND chunk"),
}
#: Bytes taken after that end, at most: hardware encoders pad a frame to a block size (zeros), some cameras and
#: phones append a trailer (any bytes), and decoders ignore both.
_MAX_TRAILER = 65_536


def image_format(data: bytes) -> Literal["jpeg", "png"] | None:
    """``jpeg`` or ``png`` by the signature ``data`` begins with (its first 8 bytes suffice), else ``None``:
    the one test of what encoded image bytes are (importers, the ROS node, :func:`image_size`)."""
    if data.startswith(_JPEG_SIGNATURE):
        return "jpeg"
    if data.startswith(_PNG_SIGNATURE):
        return "png"
    return None


def truncation_problem(data: bytes) -> str | None:
    """Why the JPEG or PNG ``data`` is cut short (a partial download, a full disk), or None. Whole, it ends
    with a JPEG's end-of-image marker or a PNG's IEND chunk, maybe followed by padding or a trailer (64 KiB at
    most, only then scanned; a JPEG's entropy-coded data never holds the marker, its bytes FF are stuffed, but a
    thumbnail's in those bytes passes a cut small file, which then fails its decode as before):
    O(1) for most images, no decode, yet a cut body would only show when decoded, in every frame using the
    image. ``None`` for data of neither format (:func:`image_format`: the caller's to refuse)."""
    fmt = image_format(data)
    if fmt is None:
        return None
    end, what = _ENDS[fmt]
    if data.endswith(end) or data.rfind(end, max(0, len(data) - _MAX_TRAILER - len(end))) >= 0:
        return None
    return f"{fmt.upper()} image does not end with {what}: cut short (a partial download, a full disk?)"


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from a JPEG's start-of-frame or a PNG's IHDR header, without decoding (the
    order of every image size in the package: Pillow's, a calibration's, :func:`letterbox_size`'s);
    ``None`` when the header is not one of those. (Pillow's ``Image.open`` parses every JPEG segment
    in Python, ~90 us: as long as decoding a small image.) Bounded work whatever the bytes: a run of
    fill bytes is skipped in one search (64 KiB at most), and at most 256 segments are walked; past
    either, the size is unknown (``None``)."""
    fmt = image_format(data)
    if fmt == "png":
        if len(data) < 24 or data[12:16] != b"IHDR":
            return None
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if fmt != "jpeg":
        return None
    i, n = 2, len(data)
    for _ in range(_JPEG_MAX_SEGMENTS):
        if i + 4 > n or data[i] != 0xFF:
            return None
        if data[i + 1] == 0xFF:  # fill bytes: skip the whole run at once
            m = _NOT_FILL.search(data, i + 1, i + 1 + _JPEG_MAX_FILL)
            if m is None:
                return None
            i = m.start() - 1
            if i + 4 > n:
                return None
        marker = data[i + 1]
        if marker in _JPEG_STANDALONE:
            i += 2
            continue
        if marker in _JPEG_SOF:
            if i + 9 > n:
                return None
            return int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big")
        if marker == 0xDA:  # start of scan before any frame header
            return None
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None
