"""Training data: generated drives -> letterboxed images + boxes (cached), CenterNet targets, augmentation.

numpy (+ Pillow) only. Images are stored already letterboxed to the network input with
:func:`perception.modelkit._camera.letterbox_image`, i.e. exactly the resampling used at serving time,
and boxes in network-input pixels.

Which objects teach what:

* *positive*: at least :data:`TRAIN_MIN_VISIBLE` visible and :data:`TRAIN_MIN_HEIGHT` px tall (original
  pixels) -> a heatmap peak plus size/offset targets;
* *ignored*: any other object with something visible -> no heatmap loss inside its box for its class,
  so the network is neither pushed to nor punished for firing on half-hidden or tiny objects.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image

from perception.modelkit._camera import (
    NET_HEIGHT,
    NET_WIDTH,
    NUM_CLASSES,
    OUTPUT_STRIDE,
    PAD_VALUE,
    letterbox_image,
)

__all__ = [
    "TRAIN_MIN_HEIGHT",
    "TRAIN_MIN_VISIBLE",
    "Dataset",
    "Targets",
    "augment",
    "gaussian_radius",
    "make_targets",
]

log = logging.getLogger("perception.camera_training")

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]
B = npt.NDArray[np.bool_]

#: Objects at least this visible and tall (original px) are positives; other visible ones are ignored.
TRAIN_MIN_VISIBLE = 0.4
TRAIN_MIN_HEIGHT = 8.0
#: Objects less visible than this are background (not even ignored).
TRAIN_MIN_IGNORE_VISIBLE = 0.05

#: A labelled object: ``(label, x1, y1, x2, y2, visible_fraction)`` in original image pixels.
Projected = tuple[str | int, float, float, float, float, float]


@dataclass(frozen=True)
class Dataset:
    """Letterboxed images ``[N, NET_HEIGHT, NET_WIDTH, 3]`` and their objects, flattened: image ``i`` owns
    rows ``offsets[i]:offsets[i+1]`` of ``boxes`` (network px), ``labels`` and ``positive``."""

    images: U8
    boxes: F32
    labels: I32
    positive: B
    offsets: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def objects(self, i: int) -> tuple[F32, I32, B]:
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.boxes[a:b], self.labels[a:b], self.positive[a:b]

    @staticmethod
    def build(samples: Iterable[tuple[U8, Sequence[Projected]]]) -> Dataset:
        """From ``(image [H,W,3], projected objects)`` pairs in original pixels."""
        from perception.types import LABELS

        images: list[U8] = []
        boxes: list[F32] = []
        labels: list[int] = []
        positive: list[bool] = []
        offsets = [0]
        for image, objects in samples:
            canvas, box = letterbox_image(image)
            images.append(canvas)
            for label, x1, y1, x2, y2, visible in objects:
                if visible < TRAIN_MIN_IGNORE_VISIBLE or x2 <= x1 or y2 <= y1:
                    continue
                boxes.append(box.to_network([[x1, y1, x2, y2]])[0])
                labels.append(LABELS.index(label) if isinstance(label, str) else int(label))
                positive.append(visible >= TRAIN_MIN_VISIBLE and (y2 - y1) >= TRAIN_MIN_HEIGHT)
            offsets.append(len(labels))
        return Dataset(
            images=np.stack(images) if images else np.zeros((0, NET_HEIGHT, NET_WIDTH, 3), np.uint8),
            boxes=np.asarray(boxes, dtype=np.float32).reshape(-1, 4),
            labels=np.asarray(labels, dtype=np.int32),
            positive=np.asarray(positive, dtype=bool),
            offsets=np.asarray(offsets, dtype=np.int64),
        )

    @staticmethod
    def concatenate(parts: Sequence[Dataset]) -> Dataset:
        shift = np.cumsum([0] + [int(p.offsets[-1]) for p in parts[:-1]])
        return Dataset(
            images=np.concatenate([p.images for p in parts]),
            boxes=np.concatenate([p.boxes for p in parts]),
            labels=np.concatenate([p.labels for p in parts]),
            positive=np.concatenate([p.positive for p in parts]),
            offsets=np.concatenate([[0]] + [p.offsets[1:] + s for p, s in zip(parts, shift, strict=True)]),
        )

    def save(self, path: Path, key: dict[str, Any]) -> None:
        """Write to ``path`` (npz) atomically, tagged with ``key`` (what the data was built from)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.tmp.npz")
        np.savez(
            tmp,
            images=self.images,
            boxes=self.boxes,
            labels=self.labels,
            positive=self.positive,
            offsets=self.offsets,
            key=np.array(json.dumps(key, sort_keys=True)),
        )
        tmp.replace(path)

    @staticmethod
    def try_load(path: Path, key: dict[str, Any]) -> Dataset | None:
        """The dataset cached at ``path`` if it was built for ``key``, else ``None``."""
        if not path.is_file():
            return None
        try:
            with np.load(path) as z:
                if str(z["key"]) != json.dumps(key, sort_keys=True):
                    return None
                return Dataset(z["images"], z["boxes"], z["labels"], z["positive"], z["offsets"])
        except (OSError, KeyError, ValueError) as exc:
            log.warning("ignoring unreadable cache %s: %s", path, exc)
            return None


