"""Camera detector pre/post-processing and the AP evaluator (pure numpy; no torch, no server)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from perception.errors import InputError, ModelContractError
from perception.modelkit import (
    APAccumulator,
    CameraDetections,
    CameraDetector,
    Letterbox,
    average_precision,
    box_iou,
    camera_ground_truth,
    decode_centernet,
    preprocess_images,
    validate_image_batch,
)
from perception.modelkit._camera import (
    MAX_DETECTIONS,
    MAX_IMAGE_SIDE,
    NET_HEIGHT,
    NET_WIDTH,
    NUM_CLASSES,
    OUTPUT_STRIDE,
    PAD_VALUE,
    letterbox_image,
)

OUT_H, OUT_W = NET_HEIGHT // OUTPUT_STRIDE, NET_WIDTH // OUTPUT_STRIDE


# ------------------------------------------------------------------------------------ letterbox


def test_letterbox_of_a_16_9_camera() -> None:
    box = Letterbox.fit(640, 360)
    assert box.scale == pytest.approx(0.6)
    assert box.resized == (384, 216)
    assert (box.pad_x, box.pad_y) == (0.0, 4.0)


@pytest.mark.parametrize("size", [(640, 360), (1920, 1080), (300, 400), (37, 1000), (2000, 13), (1, 1)])
def test_letterbox_round_trip(size: tuple[int, int]) -> None:
    w, h = size
    box = Letterbox.fit(w, h)
    rw, rh = box.resized
    assert 1 <= rw <= NET_WIDTH and 1 <= rh <= NET_HEIGHT
    assert box.pad_x + rw <= NET_WIDTH and box.pad_y + rh <= NET_HEIGHT
    original = np.array([[0.1 * w, 0.2 * h, 0.5 * w, 0.9 * h], [0, 0, w, h]], dtype=np.float32)
    np.testing.assert_allclose(box.to_original(box.to_network(original)), original, rtol=1e-5, atol=1e-3)


def test_to_original_clips_to_the_image() -> None:
    box = Letterbox.fit(640, 360)
    out = box.to_original([[-20, -20, NET_WIDTH + 20, NET_HEIGHT + 20]])
    np.testing.assert_allclose(out, [[0, 0, 640, 360]])


def test_letterbox_image_places_content_where_the_transform_says() -> None:
    image = np.zeros((360, 640, 3), np.uint8)
    image[100:200, 300:400] = (255, 0, 0)
    canvas, box = letterbox_image(image)
    assert canvas.shape == (NET_HEIGHT, NET_WIDTH, 3) and canvas.dtype == np.uint8
    assert np.all(canvas[: int(box.pad_y)] == PAD_VALUE) and np.all(canvas[-int(box.pad_y) :] == PAD_VALUE)
    x1, y1, x2, y2 = box.to_network([[300, 100, 400, 200]])[0]
    inner = canvas[int(y1) + 2 : int(y2) - 2, int(x1) + 2 : int(x2) - 2]
    assert np.all(inner[..., 0] == 255) and np.all(inner[..., 1:] == 0)
    assert canvas[int(y1) - 3, int(x1) - 3, 0] == 0 and canvas[int(y2) + 3, int(x2) + 3, 0] == 0


def test_preprocess_images_of_different_sizes() -> None:
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (360, 640, 3), dtype=np.uint8), rng.integers(0, 256, (50, 80, 3), dtype=np.uint8)]
    batch, boxes = preprocess_images(images)
    assert batch.shape == (2, 3, NET_HEIGHT, NET_WIDTH) and batch.dtype == np.float32
    assert [(b.width, b.height) for b in boxes] == [(640, 360), (80, 50)]
    assert abs(float(batch[0, :, 0, 0].max())) < 1e-6  # letterbox padding is the normalisation mean
    empty, none = preprocess_images([])
    assert empty.shape == (0, 3, NET_HEIGHT, NET_WIDTH) and none == []


# ------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("array", "fragment"),
    [
        (np.zeros((1, 8, 8, 3), np.float32), "data type UINT8"),
        (np.zeros((8, 8, 3), np.uint8), "rank 4"),
        (np.zeros((1, 8, 8, 4), np.uint8), "3 columns"),
        (np.zeros((1, 8, 8, 1), np.uint8), "3 columns"),
        (np.zeros((0, 8, 8, 3), np.uint8), "empty batch"),
        (np.zeros((1, 0, 8, 3), np.uint8), "zero-size"),
        (np.zeros((1, 8, 0, 3), np.uint8), "zero-size"),
        (np.zeros((1, MAX_IMAGE_SIDE + 1, 1, 3), np.uint8), "too large"),
        (None, "missing"),
    ],
)
def test_validate_image_batch_rejects(array: np.ndarray | None, fragment: str) -> None:
    with pytest.raises(InputError) as info:
        validate_image_batch(array, model="camera_detector")
    assert info.value.tensor == "IMAGE"
    assert str(info.value).startswith("IMAGE: ") and fragment in str(info.value)


def test_validate_image_batch_accepts() -> None:
    images = np.zeros((2, 5, 7, 3), np.uint8)
    assert validate_image_batch(images) is images


# ------------------------------------------------------------------------------------ decoding


def maps_with(
    objects: list[tuple[int, float, float, float, float, float]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Heatmap/size/offset maps with a peak per ``(label, score, cx, cy, w, h)`` (network pixels)."""
    heat = np.zeros((NUM_CLASSES, OUT_H, OUT_W), np.float32)
    size = np.zeros((2, OUT_H, OUT_W), np.float32)
    offset = np.zeros((2, OUT_H, OUT_W), np.float32)
    for label, score, cx, cy, w, h in objects:
        fx, fy = cx / OUTPUT_STRIDE, cy / OUTPUT_STRIDE
        ix, iy = int(fx), int(fy)
        heat[label, iy, ix] = score
        size[:, iy, ix] = (math.log(w / OUTPUT_STRIDE), math.log(h / OUTPUT_STRIDE))
        offset[:, iy, ix] = (fx - ix, fy - iy)
    return heat, size, offset


