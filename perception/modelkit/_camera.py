"""Camera detector pre- and post-processing, shared by serving (Triton), training and evaluation.

Pure numpy (+ Pillow for resampling): no torch, no onnxruntime. The network itself is a small
CenterNet: it takes ``[B, 3, NET_HEIGHT, NET_WIDTH]`` float32 images made by :func:`preprocess_images` and
returns, at stride :data:`OUTPUT_STRIDE`,

* ``heatmap`` ``[B, C, h, w]``: per-class centre probability (sigmoid already applied in the graph);
* ``size`` ``[B, 2, h, w]``: ``log(width / stride), log(height / stride)`` of the box centred there;
* ``offset`` ``[B, 2, h, w]``: sub-cell position of the centre, in cells (``0..1``).

:func:`decode_centernet` turns those maps into at most :data:`MAX_DETECTIONS` boxes in pixels of the
*original* image (3x3 max-pool peak suppression, top-K, size/offset regression, letterbox undone).

Images are letterboxed: scaled by one factor to fit the network input, then centred on a grey canvas.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from perception import _imageio
from perception.errors import InputError, ModelContractError
from perception.kinds import CAMERA, CAMERA_INPUT_SIZE_KEYS, TensorSpec, camera_input_size
from perception.types import LABELS

from ._triton import Arrays, Checkpoint, RequestCancelled, TritonModel, params_from_config

__all__ = [
    "CAMERA_INPUT",
    "MAX_DETECTIONS",
    "MAX_IMAGE_PIXELS",
    "MAX_IMAGE_SIDE",
    "NET_HEIGHT",
    "NET_WIDTH",
    "NUM_CLASSES",
    "ONNX_OUTPUTS",
    "OUTPUT_STRIDE",
    "CameraDetections",
    "CameraDetector",
    "CameraDetectorModel",
    "CameraDetectorParams",
    "ImageDetector",
    "Letterbox",
    "camera_ground_truth",
    "decode_centernet",
    "letterbox_image",
    "normalize_images",
    "preprocess_images",
    "validate_image_batch",
]

log = logging.getLogger("perception.modelkit")

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]

#: Network input size (pixels). 16:9 cameras letterbox into it with a few rows of padding.
NET_WIDTH = 384
NET_HEIGHT = 224
#: Stride of the output maps relative to the network input.
OUTPUT_STRIDE = 4
NUM_CLASSES = len(LABELS)
#: Rows of the fixed-size output tensors (``COUNT`` says how many are valid).
MAX_DETECTIONS = 100
#: Inputs beyond these are refused as absurd: the client's limits (one definition, perception._imageio).
MAX_IMAGE_SIDE = _imageio.MAX_IMAGE_SIDE
MAX_IMAGE_PIXELS = _imageio.MAX_PIXELS
#: Name of the model's image input tensor.
CAMERA_INPUT = CAMERA.contract.inputs[0].name
#: The camera contract's encoded input (``IMAGE_BYTES``): a request carries it or ``IMAGE``.
ENCODED_IMAGE: TensorSpec = CAMERA.contract.encoded  # type: ignore[assignment]  # the camera contract has one
#: The camera contract's per-row answer to ``IMAGE_BYTES`` (``DECODE_ERROR``): a model whose config declares
#: it answers a row that does not decode on its own, when the request asks for it.
DECODE_ERROR: TensorSpec = CAMERA.contract.decode_error  # type: ignore[assignment]  # the camera contract has one
#: Output names of the exported network, in order.
ONNX_OUTPUTS = ("heatmap", "size", "offset")

#: Grey used to pad the letterbox (also the normalisation mean, so padding is ~0 after normalising).
PAD_VALUE = 114
_MEAN = np.float32(PAD_VALUE / 255.0)
_STD = np.float32(0.25)
#: Largest ``log(size / stride)`` accepted by the decoder (a box twice the network input at most).
_MAX_LOG_SIZE = math.log(2 * max(NET_WIDTH, NET_HEIGHT) / OUTPUT_STRIDE)


#: The image input with its batch dimension, as a request carries it.
_BATCHED_IMAGE = TensorSpec(CAMERA_INPUT, "UINT8", (-1, -1, -1, 3), description="RGB images [B, H, W, 3]")


def validate_image_batch(array: npt.NDArray[Any] | None, *, model: str | None = None) -> U8:
    """Check a batched image tensor ``[B, H, W, 3]`` uint8 and return it.

    Raises :class:`InputError` naming the ``IMAGE`` tensor for a missing tensor, a wrong dtype, rank or
    channel count, an empty batch, a zero-size image, or an image larger than :data:`MAX_IMAGE_SIDE` per
    side or :data:`MAX_IMAGE_PIXELS` in total.
    """
    images: U8 = _BATCHED_IMAGE.validate(array, model=model)
    batch, height, width, _ = images.shape
    shape = list(images.shape)
    if batch == 0:
        raise InputError(f"empty batch (shape {shape})", tensor=CAMERA_INPUT, model=model)
    if height == 0 or width == 0:
        raise InputError(f"zero-size image {width}x{height} (shape {shape})", tensor=CAMERA_INPUT, model=model)
    if height > MAX_IMAGE_SIDE or width > MAX_IMAGE_SIDE or height * width > MAX_IMAGE_PIXELS:
        raise InputError(
            f"image of {width}x{height} is too large (at most {MAX_IMAGE_SIDE} px per side and "
            f"{MAX_IMAGE_PIXELS} px in total)",
            tensor=CAMERA_INPUT,
            model=model,
        )
    return images


#: The encoded input with its batch dimension, as a request carries it.
_BATCHED_ENCODED = TensorSpec(ENCODED_IMAGE.name, "BYTES", (-1, 1), description="encoded images [B, 1]")


def decode_encoded_rows(
    array: npt.NDArray[Any] | None, fit: tuple[int, int], *, model: str | None = None
) -> list[tuple[U8, tuple[float, float, float, float]] | InputError]:
    """Decode a batch of encoded images ``[B, 1]`` (``IMAGE_BYTES``) at the smallest DCT scale covering
    their letterbox into ``fit`` (the network input, as the runtime does with ``decode: client``): per
    row, the image and the factors ``(sx, sy, sx, sy)`` from its pixels to its original's, or the
    :class:`InputError` naming ``IMAGE_BYTES`` and the row why it did not decode (or is larger than
    :data:`MAX_IMAGE_SIDE` / :data:`MAX_IMAGE_PIXELS`): the caller fails the request or that row alone.

    Raises :class:`InputError` naming ``IMAGE_BYTES`` for a malformed tensor or an empty batch.
    """
    rows = _BATCHED_ENCODED.validate(array, model=model)
    if rows.shape[0] == 0:
        raise InputError(f"empty batch (shape {list(rows.shape)})", tensor=ENCODED_IMAGE.name, model=model)

    def decode(i: int) -> tuple[U8, tuple[float, float, float, float]] | InputError:
        try:
            image, (width, height) = _imageio.decode_image_scaled(bytes(rows[i, 0]), fit=fit)
        except InputError as exc:
            error = InputError(f"row {i}: {exc.message}", tensor=ENCODED_IMAGE.name, model=model)
            error.__cause__ = exc
            return error
        sx, sy = width / image.shape[1], height / image.shape[0]
        return image, (sx, sy, sx, sy)

    # Several images decode in threads, as the runtime's decode: client does (libjpeg runs without the
    # GIL): one after another, the six 1600x900 cameras of a nuScenes frame added ~100 ms to its latency.
    return [decode(0)] if len(rows) == 1 else list(_decode_pool().map(decode, range(len(rows))))


#: Threads decoding a batch's encoded images (per model process; the runtime's DECODE_THREADS likewise).
DECODE_THREADS = 4
_POOL: list[ThreadPoolExecutor] = []


def _decode_pool() -> ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="decode"))
    return _POOL[0]


@dataclass(frozen=True, slots=True)
class Letterbox:
    """How an original ``width x height`` image was placed in the network input:
    ``net = original * scale + (pad_x, pad_y)``."""

    width: int
    height: int
    scale: float
    pad_x: float
    pad_y: float

    @staticmethod
    def fit(
        width: int, height: int, net_width: int = NET_WIDTH, net_height: int = NET_HEIGHT, *, centre: bool = True
    ) -> Letterbox:
        """The letterbox of a ``width x height`` image in a ``net_width x net_height`` input: centred on
        the canvas, or at its top-left corner (padding bottom/right, as YOLOX does) with ``centre=False``."""
        if width <= 0 or height <= 0:
            raise ValueError(f"image size must be positive, got {width}x{height}")
        scale = min(net_width / width, net_height / height)
        new_w, new_h = Letterbox(width, height, scale, 0.0, 0.0).resized
        if not centre:
            return Letterbox(width, height, scale, 0.0, 0.0)
        return Letterbox(width, height, scale, float((net_width - new_w) // 2), float((net_height - new_h) // 2))

    @property
    def resized(self) -> tuple[int, int]:
        """``(width, height)`` of the scaled image inside the canvas."""
        return max(1, round(self.width * self.scale)), max(1, round(self.height * self.scale))

    def to_network(self, boxes: npt.ArrayLike) -> F32:
        """Boxes ``[N,4]`` (x1,y1,x2,y2) from original pixels to network-input pixels."""
        b = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        pad = np.array([self.pad_x, self.pad_y, self.pad_x, self.pad_y], dtype=np.float32)
        out: F32 = b * np.float32(self.scale) + pad
        return out

    def to_original(self, boxes: npt.ArrayLike) -> F32:
        """Boxes ``[N,4]`` from network-input pixels to original pixels, clipped to the image."""
        b = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        pad = np.array([self.pad_x, self.pad_y, self.pad_x, self.pad_y], dtype=np.float32)
        out = (b - pad) / np.float32(self.scale)
        np.clip(out[:, 0::2], 0.0, float(self.width), out=out[:, 0::2])
        np.clip(out[:, 1::2], 0.0, float(self.height), out=out[:, 1::2])
        return out.astype(np.float32, copy=False)


def letterbox_image(
    image: U8, net_width: int = NET_WIDTH, net_height: int = NET_HEIGHT, *, centre: bool = True
) -> tuple[U8, Letterbox]:
    """Resize ``[H, W, 3]`` uint8 (antialiased bilinear, aspect kept) onto a grey ``net`` canvas
    (centred, or at the top-left corner with ``centre=False``)."""
    from PIL import Image

    height, width = int(image.shape[0]), int(image.shape[1])
    box = Letterbox.fit(width, height, net_width, net_height, centre=centre)
    new_w, new_h = box.resized
    canvas = np.full((net_height, net_width, 3), PAD_VALUE, dtype=np.uint8)
    src = np.ascontiguousarray(image, dtype=np.uint8)
    if (new_w, new_h) == (width, height):
        resized = src
    else:
        resized = np.asarray(Image.fromarray(src, mode="RGB").resize((new_w, new_h), Image.Resampling.BILINEAR))
    x0, y0 = int(box.pad_x), int(box.pad_y)
    canvas[y0 : y0 + new_h, x0 : x0 + new_w] = resized
    return canvas, box


def normalize_images(images: U8) -> F32:
    """``[B, H, W, 3]`` uint8 RGB -> ``[B, 3, H, W]`` float32 network input (``(x/255 - mean) / std``)."""
    x = np.asarray(images, dtype=np.float32).transpose(0, 3, 1, 2)
    out: F32 = np.ascontiguousarray((x * np.float32(1.0 / 255.0) - _MEAN) / _STD, dtype=np.float32)
    return out


def preprocess_images(images: Sequence[U8] | U8) -> tuple[F32, list[Letterbox]]:
    """Letterbox and normalise images (each ``[H, W, 3]`` uint8, sizes may differ).

    Returns the network input ``[B, 3, NET_HEIGHT, NET_WIDTH]`` and each image's :class:`Letterbox`.
    """
    canvases = []
    boxes = []
    for image in images:
        canvas, box = letterbox_image(image)
        canvases.append(canvas)
        boxes.append(box)
    if not canvases:
        return np.zeros((0, 3, NET_HEIGHT, NET_WIDTH), dtype=np.float32), []
    return normalize_images(np.stack(canvases)), boxes


@dataclass(frozen=True, slots=True)
class CameraDetections:
    """Detections of one image, best first: ``boxes [N,4]`` (x1,y1,x2,y2 original pixels),
    ``scores [N]``, ``labels [N]`` (index into :data:`perception.types.LABELS`)."""

    boxes: F32
    scores: F32
    labels: I32

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def padded(self, rows: int = MAX_DETECTIONS) -> tuple[F32, F32, I32, I32]:
        """The model's output tensors: ``BOXES [rows,4]``, ``SCORES [rows]``, ``LABELS [rows]``,
        ``COUNT [1]``, zero-padded after the first ``COUNT`` rows."""
        n = min(len(self), rows)
        boxes = np.zeros((rows, 4), dtype=np.float32)
        scores = np.zeros(rows, dtype=np.float32)
        labels = np.zeros(rows, dtype=np.int32)
        boxes[:n] = self.boxes[:n]
        scores[:n] = self.scores[:n]
        labels[:n] = self.labels[:n]
        return boxes, scores, labels, np.array([n], dtype=np.int32)

    @staticmethod
    def from_padded(
        boxes: npt.ArrayLike, scores: npt.ArrayLike, labels: npt.ArrayLike, count: npt.ArrayLike
    ) -> CameraDetections:
        """Inverse of :meth:`padded` (one image's rows of the model outputs)."""
        n = int(np.asarray(count).reshape(-1)[0])
        return CameraDetections(
            np.asarray(boxes, dtype=np.float32).reshape(-1, 4)[:n].copy(),
            np.asarray(scores, dtype=np.float32).reshape(-1)[:n].copy(),
            np.asarray(labels, dtype=np.int32).reshape(-1)[:n].copy(),
        )


def _max_pool3x3(heat: F32) -> F32:
    """3x3 max filter (stride 1, edge-padded) over the last two axes."""
    padded = np.pad(heat, [(0, 0)] * (heat.ndim - 2) + [(1, 1), (1, 1)], mode="constant", constant_values=-np.inf)
    h, w = heat.shape[-2:]
    out = padded[..., 0:h, 0:w].copy()
    for dy in range(3):
        for dx in range(3):
            np.maximum(out, padded[..., dy : dy + h, dx : dx + w], out=out)
    return out


def decode_centernet(
    heatmap: npt.ArrayLike,
    size: npt.ArrayLike,
    offset: npt.ArrayLike,
    letterbox: Letterbox,
    *,
    max_detections: int = MAX_DETECTIONS,
    score_threshold: float = 0.05,
    stride: int = OUTPUT_STRIDE,
) -> CameraDetections:
    """Decode one image's CenterNet maps (``heatmap [C,h,w]``, ``size [2,h,w]``, ``offset [2,h,w]``).

    A cell is a detection when it is the maximum of its 3x3 neighbourhood in its class channel and
    scores at least ``score_threshold``; the best ``max_detections`` are kept, best first.
    """
    heat = np.asarray(heatmap, dtype=np.float32)
    sz = np.asarray(size, dtype=np.float32)
    off = np.asarray(offset, dtype=np.float32)
    if heat.ndim != 3 or sz.shape != (2, *heat.shape[1:]) or off.shape != (2, *heat.shape[1:]):
        raise ValueError(f"CenterNet maps disagree: heatmap {heat.shape}, size {sz.shape}, offset {off.shape}")
    _, h, w = heat.shape
    peaks = np.where(heat >= _max_pool3x3(heat), heat, 0.0).reshape(-1)
    candidates = np.flatnonzero(peaks >= score_threshold)
    if candidates.size > max_detections:
        part = np.argpartition(-peaks[candidates], max_detections - 1)[:max_detections]
        candidates = candidates[part]
    # Best first; ties broken by flat index so the order is deterministic.
    candidates = candidates[np.lexsort((candidates, -peaks[candidates]))]
    cls, rem = np.divmod(candidates, h * w)
    ys, xs = np.divmod(rem, w)
    cx = (xs + off[0, ys, xs]) * stride
    cy = (ys + off[1, ys, xs]) * stride
    bw = np.exp(np.clip(sz[0, ys, xs], -_MAX_LOG_SIZE, _MAX_LOG_SIZE)) * stride
    bh = np.exp(np.clip(sz[1, ys, xs], -_MAX_LOG_SIZE, _MAX_LOG_SIZE)) * stride
    net_boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], axis=1)
    boxes = letterbox.to_original(net_boxes)
    return CameraDetections(boxes, peaks[candidates].astype(np.float32), cls.astype(np.int32))