# ---------------------------------------------------------------------------------------------
# augmentation
# ---------------------------------------------------------------------------------------------


def augment(
    image: U8, boxes: F32, positive: B, rng: np.random.Generator, *, zoom: tuple[float, float] = (0.8, 1.4)
) -> tuple[U8, F32, B, npt.NDArray[np.intp]]:
    """Random horizontal flip, zoom about a random centre, and photometric jitter of one letterboxed
    sample. Boxes mostly cut off by the new frame become ignored, boxes pushed out of it are dropped.

    Returns the image, the boxes and positive flags kept, and the indices of the kept boxes.
    """
    h, w = image.shape[:2]
    out = image
    b = boxes.copy()
    pos = positive.copy()
    if rng.random() < 0.5:
        out = out[:, ::-1]
        b[:, [0, 2]] = w - b[:, [2, 0]]
    s = float(np.exp(rng.uniform(math.log(zoom[0]), math.log(zoom[1]))))
    if abs(s - 1.0) > 1e-3:
        # Output pixel p samples input (p - t) / s; choose t so the zoomed image still covers the frame
        # when zooming in, and sits somewhere inside it when zooming out.
        lo_x, hi_x = sorted((0.0, w - w * s))
        lo_y, hi_y = sorted((0.0, h - h * s))
        tx, ty = rng.uniform(lo_x, hi_x), rng.uniform(lo_y, hi_y)
        pil = Image.fromarray(np.ascontiguousarray(out))
        out = np.asarray(
            pil.transform(
                (w, h),
                Image.Transform.AFFINE,
                (1 / s, 0.0, -tx / s, 0.0, 1 / s, -ty / s),
                resample=Image.Resampling.BILINEAR,
                fillcolor=(PAD_VALUE, PAD_VALUE, PAD_VALUE),
            )
        )
        area = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
        b = b * s + np.array([tx, ty, tx, ty], dtype=np.float32)
        b[:, [0, 2]] = np.clip(b[:, [0, 2]], 0, w)
        b[:, [1, 3]] = np.clip(b[:, [1, 3]], 0, h)
        new_area = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
        kept = new_area / np.maximum(area * s * s, 1e-6)
        pos = pos & (kept >= 0.6)
        alive = kept > 0.05
        b, pos = b[alive], pos[alive]
        keep_idx = np.flatnonzero(alive)
    else:
        keep_idx = np.arange(b.shape[0])
    # Photometric (one lookup table per channel, cheap): contrast about the mean, brightness, channel gain.
    mean = float(out[::4, ::4].mean())
    contrast = rng.uniform(0.75, 1.25)
    brightness = rng.uniform(-25.0, 25.0)
    gains = rng.uniform(0.92, 1.08, size=3)
    levels = np.arange(256, dtype=np.float64)
    luts = np.clip(((levels - mean) * contrast + mean + brightness)[None, :] * gains[:, None], 0, 255)
    luts = luts.round().astype(np.uint8)
    result = np.empty_like(out)
    for c in range(3):
        result[..., c] = luts[c][out[..., c]]
    return result, b.astype(np.float32), pos, keep_idx


# ---------------------------------------------------------------------------------------------
# CenterNet targets
# ---------------------------------------------------------------------------------------------


