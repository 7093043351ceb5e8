"""The COCO-trained YOLOX-Nano detector (``models/yolox_nano``): pre- and post-processing.

Pure numpy (+ Pillow for resampling); onnxruntime only inside :class:`YoloxDetector`. The network
(Megvii YOLOX-Nano, exported to ONNX; ``models/yolox_nano/PROVENANCE.md``) takes one
``[1, 3, H, W]`` float32 image, **BGR, 0..255, no mean/std**, letterboxed at the top-left corner
(padding bottom/right with grey 114), and returns ``[1, A, 85]``: one row per anchor of the
``W/8 x H/8``, ``W/16 x H/16`` and ``W/32 x H/32`` grids (strides 8, 16, 32, row-major, in that order;
at 416x416: 52x52, 26x26, 13x13, A = 3549). The committed graph's H and W are symbolic (its Reshape is
``[1, 85, -1]`` and its Resize uses scales), so the input size is a setting: the model config's
``input_width`` / ``input_height`` (:data:`perception.kinds.CAMERA_INPUT_SIZE_KEYS`), multiples of 32;
:data:`YOLOX_INPUT` when it states none. Columns

* ``0:2`` centre offset in cells, ``2:4`` log size in cells (raw: the grid decode is **not** in the
  graph; :func:`decode_yolox` does it: ``xy = (out + grid) * stride``, ``wh = exp(out) * stride``);
* ``4`` objectness and ``5:85`` the 80 COCO class probabilities (sigmoids already applied).

The score of an anchor for one of our labels is ``objectness * max(class probability)`` over the COCO
classes mapped to that label (:data:`COCO_TO_LABEL`); every anchor proposes its best label only;
then greedy NMS per label, best first, at most :data:`~perception.modelkit._camera.MAX_DETECTIONS`.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from perception.errors import ConfigError, ModelContractError
from perception.kinds import CAMERA_INPUT_SIZE_KEYS, camera_input_size
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

#: Network input side when the model config states none (square; the export's size), and the strides
#: of the three output grids (an input side must be a multiple of the largest).
YOLOX_INPUT = 416
YOLOX_STRIDES = (8, 16, 32)

#: A network input: ``(width, height)``, or one side of a square.
Size = int | tuple[int, int]

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
#: Per label: the COCO column indices (into the 85 output columns) that map to it.
_LABEL_COLUMNS: tuple[tuple[int, ...], ...] = tuple(
    tuple(5 + COCO_CLASSES.index(coco) for coco, ours in COCO_TO_LABEL.items() if ours == label) for label in LABELS
)


def _wh(size: Size) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def check_input_size(size: Size) -> tuple[int, int]:
    """``(width, height)`` of a network input, or :class:`ValueError` unless both are positive multiples
    of the largest stride (the graph's grids must tile the input)."""
    width, height = _wh(size)
    step = max(YOLOX_STRIDES)
    for name, side in (("width", width), ("height", height)):
        if side <= 0 or side % step:
            raise ValueError(f"YOLOX input {name} must be a positive multiple of {step}, got {side}")
    return width, height


def yolox_grid(size: Size = YOLOX_INPUT, strides: Sequence[int] = YOLOX_STRIDES) -> tuple[F32, F32]:
    """Cell coordinates ``[A, 2]`` (x, y) and stride ``[A]`` of every anchor, in the network's order,
    for a ``size`` input (``(width, height)`` or a square's side)."""
    width, height = _wh(size)
    grids = []
    steps = []
    for stride in strides:
        nx, ny = width // stride, height // stride
        ys, xs = np.mgrid[0:ny, 0:nx]
        grids.append(np.stack([xs.reshape(-1), ys.reshape(-1)], axis=1))
        steps.append(np.full(nx * ny, stride))
    return np.concatenate(grids).astype(np.float32), np.concatenate(steps).astype(np.float32)


@functools.lru_cache(maxsize=8)
def _grid(size: tuple[int, int]) -> tuple[F32, F32, float]:
    """The anchors of a ``(width, height)`` input and the largest log size the decoder accepts there
    (a box four times the input's larger side)."""
    grid, stride = yolox_grid(size)
    grid.flags.writeable = False
    stride.flags.writeable = False
    return grid, stride, math.log(4 * max(size) / min(YOLOX_STRIDES))


def yolox_preprocess(images: Sequence[U8] | U8, size: Size = YOLOX_INPUT) -> tuple[F32, list[Letterbox]]:
    """Letterbox RGB ``[H, W, 3]`` uint8 images (sizes may differ) at the top-left of a grey
    canvas of ``size`` (``(width, height)`` or a square's side) -> ``[B, 3, height, width]`` float32
    BGR 0..255, and each image's letterbox."""
    width, height = _wh(size)
    canvases = []
    boxes = []
    for image in images:
        canvas, box = letterbox_image(image, width, height, centre=False)
        canvases.append(canvas)
        boxes.append(box)
    if not canvases:
        return np.zeros((0, 3, height, width), dtype=np.float32), []
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
    input_size: Size = YOLOX_INPUT,
    score_threshold: float = 0.05,
    nms_iou: float = 0.45,
    max_detections: int = MAX_DETECTIONS,
) -> CameraDetections:
    """One image's raw network output ``[A, 85]`` for an ``input_size`` network input -> its detections
    in original pixels, best first."""
    grid, strides, max_log_size = _grid(_wh(input_size))
    out = np.asarray(output, dtype=np.float32)
    if out.ndim != 2 or out.shape != (len(grid), _NUM_OUTPUTS):
        raise ValueError(f"YOLOX output must be [{len(grid)}, {_NUM_OUTPUTS}], got {list(out.shape)}")
    per_label = np.stack([out[:, list(cols)].max(axis=1) for cols in _LABEL_COLUMNS], axis=1) * out[:, 4:5]
    labels = per_label.argmax(axis=1)
    scores = per_label[np.arange(len(labels)), labels]
    keep = np.flatnonzero(np.isfinite(scores) & (scores >= score_threshold))
    if keep.size == 0:
        return CameraDetections(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))
    cand = out[keep]
    stride = strides[keep, None]
    xy = (cand[:, 0:2] + grid[keep]) * stride
    wh = np.exp(np.clip(cand[:, 2:4], -max_log_size, max_log_size)) * stride
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

    ``input_size`` is the network input ``(width, height)`` (or a square's side; multiples of 32): any
    size when the graph's H and W are symbolic, else the graph's own.
    """

    def __init__(
        self,
        onnx_path: str | os.PathLike[str],
        *,
        input_size: Size = YOLOX_INPUT,
        intra_op_threads: int = 1,
        score_threshold: float = 0.05,
        nms_iou: float = 0.45,
        max_detections: int = MAX_DETECTIONS,
    ) -> None:
        path = os.fspath(onnx_path)
        width, height = self._size = check_input_size(input_size)
        anchors = len(_grid(self._size)[0])
        self._session = onnx_session(path, "YOLOX", intra_op_threads=intra_op_threads)
        inputs = self._session.get_inputs()
        outputs = self._session.get_outputs()
        if len(inputs) != 1 or len(outputs) != 1:
            raise ModelContractError(
                f"YOLOX network must have 1 input and 1 output, has {len(inputs)} and {len(outputs)}", file=path
            )
        # A symbolic dim (a name, or None) takes any size; a fixed one must be the size asked for.
        if not _dims_fit(inputs[0].shape[1:], [3, height, width]) or not _dims_fit(
            outputs[0].shape[1:], [anchors, _NUM_OUTPUTS]
        ):
            raise ModelContractError(
                f"YOLOX network must map [B, 3, {height}, {width}] -> [B, {anchors}, {_NUM_OUTPUTS}] "
                f"(H and W symbolic, or these), maps {inputs[0].shape} -> {outputs[0].shape}",
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
        """The network input ``(width, height)``."""
        return self._size

    def preprocess(self, images: Sequence[U8] | U8) -> tuple[F32, list[Letterbox]]:
        return yolox_preprocess(images, self._size)

    def infer(self, batch: F32) -> tuple[F32]:
        """Raw outputs ``[B, A, 85]`` of a preprocessed batch ``[B, 3, height, width]``."""
        if not self._fixed_batch:
            (out,) = self._session.run([self._output], {self._input: batch})
            return (out,)
        rows = [self._session.run([self._output], {self._input: batch[i : i + 1]})[0] for i in range(len(batch))]
        anchors = len(_grid(self._size)[0])
        return (np.concatenate(rows) if rows else np.zeros((0, anchors, _NUM_OUTPUTS), np.float32),)

    def decode(self, maps: Sequence[F32], letterboxes: Sequence[Letterbox]) -> list[CameraDetections]:
        (out,) = maps
        return [
            decode_yolox(
                out[i],
                box,
                input_size=self._size,
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


def _dims_fit(have: Sequence[Any], want: Sequence[int]) -> bool:
    return len(have) == len(want) and all(not isinstance(h, int) or h == w for h, w in zip(have, want, strict=True))


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
        file = self.config_file
        size = camera_input_size(config.get("parameters"), file=file, model=self.model_name, require_both=True)
        try:
            size = check_input_size(size or YOLOX_INPUT)
        except ValueError as exc:
            key = CAMERA_INPUT_SIZE_KEYS[0] if "width" in str(exc) else CAMERA_INPUT_SIZE_KEYS[1]
            raise ConfigError(str(exc), file=file, key=key, model=self.model_name) from exc
        return YoloxDetector(
            onnx_path,
            input_size=size,
            intra_op_threads=max(1, params.intra_op_threads),
            score_threshold=params.score_threshold,
            nms_iou=params.nms_iou,
        )
