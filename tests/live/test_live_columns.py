"""LiveRuntime over a fake inference client (no Triton): a host's cloud is read by its columns' names when it
names them all, refused when a name says a column would be misread; an image of another size than its camera's
calibration is refused, never read wrong; an image's bytes in the host's buffer are taken as bytes."""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import numpy as np
import pytest

from perception._imageio import encode_jpeg
from perception.config import LiveConfig, RuntimeConfig, SensorConfig, TriggerConfig, from_data
from perception.errors import SampleDroppedError
from perception.fusion._testing import make_rig
from perception.kinds import kind_def
from perception.live import LiveRuntime, _runtime
from perception.live._assembler import LiveAssembler
from perception.scheduler import FusionStage, Runtime, Session
from perception.triton import InferRequest
from perception.types import (
    EgoPose,
    FrameResult,
    FrameStatus,
    ImageSample,
    PointCloudSample,
    Sample,
    SensorSpec,
    Transform,
)

WATCHDOG_S = 30.0
MS = 1_000_000
RIG = {"radar": SensorSpec("radar", "radar", "radar", Transform(), "/radar", rate_hz=10.0)}


class _Radar:
    """A radar model answering at once with no object; keeps the POINTS it was sent."""

    def __init__(self) -> None:
        self.points: list[np.ndarray] = []
        self.lock = threading.Lock()
        self.outputs = {
            spec.name: np.zeros(tuple(0 if d == -1 else d for d in spec.dims), dtype=spec.numpy_dtype)
            for spec in kind_def("radar").contract.outputs
        }

    async def infer_request(self, req: InferRequest) -> Any:
        with self.lock:
            self.points.append(np.array(req.inputs["POINTS"]))
        return type("Result", (), {"outputs": self.outputs})()