def gaussian_radius(height: float, width: float, min_overlap: float = 0.7) -> float:
    """CenterNet's radius: the largest centre shift keeping IoU >= ``min_overlap`` (three cases)."""
    a1 = 1.0
    b1 = height + width
    c1 = width * height * (1 - min_overlap) / (1 + min_overlap)
    r1 = (b1 + math.sqrt(b1**2 - 4 * a1 * c1)) / 2
    a2 = 4.0
    b2 = 2 * (height + width)
    c2 = (1 - min_overlap) * width * height
    r2 = (b2 + math.sqrt(b2**2 - 4 * a2 * c2)) / 2
    a3 = 4 * min_overlap
    b3 = -2 * min_overlap * (height + width)
    c3 = (min_overlap - 1) * width * height
    r3 = (b3 + math.sqrt(b3**2 - 4 * a3 * c3)) / 2
    return min(r1, r2, r3)


@dataclass(frozen=True)
class Targets:
    """Dense targets of one image at the output stride: ``heat [C,h,w]`` (Gaussian peaks, exactly 1 at
    centres), ``weight [C,h,w]`` (0 inside ignored objects), ``size``/``offset`` ``[2,h,w]`` and
    ``mask [h,w]`` (1 at object centres, where size/offset are supervised)."""

    heat: F32
    weight: F32
    size: F32
    offset: F32
    mask: F32


def _draw_gaussian(heat: F32, cx: int, cy: int, radius: int) -> None:
    diameter = 2 * radius + 1
    sigma = diameter / 6
    ys, xs = np.ogrid[-radius : radius + 1, -radius : radius + 1]
    g = np.exp(-(xs * xs + ys * ys) / (2 * sigma * sigma)).astype(np.float32)
    h, w = heat.shape
    left, right = min(cx, radius), min(w - cx, radius + 1)
    top, bottom = min(cy, radius), min(h - cy, radius + 1)
    region = heat[cy - top : cy + bottom, cx - left : cx + right]
    np.maximum(region, g[radius - top : radius + bottom, radius - left : radius + right], out=region)


def make_targets(
    boxes: F32,
    labels: I32,
    positive: B,
    *,
    out_height: int = NET_HEIGHT // OUTPUT_STRIDE,
    out_width: int = NET_WIDTH // OUTPUT_STRIDE,
    stride: int = OUTPUT_STRIDE,
) -> Targets:
    """CenterNet targets for one image's boxes (network-input px)."""
    heat = np.zeros((NUM_CLASSES, out_height, out_width), np.float32)
    weight = np.ones_like(heat)
    size = np.zeros((2, out_height, out_width), np.float32)
    offset = np.zeros_like(size)
    mask = np.zeros((out_height, out_width), np.float32)
    # Ignore regions first, so a positive overlapping an ignored object still gets its loss.
    for box, label, pos in zip(boxes, labels, positive, strict=True):
        if pos:
            continue
        x1, y1, x2, y2 = (box / stride).tolist()
        weight[label, max(0, int(y1)) : math.ceil(y2) + 1, max(0, int(x1)) : math.ceil(x2) + 1] = 0.0
    # Large boxes first so small ones win shared centre cells.
    order = np.argsort(-(boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]), kind="stable")
    for i in order:
        if not positive[i]:
            continue
        x1, y1, x2, y2 = (boxes[i] / stride).tolist()
        bw, bh = max(x2 - x1, 1e-3), max(y2 - y1, 1e-3)
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        ix, iy = min(max(int(cx), 0), out_width - 1), min(max(int(cy), 0), out_height - 1)
        radius = max(0, int(gaussian_radius(math.ceil(bh), math.ceil(bw))))
        label = int(labels[i])
        _draw_gaussian(heat[label], ix, iy, radius)
        heat[label, iy, ix] = 1.0
        weight[label, max(0, iy - radius) : iy + radius + 1, max(0, ix - radius) : ix + radius + 1] = 1.0
        size[:, iy, ix] = (math.log(bw), math.log(bh))
        offset[:, iy, ix] = (cx - ix, cy - iy)
        mask[iy, ix] = 1.0
    return Targets(heat, weight, size, offset, mask)
