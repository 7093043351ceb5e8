"""The Chrome trace of frame results, from hand-made latency trees (no server)."""

from __future__ import annotations

import json
from pathlib import Path

from perception.metrics import ChromeTrace
from perception.types import FrameResult, FrameStatus, LatencyTree, SensorResult, SensorStatus

MS = 1_000_000


def _result(fid: int, start_ms: int, *, missed: bool = False, late: bool = False) -> FrameResult:
    lidar = {
        "total": 30 * MS, "preprocess": 2 * MS, "request": 28 * MS, "serialize": 1 * MS, "in_flight": 27 * MS,
        "server_queue": 5 * MS, "server_compute_input": 1 * MS, "server_compute_infer": 15 * MS,
        "server_compute_output": 1 * MS, "server_compute": 17 * MS, "server_total": 22 * MS, "overhead": 5 * MS,
    }  # fmt: skip
    sensors = {"lidar_top": lidar}
    results = {"lidar_top": SensorResult("lidar_top", SensorStatus.OK, 30 * MS, model="lidar_detector")}
    if late:
        sensors["radar_front"] = {"total": 40 * MS}
        results["radar_front"] = SensorResult("radar_front", SensorStatus.LATE, 40 * MS, model="radar_detector")
    stages = {"schedule_wait": 1 * MS, "dispatch": 30 * MS, "join_wait": 10 * MS if late else 0, "fusion": 3 * MS}
    tree = LatencyTree(total_ns=sum(stages.values()), stages=stages, sensors=sensors, start_ns=start_ms * MS)
    status = FrameStatus.DEGRADED if late else FrameStatus.OK
    return FrameResult(fid, fid * 100 * MS, status, results, latency=tree, deadline_missed=missed)


def test_frames_in_flight_get_lanes_and_a_missed_deadline_is_marked(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    with ChromeTrace(path, process_name="perception test") as trace:
        trace.add(_result(0, 1000))
        trace.add(_result(1, 1010, missed=True, late=True))  # overlaps frame 0: a second lane
        trace.add(FrameResult(2, 0, FrameStatus.DROPPED, {}, reason="queue full"))  # nothing to draw
        trace.add(_result(3, 1100))  # lane 0 is free again
    events = json.loads(path.read_text())
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(names.values()) == ["frame", "frame #1", "lidar_top", "lidar_top #1", "radar_front #1"]
    frames = {e["args"]["frame_id"]: e for e in events if e["ph"] == "X" and e["cat"].startswith("frame")}
    assert set(frames) == {0, 1, 3}
    assert frames[0]["tid"] == frames[3]["tid"] != frames[1]["tid"]
    assert frames[1]["cat"] == "frame,deadline_missed" and frames[1]["args"]["deadline_missed"] is True
    (instant,) = [e for e in events if e["ph"] == "i"]
    assert instant["name"] == "deadline missed" and instant["ts"] == frames[1]["ts"] + frames[1]["dur"]
    assert frames[1]["ts"] == 10_000.0 and frames[0]["ts"] == 0.0  # µs from the first frame's start
    late = [e for e in events if e["ph"] == "X" and e["name"] == "radar_front"]
    assert late[0]["args"]["status"] == "late" and late[0]["dur"] == 40_000.0
    server = [e for e in events if e["name"] == "server" and e["tid"] == frames[0]["tid"] + 1]
    # the server block is centred in in_flight (the tree has its duration, not its position)
    assert server[0]["ts"] == 1_000 + 2_000 + 1_000 + 2_500 and server[0]["dur"] == 22_000
    assert len([e for e in events if e["ph"] == "s"]) == 4  # one flow per request: 1 + 2 + 1
