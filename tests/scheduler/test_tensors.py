"""Request tensors: the image-header probe that decides where a camera image is decoded."""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt
import pytest
from PIL import Image

from perception._imageio import encode_jpeg
from perception.scheduler._tensors import INLINE_DECODE_PIXELS, decode_inline, image_size
from perception.types import ImageSample


def _image(h: int, w: int) -> npt.NDArray[np.uint8]:
    return np.random.default_rng(h * w).integers(0, 255, (h, w, 3), dtype=np.uint8)


def _encoded(h: int, w: int, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(_image(h, w)).save(buf, format=fmt, **kw)
    return buf.getvalue()


@pytest.mark.parametrize(
    "data",
    [
        encode_jpeg(_image(37, 53)),
        _encoded(37, 53, "JPEG", progressive=True),  # SOF2
        _encoded(37, 53, "JPEG", exif=b"Exif\x00\x00" + bytes(300)),  # an APP1 segment before the frame
        _encoded(37, 53, "PNG"),
    ],
)
def test_image_size_reads_the_header(data: bytes) -> None:
    assert image_size(data) == (53, 37)  # (width, height)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not an image",
        b"\xff\xd8",  # SOI only
        b"\xff\xd8\xff\xc0\x00\x11\x08",  # frame header cut short
        b"\xff\xd8\xff\xda\x00\x02",  # scan before any frame header
        b"\xff\xd8\x00\x00\x00\x00",  # not a marker
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDX" + bytes(8),  # no IHDR
    ],
)
def test_image_size_of_malformed_data_is_none(data: bytes) -> None:
    assert image_size(data) is None


def test_only_small_images_decode_inline() -> None:
    side = int(INLINE_DECODE_PIXELS**0.5)
    assert side * side == INLINE_DECODE_PIXELS

    def sample(h: int, w: int) -> ImageSample:
        return ImageSample("cam", 0, "cam", encode_jpeg(_image(h, w)))

    assert decode_inline(sample(48, 64))
    assert decode_inline(sample(side, side))
    assert not decode_inline(sample(side, side + 1))
    assert not decode_inline(ImageSample("cam", 0, "cam", b"garbage"))  # the worker thread reports it
