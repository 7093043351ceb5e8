"""Defaults chosen by a drive's source: a drive of the simulator, or a recording of real sensors.

Which reference camera model serves a drive's cameras when no profile names one:

Chosen by measurement (``bench/bench_camera.py`` -> ``bench/results/camera.json``, 2D AP50 per class on
every camera image): the simulator-trained CNN (``camera_detector``) is the better detector on the
simulator's drives, the COCO-trained YOLOX-Nano (``yolox_nano``) on recorded ones (the CNN finds
nothing on real cameras). A drive written by ``perception sim`` says so in its metadata
(``generator: perception sim``); everything else (``perception import`` of nuScenes, KITTI, ROS 2
bags: ``source: ...``) is a recording of real cameras. A profile's ``sensors[].model`` always wins.

The frame budget of a recorded drive is the profile's ``budget.recorded_total_ms`` when it sets one, or
when it has no ``budget:`` section (:data:`perception.config._model.RECORDED_TOTAL_MS`;
:meth:`perception.config._model.BudgetConfig.for_drive`): real rigs carry more and larger sensors than the
simulator's (the 12-sensor nuScenes rig, a 64-beam KITTI lidar).
"""

from __future__ import annotations

from collections.abc import Mapping

from perception.types import SIM_GENERATOR

__all__ = ["CAMERA_MODEL_RECORDED", "CAMERA_MODEL_SIMULATED", "default_camera_model", "is_simulated"]

#: The camera model for drives of the simulator, and for recordings of real cameras.
CAMERA_MODEL_SIMULATED = "camera_detector"
CAMERA_MODEL_RECORDED = "yolox_nano"


def is_simulated(metadata: Mapping[str, str]) -> bool:
    """A drive with this metadata (``DriveReader.metadata``) was written by ``perception sim``."""
    return metadata.get("generator") == SIM_GENERATOR


def default_camera_model(metadata: Mapping[str, str]) -> str:
    """The default camera model for a drive with this metadata (``DriveReader.metadata``)."""
    return CAMERA_MODEL_SIMULATED if is_simulated(metadata) else CAMERA_MODEL_RECORDED
