"""``perception ros node --record``: the node's run recorded and replayed as recorded (issue 47), over real
rclpy on loopback: 3 s of the bundled drive played into the node, then the recording re-fused in order."""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from recording_helpers import as_recorded
from ros_helpers import DRIVE, ROOT, OwnRos, Subscriber, wait_for, write_profile

from perception.config import load_config
from perception.drives import DriveReader
from perception.live import Faults
from perception.record import RunRecorder
from perception.ros import run_node, run_play
from perception.server import EmbeddedTriton
from perception.types import FrameResult


@dataclass
class NodeRun:
    """A node's recorded run: the recording, the node's profile, what it published, the recorder's stats."""

    run: Path
    profile: Path
    published: list[FrameResult]
    stats: Counter[str]


@pytest.fixture(scope="module")
def node_run(triton: EmbeddedTriton, tmp_path_factory: pytest.TempPathFactory) -> NodeRun:
    tmp_path = tmp_path_factory.mktemp("node_record")
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
    return NodeRun(run, profile, published, rec.stats)


def test_the_node_s_run_recorded_replays_as_recorded(node_run: NodeRun) -> None:
    run, profile, published, stats = node_run.run, node_run.profile, node_run.published, node_run.stats
    assert stats["fused"] >= 10 and not any(k.startswith("dropped_") for k in stats), stats
    with DriveReader(run) as reader:
        from perception.ros._node import rig_source

        # the rig's source, resolved as the node resolved it (rig_source: the drive's own, without its poses)
        source_meta = rig_source(DRIVE).metadata
        assert source_meta and all(reader.metadata.get(k) == str(v) for k, v in source_meta.items()), reader.metadata
        frames = [json.loads(d) for _, _, _, d in reader.messages(["/record/frames"])]
    assert len(frames) == stats["frames"] >= len(published)
    out = as_recorded(run, load_config(profile))
    assert out.first is None, out.first
    assert out.compared == stats["fused"] and out.equal == out.compared
    replayed = {r.frame_id: r.detections for r in out.results}
    assert all(replayed[r.frame_id] == r.detections for r in published)  # what the node published, exactly


def test_rerun_models_on_the_node_s_recording_answers_as_the_run(node_run: NodeRun, triton: EmbeddedTriton) -> None:
    # The node's stamps are on the ROS clock, its frames' on the host's (time base offset). The replay asked the
    # models again of each camera image at its received stamp, so every camera's answer carried another
    # sample_t_ns than the run's: 'decision' at every frame with a camera image (31 of 84 frames of a 3 s run).
    out = as_recorded(node_run.run, load_config(node_run.profile), rerun_models=True, url=triton.grpc_url)
    assert out.first is None, out.first
    assert out.compared == node_run.stats["fused"] and out.equal == out.compared


def test_the_node_s_accumulated_clouds_are_recorded_as_the_sweeps_they_are_made_of(node_run: NodeRun) -> None:
    # (the recorder traced them by their stamps, which the node's time base maps: their rows were written again)
    from perception.record import _format as fmt

    with DriveReader(node_run.run) as reader:
        from perception.record._replay import fusion_records

        lidar = [r["samples"].get("lidar_top") for r in fusion_records(reader)]
        again = list(reader.points(fmt.points_topic("lidar_top"), "lidar_top"))
    merged = [e for e in lidar if e and e.get("merged")]
    assert len(merged) >= 10 and all(e["raw_t_ns"] is not None and e["points"] is False for e in merged)
    assert not again


