"""``perception ros node --record``: the node's run recorded and replayed as recorded (issue 47), over real
rclpy on loopback: 3 s of the bundled drive played into the node, then the recording re-fused in order."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import anyio
from ros_helpers import DRIVE, ROOT, wait_for, write_profile

from perception.config import load_config
from perception.drives import DriveReader
from perception.live import Faults
from perception.record import RunRecorder, replay_as_recorded
from perception.ros import run_node, run_play
from perception.server import EmbeddedTriton
from perception.types import FrameResult


def test_the_node_s_run_recorded_replays_as_recorded(triton: EmbeddedTriton, tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "ros.yaml")
    run = tmp_path / "node.mcap"
    published: list[FrameResult] = []
    stop = threading.Event()
    codes: list[int] = []
    with RunRecorder(run) as rec:
        params = {"profile": str(profile), "rig": str(DRIVE), "url": triton.grpc_url}
        thread = threading.Thread(
            target=lambda: codes.append(run_node(params, stop=stop, on_published=published.append, observer=rec)),
            daemon=True,
        )
        thread.start()
        try:
            played = run_play(DRIVE, load_config(ROOT / "launch" / "replay.yaml"), Faults(), span_s=(0.0, 3.0),
                              wait_subscribers_s=60)  # fmt: skip
            assert played["lidar_top"] == 31  # 0 .. 3 s inclusive
            wait_for(lambda: sum(len(r.detections) > 0 for r in published) >= 10, 60, "frames with objects")
        finally:
            stop.set()
            thread.join(timeout=60)
    assert codes == [0]
    assert rec.stats["fused"] >= 10 and not any(k.startswith("dropped_") for k in rec.stats), rec.stats
    with DriveReader(run) as reader:
        from perception.ros._node import rig_source

        # the rig's source, resolved as the node resolved it (rig_source: the drive's own, without its poses)
        source_meta = rig_source(DRIVE).metadata
        assert source_meta and all(reader.metadata.get(k) == str(v) for k, v in source_meta.items()), reader.metadata
        frames = [json.loads(d) for _, _, _, d in reader.messages(["/record/frames"])]
    assert len(frames) == rec.stats["frames"] >= len(published)
    out = anyio.run(lambda: replay_as_recorded(run, load_config(profile)))
    assert out.first is None, out.first
    assert out.compared == rec.stats["fused"] and out.equal == out.compared
    replayed = {r.frame_id: r.detections for r in out.results}
    assert all(replayed[r.frame_id] == r.detections for r in published)  # what the node published, exactly
