"""The COCO-trained YOLOX-Nano detector (``models/yolox_nano``): pre- and post-processing.

Pure numpy (+ Pillow for resampling); onnxruntime only inside :class:`YoloxDetector`. The network
(Megvii YOLOX-Nano, exported to ONNX; ``models/yolox_nano/PROVENANCE.md``) takes one
``[1, 3, 416, 416]`` float32 image, **BGR, 0..255, no mean/std**, letterboxed at the top-left corner
(padding bottom/right with grey 114), and returns ``[1, 3549, 85]``: one row per anchor of the
52x52, 26x26 and 13x13 grids (strides 8, 16, 32, row-major, in that order), columns

* ``0:2`` centre offset in cells, ``2:4`` log size in cells (raw: the grid decode is **not** in the
  graph; :func:`decode_yolox` does it: ``xy = (out + grid) * stride``, ``wh = exp(out) * stride``);
* ``4`` objectness and ``5:85`` the 80 COCO class probabilities (sigmoids already applied).

The score of an anchor for one of our labels is ``objectness * max(class probability)`` over the COCO
classes mapped to that label (:data:`COCO_TO_LABEL`); every anchor proposes its best label only;
then greedy NMS per label, best first, at most :data:`~perception.modelkit._camera.MAX_DETECTIONS`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from perception.errors import ModelContractError
from perception.kinds import CAMERA_INPUT_SIZE_KEYS
from perception.types import LABELS

from ._camera import (
    MAX_DETECTIONS,
    CameraDetections,
    CameraDetectorModel,
    ImageDetector,
    Letterbox,
    letterbox_image,
    onnx_session,
)
from ._triton import params_from_config

__all__ = [
    "COCO_CLASSES",
    "COCO_TO_LABEL",
    "YOLOX_INPUT",
    "YOLOX_STRIDES",
    "YoloxDetector",
    "YoloxDetectorModel",
    "YoloxParams",
    "decode_yolox",
    "nms",
    "yolox_grid",
    "yolox_preprocess",
]

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

#: Network input side (square) and the strides of its three output grids.
YOLOX_INPUT = 416
YOLOX_STRIDES = (8, 16, 32)

#: The 80 COCO class names in the network's output order (``models/yolox_nano/coco_classes.txt``).
COCO_CLASSES: tuple[str, ...] = (
    "person", "bicycle", "car", "motorbike", "aeroplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "sofa",
    "pottedplant", "bed", "diningtable", "toilet", "tvmonitor", "laptop", "mouse", "remote", "keyboard",
    "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase",
    "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip

#: COCO class -> our label (``perception.types.LABELS``). The other 74 classes are ignored. This is the
#: mapping the nuScenes importer uses the other way round (bus, construction vehicle, trailer -> truck;
#: bicycle, motorcycle -> cyclist, ridden or parked: nuScenes annotates parked bicycles as bicycles).
COCO_TO_LABEL: Mapping[str, str] = {
    "car": "car",
    "truck": "truck",
    "bus": "truck",
    "person": "pedestrian",
    "bicycle": "cyclist",
    "motorbike": "cyclist",
}

_NUM_OUTPUTS = 5 + len(COCO_CLASSES)
#: Largest log size accepted by the decoder (a box four times the network input at most).
_MAX_LOG_SIZE = math.log(4 * YOLOX_INPUT / min(YOLOX_STRIDES))
#: Per label: the COCO column indices (into the 85 output columns) that map to it.
_LABEL_COLUMNS: tuple[tuple[int, ...], ...] = tuple(
    tuple(5 + COCO_CLASSES.index(coco) for coco, ours in COCO_TO_LABEL.items() if ours == label) for label in LABELS
)


def yolox_grid(size: int = YOLOX_INPUT, strides: Sequence[int] = YOLOX_STRIDES) -> tuple[F32, F32]:
    """Cell coordinates ``[A, 2]`` (x, y) and stride ``[A]`` of every anchor, in the network's order."""
    grids = []
    steps = []
    for stride in strides:
        n = size // stride
        ys, xs = np.mgrid[0:n, 0:n]
        grids.append(np.stack([xs.reshape(-1), ys.reshape(-1)], axis=1))
        steps.append(np.full(n * n, stride))
    return np.concatenate(grids).astype(np.float32), np.concatenate(steps).astype(np.float32)


