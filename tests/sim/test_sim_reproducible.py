"""Reproducibility across CPUs: the rounding grid absorbs an ulp, and the drive comparison used for the
bundled drive passes ulp-level differences but fails on real ones.

Another CPU model's numpy/libm may return transcendentals one ulp away. Without such a machine at hand,
these tests make one: the world's sin/cos/arctan2/... results are nudged by one ulp (``np.nextafter``),
and the drives' floats and pixels are perturbed by one ulp / one level.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from drive_compare import drive_differences, image_differences, point_data_differences, repeated
from mcap.reader import make_reader
from mcap.writer import CompressionType, Writer
from PIL import Image

from perception.drives import _codec as codec
from perception.sim import Simulator, generate_drive
from perception.sim import _world as world_module

# --------------------------------------------------------------------------------------------------
# the generator: 1 ulp in the math does not reach the file
# --------------------------------------------------------------------------------------------------

TRANSCENDENTALS = frozenset({"sin", "cos", "tan", "arctan2", "atan2", "hypot", "exp", "log", "arcsin", "arccos"})


class _Nudged:
    """A module (numpy or math) whose transcendentals return one ulp up or down, alternately."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self._calls = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._module, name)
        if name not in TRANSCENDENTALS:
            return attr

        def nudged(*args: Any, **kwargs: Any) -> Any:
            self._calls += 1
            out = np.nextafter(attr(*args, **kwargs), np.inf if self._calls % 2 else -np.inf)
            return float(out) if self._module is math else out

        return nudged