def test_a_node_deactivated_and_activated_again_mid_recording_replays_run_by_run(
    triton: EmbeddedTriton, tmp_path: Path, ros: OwnRos
) -> None:
    # A lifecycle manager deactivates the node mid-drive and activates it again (over the node's change_state
    # service, as `ros2 lifecycle set` does): each activation is a run of its own in the recording (a segment,
    # fusion and its tracker starting afresh), and the replay as recorded reproduces every frame of each.
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState

    profile = write_profile(tmp_path / "ros.yaml")
    run = tmp_path / "node.mcap"
    published: list[FrameResult] = []
    stop, played_stop = threading.Event(), threading.Event()
    codes: list[int] = []
    manager = ros.other("perception_test_lifecycle_manager")
    executor = ros.executor(manager)
    change = manager.create_client(ChangeState, "/perception_fusion/change_state")

    def transition(transition_id: int) -> None:
        request = ChangeState.Request()
        request.transition.id = transition_id
        future = change.call_async(request)
        executor.spin_until_future_complete(future, timeout_sec=60)
        assert future.done() and future.result().success, transition_id

    with RunRecorder(run) as rec:
        params = {"profile": str(profile), "rig": str(DRIVE), "url": triton.grpc_url}
        node = threading.Thread(
            target=lambda: codes.append(run_node(params, stop=stop, on_published=published.append, observer=rec)),
            daemon=True,
        )
        node.start()
        player = threading.Thread(
            target=run_play,
            args=(DRIVE, load_config(ROOT / "launch" / "replay.yaml"), Faults()),
            kwargs={"span_s": (0.0, 8.0), "wait_subscribers_s": 60, "stop": played_stop},
            daemon=True,
        )
        try:
            assert change.wait_for_service(timeout_sec=60)
            player.start()
            wait_for(lambda: len(published) >= 5, 60, "the first run's frames")
            transition(Transition.TRANSITION_DEACTIVATE)
            first = len(published)
            transition(Transition.TRANSITION_ACTIVATE)
            wait_for(lambda: len(published) >= first + 5, 60, "the second run's frames")
        finally:
            played_stop.set()
            player.join(timeout=60)
            stop.set()
            node.join(timeout=60)
    assert codes == [0]
    runs = {}
    for segment in [run, *sorted(tmp_path.glob("node-*.mcap"))]:
        with DriveReader(segment) as reader:
            runs[reader.metadata["record.run"]] = len(list(reader.messages(["/record/fusion"])))
    assert len(runs) == 2 and all(runs.values()), runs  # each activation's frames in a run of its own
    out = as_recorded(run, load_config(profile))
    assert out.first is None, out.first
    assert out.compared == rec.stats["fused"] == sum(runs.values()) and out.equal == out.compared
    # what the node published, frame by frame, in order (each run numbers its frames from 0)
    assert [(r.frame_id, r.detections) for r in out.results] == [(r.frame_id, r.detections) for r in published]


def test_a_recording_that_fails_is_an_error_in_diagnostics(
    triton: EmbeddedTriton, tmp_path: Path, subscriber: Subscriber
) -> None:
    # A recording that cannot be written (a full disk; here a file that cannot be created) ends the recording,
    # never the run: the node ran on unrecorded, and only a log line said so; /diagnostics, what a vehicle's
    # monitoring watches, said nothing of it.
    from perception.errors import PerceptionError

    profile = write_profile(tmp_path / "ros.yaml")
    stop = threading.Event()
    codes: list[int] = []
    rec = RunRecorder(Path("/proc/run.mcap"))  # (perception ros node refuses such a path before it starts)
    with pytest.raises(PerceptionError, match=r"recording /proc/run\.mcap failed"), rec:
        params = {"profile": str(profile), "rig": str(DRIVE), "url": triton.grpc_url}
        thread = threading.Thread(target=lambda: codes.append(run_node(params, stop=stop, observer=rec)), daemon=True)
        thread.start()
        try:

            def recording() -> list[Any]:
                with subscriber.seen.lock:
                    return [s for d in subscriber.seen.diagnostics for s in d.status if s.name.endswith(": recording")]

            wait_for(lambda: any(s.level == b"\x02" for s in recording()), 60, "the recording's status at ERROR")
        finally:
            stop.set()
            thread.join(timeout=60)
    assert codes == [0]  # the run itself went on
    statuses = recording()
    assert statuses and statuses[-1].level == b"\x02", "no recording status at ERROR in /diagnostics"
    status = statuses[-1]
    assert status.name == "perception_fusion: recording" and "recording failed" in status.message, status
    assert {v.key: v.value for v in status.values}["file"] == "/proc/run.mcap"
