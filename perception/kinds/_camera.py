"""The camera kind: an RGB image (JPEG/PNG) in, 2D boxes in pixels out (they confirm and add objects)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.errors import ConfigError, InputError
from perception.types import ImageSample, Sample, SensorSpec

from ._intake import image_data_problem
from ._kind import FusionRole, Prepared, SensorKindDef
from ._tensors import KindContract, TensorSpec

__all__ = [
    "CAMERA",
    "CAMERA_INPUT_SIZE_KEYS",
    "MAX_CAMERA_INPUT_SIDE",
    "camera_input",
    "camera_input_size",
    "encoded_input",
]

#: ``parameters`` of a camera model's ``config.pbtxt`` stating its network input ``width, height``: the
#: runtime then decodes JPEGs at the smallest DCT scale covering the letterboxed image (decoding at the
#: model's scale); the model builds its network input at that size (a network with symbolic H/W, such as
#: ``yolox_nano``) or checks them against its fixed network at load. Optional: without them the runtime
#: sends full-resolution images. Read and validated by :func:`camera_input_size` (one definition).
CAMERA_INPUT_SIZE_KEYS = ("input_width", "input_height")
#: Largest network input side a camera model's config may state (pixels).
MAX_CAMERA_INPUT_SIDE = 4096


def camera_input_size(
    parameters: Any, *, file: str | None = None, model: str | None = None, require_both: bool = False
) -> tuple[int, int] | None:
    """The network input ``(width, height)`` stated by a camera model's config ``parameters`` (the
    :data:`CAMERA_INPUT_SIZE_KEYS`; a mapping of ``{key: {"string_value": "416"}}`` as Triton serves it,
    or of plain values), or ``None`` when it states neither (or, unless ``require_both``, only one).

    Raises :class:`ConfigError` naming the key (and ``file``, ``model`` when given) for a value that is
    not an integer in ``1..MAX_CAMERA_INPUT_SIDE``, or, with ``require_both``, when one key is missing.
    """
    if not isinstance(parameters, Mapping):
        return None
    raw = {key: parameters.get(key) for key in CAMERA_INPUT_SIZE_KEYS}
    missing = [key for key, entry in raw.items() if entry is None]
    if len(missing) == len(raw):
        return None
    if missing:
        if require_both:
            given = next(key for key in CAMERA_INPUT_SIZE_KEYS if key not in missing)
            raise ConfigError(
                f"{given} is set but {missing[0]} is not: state both", file=file, key=missing[0], model=model
            )
        return None
    values = []
    for key, entry in raw.items():
        text = entry.get("string_value", "") if isinstance(entry, Mapping) else entry
        try:
            value = int(str(text).strip())
        except ValueError:
            value = None
        if value is None or not 0 < value <= MAX_CAMERA_INPUT_SIDE:
            raise ConfigError(
                f"must be a positive integer of at most {MAX_CAMERA_INPUT_SIDE} (pixels), got {text!r}",
                file=file,
                key=key,
                model=model,
            )
        values.append(value)
    return values[0], values[1]


CONTRACT = KindContract(
    inputs=(TensorSpec("IMAGE", "UINT8", (-1, -1, 3), description="RGB, one image per batch row"),),
    outputs=(
        TensorSpec("BOXES", "FP32", (100, 4), description="x1, y1, x2, y2 in pixels of the original image"),
        TensorSpec("SCORES", "FP32", (100,)),
        TensorSpec("LABELS", "INT32", (100,)),
        TensorSpec("COUNT", "INT32", (1,), description="number of valid rows"),
    ),
    batched=True,
    encoded=TensorSpec(
        "IMAGE_BYTES",
        "BYTES",
        (1,),
        optional=True,
        description="the image as recorded (JPEG/PNG), one per batch row: the model decodes it (decode: server)",
    ),
    decode_error=TensorSpec(
        "DECODE_ERROR",
        "BYTES",
        (1,),
        optional=True,
        description="per batch row: empty when its IMAGE_BYTES decoded, else why not (the row then has COUNT 0)",
    ),
)


def camera_input(
    sample: Sample, input_size: tuple[int, int] | None = None
) -> tuple[npt.NDArray[np.uint8], tuple[float, float]]:
    """A camera sample's ``IMAGE`` row ``[H, W, 3]`` and the factors ``(sx, sy)`` from its pixels to
    the original image's (the scheduler applies them to the model's ``BOXES``).

    With the model's network input ``input_size = (width, height)`` (its config's ``input_width`` /
    ``input_height`` parameters) a JPEG is decoded at the smallest DCT scale that still covers the
    letterbox the model makes of it (``decode_image_scaled``): a 1600x900 camera for a 416x416 network
    decodes at 800x450, in about half the time of a full decode, and the model resizes a quarter of
    the pixels. Without it (or for a PNG) the image is decoded at full size and the factors are 1.
    """
    from perception._imageio import decode_image_scaled

    if not isinstance(sample, ImageSample):
        raise InputError(f"expected an image for a camera, got {type(sample).__name__}", sensor=sample.sensor)
    image, (width, height) = decode_image_scaled(_image_bytes(sample, "IMAGE"), sensor=sample.sensor, fit=input_size)
    return image, (width / image.shape[1], height / image.shape[0])


def encoded_input(sample: Sample, tensor: TensorSpec) -> Prepared:
    """An image sample's request tensors for a model that decodes it (``SensorConfig.decode: server``):
    its bytes as recorded, in ``tensor`` (its kind's ``contract.encoded``); the model answers in the
    original image's pixels, so the factors are 1."""
    if not isinstance(sample, ImageSample):
        raise InputError(f"expected an image, got {type(sample).__name__}", sensor=sample.sensor)
    data = _image_bytes(sample, tensor.name)
    if not data:
        raise InputError("empty image data", sensor=sample.sensor, tensor=tensor.name)
    row = np.empty(1, dtype=np.object_)
    row[0] = data
    return {tensor.name: row}, (1.0, 1.0)


def _image_bytes(sample: ImageSample, tensor: str) -> bytes:
    """An image sample's encoded bytes; :class:`InputError` for data that is none (:func:`image_data_problem`:
    a frame handed in whole holding an array of pixels failed its processing with numpy's ValueError)."""
    data: Any = sample.data
    if (problem := image_data_problem(data)) is not None:
        raise InputError(problem, sensor=sample.sensor, tensor=tensor)
    return data if isinstance(data, bytes) else bytes(data)


def _prepare(sample: Sample, input_size: tuple[int, int] | None) -> Prepared:
    image, scale = camera_input(sample, input_size)
    return {"IMAGE": image}, scale


def _warmup(sensor: str, spec: SensorSpec | None) -> Sample:
    """A deterministic noise image of the camera's size (640x360 without a calibration), as a JPEG:
    the warm-up then decodes like a frame's sample does."""
    from perception._imageio import encode_jpeg

    cal = spec.calibration if spec is not None else None
    h, w = (cal.height, cal.width) if cal is not None else (360, 640)
    image = np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8)
    return ImageSample(sensor, 0, sensor, encode_jpeg(image))


CAMERA = SensorKindDef(
    name="camera",
    sample=ImageSample,
    contract=CONTRACT,
    prepare=_prepare,
    warmup=_warmup,
    fusion=FusionRole.IMAGE_BOXES,
    default_model="auto",  # by the drive's source: perception.config.default_camera_model
    color=(1.00, 0.50, 0.00),
)
