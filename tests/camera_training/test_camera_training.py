"""The camera detector's training package: data, targets, settings and the network's shapes.

Small and fast: a few synthetic images, no training run. The network tests need torch, an optional
extra (``pip install -e '.[train]'``); without it they are skipped and the torch-free parts still run.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from perception.camera_training import _cli
from perception.camera_training._data import (
    TRAIN_MIN_HEIGHT,
    TRAIN_MIN_VISIBLE,
    Dataset,
    augment,
    gaussian_radius,
    make_targets,
)
from perception.camera_training._settings import TrainSettings
from perception.camera_training._sources import EVAL_SEED, camera_samples, check_training_seeds
from perception.modelkit._camera import NET_HEIGHT, NET_WIDTH, NUM_CLASSES, OUTPUT_STRIDE, PAD_VALUE
from perception.types import LABELS

OUT_H, OUT_W = NET_HEIGHT // OUTPUT_STRIDE, NET_WIDTH // OUTPUT_STRIDE


def _image(width: int = 640, height: int = 360, value: int = 200) -> np.ndarray:
    return np.full((height, width, 3), value, np.uint8)


def test_settings_defaults_and_the_command_line_show_the_same_recipe() -> None:
    s = TrainSettings()
    assert (s.epochs, s.batch_size, s.threads, s.time_budget_s) == (12, 16, 1, None)
    args = _cli._parse(["--out", "x.onnx"])
    assert (args.epochs, args.batch_size, args.lr, args.threads) == (s.epochs, s.batch_size, s.lr, s.threads)
    assert list(_cli._seed_range("100-102")) == [100, 101, 102] and list(_cli._seed_range("7")) == [7]
    with pytest.raises(SystemExit):  # --out is required
        _cli._parse([])


def test_evaluation_seeds_are_never_trained_on() -> None:
    check_training_seeds(range(100, 124))
    for bad in (range(95, 105), [EVAL_SEED]):
        with pytest.raises(ValueError, match="reserved for evaluation"):
            check_training_seeds(bad)


def test_dataset_letterboxes_images_and_sorts_objects_into_positive_ignored_and_background() -> None:
    objects = [
        ("car", 100.0, 100.0, 200.0, 180.0, 0.9),  # positive
        ("pedestrian", 300.0, 100.0, 310.0, 100.0 + TRAIN_MIN_HEIGHT / 2, 0.9),  # too small: ignored
        ("truck", 400.0, 50.0, 500.0, 150.0, TRAIN_MIN_VISIBLE / 2),  # half hidden: ignored
        ("cyclist", 10.0, 10.0, 40.0, 60.0, 0.01),  # hardly visible: background, dropped
        ("car", 50.0, 50.0, 50.0, 90.0, 1.0),  # degenerate box: dropped
    ]
    data = Dataset.build([(_image(), objects), (_image(1280, 720), [(0, 0.0, 0.0, 1280.0, 720.0, 1.0)])])
    assert len(data) == 2 and data.images.shape == (2, NET_HEIGHT, NET_WIDTH, 3) and data.images.dtype == np.uint8
    assert data.offsets.tolist() == [0, 3, 4]
    boxes, labels, positive = data.objects(0)
    assert labels.tolist() == [LABELS.index("car"), LABELS.index("pedestrian"), LABELS.index("truck")]
    assert positive.tolist() == [True, False, False]
    # 640x360 -> 384x216 (scale 0.6) with 4 rows of padding above: boxes are in network pixels
    np.testing.assert_allclose(boxes[0], [60.0, 64.0, 120.0, 112.0], atol=1e-4)
    full, _, _ = data.objects(1)
    np.testing.assert_allclose(full[0], [0.0, 4.0, NET_WIDTH, NET_HEIGHT - 4.0], atol=1e-4)
    assert (data.images[:, :4] == PAD_VALUE).all() and (data.images[:, 4:-4] == 200).all()

    both = Dataset.concatenate([data, data])
    assert len(both) == 4 and both.offsets.tolist() == [0, 3, 4, 7, 8]
    np.testing.assert_array_equal(both.objects(2)[0], boxes)


def test_dataset_cache_round_trip_and_key_and_damage(tmp_path: Path) -> None:
    data = Dataset.build([(_image(), [("car", 100.0, 100.0, 200.0, 180.0, 0.9)])])
    path = tmp_path / "cache" / "urban-100.npz"
    data.save(path, {"version": 1})
    loaded = Dataset.try_load(path, {"version": 1})
    assert loaded is not None
    for name in ("images", "boxes", "labels", "positive", "offsets"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(data, name))
    assert Dataset.try_load(path, {"version": 2}) is None  # built for something else: rebuilt
    assert Dataset.try_load(tmp_path / "missing.npz", {"version": 1}) is None
    path.write_bytes(b"not an npz")
    assert Dataset.try_load(path, {"version": 1}) is None  # damaged cache: ignored with a warning


def test_targets_peak_at_the_centre_with_size_and_offset_and_ignore_regions() -> None:
    car = LABELS.index("car")
    boxes = np.array([[40.0, 40.0, 80.0, 72.0], [200.0, 100.0, 240.0, 140.0]], np.float32)
    t = make_targets(boxes, np.array([car, car], np.int32), np.array([True, False]))
    assert t.heat.shape == t.weight.shape == (NUM_CLASSES, OUT_H, OUT_W)
    assert t.size.shape == t.offset.shape == (2, OUT_H, OUT_W) and t.mask.shape == (OUT_H, OUT_W)
    # centre (60, 56) px -> cell (15, 14) at stride 4: a peak of exactly 1, the only supervised cell
    assert t.heat[car, 14, 15] == 1.0 and t.heat[car].max() == 1.0 and t.mask.sum() == 1.0 and t.mask[14, 15] == 1
    assert t.heat[np.arange(NUM_CLASSES) != car].max() == 0.0
    np.testing.assert_allclose(t.size[:, 14, 15], [math.log(10.0), math.log(8.0)], rtol=1e-6)
    np.testing.assert_allclose(t.offset[:, 14, 15], [0.0, 0.0], atol=1e-6)
    # the ignored car: no heatmap loss inside its box, for its class only
    assert t.weight[car, 25:36, 50:61].max() == 0.0 and t.weight[car - 1 if car else car + 1, 30, 55] == 1.0
    assert t.heat[car, 25:36, 50:61].max() == 0.0
    assert gaussian_radius(8.0, 10.0) > 0


def test_augment_keeps_shapes_and_boxes_inside_the_frame() -> None:
    rng = np.random.default_rng(0)
    data = Dataset.build([(_image(), [("car", 100.0, 100.0, 200.0, 180.0, 0.9), ("car", 5.0, 5.0, 40.0, 40.0, 0.9)])])
    boxes, _, positive = data.objects(0)
    for _ in range(20):
        image, b, pos, kept = augment(data.images[0], boxes, positive, rng)
        assert image.shape == data.images[0].shape and image.dtype == np.uint8
        assert b.shape == (len(kept), 4) and pos.shape == (len(kept),) and set(kept.tolist()) <= {0, 1}
        assert (b[:, [0, 2]] >= 0).all() and (b[:, [0, 2]] <= NET_WIDTH).all()
        assert (b[:, [1, 3]] >= 0).all() and (b[:, [1, 3]] <= NET_HEIGHT).all()
        assert (pos <= positive[kept]).all()  # augmentation can demote a positive, never promote one


def test_camera_samples_are_the_drive_images_with_labels_at_their_capture_time() -> None:
    samples = camera_samples("urban", 101, duration_s=0.2, frame_step_s=None)
    cameras = {name for name, *_ in samples}
    assert cameras == {"cam_front", "cam_back"}
    for _name, t_ns, image, labels in samples:
        assert t_ns >= 0 and image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8
        for label, x1, y1, x2, y2, visible in labels:
            assert label in LABELS and x1 <= x2 and y1 <= y2 and 0.0 <= visible <= 1.0
    assert any(labels for *_, labels in samples)  # an urban street has objects in view


# -- the network (torch) --------------------------------------------------------------------------------


def test_network_outputs_have_the_documented_shapes() -> None:
    torch = pytest.importorskip("torch", reason="torch is in the optional 'train' extra (pip install -e '.[train]')")
    from perception.camera_training._net import CenterNet, ExportWrapper
    from perception.camera_training._train import losses

    torch.manual_seed(0)
    net = CenterNet().eval()
    x = torch.zeros((2, 3, NET_HEIGHT, NET_WIDTH))
    with torch.no_grad():
        heat, size, offset = net(x)
        probs, _, _ = ExportWrapper(net)(x)
    assert tuple(heat.shape) == (2, NUM_CLASSES, OUT_H, OUT_W)
    assert tuple(size.shape) == tuple(offset.shape) == (2, 2, OUT_H, OUT_W)
    assert float(probs.min()) >= 0.0 and float(probs.max()) <= 1.0
    t = make_targets(np.array([[40.0, 40.0, 80.0, 72.0]], np.float32), np.array([0], np.int32), np.array([True]))
    names = ("heat", "weight", "size", "offset", "mask")
    batch = {name: torch.from_numpy(np.stack([getattr(t, name)] * 2)) for name in names}
    out = losses((heat, size, offset), batch)
    assert out and all(bool(torch.isfinite(v)) for v in out.values())


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--data-seeds", "1-2"], "reserved for evaluation"),
        (["--data-seeds", "300-200"], "an empty range: '300-200' ends before it begins"),
        (["--data-seeds", "abc"], "expected 'A-B' or 'A' (whole numbers), got 'abc'"),
        (["--scenarios", "nowhere"], "unknown scenario(s) ['nowhere']"),
        (["--epochs", "0"], "must be >= 1, got 0"),
    ],
)
def test_a_mistaken_option_is_a_usage_error_saying_what_is_wrong(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # each ended in a traceback (a reserved or reversed seed range: only once the data was being made)
    with pytest.raises(SystemExit) as info:
        _cli._parse(["--out", "x.onnx", *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and said in err and "Traceback" not in err, err
    args = _cli._parse(["--out", "x.onnx", "--data-seeds", "100-101", "--scenarios", "urban,dense"])
    assert list(args.data_seeds) == [100, 101] and args.scenarios == ("urban", "dense")