class _Seen:
    """An observer keeping the samples it is given (as a recorder records them)."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []

    def begin(self, session: Session) -> None:
        pass

    def fusion(self, stage: FusionStage | None) -> FusionStage | None:
        return stage

    def sample(self, sample: Sample, arrival_ns: int) -> None:
        self.samples.append(sample)

    def ego(self, pose: EgoPose, arrival_ns: int) -> None:
        pass

    def result(self, result: FrameResult) -> None:
        pass


def _config(sensor: str = "radar", kind: str = "radar", model: str = "rad") -> RuntimeConfig:
    """One sensor, its own trigger, no fusion, margins no test reaches."""
    return from_data(
        RuntimeConfig,
        {
            "server": {"url": "localhost:1"},
            "sensors": [{"name": sensor, "kind": kind, "model": model, "transport": "grpc"}],
            "trigger": {"sensor": sensor},
            "fusion": {"enabled": False},
            "live": {"trigger_tolerance_ms": 600_000, "max_stamp_skew_ms": 600_000},
            "budget": {"total_ms": 60_000, "fusion_reserve_ms": 10},
        },
    )


def test_radar_pushed_with_its_columns_in_another_order_is_read_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the push checked the number of fields, not their names: a radar cloud with its RCS before its
    # radial velocity was sent by position, the RCS (12.5 dBsm) read as the Doppler, without a word.
    client = _Radar()
    monkeypatch.setattr(_runtime, "Runtime", functools.partial(Runtime, client=client, check_models=False))
    t0 = time.monotonic_ns() - 10_000 * MS
    fields = ("x", "y", "z", "rcs", "radial_velocity")
    seen = _Seen()
    with LiveRuntime(_config(), RIG, observer=seen) as live:
        ok = live.push(PointCloudSample("radar", t0, "radar", np.array([[10, 1, 0.5, 12.5, -3.0]], np.float32), fields))
        # rcs where the radial velocity is read, and no radial_velocity to read by name: refused
        bad = live.push(
            PointCloudSample(
                "radar", t0 + 100 * MS, "radar", np.zeros((1, 5), np.float32), ("x", "y", "z", "rcs", "doppler")
            )
        )
        assert ok is not None and bad is not None
        result = ok.result(timeout=WATCHDOG_S)
        with pytest.raises(SampleDroppedError, match=r"invalid: column 3 .* is 'rcs'") as dropped:
            bad.result(timeout=WATCHDOG_S)
        assert dropped.value.sensor == "radar"
        status = live.status()
    assert result.status is FrameStatus.OK
    [sent] = client.points
    np.testing.assert_array_equal(sent.reshape(-1, 5)[0], np.array([10, 1, 0.5, -3.0, 12.5], np.float32))
    assert status["intake"]["invalid_by_sensor"] == {"radar": 1}
    # the observer (a recorder) sees the cloud in its kind's order too: a drive holds a kind's fields in its
    # order, and its writer refused the cloud as pushed (the recording lost the sweep)
    assert seen.samples[0].fields == kind_def("radar").point_fields
    np.testing.assert_array_equal(seen.samples[0].points, sent.reshape(-1, 5))
    assert "'rcs'" in status["intake"]["invalid_reasons"]["radar"]


def test_an_image_of_another_size_than_its_calibration_is_refused() -> None:
    # Before: the live intake took a camera's image of any size: fusion placed its boxes with the intrinsics
    # of the calibration's size (a host downscaling its camera misplaced every camera object, without a word),
    # while a replay at least counts such images (image_size_mismatch).
    rig = make_rig(cameras=1, radars=0, lidar=False, width=640, height=360)
    asm: LiveAssembler[None] = LiveAssembler(
        (SensorConfig("cam_front", "camera", "m"),), TriggerConfig(sensor="cam_front"), LiveConfig(), rig=rig
    )
    t = 10**12
    small = ImageSample("cam_front", t, "cam_front", encode_jpeg(np.zeros((180, 320, 3), np.uint8)))
    assert asm.add(small, t) == (
        "invalid: image is 320x180, its camera's calibration 640x360 "
        "(its boxes would be placed with the calibration's intrinsics)"
    )
    assert asm.stats.invalid_by_sensor == {"cam_front": 1}
    right = ImageSample("cam_front", t + 100 * MS, "cam_front", encode_jpeg(np.zeros((360, 640, 3), np.uint8)))
    assert asm.add(right, t + 100 * MS) is None


class _Camera:
    """A camera model answering at once with no object (a batch of one)."""

    def __init__(self) -> None:
        self.outputs = {
            spec.name: np.zeros((1, *spec.dims), dtype=spec.numpy_dtype) for spec in kind_def("camera").contract.outputs
        }

    async def infer_request(self, req: InferRequest) -> Any:
        return type("Result", (), {"outputs": self.outputs})()


@pytest.mark.parametrize("view", [memoryview, bytearray])
def test_image_bytes_in_the_host_s_buffer_are_taken_as_bytes(monkeypatch: pytest.MonkeyPatch, view: type) -> None:
    # Before: the intake check took a memoryview or bytearray of JPEG bytes (a driver's receive buffer, handed
    # over without a copy), and a memoryview's decode raised AttributeError in the frame's processing: the
    # frame was dropped as an internal error, every frame; a bytearray the host reused changed under it.
    monkeypatch.setattr(_runtime, "Runtime", functools.partial(Runtime, client=_Camera(), check_models=False))
    cfg = _config("cam", "camera", "cam")
    rig = {"cam": SensorSpec("cam", "camera", "cam", Transform(), "/cam", rate_hz=10.0)}
    buffer = bytearray(encode_jpeg(np.full((36, 64, 3), 200, np.uint8)))
    seen = _Seen()
    with LiveRuntime(cfg, rig, observer=seen) as live:
        future = live.push(ImageSample("cam", time.monotonic_ns() - 10_000 * MS, "cam", view(buffer)))
        assert future is not None
        result = future.result(timeout=WATCHDOG_S)
    assert result.status is FrameStatus.OK, (result.reason, result.sensors)
    [sample] = seen.samples
    assert isinstance(sample, ImageSample) and type(sample.data) is bytes and sample.data == bytes(buffer)


def test_a_sample_in_another_sensor_s_frame_or_the_vehicle_s_is_refused() -> None:
    # Before: a sample's frame_id was never read: a host pushing its lidar cloud already moved to base_link (or a
    # camera's frame) had it taken as in the lidar's own frame and moved by the lidar's extrinsic once more (every
    # box 1.9 m up and 1 m forward), without a word; a recorder's drive writer refused each such sweep.
    rig = make_rig(cameras=1, radars=0)
    asm: LiveAssembler[None] = LiveAssembler(
        (SensorConfig("lidar_top", "lidar", "m"),), TriggerConfig(sensor="lidar_top"), LiveConfig(), rig=rig
    )
    t = 10**12

    def sweep(k: int, frame: str) -> PointCloudSample:
        return PointCloudSample(
            "lidar_top", t + k * 100 * MS, frame, np.zeros((1, 4), np.float32), ("x", "y", "z", "i")
        )

    assert asm.add(sweep(0, "base_link"), t) == (
        "invalid: sample in frame 'base_link', the rig's lidar_top in 'lidar_top': a sensor's samples are taken in "
        "its own frame (its extrinsic moves them to base_link)"
    )
    assert "in frame 'cam_front_optical'" in (asm.add(sweep(1, "cam_front_optical"), t + 100 * MS) or "")
    assert "in frame 'map'" in (asm.add(sweep(2, "map"), t + 200 * MS) or "")
    assert asm.stats.invalid_by_sensor == {"lidar_top": 3}
    # its own frame, another name of it (a driver's), or none: taken
    assert asm.add(sweep(3, "lidar_top"), t + 300 * MS) is None
    assert asm.add(sweep(4, "velodyne"), t + 400 * MS) is None
    assert asm.add(sweep(5, ""), t + 500 * MS) is None