def test_decode_recovers_boxes_in_original_pixels() -> None:
    box = Letterbox.fit(1280, 720)  # scale 0.3, pad_y 4
    gt = np.array([[100, 200, 300, 330], [700, 150, 760, 300]], dtype=np.float32)
    net = box.to_network(gt)
    objects = [
        (0, 0.9, *(net[0, :2] + net[0, 2:]) / 2, *(net[0, 2:] - net[0, :2])),
        (2, 0.7, *(net[1, :2] + net[1, 2:]) / 2, *(net[1, 2:] - net[1, :2])),
    ]
    dets = decode_centernet(*maps_with(objects), box)
    assert len(dets) == 2
    assert dets.labels.tolist() == [0, 2]
    np.testing.assert_allclose(dets.scores, [0.9, 0.7], rtol=1e-6)
    np.testing.assert_allclose(dets.boxes, gt, atol=0.05)


def test_decode_suppresses_non_peaks_and_keeps_other_classes() -> None:
    heat, size, offset = maps_with([(0, 0.9, 100, 100, 40, 20)])
    iy, ix = 100 // OUTPUT_STRIDE, 100 // OUTPUT_STRIDE
    heat[0, iy, ix + 1] = 0.8  # a shoulder of the same peak: suppressed
    heat[0, iy + 1, ix - 1] = 0.85  # diagonal neighbour: suppressed
    heat[1, iy, ix + 1] = 0.6  # same place, other class: kept
    heat[0, iy, ix + 3] = 0.5  # two cells away: a peak of its own
    dets = decode_centernet(heat, size, offset, Letterbox.fit(NET_WIDTH, NET_HEIGHT))
    assert [(int(c), round(float(s), 2)) for c, s in zip(dets.labels, dets.scores, strict=True)] == [
        (0, 0.9),
        (1, 0.6),
        (0, 0.5),
    ]


def test_decode_threshold_and_top_k() -> None:
    rng = np.random.default_rng(3)
    heat = np.zeros((NUM_CLASSES, OUT_H, OUT_W), np.float32)
    heat[:, ::2, ::2] = rng.uniform(0.0, 1.0, heat[:, ::2, ::2].shape)  # isolated peaks: 4 * 28 * 48 of them
    size = np.zeros((2, OUT_H, OUT_W), np.float32)
    offset = np.zeros_like(size)
    box = Letterbox.fit(NET_WIDTH, NET_HEIGHT)
    dets = decode_centernet(heat, size, offset, box)
    assert len(dets) == MAX_DETECTIONS
    assert np.all(np.diff(dets.scores) <= 0)
    np.testing.assert_allclose(dets.scores, np.sort(heat.reshape(-1))[::-1][:MAX_DETECTIONS])
    strict = decode_centernet(heat, size, offset, box, score_threshold=0.99, max_detections=1000)
    assert len(strict) == int(np.count_nonzero(heat >= 0.99))
    assert len(decode_centernet(np.zeros_like(heat), size, offset, box)) == 0


def test_decode_rejects_mismatched_maps() -> None:
    heat, size, offset = maps_with([])
    with pytest.raises(ValueError, match="disagree"):
        decode_centernet(heat, size[:, :-1], offset, Letterbox.fit(10, 10))


