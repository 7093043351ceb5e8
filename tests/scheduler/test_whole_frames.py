"""Frames a host hands in whole (``ThreadedRuntime.submit``, ``Runtime.process``; a fake inference client, no
Triton): each sample passes the live intake's check against the rig (``RigCheck``). A sample refused is its
sensor's input error, seen by neither its model nor fusion; a point cloud naming its kind's fields in another
order reaches the model and fusion in the kind's order."""

from __future__ import annotations

import functools
from collections.abc import Mapping

import anyio
import numpy as np
import pytest
from fake_answers import EmptyAnswers

from perception._imageio import encode_jpeg
from perception.config import RuntimeConfig, from_data
from perception.scheduler import RigCheck, Runtime, ThreadedRuntime, _thread
from perception.types import (
    CameraCalibration,
    Detection3D,
    Frame,
    FrameResult,
    FrameStatus,
    ImageSample,
    PointCloudSample,
    SensorResult,
    SensorSpec,
    SessionSource,
    Transform,
)

WATCHDOG_S = 30.0
CAL = CameraCalibration(64, 36, (50.0, 0, 32, 0, 50, 18, 0, 0, 1))
RIG = {
    "lidar": SensorSpec("lidar", "lidar", "lidar_link", Transform.from_xyz_rpy((1.0, 0.0, 1.8), (0, 0, 0)), "/l"),
    "cam": SensorSpec("cam", "camera", "cam_link", Transform(), "/c", CAL),
}
LIDAR = ("x", "y", "z", "intensity")