def camera_ground_truth(
    projected: Sequence[tuple[str | int, float, float, float, float, float]],
    *,
    min_visible: float = 0.5,
    min_height: float = 10.0,
) -> tuple[F32, I32, npt.NDArray[np.bool_]]:
    """Split projected ground truth ``(label, x1, y1, x2, y2, visible_fraction)`` into evaluation boxes.

    Returns ``boxes [N,4]``, ``labels [N]`` and ``ignore [N]``: an object is *counted* when at least
    ``min_visible`` of it is visible and its box is at least ``min_height`` pixels tall; the others are
    "don't care" (a detection on them is neither right nor wrong). Labels may be names or ids.
    """
    boxes = np.zeros((len(projected), 4), dtype=np.float32)
    labels = np.zeros(len(projected), dtype=np.int32)
    ignore = np.zeros(len(projected), dtype=bool)
    for i, (label, x1, y1, x2, y2, visible) in enumerate(projected):
        labels[i] = LABELS.index(label) if isinstance(label, str) else int(label)
        boxes[i] = (x1, y1, x2, y2)
        ignore[i] = visible < min_visible or (y2 - y1) < min_height
    return boxes, labels, ignore


class ImageDetector(Protocol):
    """What :class:`CameraDetectorModel` runs: preprocessing (per request), the network (one run for
    every image the dynamic batcher handed over) and decoding (per request)."""

    @property
    def input_size(self) -> tuple[int, int]:
        """The network input ``(width, height)``."""
        ...

    def preprocess(self, images: Sequence[U8] | U8) -> tuple[F32, list[Letterbox]]: ...

    def infer(self, batch: F32) -> Sequence[F32]: ...

    def decode(self, maps: Sequence[F32], letterboxes: Sequence[Letterbox]) -> list[CameraDetections]: ...


