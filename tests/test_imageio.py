"""perception._imageio.truncation_problem: an image whose header is whole but whose body was cut short."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from perception._imageio import decode_image, encode_jpeg, image_size, truncation_problem
from perception.errors import InputError

REAL = Path(os.environ.get("PERCEPTION_REAL_DATA") or Path(__file__).resolve().parents[2] / "shared" / "real_data")


def _noise(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (48, 64, 3), dtype=np.uint8)


def _png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


IMAGES = {"jpeg": encode_jpeg(_noise()), "png": _png(_noise())}


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
@pytest.mark.parametrize("keep", [0.3, 0.6, 0.99])
def test_a_body_cut_short_is_said_so(fmt: str, keep: float) -> None:
    whole = IMAGES[fmt]
    cut = whole[: int(len(whole) * keep)]
    assert image_size(cut) == (64, 48)  # its header whole: the importers took it by that
    with pytest.raises(InputError, match="cannot decode image"):  # what a replay found, in every frame
        decode_image(cut)
    assert f"{fmt.upper()} image does not end with" in (truncation_problem(cut) or "")
    assert truncation_problem(whole[:-1]) is not None  # one byte short


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_whole_images_and_zero_padding_or_a_trailer_pass(fmt: str) -> None:
    whole = IMAGES[fmt]
    assert truncation_problem(whole) is None
    for pad in (1, 3, 4096, 65_536):  # cameras pad a frame with zeros (4-byte words, blocks)
        assert truncation_problem(whole + bytes(pad)) is None
        decode_image(whole + bytes(pad))
    # a trailer after the end (a camera's or a phone's metadata): the decoders ignore it, so must this check
    trailer = b"\xff\xff\x00\x01SEFT trailer" * 100
    assert truncation_problem(whole + trailer) is None
    decode_image(whole + trailer)
    assert truncation_problem(whole + bytes(65_537)) is not None  # more than that: no end near the end
    assert truncation_problem(whole[: len(whole) // 2] + bytes(16)) is not None  # a cut body, zero-filled


def test_data_of_neither_format_is_the_caller_s() -> None:
    for data in (b"", b"x", b"not an image", b"\xff\xd8", bytes(100)):
        assert truncation_problem(data) is None


@pytest.mark.skipif(not REAL.is_dir(), reason=f"real data not found at {REAL} (set PERCEPTION_REAL_DATA)")
def test_real_images_pass_and_their_cut_copies_do_not() -> None:
    # nuScenes' JPEGs and KITTI's PNGs as recorded: each ends with its end marker, no padding
    files = sorted(REAL.glob("**/*.jpg")) + sorted(REAL.glob("**/*.png"))
    assert {f.suffix for f in files} == {".jpg", ".png"}
    for f in files:
        data = f.read_bytes()
        assert truncation_problem(data) is None, f
        assert truncation_problem(data[: int(len(data) * 0.6)]) is not None, f
