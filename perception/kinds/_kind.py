"""What a sensor kind is: :class:`SensorKindDef`, one frozen value per kind, declaring everything about it."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from perception.types import ImageSample, PointCloudSample, Sample, SensorSpec

from ._tensors import KindContract

__all__ = [
    "MAX_ACCUMULATE_MS",
    "ROLE_OUTPUTS",
    "FusionRole",
    "Prepare",
    "Prepared",
    "SensorKindDef",
    "WarmupSample",
    "accumulate_problem",
]

RGB = tuple[float, float, float]

#: The longest sweep accumulation a sensor may ask for (ms): longer windows smear every moving object.
MAX_ACCUMULATE_MS = 2000.0


def accumulate_problem(accumulate_ms: float, kind: str, *, image: bool) -> str | None:
    """What is wrong with a sweep accumulation window for a sensor of ``kind`` (``image``: an image
    kind), or ``None``; the one check behind kinds' and profiles' ``accumulate_ms``."""
    if not 0 <= accumulate_ms <= MAX_ACCUMULATE_MS:
        return f"must be within 0..{MAX_ACCUMULATE_MS:g}, got {accumulate_ms}"
    if accumulate_ms and image:
        return f"only point-cloud sensors accumulate sweeps, not a {kind}"
    return None


#: A sample's request tensors, without the batch dimension, and the factors ``(sx, sy)`` from the
#: pixels of the image sent to those of the original image (``(1, 1)`` for anything else).
Prepared = tuple[dict[str, npt.NDArray[Any]], tuple[float, float]]
#: ``prepare(sample, input_size)``: ``input_size`` is the model's network input ``(width, height)``
#: when its config states it (``CAMERA_INPUT_SIZE_KEYS``), else ``None``. Raises ``InputError``.
Prepare = Callable[[Sample, "tuple[int, int] | None"], Prepared]
#: ``warmup(sensor, spec)``: a representative, deterministic sample for a warm-up request.
WarmupSample = Callable[[str, "SensorSpec | None"], Sample]


class FusionRole(enum.Enum):
    """How the fusion stage uses a kind's detections (its model's outputs, :data:`ROLE_OUTPUTS`)."""

    #: lidar-like: 3D boxes in the sensor frame seed the objects.
    BOXES_3D = "boxes_3d"
    #: radar-like: positions with radial (and over-ground) velocity refine objects' motion.
    DOPPLER_POINTS = "doppler_points"
    #: camera-like: 2D boxes in pixels confirm and add objects; the sensor needs a calibration.
    IMAGE_BOXES = "image_boxes"


#: The output tensors a kind's contract must have for its fusion role.
ROLE_OUTPUTS: Mapping[FusionRole, frozenset[str]] = {
    FusionRole.BOXES_3D: frozenset({"BOXES", "LABELS", "SCORES"}),
    FusionRole.DOPPLER_POINTS: frozenset({"POSITIONS", "RADIAL_VELOCITY", "VELOCITY", "RCS", "SCORES", "RETURNS"}),
    FusionRole.IMAGE_BOXES: frozenset({"BOXES", "SCORES", "LABELS", "COUNT"}),
}


@dataclass(frozen=True, slots=True)
class SensorKindDef:
    """Everything the runtime knows about one sensor kind; register it with
    :func:`perception.kinds.register_kind`.

    * ``name``: the kind's name in profiles, rigs and drives (``SensorSpec.kind``, ``SensorConfig.kind``).
    * ``sample``: the sample type (:class:`ImageSample` or :class:`PointCloudSample`); it picks the
      drive codec (image kinds are stored as compressed images with a calibration, point kinds as point
      clouds with ``point_fields`` as their columns).
    * ``contract``: the tensors of its model, the one source read by the runtime's start-up check, the
      model side (:mod:`perception.modelkit`), the tests of ``models/*/config.pbtxt`` and the docs.
    * ``prepare`` / ``warmup``: a sample's request tensors, and a warm-up sample.
    * ``fusion``: its role in fusion (``None``: the fusion stage has no rule for it and rejects a rig
      with such a sensor at start-up).
    * ``default_model``: the model a profile's sensor of this kind uses unless it says otherwise.
    * ``color``: its colour in views (boxes seen by this kind alone).
    * ``accumulate_ms``: a point kind's default sweep accumulation (``SensorConfig.accumulate_ms``):
      earlier sweeps captured up to this long before the one a frame uses are merged into it, moved
      by the ego motion (:mod:`perception.scheduler`); 0 sends each sweep alone. Image kinds have none.
    """

    name: str
    sample: type[ImageSample] | type[PointCloudSample]
    contract: KindContract
    prepare: Prepare
    warmup: WarmupSample
    fusion: FusionRole | None = None
    default_model: str | None = None
    color: RGB = (0.6, 0.6, 0.6)
    point_fields: tuple[str, ...] = ()
    accumulate_ms: float = 0.0

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum() or not self.name.islower():
            raise ValueError(f"sensor kind name must be lower-case letters, digits and '_', got {self.name!r}")
        if self.sample is PointCloudSample and not self.point_fields:
            raise ValueError(f"sensor kind {self.name!r}: a point-cloud kind needs point_fields")
        if self.sample is ImageSample and self.point_fields:
            raise ValueError(f"sensor kind {self.name!r}: an image kind has no point_fields")
        problem = accumulate_problem(self.accumulate_ms, self.name, image=self.sample is ImageSample)
        if problem:
            raise ValueError(f"sensor kind {self.name!r}: accumulate_ms: {problem}")
        if self.fusion is not None:
            missing = ROLE_OUTPUTS[self.fusion] - set(self.contract.output_names)
            if missing:
                raise ValueError(
                    f"sensor kind {self.name!r}: fusion role {self.fusion.value} needs outputs "
                    f"{', '.join(sorted(missing))} in its contract"
                )

    @property
    def is_image(self) -> bool:
        """Image kinds carry a camera calibration and are stored as compressed images."""
        return self.sample is ImageSample
