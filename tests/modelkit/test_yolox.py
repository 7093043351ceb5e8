"""YOLOX-Nano pre/post-processing on synthetic arrays (letterbox, grid decode, NMS, COCO mapping; no server)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from perception.errors import ConfigError, ModelContractError
from perception.modelkit import (
    COCO_CLASSES,
    COCO_TO_LABEL,
    Letterbox,
    YoloxDetector,
    YoloxDetectorModel,
    decode_yolox,
    nms,
    yolox_preprocess,
)
from perception.modelkit._camera import PAD_VALUE
from perception.modelkit._yolox import YOLOX_INPUT, YOLOX_STRIDES, yolox_grid
from perception.types import LABELS

REPO = Path(__file__).resolve().parents[2]
ONNX = REPO / "models" / "yolox_nano" / "1" / "yolox_nano.onnx"
ANCHORS = sum((YOLOX_INPUT // s) ** 2 for s in YOLOX_STRIDES)
COLS = 5 + len(COCO_CLASSES)


def raw_output() -> npt.NDArray[np.float32]:
    """A network output where nothing is detected (objectness 0, log size 0)."""
    return np.zeros((ANCHORS, COLS), np.float32)


def anchor_index(stride: int, cell_x: int, cell_y: int) -> int:
    offset = 0
    for s in YOLOX_STRIDES:
        n = YOLOX_INPUT // s
        if s == stride:
            return offset + cell_y * n + cell_x
        offset += n * n
    raise ValueError(stride)


def put(
    out: npt.NDArray[np.float32], stride: int, cx: float, cy: float, w: float, h: float, coco: str, p: float
) -> int:
    """Write an anchor predicting a ``w x h`` box centred at ``(cx, cy)`` (network pixels) of ``coco``."""
    gx, gy = int(cx // stride), int(cy // stride)
    i = anchor_index(stride, gx, gy)
    out[i, 0] = cx / stride - gx
    out[i, 1] = cy / stride - gy
    out[i, 2] = np.log(w / stride)
    out[i, 3] = np.log(h / stride)
    out[i, 4] = 1.0
    out[i, 5 + COCO_CLASSES.index(coco)] = p
    return i


# -------------------------------------------------------------------------------- letterbox / input


def test_letterbox_is_top_left_with_bottom_padding() -> None:
    box = Letterbox.fit(1600, 900, YOLOX_INPUT, YOLOX_INPUT, centre=False)
    assert box.scale == pytest.approx(0.26)
    assert (box.pad_x, box.pad_y) == (0.0, 0.0)
    assert box.resized == (416, 234)


def test_preprocess_is_bgr_0_255_with_grey_padding() -> None:
    image = np.zeros((90, 160, 3), np.uint8)
    image[..., 0] = 200  # red
    image[..., 2] = 10  # blue
    batch, (box,) = yolox_preprocess([image])
    assert batch.shape == (1, 3, YOLOX_INPUT, YOLOX_INPUT) and batch.dtype == np.float32
    rows = box.resized[1]
    assert rows == 234
    np.testing.assert_allclose(batch[0, 2, : rows - 1], 200)  # channel 2 is red: BGR
    np.testing.assert_allclose(batch[0, 0, : rows - 1], 10)
    np.testing.assert_allclose(batch[0, :, rows:], PAD_VALUE)  # padding below, unnormalised


def test_preprocess_of_no_image() -> None:
    batch, boxes = yolox_preprocess([])
    assert batch.shape == (0, 3, YOLOX_INPUT, YOLOX_INPUT) and boxes == []


def test_grid_order_is_row_major_per_stride() -> None:
    grid, stride = yolox_grid()
    assert grid.shape == (ANCHORS, 2) and ANCHORS == 3549
    i = anchor_index(16, 5, 3)
    assert tuple(grid[i]) == (5.0, 3.0) and stride[i] == 16
    assert tuple(grid[anchor_index(8, 51, 0)]) == (51.0, 0.0)
    assert stride[-1] == 32 and tuple(grid[-1]) == (12.0, 12.0)


# -------------------------------------------------------------------------------- decode


def test_decode_puts_a_box_where_the_anchor_says_in_original_pixels() -> None:
    out = raw_output()
    put(out, 16, cx=200.0, cy=100.0, w=80.0, h=40.0, coco="car", p=0.9)
    box = Letterbox.fit(1600, 900, YOLOX_INPUT, YOLOX_INPUT, centre=False)
    dets = decode_yolox(out, box)
    assert len(dets) == 1
    assert dets.labels[0] == LABELS.index("car") and dets.scores[0] == pytest.approx(0.9)
    np.testing.assert_allclose(dets.boxes[0], np.array([160, 80, 240, 120]) / 0.26, rtol=1e-5)


def test_score_is_objectness_times_class_probability() -> None:
    out = raw_output()
    i = put(out, 8, 100.0, 100.0, 20.0, 40.0, "person", 0.8)
    out[i, 4] = 0.5
    dets = decode_yolox(out, Letterbox.fit(416, 416, 416, 416, centre=False))
    assert dets.scores[0] == pytest.approx(0.4) and dets.labels[0] == LABELS.index("pedestrian")


def test_mapping_table() -> None:
    assert dict(COCO_TO_LABEL) == {
        "car": "car",
        "truck": "truck",
        "bus": "truck",
        "person": "pedestrian",
        "bicycle": "cyclist",
        "motorbike": "cyclist",
    }
    assert set(COCO_TO_LABEL) <= set(COCO_CLASSES) and set(COCO_TO_LABEL.values()) == set(LABELS)


@pytest.mark.parametrize(("coco", "label"), [*COCO_TO_LABEL.items()])
def test_each_mapped_class_gives_its_label(coco: str, label: str) -> None:
    out = raw_output()
    put(out, 32, 208.0, 208.0, 100.0, 100.0, coco, 0.7)
    dets = decode_yolox(out, Letterbox.fit(416, 416, 416, 416, centre=False))
    assert [LABELS[k] for k in dets.labels] == [label]


def test_unmapped_classes_are_ignored_and_the_best_mapped_one_wins() -> None:
    out = raw_output()
    i = put(out, 32, 208.0, 208.0, 100.0, 100.0, "pottedplant", 0.95)
    j = put(out, 16, 100.0, 300.0, 60.0, 60.0, "train", 0.9)
    out[j, 5 + COCO_CLASSES.index("bus")] = 0.3
    out[j, 5 + COCO_CLASSES.index("truck")] = 0.6  # bus and truck both map to truck: the best counts
    out[i, 4] = 1.0
    dets = decode_yolox(out, Letterbox.fit(416, 416, 416, 416, centre=False))
    assert len(dets) == 1 and LABELS[dets.labels[0]] == "truck" and dets.scores[0] == pytest.approx(0.6)


def test_threshold_and_max_detections() -> None:
    out = raw_output()
    for k in range(20):
        put(out, 8, 10.0 + 20 * k, 50.0, 8.0, 8.0, "person", 0.5 + k * 0.01)
    put(out, 8, 10.0, 300.0, 8.0, 8.0, "person", 0.01)
    box = Letterbox.fit(416, 416, 416, 416, centre=False)
    assert len(decode_yolox(out, box, score_threshold=0.05)) == 20
    best = decode_yolox(out, box, max_detections=5)
    assert len(best) == 5 and np.all(np.diff(best.scores) <= 0) and best.scores[0] == pytest.approx(0.69)


def test_overlapping_boxes_of_one_label_are_suppressed_not_across_labels() -> None:
    out = raw_output()
    put(out, 16, 200.0, 200.0, 100.0, 60.0, "car", 0.9)
    put(out, 8, 204.0, 202.0, 100.0, 60.0, "car", 0.8)  # same car, another anchor
    put(out, 32, 210.0, 200.0, 100.0, 60.0, "truck", 0.5)  # another label: kept
    dets = decode_yolox(out, Letterbox.fit(416, 416, 416, 416, centre=False), nms_iou=0.45)
    assert [LABELS[k] for k in dets.labels] == ["car", "truck"]
    assert dets.scores.tolist() == pytest.approx([0.9, 0.5])


def test_decode_rejects_a_wrong_shape() -> None:
    with pytest.raises(ValueError, match="3549"):
        decode_yolox(np.zeros((100, 85), np.float32), Letterbox.fit(10, 10))


def test_decode_clips_to_the_image_and_survives_huge_sizes() -> None:
    out = raw_output()
    i = put(out, 32, 400.0, 400.0, 10.0, 10.0, "car", 0.9)
    out[i, 2:4] = 1e4  # exp overflow without the clip
    dets = decode_yolox(out, Letterbox.fit(640, 360, 416, 416, centre=False))
    assert np.all(np.isfinite(dets.boxes))
    assert dets.boxes[:, [0, 2]].max() <= 640 and dets.boxes[:, [1, 3]].max() <= 360


# -------------------------------------------------------------------------------- NMS


def test_nms_keeps_the_best_and_disjoint_boxes() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 10]], np.float32)
    scores = np.array([0.5, 0.9, 0.3, 0.5])
    assert nms(boxes, scores, 0.5).tolist() == [1, 2]
    assert nms(boxes, scores, 0.99).tolist() == [1, 0, 2]  # the exact duplicate (IoU 1) goes
    assert nms(np.zeros((0, 4)), np.zeros(0), 0.5).tolist() == []


def test_nms_of_degenerate_boxes() -> None:
    boxes = np.array([[5, 5, 5, 5], [5, 5, 5, 5]], np.float32)  # zero area: IoU 0, both kept
    assert nms(boxes, [0.2, 0.1], 0.5).tolist() == [0, 1]


# -------------------------------------------------------------------------------- the network


def test_detector_loads_the_committed_network_and_runs_a_batch() -> None:
    detector = YoloxDetector(ONNX)
    assert detector.input_size == (YOLOX_INPUT, YOLOX_INPUT)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (90, 160, 3), dtype=np.uint8), rng.integers(0, 256, (300, 200, 3), dtype=np.uint8)]
    batch, boxes = detector.preprocess(images)
    (out,) = detector.infer(batch)
    assert out.shape == (2, ANCHORS, COLS)
    both = detector.decode((out,), boxes)
    alone = detector([images[1]])[0]
    np.testing.assert_allclose(both[1].boxes, alone.boxes, atol=1e-3)


def test_detector_refuses_another_graph() -> None:
    other = REPO / "models" / "camera_detector" / "1" / "camera_detector.onnx"
    with pytest.raises(ModelContractError, match="YOLOX network"):
        YoloxDetector(other)
    with pytest.raises(ModelContractError, match="cannot load"):
        YoloxDetector(REPO / "no_such.onnx")


# -------------------------------------------------------------------------------- the input size, a setting


def test_the_committed_graph_has_symbolic_height_and_width() -> None:
    import onnxruntime as ort

    session = ort.InferenceSession(str(ONNX), providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    (out,) = session.get_outputs()
    assert inp.shape[:2] == [1, 3] and all(isinstance(d, str) for d in inp.shape[2:])
    assert isinstance(out.shape[1], str) and out.shape[2] == COLS


@pytest.mark.parametrize("size", [(640, 640), (512, 512), (640, 384)])
def test_grid_preprocess_and_network_at_another_size(size: tuple[int, int]) -> None:
    width, height = size
    anchors = sum((width // s) * (height // s) for s in YOLOX_STRIDES)
    grid, stride = yolox_grid(size)
    assert grid.shape == (anchors, 2) and stride[-1] == 32
    assert tuple(grid[-1]) == (width // 32 - 1, height // 32 - 1)  # row-major: x runs fastest
    detector = YoloxDetector(ONNX, input_size=size)
    assert detector.input_size == size
    image = np.random.default_rng(1).integers(0, 256, (90, 160, 3), dtype=np.uint8)
    batch, (box,) = detector.preprocess([image])
    assert batch.shape == (1, 3, height, width)
    assert box.scale == pytest.approx(min(width / 160, height / 90))
    (out,) = detector.infer(batch)
    assert out.shape == (1, anchors, COLS)


def test_decode_at_another_size_maps_back_to_original_pixels() -> None:
    size = (640, 384)
    grid, stride = yolox_grid(size)
    out = np.zeros((len(grid), COLS), np.float32)
    i = int(np.flatnonzero((stride == 16) & (grid[:, 0] == 12) & (grid[:, 1] == 6))[0])
    out[i, 0:2] = 0.5  # centre (12.5, 6.5) cells of 16 px: (200, 104) in the network input
    out[i, 2:4] = np.log([80 / 16, 40 / 16])
    out[i, 4] = 1.0
    out[i, 5 + COCO_CLASSES.index("car")] = 0.9
    box = Letterbox.fit(1600, 900, *size, centre=False)
    assert box.scale == pytest.approx(0.4)
    dets = decode_yolox(out, box, input_size=size)
    np.testing.assert_allclose(dets.boxes[0], np.array([160, 84, 240, 124]) / 0.4, rtol=1e-5)
    with pytest.raises(ValueError, match="YOLOX output must be"):
        decode_yolox(out, box)  # the default size's anchors differ


@pytest.mark.parametrize("size", [0, 400, (640, 360), (-32, 32)])
def test_detector_refuses_a_size_the_grids_do_not_tile(size: int | tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        YoloxDetector(ONNX, input_size=size)


def _served_model(tmp_path: Path, parameters: dict[str, str]) -> tuple[YoloxDetectorModel, dict[str, object]]:
    """A YoloxDetectorModel set up as the python backend would, from a model directory in tmp_path."""
    version = tmp_path / "yolox_nano" / "1"
    version.mkdir(parents=True)
    (version / "yolox_nano.onnx").symlink_to(ONNX)
    model = YoloxDetectorModel()
    model._model_dir = version
    model.model_name = "yolox_nano"
    config = {"name": "yolox_nano", "parameters": {k: {"string_value": v} for k, v in parameters.items()}}
    return model, config


@pytest.mark.parametrize(
    ("parameters", "key", "why"),
    [
        ({"input_width": "big", "input_height": "416"}, "input_width", "positive integer"),
        ({"input_width": "416", "input_height": "0"}, "input_height", "positive integer"),
        ({"input_width": "416", "input_height": "-32"}, "input_height", "positive integer"),
        ({"input_width": "416", "input_height": "99999"}, "input_height", "at most"),
        ({"input_width": "400", "input_height": "416"}, "input_width", "multiple of 32"),
        ({"input_width": "640", "input_height": "360"}, "input_height", "multiple of 32"),
        ({"input_width": "640"}, "input_height", "state both"),
    ],
)
def test_a_bad_input_size_fails_the_load_naming_the_key_and_the_file(
    tmp_path: Path, parameters: dict[str, str], key: str, why: str
) -> None:
    model, config = _served_model(tmp_path, parameters)
    with pytest.raises(ConfigError, match=why) as info:
        model.setup(config)
    err = info.value
    assert err.key == key and err.file == str(tmp_path / "yolox_nano" / "config.pbtxt")
    assert str(err).startswith(f"{err.file}: {key}: ") and "yolox_nano" in str(err)


@pytest.mark.parametrize(
    ("parameters", "size"), [({}, (416, 416)), ({"input_width": "640", "input_height": "384"}, (640, 384))]
)
def test_the_configured_size_is_the_networks(tmp_path: Path, parameters: dict[str, str], size: tuple[int, int]) -> None:
    model, config = _served_model(tmp_path, parameters)
    model.setup(config)
    assert model.detector.input_size == size
