"""TraceSplitter on hand-written trace files (no server): each request's own server time, by its id."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from perception.metrics import TraceSplitter
from perception.triton import TraceReader
from perception.types import FrameResult, FrameStatus, LatencyTree, SensorResult, SensorStatus

MS = 1_000_000
SENSORS = [
    ("lidar_top", "lidar", "lidar_detector"),
    ("cam_a", "camera", "camera_detector"),
    ("cam_b", "camera", "camera_detector"),
]
_ids = itertools.count()


def _write(directory: Path, request_id: str, model: str, queue_ms: int, infer_ms: int) -> None:
    """One request's trace file: queue, 1 ms input, infer, 1 ms output."""
    tid = next(_ids)
    t = [0, 0, queue_ms, queue_ms + 1, queue_ms + 1 + infer_ms, queue_ms + 2 + infer_ms, queue_ms + 2 + infer_ms]
    names = ("REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START")
    names += ("COMPUTE_END", "REQUEST_END")
    objs: list[dict[str, Any]] = [{"id": tid, "model_name": model, "model_version": 1, "request_id": request_id}]
    objs += [{"id": tid, "timestamps": [{"name": e, "ns": 10**9 + v * MS}]} for e, v in zip(names, t, strict=True)]
    (directory / f"trace.json.{tid}").write_text(json.dumps(objs))


def _result(fid: int, in_flight_ms: int, *, cam_b: SensorStatus = SensorStatus.OK) -> FrameResult:
    def stages(total_ms: int) -> dict[str, int]:
        return {"total": (total_ms + 2) * MS, "preprocess": 1 * MS, "serialize": 1 * MS, "request": (total_ms + 1) * MS}

    sensors = {name: SensorResult(name, SensorStatus.OK, model=model) for name, _, model in SENSORS}
    sensors["cam_b"] = SensorResult("cam_b", cam_b, model="camera_detector")
    tree = LatencyTree(
        total_ns=100 * MS, stages={"dispatch": 100 * MS}, sensors={n: stages(in_flight_ms) for n in sensors}
    )
    return FrameResult(fid, fid * 100 * MS, FrameStatus.OK, sensors, latency=tree)


@pytest.mark.anyio
async def test_each_request_is_found_by_its_id_whatever_the_order(tmp_path: Path) -> None:
    _write(tmp_path, "warmup-0", "lidar_detector", 0, 50)
    splitter = TraceSplitter(TraceReader(tmp_path), SENSORS, batched_cameras=True, settle_timeout_s=0.05)
    with anyio.fail_after(10):
        await splitter.start()  # the warm-up's trace is read and forgotten
        # frame 2's traces land before frame 1's (frames in flight); one camera request for both cameras
        _write(tmp_path, "2:lidar_top", "lidar_detector", 30, 20)
        _write(tmp_path, "1:cam_a,cam_b", "camera_detector", 5, 40)
        _write(tmp_path, "1:lidar_top", "lidar_detector", 2, 20)
        one = await splitter.attribute(_result(1, 60))
        two = await splitter.attribute(_result(2, 60))
    lidar1, lidar2 = one.latency.sensors["lidar_top"], two.latency.sensors["lidar_top"]
    assert lidar1["server_queue"] == 2 * MS and lidar2["server_queue"] == 30 * MS
    assert lidar1["server_compute"] == 22 * MS and lidar1["server_total"] == 24 * MS
    assert lidar1["overhead"] == lidar1["in_flight"] - 24 * MS == 36 * MS
    for cam in ("cam_a", "cam_b"):  # the batch's time in both cameras' trees
        assert one.latency.sensors[cam]["server_compute_infer"] == 40 * MS
    assert one.latency.server["camera_detector"]["requests"] == 1
    # frame 2's cameras sent nothing traced: unavailable, with the reason (after the settle timeout)
    assert "no trace" in two.latency.server_unavailable["camera_detector"]
    assert "server_total" not in two.latency.sensors["cam_a"]
    assert not os.listdir(tmp_path)  # every file read and deleted


@pytest.mark.anyio
async def test_late_traces_of_reported_frames_are_dropped_and_a_trace_too_long_is_refused(tmp_path: Path) -> None:
    splitter = TraceSplitter(TraceReader(tmp_path), SENSORS[:1], batched_cameras=True, settle_timeout_s=0.05)
    with anyio.fail_after(10):
        await splitter.start()
        _write(tmp_path, "3:lidar_top", "lidar_detector", 0, 20)
        await splitter.attribute(_result(3, 30))
        _write(tmp_path, "3:lidar_top", "lidar_detector", 500, 20)  # frame 3 again, after it was reported
        _write(tmp_path, "4:lidar_top", "lidar_detector", 100, 20)  # longer than the request was in flight
        four = await splitter.attribute(_result(4, 30))
    assert four.latency.server_unavailable["lidar_detector"].startswith("not this request's trace")
    assert not splitter._traces  # nothing kept for frames already reported


@pytest.mark.anyio
async def test_a_server_that_writes_no_trace_stops_costing_the_settle_time(tmp_path: Path) -> None:
    splitter = TraceSplitter(TraceReader(tmp_path), SENSORS[:1], batched_cameras=True, settle_timeout_s=1.0)
    with anyio.fail_after(60):  # 3 frames wait the settle timeout, then none waits
        await splitter.start()
        for fid in range(8):
            r = await splitter.attribute(_result(fid, 30))
            assert r.latency.server_unavailable["lidar_detector"].startswith("no trace")
    assert "within 0 ms" in r.latency.server_unavailable["lidar_detector"]


@pytest.mark.anyio
async def test_a_sensor_reusing_an_earlier_answer_sent_no_request_and_is_not_waited_for(tmp_path: Path) -> None:
    # Under overload the cameras reuse their latest answer (pipeline.required_sensors): no request of theirs
    # is in this frame, so none of their traces is awaited (each used to cost the settle timeout, a
    # second per frame, which held the records back until the replay's intake overflowed its queue).
    splitter = TraceSplitter(TraceReader(tmp_path), SENSORS, batched_cameras=True, settle_timeout_s=0.05)
    reused = _result(5, 60)
    for cam in ("cam_a", "cam_b"):
        reused.sensors[cam] = SensorResult(cam, SensorStatus.OK, model="camera_detector", reused_age_ns=50 * MS)
    with anyio.fail_after(10):
        await splitter.start()
        _write(tmp_path, "5:lidar_top", "lidar_detector", 1, 20)
        five = await splitter.attribute(reused)
    assert five.latency.server_unavailable == {}  # nothing missing: the lidar's trace was the frame's only one
    assert set(five.latency.server) == {"lidar_detector"}
