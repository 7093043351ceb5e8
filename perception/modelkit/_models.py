"""The reference lidar and radar models as Triton python-backend classes (thin: contract + pipeline).

``models/<name>/1/model.py`` only subclasses these as ``TritonPythonModel``. Numeric fields of
:class:`LidarParams` / :class:`RadarParams` can be overridden from ``config.pbtxt`` ``parameters``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from perception.kinds import LIDAR, RADAR, TensorSpec

from ._lidar import LidarParams, detect_lidar
from ._radar import RadarParams, detect_radar
from ._triton import Arrays, Checkpoint, TritonModel, params_from_config

__all__ = ["LidarDetectorModel", "RadarDetectorModel"]


class LidarDetectorModel(TritonModel):
    """``POINTS [N,4]`` -> ``BOXES [M,7]``, ``LABELS [M]``, ``SCORES [M]`` (see :func:`detect_lidar`)."""

    INPUTS: ClassVar[tuple[TensorSpec, ...]] = LIDAR.contract.inputs
    OUTPUTS: ClassVar[tuple[TensorSpec, ...]] = LIDAR.contract.outputs
    params = LidarParams()

    def setup(self, config: Mapping[str, Any]) -> None:
        self.params = params_from_config(LidarParams(), config)

    def run(self, inputs: Arrays, checkpoint: Checkpoint) -> Arrays:
        det = detect_lidar(inputs["POINTS"], self.params, checkpoint)
        return {"BOXES": det.boxes, "LABELS": det.labels, "SCORES": det.scores}


class RadarDetectorModel(TritonModel):
    """``POINTS [N,>=5]`` -> per-object ``POSITIONS``, ``RADIAL_VELOCITY``, ``VELOCITY``, ``RCS``, ``SCORES``,
    ``RETURNS``."""

    INPUTS: ClassVar[tuple[TensorSpec, ...]] = RADAR.contract.inputs
    OUTPUTS: ClassVar[tuple[TensorSpec, ...]] = RADAR.contract.outputs
    params = RadarParams()

    def setup(self, config: Mapping[str, Any]) -> None:
        self.params = params_from_config(RadarParams(), config)

    def run(self, inputs: Arrays, checkpoint: Checkpoint) -> Arrays:
        det = detect_radar(inputs["POINTS"], self.params, checkpoint)
        return {
            "POSITIONS": det.positions,
            "RADIAL_VELOCITY": det.radial_velocity,
            "VELOCITY": det.velocity,
            "RCS": det.rcs,
            "SCORES": det.scores,
            "RETURNS": det.returns,
        }
