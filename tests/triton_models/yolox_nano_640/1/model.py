"""``models/yolox_nano`` at another input size: the same model class, the committed network."""

from __future__ import annotations

from pathlib import Path

from perception.modelkit import YoloxDetectorModel


class TritonPythonModel(YoloxDetectorModel):
    """See ``../config.pbtxt``."""

    ONNX_FILE = str(Path(__file__).resolve().parents[4] / "models" / "yolox_nano" / "1" / "yolox_nano.onnx")
