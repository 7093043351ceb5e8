"""Which reference camera model serves a drive's cameras when no profile names one.

Chosen by measurement (``bench/bench_camera.py`` -> ``bench/results/camera.json``, 2D AP50 per class on
every camera image): the simulator-trained CNN (``camera_detector``) is the better detector on the
simulator's drives, the COCO-trained YOLOX-Nano (``yolox_nano``) on recorded ones (the CNN finds
nothing on real cameras). A drive written by ``perception sim`` says so in its metadata
(``generator: perception sim``); everything else (``perception import`` of nuScenes, KITTI, ROS 2
bags: ``source: ...``) is a recording of real cameras. A profile's ``sensors[].model`` always wins.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["CAMERA_MODEL_RECORDED", "CAMERA_MODEL_SIMULATED", "default_camera_model"]

#: The camera model for drives of the simulator, and for recordings of real cameras.
CAMERA_MODEL_SIMULATED = "camera_detector"
CAMERA_MODEL_RECORDED = "yolox_nano"
#: The ``generator`` metadata value ``perception sim`` writes into its drives.
_SIM_GENERATOR = "perception sim"


def default_camera_model(metadata: Mapping[str, str]) -> str:
    """The default camera model for a drive with this metadata (``DriveReader.metadata``)."""
    if metadata.get("generator") == _SIM_GENERATOR:
        return CAMERA_MODEL_SIMULATED
    return CAMERA_MODEL_RECORDED
