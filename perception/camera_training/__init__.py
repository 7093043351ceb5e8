"""Training of the camera detector (``models/camera_detector``) on the synthetic drive generator.

Run it as ``python -m perception.camera_training --seed 0 --out models/camera_detector/1/camera_detector.onnx``
(needs the ``train`` extra: ``pip install -e '.[train]'``). Nothing in the runtime, the models or the
tests imports this package; torch is imported only when training starts.

Modules: :mod:`._data` (drives -> cached letterboxed images + boxes, CenterNet targets, augmentation;
numpy only), :mod:`._net` (the torch network), :mod:`._train` (loop, export), :mod:`._evaluate`
(AP@0.5 of an exported ONNX model on a generated drive; numpy + onnxruntime only).
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see ``python -m perception.camera_training --help``)."""
    from ._cli import main as _main

    return _main(argv)