def test_rounding_grid_absorbs_one_ulp_in_the_world_math(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ground truth and ego poses as written are the same when every sin/cos/arctan2/hypot of the world
    model (road, ego motion, actors, rotation into base_link) is one ulp off; unrounded they differ."""
    plain = Simulator("urban", seed=7, duration_s=10.0)
    times = plain.ground_truth_times()[::9]
    want_gt = [plain.ground_truth(t) for t in times]
    want_raw = [plain.world.ground_truth(t) for t in times]
    want_ego = [plain.ego_pose(t) for t in times]

    monkeypatch.setattr(world_module, "np", _Nudged(np))
    monkeypatch.setattr(world_module, "math", _Nudged(math))
    nudged = Simulator("urban", seed=7, duration_s=10.0)
    # unrounded, the nudge reaches ground truth and ego poses (else this test would prove nothing)
    assert all(g.objects for g in want_gt)
    assert [nudged.world.ground_truth(t) for t in times] != want_raw
    assert [nudged.world.ego_pose(t) for t in times] != [plain.world.ego_pose(t) for t in times]
    for t, want, ego in zip(times, want_gt, want_ego, strict=True):
        got = nudged.ground_truth(t)
        assert got == want, t
        assert codec.encode_ground_truth(got).SerializeToString(deterministic=True) == codec.encode_ground_truth(
            want
        ).SerializeToString(deterministic=True)
        assert nudged.ego_pose(t) == ego, t


# --------------------------------------------------------------------------------------------------
# the drive comparison
# --------------------------------------------------------------------------------------------------

Edit = Callable[[int, str, Any], int]  # (message index, topic, decoded message to mutate) -> log_time shift


def _rewrite(src: Path, dst: Path, edit: Edit) -> Path:
    """A copy of drive ``src`` with every message decoded, passed through ``edit`` and re-encoded."""
    with src.open("rb") as f, dst.open("wb") as g:
        reader = make_reader(f)
        summary = reader.get_summary()
        assert summary is not None
        header = reader.get_header()
        w = Writer(g, compression=CompressionType.ZSTD)
        w.start(profile=header.profile, library=header.library)
        schemas = sorted(summary.schemas.values(), key=lambda s: s.id)
        schema_ids = {s.id: w.register_schema(s.name, s.encoding, s.data) for s in schemas}
        channel_ids = {
            c.id: w.register_channel(c.topic, c.message_encoding, schema_ids[c.schema_id], dict(c.metadata))
            for c in sorted(summary.channels.values(), key=lambda c: c.id)
        }
        for m in reader.iter_metadata():
            w.add_metadata(m.name, dict(m.metadata))
        for i, (schema, channel, message) in enumerate(reader.iter_messages(log_time_order=False)):
            assert schema is not None
            msg = codec.SCHEMAS[schema.name].FromString(message.data)
            shift = edit(i, channel.topic, msg)
            w.add_message(channel_ids[channel.id], message.log_time + shift, msg.SerializeToString(deterministic=True),
                          message.publish_time + shift, message.sequence)
        w.finish()
    return dst


@pytest.fixture(scope="module")
def small_drive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reproducible") / "small.mcap"
    generate_drive(path, scenario="urban", seed=5, duration_s=0.6)
    return path


JPEG_QUALITY: int = Simulator("urban", seed=5, duration_s=0.6).rig.sensor("cam_front").params.jpeg_quality  # type: ignore[union-attr]


def _decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), np.uint8)


def _encode(pixels: np.ndarray) -> bytes:
    from perception._imageio import encode_jpeg

    return encode_jpeg(pixels.astype(np.uint8), quality=JPEG_QUALITY)


def _nudge_doubles(msg: Any) -> None:
    """Every double of ``msg`` (recursively) one ulp up; repr()-ed metadata numbers too."""
    for fd, value in msg.ListFields():
        if fd.type == fd.TYPE_MESSAGE:
            for sub in value if repeated(fd) else [value]:
                _nudge_doubles(sub)
        elif fd.type == fd.TYPE_DOUBLE and not repeated(fd):
            setattr(msg, fd.name, float(np.nextafter(value, np.inf)))
        elif fd.type == fd.TYPE_DOUBLE:
            up = [float(np.nextafter(v, np.inf)) for v in value]
            del value[:]
            value.extend(up)
    if msg.DESCRIPTOR.full_name == "foxglove.KeyValuePair" and msg.key in ("yaw", "vx", "vy"):
        msg.value = repr(float(np.nextafter(float(msg.value), np.inf)))


def _reencoded(i: int, topic: str, msg: Any) -> int:
    """Images decoded and encoded again: the reference for :func:`_one_ulp_everywhere`, whose images are
    these decoded pixels (standing for the renderer's) with a few of them flipped before encoding."""
    if msg.DESCRIPTOR.full_name == "foxglove.CompressedImage":
        msg.data = _encode(_decode(msg.data))
    return 0


def _one_ulp_everywhere(i: int, topic: str, msg: Any) -> int:
    """What another CPU may do: every double and float32 one ulp away, three pixels per image one level
    off (a rendered float that sat on a rounding tie to uint8) before encoding."""
    name = msg.DESCRIPTOR.full_name
    if name == "foxglove.PointCloud":
        points = np.frombuffer(msg.data, np.float32)
        msg.data = np.nextafter(points, np.float32(np.inf)).astype(np.float32).tobytes()
    elif name == "foxglove.CompressedImage":
        pixels = _decode(msg.data).astype(np.int16)
        rng = np.random.default_rng(i)
        for _ in range(3):
            y, x, c = rng.integers(pixels.shape[0]), rng.integers(pixels.shape[1]), rng.integers(3)
            pixels[y, x, c] += 1 if pixels[y, x, c] < 255 else -1
        msg.data = _encode(pixels)
    _nudge_doubles(msg)
    return 0


def test_identity_rewrite_is_equivalent(small_drive: Path, tmp_path: Path) -> None:
    same = _rewrite(small_drive, tmp_path / "same.mcap", lambda i, topic, msg: 0)
    assert drive_differences(small_drive, same) == []


def test_one_ulp_everywhere_passes(small_drive: Path, tmp_path: Path) -> None:
    reference = _rewrite(small_drive, tmp_path / "reference.mcap", _reencoded)
    nudged = _rewrite(small_drive, tmp_path / "nudged.mcap", _one_ulp_everywhere)
    with reference.open("rb") as a, nudged.open("rb") as b:
        before = [(c.topic, m.data) for _, c, m in make_reader(a).iter_messages(log_time_order=False)]
        after = [(c.topic, m.data) for _, c, m in make_reader(b).iter_messages(log_time_order=False)]
    # every message but the images changed (a one-level flip of three pixels rarely survives JPEG's
    # quantisation: image_differences is exercised on flips that do in the test below)
    assert len(before) == len(after)
    assert all(x != y for (topic, x), (_, y) in zip(before, after, strict=True) if "image" not in topic)
    assert drive_differences(reference, nudged) == []
    assert drive_differences(nudged, reference) == []


def test_one_grid_step_in_ground_truth_passes(small_drive: Path, tmp_path: Path) -> None:
    """A value exactly on a rounding tie may round the other way elsewhere: one 1 µm step."""

    def step(i: int, topic: str, msg: Any) -> int:
        if topic == codec.GROUND_TRUTH_TOPIC:
            for entity in msg.entities:
                entity.cubes[0].pose.position.x += 1e-6
        return 0

    assert drive_differences(small_drive, _rewrite(small_drive, tmp_path / "step.mcap", step)) == []


def _first(topic: str, change: Callable[[Any], None]) -> Edit:
    seen: list[int] = []

    def edit(i: int, t: str, msg: Any) -> int:
        if t == topic and not seen:
            seen.append(i)
            change(msg)
        return 0

    return edit


def _shift_point(msg: Any) -> None:
    points = np.frombuffer(msg.data, np.float32).copy()
    points[0] += np.float32(1e-3)
    msg.data = points.tobytes()


def _drop_point(msg: Any) -> None:
    msg.data = msg.data[: -msg.point_stride]


def _brighter(msg: Any) -> None:
    msg.data = _encode(np.clip(_decode(msg.data).astype(np.int16) + 3, 0, 255))


def _gt_yaw(msg: Any) -> None:
    kv = next(kv for kv in msg.entities[0].metadata if kv.key == "yaw")
    kv.value = repr(float(kv.value) + 1e-3)


def _gt_label(msg: Any) -> None:
    msg.entities[0].metadata[0].value = "truck" if msg.entities[0].metadata[0].value != "truck" else "car"


def _gt_center(msg: Any) -> None:
    msg.entities[0].cubes[0].pose.position.y += 1e-3


def _ego(msg: Any) -> None:
    msg.pose.position.x += 1e-3


LIDAR, CAMERA = "/sensors/lidar_top/points", "/sensors/cam_front/image/compressed"
#: a real change, and what the reported difference names
REAL_CHANGES: dict[str, tuple[Edit, str]] = {
    "lidar point moved 1 mm": (_first(LIDAR, _shift_point), LIDAR),
    "lidar point dropped": (_first(LIDAR, _drop_point), LIDAR),
    "image 3 levels brighter": (_first(CAMERA, _brighter), CAMERA),
    "ground-truth centre moved 1 mm": (_first(codec.GROUND_TRUTH_TOPIC, _gt_center), "position.y"),
    "ground-truth yaw turned 1 mrad": (_first(codec.GROUND_TRUTH_TOPIC, _gt_yaw), "(yaw)"),
    "ground-truth label": (_first(codec.GROUND_TRUTH_TOPIC, _gt_label), "metadata[0].value"),
    "ego moved 1 mm": (_first(codec.EGO_TOPIC, _ego), codec.EGO_TOPIC),
    "timestamp 1 ns later": (lambda i, topic, msg: 1 if i == 40 else 0, "message 40 "),
}


@pytest.mark.parametrize("what", list(REAL_CHANGES))
def test_a_real_difference_fails(small_drive: Path, tmp_path: Path, what: str) -> None:
    edit, named = REAL_CHANGES[what]
    changed = _rewrite(small_drive, tmp_path / "changed.mcap", edit)
    found = drive_differences(small_drive, changed)
    assert found and all(named in line for line in found), found
    # on top of the ulp noise another CPU adds, the real change still shows
    reference = _rewrite(small_drive, tmp_path / "reference.mcap", _reencoded)
    noisy = _rewrite(changed, tmp_path / "noisy.mcap", _one_ulp_everywhere)
    found = drive_differences(reference, noisy)
    assert found and all(named in line for line in found), found


def test_point_and_image_tolerances_directly(small_drive: Path) -> None:
    x = np.array([0.0, -0.0, 1.5, -80.25, 199.99, 3e-8, np.nan, np.inf], np.float32)
    up = np.nextafter(x, np.float32(np.inf)).astype(np.float32)
    up[6:] = x[6:]  # non-finite values must stay as they are
    assert point_data_differences(x.tobytes(), up.tobytes()) is None
    far = x.copy()
    far[3] += np.float32(1e-3)
    assert point_data_differences(x.tobytes(), far.tobytes()) is not None
    moved_nan = x.copy()
    moved_nan[[5, 6]] = moved_nan[[6, 5]]
    assert point_data_differences(x.tobytes(), moved_nan.tobytes()) is not None
    with small_drive.open("rb") as f:
        image = next(m.data for _, c, m in make_reader(f).iter_messages(topics=[CAMERA]))
    pixels = _decode(codec.SCHEMAS["foxglove.CompressedImage"].FromString(image).data)
    base = _encode(pixels)
    rng = np.random.default_rng(1)
    changed = 0
    for _ in range(2000):  # three pixels one level off, until a few such flips change the JPEG bytes
        flipped = pixels.astype(np.int16)
        for _ in range(3):
            y, x, c = rng.integers(pixels.shape[0]), rng.integers(pixels.shape[1]), rng.integers(3)
            flipped[y, x, c] += 1 if flipped[y, x, c] < 255 else -1
        other = _encode(flipped)
        if other != base:
            changed += 1
            assert image_differences(base, other) is None
            if changed == 5:
                break
    assert changed == 5
    shifted = np.roll(pixels, 1, axis=1)  # the whole picture one pixel to the right
    assert image_differences(base, _encode(shifted)) is not None