def onnx_session(onnx_path: str | os.PathLike[str], what: str, *, intra_op_threads: int = 1) -> Any:
    """An onnxruntime CPU session for a camera network: sequential, ``intra_op_threads`` threads, errors
    only in its log; a file that does not load is a :class:`ModelContractError` naming ``what`` and the file."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only
    path = os.fspath(onnx_path)
    try:
        return ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped errors (missing file, bad graph)
        raise ModelContractError(f"cannot load the {what} network: {exc}", file=path) from exc


class CameraDetector:
    """The exported network in an onnxruntime CPU session, with pre/post-processing around it.

    ``CameraDetector(path)(images)`` maps a sequence of ``[H, W, 3]`` uint8 RGB images (sizes may
    differ) to one :class:`CameraDetections` per image, in original pixels. Used by the Triton model and
    by offline evaluation alike, so both see exactly the same numbers.
    """

    def __init__(
        self,
        onnx_path: str | os.PathLike[str],
        *,
        intra_op_threads: int = 1,
        score_threshold: float = 0.05,
        max_detections: int = MAX_DETECTIONS,
    ) -> None:
        self._session = onnx_session(onnx_path, "detector", intra_op_threads=intra_op_threads)
        inputs = self._session.get_inputs()
        outputs = [o.name for o in self._session.get_outputs()]
        if len(inputs) != 1 or outputs != list(ONNX_OUTPUTS):
            raise ModelContractError(
                f"detector network must have 1 input and outputs {list(ONNX_OUTPUTS)}, has "
                f"{[i.name for i in inputs]} -> {outputs}",
                file=os.fspath(onnx_path),
            )
        shape = inputs[0].shape
        if list(shape[1:]) != [3, NET_HEIGHT, NET_WIDTH]:
            raise ModelContractError(
                f"detector network input must be [B, 3, {NET_HEIGHT}, {NET_WIDTH}], is {shape}",
                file=os.fspath(onnx_path),
            )
        self._input = inputs[0].name
        self.score_threshold = score_threshold
        self.max_detections = max_detections

    @property
    def input_size(self) -> tuple[int, int]:
        return NET_WIDTH, NET_HEIGHT

    @staticmethod
    def preprocess(images: Sequence[U8] | U8) -> tuple[F32, list[Letterbox]]:
        """The network input of ``images`` and their letterboxes (:func:`preprocess_images`)."""
        return preprocess_images(images)

    def infer(self, batch: F32) -> tuple[F32, F32, F32]:
        """Run the network on a preprocessed batch ``[B, 3, NET_HEIGHT, NET_WIDTH]`` -> its raw maps."""
        heatmap, size, offset = self._session.run(list(ONNX_OUTPUTS), {self._input: batch})
        return heatmap, size, offset

    def decode(self, maps: Sequence[F32], letterboxes: Sequence[Letterbox]) -> list[CameraDetections]:
        heatmap, size, offset = maps
        return [
            decode_centernet(
                heatmap[i],
                size[i],
                offset[i],
                box,
                max_detections=self.max_detections,
                score_threshold=self.score_threshold,
            )
            for i, box in enumerate(letterboxes)
        ]

    def __call__(self, images: Sequence[U8] | U8) -> list[CameraDetections]:
        batch, letterboxes = preprocess_images(images)
        if not letterboxes:
            return []
        return self.decode(self.infer(batch), letterboxes)


@dataclass(frozen=True, slots=True)
class CameraDetectorParams:
    """Tunables of :class:`CameraDetectorModel` (``parameters`` of its ``config.pbtxt``)."""

    score_threshold: float = 0.05
    intra_op_threads: int = 1


class CameraDetectorModel(TritonModel):
    """``IMAGE [B, H, W, 3]`` uint8 -> ``BOXES [B,100,4]``, ``SCORES``, ``LABELS``, ``COUNT`` per image.

    The network lives next to ``model.py`` as ``camera_detector.onnx``. All images of all requests that
    Triton's dynamic batcher hands to one :meth:`execute` go through the network in one run; requests
    still fail independently (``INVALID_ARG`` for a malformed ``IMAGE``, ``CANCELLED`` when the client
    gave up, ``INTERNAL`` when the network fails).

    A request of encoded images (``IMAGE_BYTES``) that asks for ``DECODE_ERROR`` (declared in the config)
    gets a row that does not decode answered on its own: no detections (``COUNT`` 0) and the reason in
    its ``DECODE_ERROR`` row, the other rows as usual. Otherwise such a row fails the request
    (``INVALID_ARG`` naming ``IMAGE_BYTES`` and the row).
    """

    #: The image, or (``decode: server``) the image as recorded, decoded here at the network's scale.
    INPUTS: ClassVar[tuple[TensorSpec, ...]] = (*CAMERA.contract.inputs, ENCODED_IMAGE)
    #: The contract's outputs, and (optional in the config) the per-row ``DECODE_ERROR``.
    OUTPUTS: ClassVar[tuple[TensorSpec, ...]] = (*CAMERA.contract.outputs, DECODE_ERROR)
    MAX_BATCH_SIZE: ClassVar[int | None] = 8
    ONNX_FILE: ClassVar[str] = "camera_detector.onnx"

    params: Any = CameraDetectorParams()
    _model_dir: Path | None = None
    _detector: ImageDetector | None = None
    #: The config declares ``DECODE_ERROR``: every answer carries it, and rows are answered on their own.
    _decode_errors: bool = False

    def initialize(self, args: Mapping[str, str]) -> None:
        repository = args.get("model_repository")
        version = args.get("model_version")
        if repository and version:
            self._model_dir = Path(repository) / version
        super().initialize(args)

    def setup(self, config: Mapping[str, Any]) -> None:
        if self._model_dir is None:
            raise ModelContractError("the python backend gave no model repository/version", model=self.model_name)
        self._detector = detector = self.make_detector(self._model_dir / self.ONNX_FILE, config)
        self._decode_errors = any(entry.get("name") == DECODE_ERROR.name for entry in config.get("output", ()))
        declared = camera_input_size(
            config.get("parameters"), file=self.config_file, model=self.model_name, require_both=True
        )
        if declared is not None and declared != detector.input_size:
            raise ModelContractError(
                f"config parameters {'/'.join(CAMERA_INPUT_SIZE_KEYS)} say {declared[0]}x{declared[1]}, the "
                f"network's input is {detector.input_size[0]}x{detector.input_size[1]}",
                model=self.model_name,
            )

    @property
    def config_file(self) -> str | None:
        """This model's ``config.pbtxt`` (for errors naming it), when the backend said where it is."""
        return None if self._model_dir is None else os.fspath(self._model_dir.parent / "config.pbtxt")

    def make_detector(self, onnx_path: Path, config: Mapping[str, Any]) -> ImageDetector:
        """The detector (network + pre/post-processing) of this model; ``config`` is its Triton config."""
        self.params = params_from_config(CameraDetectorParams(), config, ignore=CAMERA_INPUT_SIZE_KEYS)
        return CameraDetector(
            onnx_path,
            intra_op_threads=max(1, self.params.intra_op_threads),
            score_threshold=self.params.score_threshold,
        )

    @property
    def detector(self) -> ImageDetector:
        if self._detector is None:
            raise ModelContractError("the camera detector is not loaded", model=self.model_name)
        return self._detector

    def run(self, inputs: Arrays, checkpoint: Checkpoint) -> Arrays:
        """One request on its own (the batched path is :meth:`execute`)."""
        images = validate_image_batch(inputs[CAMERA_INPUT], model=self.model_name)
        batch, letterboxes = self.detector.preprocess(list(images))
        checkpoint("preprocess")
        maps = self.detector.infer(batch)
        checkpoint("network")
        return _stack_outputs(self.detector.decode(maps, letterboxes))

    def execute(self, requests: Sequence[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        staged: list[tuple[int, _Staged]] = []
        for i, request in enumerate(requests):
            try:
                staged.append((i, self._stage(request)))
            except InputError as exc:
                log.debug("%s: rejected request: %s", self.model_name, exc)
                responses[i] = self._error(f"{self.model_name}: invalid input {exc}", "INVALID_ARG")
            except RequestCancelled:
                responses[i] = self._error(f"{self.model_name}: request cancelled while queued", "CANCELLED")
            except Exception as exc:
                log.exception("%s: request failed", self.model_name)
                responses[i] = self._internal(exc)
        if staged:
            self._run_staged(staged, responses)
        return responses

    def _internal(self, exc: Exception) -> Any:
        return self._error(f"{self.model_name}: internal error: {type(exc).__name__}: {exc}", "INTERNAL")

    # -- batched execution -------------------------------------------------------------------------

    def _stage(self, request: Any) -> _Staged:
        if _cancelled(request):
            raise RequestCancelled("queued")
        tensor = self._pb.get_input_tensor_by_name(request, CAMERA_INPUT)
        if tensor is None:
            encoded = self._pb.get_input_tensor_by_name(request, ENCODED_IMAGE.name)
            if encoded is not None:
                return self._stage_encoded(request, encoded.as_numpy())
        images = validate_image_batch(None if tensor is None else tensor.as_numpy(), model=self.model_name)
        batch, letterboxes = self.detector.preprocess(list(images))
        return _Staged(request, batch, letterboxes, rows=len(letterboxes))

    def _stage_encoded(self, request: Any, array: npt.NDArray[Any]) -> _Staged:
        """A request of encoded images: decoded here; a row that does not decode is answered on its own
        when the request asks for ``DECODE_ERROR`` (the config declares it), else it fails the request."""
        decoded = decode_encoded_rows(array, self.detector.input_size, model=self.model_name)
        failed = {i: row for i, row in enumerate(decoded) if isinstance(row, InputError)}
        if failed and not (self._decode_errors and _asks_for(request, DECODE_ERROR.name)):
            raise next(iter(failed.values()))
        good = [row for row in decoded if not isinstance(row, InputError)]
        for error in failed.values():
            log.debug("%s: %s (answered as that row's DECODE_ERROR)", self.model_name, error)
        if good:
            batch, letterboxes = self.detector.preprocess([image for image, _ in good])
        else:  # nothing to run the network on
            width, height = self.detector.input_size
            batch, letterboxes = np.zeros((0, 3, height, width), np.float32), []
        return _Staged(
            request,
            batch,
            letterboxes,
            [scale for _, scale in good],
            rows=len(decoded),
            failed={i: error.message for i, error in failed.items()},
        )

    def _run_staged(self, staged: list[tuple[int, _Staged]], responses: list[Any]) -> None:
        t0 = time.perf_counter()
        try:
            batches = [s.batch for _, s in staged if len(s.batch)]
            maps: Sequence[F32] = self.detector.infer(np.concatenate(batches)) if batches else ()
        except Exception as exc:
            log.exception("%s: network failed", self.model_name)
            for i, _ in staged:
                responses[i] = self._error(f"{self.model_name}: internal error: network failed: {exc}", "INTERNAL")
            return
        t1 = time.perf_counter()
        row = 0
        for i, job in staged:
            n = len(job.letterboxes)
            part = tuple(m[row : row + n] for m in maps)
            row += n
            if _cancelled(job.request):
                responses[i] = self._error(f"{self.model_name}: request cancelled after stage network", "CANCELLED")
                continue
            try:
                outputs = _stack_outputs(self.detector.decode(part, job.letterboxes) if n else [], job.rows, job.failed)
                if job.scales is not None and n:  # decoded here at the network's scale: boxes in the original's pixels
                    good = [r for r in range(job.rows) if r not in job.failed]
                    outputs["BOXES"][good] *= np.asarray(job.scales, np.float32)[:, None, :]
                names = (*_OUTPUT_NAMES, DECODE_ERROR.name) if self._decode_errors else _OUTPUT_NAMES
                responses[i] = self._pb.InferenceResponse(
                    output_tensors=[self._pb.Tensor(name, outputs[name]) for name in names]
                )
            except Exception as exc:
                log.exception("%s: decoding failed", self.model_name)
                responses[i] = self._internal(exc)
        log.debug(
            "%s: %d request(s), %d image(s): network %.1f ms, decode %.1f ms",
            self.model_name,
            len(staged),
            row,
            (t1 - t0) * 1e3,
            (time.perf_counter() - t1) * 1e3,
        )


@dataclass(frozen=True, slots=True)
class _Staged:
    """A validated, preprocessed request waiting for the batched network run."""

    request: Any
    #: The network input of the request's images that decoded (``[n, 3, H, W]``, n may be 0).
    batch: F32
    letterboxes: list[Letterbox]
    #: Per decoded image, ``(sx, sy, sx, sy)`` from its pixels to the original's (an encoded image
    #: decoded here at the network's scale); ``None`` when the request carried the pixels.
    scales: list[tuple[float, float, float, float]] | None = None
    #: Rows of the request (its batch size): the decoded images and the :attr:`failed` ones.
    rows: int = 0
    #: Row -> why its encoded image did not decode (answered as that row's ``DECODE_ERROR``).
    failed: Mapping[int, str] = field(default_factory=dict)


_OUTPUT_NAMES = tuple(spec.name for spec in CAMERA.contract.outputs)


def _cancelled(request: Any) -> bool:
    is_cancelled = getattr(request, "is_cancelled", None)
    return bool(is_cancelled()) if is_cancelled is not None else False


def _asks_for(request: Any, output: str) -> bool:
    """Whether ``request`` asks for ``output`` (Triton's list of the outputs it asked for)."""
    requested = getattr(request, "requested_output_names", None)
    return requested is None or output in requested()


def _stack_outputs(
    detections: Sequence[CameraDetections], rows: int | None = None, failed: Mapping[int, str] | None = None
) -> dict[str, npt.NDArray[Any]]:
    """Per-image padded outputs stacked into the batched output tensors, with ``DECODE_ERROR``: the
    ``detections`` fill the ``rows`` (default: as many) in order but for the ``failed`` ones, which get
    no detections and their reason."""
    failed = failed or {}
    rows = len(detections) if rows is None else rows
    empty = CameraDetections(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))
    found = iter(detections)
    padded = [(empty if r in failed else next(found)).padded() for r in range(rows)]
    outputs: dict[str, npt.NDArray[Any]] = {
        name: np.stack([p[k] for p in padded]) for k, name in enumerate(_OUTPUT_NAMES)
    }
    errors = np.empty((rows, 1), dtype=np.object_)
    for r in range(rows):
        errors[r, 0] = failed.get(r, "").encode()
    outputs[DECODE_ERROR.name] = errors
    return outputs