_GRID, _STRIDE = yolox_grid()


def yolox_preprocess(images: Sequence[U8] | U8, size: int = YOLOX_INPUT) -> tuple[F32, list[Letterbox]]:
    """Letterbox RGB ``[H, W, 3]`` uint8 images (sizes may differ) at the top-left of a grey
    ``size x size`` canvas -> ``[B, 3, size, size]`` float32 BGR 0..255, and each image's letterbox."""
    canvases = []
    boxes = []
    for image in images:
        canvas, box = letterbox_image(image, size, size, centre=False)
        canvases.append(canvas)
        boxes.append(box)
    if not canvases:
        return np.zeros((0, 3, size, size), dtype=np.float32), []
    bgr = np.stack(canvases)[..., ::-1].transpose(0, 3, 1, 2)
    return np.ascontiguousarray(bgr, dtype=np.float32), boxes


def nms(boxes: npt.ArrayLike, scores: npt.ArrayLike, iou_threshold: float) -> I64:
    """Greedy non-maximum suppression: indices of the kept boxes ``[N,4]`` (x1,y1,x2,y2), best first.

    A box is dropped when its IoU with a better kept box exceeds ``iou_threshold``. Ties in score keep
    the lower index first (deterministic).
    """
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    order = np.lexsort((np.arange(len(s)), -s))
    area = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    keep: list[int] = []
    while order.size:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        w = np.clip(np.minimum(b[i, 2], b[rest, 2]) - np.maximum(b[i, 0], b[rest, 0]), 0, None)
        h = np.clip(np.minimum(b[i, 3], b[rest, 3]) - np.maximum(b[i, 1], b[rest, 1]), 0, None)
        inter = w * h
        union = area[i] + area[rest] - inter
        iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)


def decode_yolox(
    output: npt.ArrayLike,
    letterbox: Letterbox,
    *,
    score_threshold: float = 0.05,
    nms_iou: float = 0.45,
    max_detections: int = MAX_DETECTIONS,
) -> CameraDetections:
    """One image's raw network output ``[A, 85]`` -> its detections in original pixels, best first."""
    out = np.asarray(output, dtype=np.float32)
    if out.ndim != 2 or out.shape != (len(_GRID), _NUM_OUTPUTS):
        raise ValueError(f"YOLOX output must be [{len(_GRID)}, {_NUM_OUTPUTS}], got {list(out.shape)}")
    per_label = np.stack([out[:, list(cols)].max(axis=1) for cols in _LABEL_COLUMNS], axis=1) * out[:, 4:5]
    labels = per_label.argmax(axis=1)
    scores = per_label[np.arange(len(labels)), labels]
    keep = np.flatnonzero(np.isfinite(scores) & (scores >= score_threshold))
    if keep.size == 0:
        return CameraDetections(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))
    cand = out[keep]
    stride = _STRIDE[keep, None]
    xy = (cand[:, 0:2] + _GRID[keep]) * stride
    wh = np.exp(np.clip(cand[:, 2:4], -_MAX_LOG_SIZE, _MAX_LOG_SIZE)) * stride
    boxes = letterbox.to_original(np.concatenate([xy - wh / 2, xy + wh / 2], axis=1))
    scores, labels = scores[keep], labels[keep]
    kept = []
    for k in range(len(LABELS)):  # NMS per label: a car and a truck box on one vehicle both stay
        of_label = np.flatnonzero(labels == k)
        kept.append(of_label[nms(boxes[of_label], scores[of_label], nms_iou)])
    chosen = np.concatenate(kept)
    chosen = chosen[np.lexsort((chosen, -scores[chosen]))][:max_detections]
    return CameraDetections(
        boxes[chosen].astype(np.float32), scores[chosen].astype(np.float32), labels[chosen].astype(np.int32)
    )


