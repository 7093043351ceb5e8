"""Triton python-backend entry of the camera detector (logic: perception.modelkit, network: camera_detector.onnx)."""

from __future__ import annotations

from perception.modelkit import CameraDetectorModel


class TritonPythonModel(CameraDetectorModel):
    """See :class:`perception.modelkit.CameraDetectorModel` and ``models/README.md``."""
