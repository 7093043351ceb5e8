"""Triton python-backend entry of the YOLOX-Nano camera detector (logic: perception.modelkit; yolox_nano.onnx)."""

from __future__ import annotations

from perception.modelkit import YoloxDetectorModel


class TritonPythonModel(YoloxDetectorModel):
    """See :class:`perception.modelkit.YoloxDetectorModel` and ``models/README.md``."""