def test_padded_round_trip_and_truncation() -> None:
    n = 130
    dets = CameraDetections(
        np.arange(n * 4, dtype=np.float32).reshape(n, 4),
        np.linspace(1, 0.01, n, dtype=np.float32),
        (np.arange(n) % 4).astype(np.int32),
    )
    boxes, scores, labels, count = dets.padded()
    assert boxes.shape == (100, 4) and scores.shape == (100,) and labels.shape == (100,) and count.tolist() == [100]
    back = CameraDetections.from_padded(boxes, scores, labels, count)
    np.testing.assert_array_equal(back.boxes, dets.boxes[:100])
    few = CameraDetections(dets.boxes[:3], dets.scores[:3], dets.labels[:3]).padded()
    assert few[3].tolist() == [3] and not few[0][3:].any() and not few[1][3:].any()


def test_detector_refuses_a_missing_network(tmp_path: Path) -> None:
    with pytest.raises(ModelContractError, match="cannot load"):
        CameraDetector(tmp_path / "missing.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf")
    with pytest.raises(ModelContractError):
        CameraDetector(bad)


# ------------------------------------------------------------------------------------ ground truth


def test_camera_ground_truth_ignore_rule() -> None:
    boxes, labels, ignore = camera_ground_truth(
        [
            ("car", 10, 10, 60, 40, 1.0),  # counted
            ("truck", 10, 10, 60, 40, 0.3),  # mostly hidden: ignored
            ("pedestrian", 10, 10, 14, 19, 1.0),  # 9 px tall: ignored
            (3, 0, 0, 20, 10, 0.5),  # exactly at both limits: counted
        ]
    )
    assert labels.tolist() == [0, 1, 2, 3]
    assert ignore.tolist() == [False, True, True, False]
    assert boxes.shape == (4, 4)


# ------------------------------------------------------------------------------------ AP


def test_box_iou() -> None:
    iou = box_iou([[0, 0, 10, 10], [0, 0, 0, 0]], [[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30]])
    np.testing.assert_allclose(iou, [[1.0, 50 / 150, 0.0], [0.0, 0.0, 0.0]])


def test_average_precision_by_hand() -> None:
    # TP, FP, TP over 3 objects: P/R = (1, 1/3), (1/2, 1/3), (2/3, 2/3) -> 1/3 * 1 + 1/3 * 2/3
    assert average_precision([0.9, 0.8, 0.7], [True, False, True], 3) == pytest.approx(1 / 3 + 2 / 9)
    assert average_precision([0.5, 0.4], [True, True], 2) == pytest.approx(1.0)
    assert average_precision([], [], 2) == 0.0
    assert math.isnan(average_precision([0.3], [False], 0))


def test_accumulator_matching_rules() -> None:
    acc = APAccumulator(num_classes=2, iou_threshold=0.5)
    gt_boxes = [[0, 0, 10, 10], [20, 0, 30, 10], [40, 0, 50, 10]]
    gt_labels = [0, 0, 0]
    gt_ignore = [False, False, True]
    acc.add(
        det_boxes=[
            [0, 0, 10, 10],  # TP
            [0, 1, 10, 11],  # duplicate of the first: FP
            [40, 0, 50, 10],  # on the ignored object: dropped
            [60, 0, 70, 10],  # nothing there: FP
            [20, 0, 30, 10],  # right box, wrong class: FP for class 1, and class 0's second object is missed
        ],
        det_scores=[0.9, 0.8, 0.95, 0.3, 0.6],
        det_labels=[0, 0, 0, 0, 1],
        gt_boxes=gt_boxes,
        gt_labels=gt_labels,
        gt_ignore=gt_ignore,
    )
    car, other = acc.results()
    assert (car.num_gt, car.num_detections, car.true_positives, car.false_positives) == (2, 3, 1, 2)
    assert car.ap == pytest.approx(0.5)  # one of two found at precision 1
    assert car.recall == pytest.approx(0.5)
    assert other.num_gt == 0 and math.isnan(other.ap) and other.false_positives == 1
    assert APAccumulator.mean_ap([car, other]) == pytest.approx(0.5)


def test_accumulator_over_images_and_best_iou_match() -> None:
    acc = APAccumulator(num_classes=1)
    # Image 1: the detection overlaps two objects; it must take the better one, leaving the other free.
    acc.add([[0, 0, 10, 10], [9, 0, 19, 10]], [0.9, 0.8], [0, 0], [[1, 0, 11, 10], [9, 0, 19, 10]], [0, 0])
    # Image 2: one object, no detection.
    acc.add(np.zeros((0, 4)), [], [], [[0, 0, 5, 5]], [0])
    (res,) = acc.results()
    assert acc.images == 2 and res.num_gt == 3 and res.true_positives == 2
    assert res.ap == pytest.approx(2 / 3)


def test_accumulator_rejects_bad_input() -> None:
    acc = APAccumulator(num_classes=2)
    with pytest.raises(ValueError, match="length"):
        acc.add([[0, 0, 1, 1]], [0.5, 0.4], [0], [], [])
    with pytest.raises(ValueError, match="out of range"):
        acc.add([[0, 0, 1, 1]], [0.5], [2], [], [])
    with pytest.raises(ValueError):
        APAccumulator(num_classes=0)