class _Fusion:
    """A fusion stage that keeps the frames it was handed."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []

    def __call__(
        self, frame: Frame, results: Mapping[str, SensorResult]
    ) -> tuple[tuple[Detection3D, ...], Mapping[str, int]]:
        self.frames.append(frame)
        return (), {"fusion": 0}


def _config() -> RuntimeConfig:
    return from_data(
        RuntimeConfig,
        {
            "server": {"url": "localhost:1"},
            "sensors": [
                {"name": "lidar", "kind": "lidar", "model": "lid", "transport": "grpc"},
                {"name": "cam", "kind": "camera", "model": "cam", "transport": "grpc"},
            ],
            "trigger": {"rate_hz": 10},
            "budget": {"total_ms": 3000, "fusion_reserve_ms": 10},
        },
    )


def _image(width: int = 64, height: int = 36) -> ImageSample:
    return ImageSample("cam", 0, "cam_link", encode_jpeg(np.full((height, width, 3), 200, np.uint8)))


def _cloud(fields: tuple[str, ...] = LIDAR, frame_id: str = "lidar_link") -> PointCloudSample:
    pts = np.arange(5 * len(fields), dtype=np.float32).reshape(5, len(fields))
    return PointCloudSample("lidar", 0, frame_id, pts, fields)


def _submit(monkeypatch: pytest.MonkeyPatch, frame: Frame) -> tuple[FrameResult, EmptyAnswers, _Fusion]:
    client, fusion = EmptyAnswers(), _Fusion()
    monkeypatch.setattr(_thread, "Runtime", functools.partial(Runtime, client=client, check_models=False))
    with ThreadedRuntime(_config(), rig=RIG, fusion=fusion) as rt:
        result = rt.submit(frame).result(WATCHDOG_S)
    return result, client, fusion


def test_a_cloud_naming_its_fields_in_another_order_reaches_the_model_and_fusion_in_the_kinds_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: the model's tensor was read by name, but fusion (and a stream's accumulation) read x, y, z from
    # the first three columns: the intensity taken for x.
    cloud = _cloud(("intensity", "x", "y", "z"))
    result, client, fusion = _submit(monkeypatch, Frame(0, 0, {"lidar": cloud, "cam": _image()}))
    assert result.status is FrameStatus.OK, result.sensors
    (fused,) = fusion.frames
    seen = fused.samples["lidar"]
    assert isinstance(seen, PointCloudSample) and seen.fields == LIDAR
    np.testing.assert_array_equal(seen.points, cloud.points[:, [1, 2, 3, 0]])
    (points,) = [i["POINTS"] for i in client.inputs if "POINTS" in i]
    np.testing.assert_array_equal(points, cloud.points[:, [1, 2, 3, 0]])


@pytest.mark.parametrize(
    ("sample", "said"),
    [
        (_cloud(frame_id="base_link"), "sample in frame 'base_link', the rig's lidar in 'lidar_link'"),
        (_cloud(frame_id="cam_link"), "sample in frame 'cam_link', the rig's lidar in 'lidar_link'"),
        (_cloud(("x", "y", "z", "rcs")), "column 3 of ('x', 'y', 'z', 'rcs') is 'rcs'"),
        (PointCloudSample("lidar", 0.5, "lidar_link", np.zeros((2, 4), np.float32), LIDAR), "stamp must be integer"),  # type: ignore[arg-type]
        (_image(80, 36), "image is 80x36, its camera's calibration 64x36"),
    ],
)
def test_a_sample_the_rig_refuses_is_its_sensors_error_seen_by_neither_model_nor_fusion(
    monkeypatch: pytest.MonkeyPatch, sample: PointCloudSample | ImageSample, said: str
) -> None:
    # Before: a cloud in base_link was moved by the lidar's extrinsic once more, an image of another size had
    # its boxes placed with the calibration's intrinsics: in the frame's detections, without a word.
    name = sample.sensor
    samples: dict[str, PointCloudSample | ImageSample] = {"lidar": _cloud(), "cam": _image(), name: sample}
    result, client, fusion = _submit(monkeypatch, Frame(7, 0, samples))
    assert result.status is FrameStatus.DEGRADED
    got = result.sensors[name]
    assert got.status == "error" and said in (got.error or ""), got.error
    assert (got.error or "").startswith(f"{name}: ") and "frame=7" in (got.error or "")
    other = "cam" if name == "lidar" else "lidar"
    assert result.sensors[other].status == "ok"
    assert len(client.inputs) == 1  # the other sensor's request alone
    (fused,) = fusion.frames
    assert fused.samples[name] is None and fused.samples[other] is not None


@pytest.mark.anyio
async def test_a_replay_runtime_takes_an_image_of_another_size_than_its_calibration() -> None:
    # A drive's runtime counts such images (the replay's image_size_mismatch) and sends them: only a vehicle's
    # (its rig pushed live) refuses them.
    fusion = _Fusion()
    runtime = Runtime(
        _config(), source=SessionSource.simulated(RIG), fusion=fusion, client=EmptyAnswers(), check_models=False
    )
    with anyio.fail_after(WATCHDOG_S):
        async with runtime as rt:
            result = await rt.process(Frame(0, 0, {"lidar": _cloud(), "cam": _image(80, 36)}))
    assert result.sensors["cam"].status == "ok", result.sensors["cam"].error


def test_an_accumulated_cloud_over_one_samples_byte_limit_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    # The byte limit bounds a sample as a host sends it. A cloud the accumulator made of sweeps each within it
    # (accumulate_ms up to 2 s: 21 sweeps of a 10 Hz lidar of 5 MB, 105 MB) was refused whole by the runtime's
    # check of the frames it takes, the live intake's and the replay's included: the lidar an input error in
    # every frame, where before the check of whole frames it was sent. (The limit made small here: 64 rows.)
    from perception.kinds import _intake

    sweep = np.arange(64 * 4, dtype=np.float32).reshape(64, 4)
    monkeypatch.setattr(_intake, "MAX_SAMPLE_BYTES", sweep.nbytes)  # (the test's image is within it)
    rows = np.concatenate([sweep, sweep + 1.0])
    merged = PointCloudSample(
        "lidar", 0, "lidar_link", rows, LIDAR, merged_from=((-50_000_000, 64, tuple(np.eye(4).ravel())),)
    )
    result, client, fusion = _submit(monkeypatch, Frame(0, 0, {"lidar": merged, "cam": _image()}))
    assert result.sensors["lidar"].status == "ok", result.sensors["lidar"].error
    (points,) = [i["POINTS"] for i in client.inputs if "POINTS" in i]
    assert points.shape == (128, 4)
    (fused,) = fusion.frames
    assert fused.samples["lidar"] is merged  # fusion sees it too
    # a sweep as sent over the limit is still refused
    big = PointCloudSample("lidar", 0, "lidar_link", rows, LIDAR)
    result, _, _ = _submit(monkeypatch, Frame(0, 0, {"lidar": big, "cam": _image()}))
    assert result.sensors["lidar"].status == "error" and "byte limit" in (result.sensors["lidar"].error or "")


@pytest.mark.anyio
async def test_a_frame_handed_in_is_checked_though_the_runtime_serves_an_intake_that_checked_its_own() -> None:
    # A live runtime's own intake checks each sample as it arrives (Runtime.intake_check) and its frames are not
    # checked again (run's checked=); a frame a host hands to process, or streams to run without it, still is.
    fusion = _Fusion()
    runtime = Runtime(
        _config(), source=SessionSource.live(RIG), fusion=fusion, client=EmptyAnswers(), check_models=False
    )
    bad = _cloud(frame_id="base_link")
    with anyio.fail_after(WATCHDOG_S):
        async with runtime as rt:
            check = rt.intake_check()
            processed = await rt.process(Frame(0, 0, {"lidar": bad, "cam": _image()}))
            streamed = [r async for r in rt.run([Frame(1, 0, {"lidar": bad, "cam": _image()})])]
            taken = [r async for r in rt.run([Frame(2, 0, {"lidar": _cloud(), "cam": _image()})], checked=check)]
            with pytest.raises(ValueError, match="not an intake check of this runtime"):
                other = RigCheck(_config().active_sensors, RIG, image_sizes=True)
                [r async for r in rt.run([Frame(3, 0, {"lidar": bad})], checked=other)]
    for result in (processed, *streamed):
        got = result.sensors["lidar"]
        assert got.status == "error" and "sample in frame 'base_link'" in (got.error or ""), got.error
    assert [f.frame_id for f in fusion.frames] == [0, 1, 2]
    assert [f.samples["lidar"] for f in fusion.frames[:2]] == [None, None]
    assert [r.status for r in taken] == [FrameStatus.OK]