class YoloxDetector:
    """The YOLOX ONNX graph in an onnxruntime CPU session, with pre/post-processing around it.

    ``YoloxDetector(path)(images)`` maps ``[H, W, 3]`` uint8 RGB images to one
    :class:`~perception.modelkit.CameraDetections` per image, in pixels of each image (the Triton model
    and offline evaluation run exactly this). The exported graph has a fixed batch of 1: a batch runs
    image by image in one session (on a CPU the cost is per image anyway).
    """

    def __init__(
        self,
        onnx_path: str | os.PathLike[str],
        *,
        intra_op_threads: int = 1,
        score_threshold: float = 0.05,
        nms_iou: float = 0.45,
        max_detections: int = MAX_DETECTIONS,
    ) -> None:
        path = os.fspath(onnx_path)
        self._session = onnx_session(path, "YOLOX", intra_op_threads=intra_op_threads)
        inputs = self._session.get_inputs()
        outputs = self._session.get_outputs()
        if len(inputs) != 1 or len(outputs) != 1:
            raise ModelContractError(
                f"YOLOX network must have 1 input and 1 output, has {len(inputs)} and {len(outputs)}", file=path
            )
        if list(inputs[0].shape[1:]) != [3, YOLOX_INPUT, YOLOX_INPUT] or list(outputs[0].shape[1:]) != [
            len(_GRID),
            _NUM_OUTPUTS,
        ]:
            raise ModelContractError(
                f"YOLOX network must map [B, 3, {YOLOX_INPUT}, {YOLOX_INPUT}] -> [B, {len(_GRID)}, {_NUM_OUTPUTS}], "
                f"maps {inputs[0].shape} -> {outputs[0].shape}",
                file=path,
            )
        self._input = inputs[0].name
        self._output = outputs[0].name
        self._fixed_batch = inputs[0].shape[0] == 1
        self.score_threshold = score_threshold
        self.nms_iou = nms_iou
        self.max_detections = max_detections

    @property
    def input_size(self) -> tuple[int, int]:
        return YOLOX_INPUT, YOLOX_INPUT

    @staticmethod
    def preprocess(images: Sequence[U8] | U8) -> tuple[F32, list[Letterbox]]:
        return yolox_preprocess(images)

    def infer(self, batch: F32) -> tuple[F32]:
        """Raw outputs ``[B, 3549, 85]`` of a preprocessed batch ``[B, 3, 416, 416]``."""
        if not self._fixed_batch:
            (out,) = self._session.run([self._output], {self._input: batch})
            return (out,)
        rows = [self._session.run([self._output], {self._input: batch[i : i + 1]})[0] for i in range(len(batch))]
        return (np.concatenate(rows) if rows else np.zeros((0, len(_GRID), _NUM_OUTPUTS), np.float32),)

    def decode(self, maps: Sequence[F32], letterboxes: Sequence[Letterbox]) -> list[CameraDetections]:
        (out,) = maps
        return [
            decode_yolox(
                out[i],
                box,
                score_threshold=self.score_threshold,
                nms_iou=self.nms_iou,
                max_detections=self.max_detections,
            )
            for i, box in enumerate(letterboxes)
        ]

    def __call__(self, images: Sequence[U8] | U8) -> list[CameraDetections]:
        batch, letterboxes = self.preprocess(images)
        if not letterboxes:
            return []
        return self.decode(self.infer(batch), letterboxes)


@dataclass(frozen=True, slots=True)
class YoloxParams:
    """Tunables of :class:`YoloxDetectorModel` (``parameters`` of its ``config.pbtxt``)."""

    score_threshold: float = 0.05
    nms_iou: float = 0.45
    intra_op_threads: int = 1


class YoloxDetectorModel(CameraDetectorModel):
    """The camera contract served by YOLOX-Nano (``models/yolox_nano``): same tensors, batching and
    per-request errors as :class:`~perception.modelkit.CameraDetectorModel`, another network."""

    ONNX_FILE: ClassVar[str] = "yolox_nano.onnx"

    def make_detector(self, onnx_path: Path, config: Mapping[str, Any]) -> ImageDetector:
        self.params = params = params_from_config(YoloxParams(), config, ignore=CAMERA_INPUT_SIZE_KEYS)
        return YoloxDetector(
            onnx_path,
            intra_op_threads=max(1, params.intra_op_threads),
            score_threshold=params.score_threshold,
            nms_iou=params.nms_iou,
        )
