"""``perception replay --live``: a real Foxglove WebSocket client connects while the command replays a
drive and receives the fused detections as they are made."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from foxglove_schemas_protobuf.SceneUpdate_pb2 import SceneUpdate
from ws_client import WsClient

from perception.fusion import CAMERA_GUIDED_SOURCE
from perception.server import EmbeddedTriton
from perception.types import Detection3D
from perception.viz._encode import DETECTIONS_TOPIC, decode_detections

REPO_ROOT = Path(__file__).resolve().parents[2]
#: 10 s of drive at recorded speed: time enough to connect and subscribe on a busy host before it ends.
BUNDLED = REPO_ROOT / "replay_data" / "urban_seed7_10s.mcap"
_MESSAGE_DATA = 0x01  # binary opcode of a message


def _subscribe(client: WsClient, subscribed: dict[int, int], channel: int) -> None:
    sub = {"id": len(subscribed) + 1, "channelId": channel}
    subscribed[sub["id"]] = channel
    client.send_json({"op": "subscribe", "subscriptions": [sub]})


def _first_detections(client: WsClient, deadline: float) -> tuple[int, tuple[Detection3D, ...]]:
    """Subscribe to the fused detections and return the first message holding any (its log time).

    As a Foxglove app does, the subscription follows the channel: a channel withdrawn and advertised again
    (under a new id) is subscribed again."""
    subscribed: dict[int, int] = {}  # subscription id -> channel id
    channel: int | None = None  # the detections' channel id
    while True:
        assert time.monotonic() < deadline, "no detections reached the client"
        opcode, payload = client.recv()
        if opcode == 1:
            msg = json.loads(payload)
            if msg["op"] == "advertise":
                channel = next((c["id"] for c in msg["channels"] if c["topic"] == DETECTIONS_TOPIC), channel)
                if channel is not None and channel not in subscribed.values():
                    _subscribe(client, subscribed, channel)
            elif msg["op"] == "status" and msg.get("level") == 2 and channel is not None:
                # the server refused the subscription (a channel it had advertised was not yet known to
                # this client's session, seen on a busy host): ask again, as often as it says so
                _subscribe(client, subscribed, channel)
            continue
        if opcode != 2 or payload[0] != _MESSAGE_DATA:
            continue
        sub_id = int.from_bytes(payload[1:5], "little")
        log_time = int.from_bytes(payload[5:13], "little")
        assert sub_id in subscribed
        scene = SceneUpdate()
        scene.ParseFromString(payload[13:])
        detections = decode_detections(scene)
        if detections:
            return log_time, detections


def test_a_foxglove_client_receives_detections_during_a_cli_replay(triton: EmbeddedTriton, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "perception", "replay", str(BUNDLED), "--url", triton.grpc_url, "--live"]
    argv += ["--live-port", "0", "--rate", "1.0", "--out", str(tmp_path / "out"), "--no-progress", "--no-fused-mcap"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # printed (and flushed) before the replay starts
            found = re.match(r"live view: ws://127\.0\.0\.1:(\d+) ", line)
            assert found, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
            client = WsClient("127.0.0.1", int(found.group(1)), timeout_s=30.0)
            try:
                assert client.recv_json()["op"] == "serverInfo"
                log_time, detections = _first_detections(client, time.monotonic() + 120)
            except (ConnectionError, AssertionError) as exc:
                proc.send_signal(signal.SIGINT)
                out, err = proc.communicate(timeout=60)
                raise AssertionError(f"{exc}; the replay printed:\n{out}\n{err[-3000:]}") from exc
            finally:
                client.close()
            assert proc.poll() is None  # received while the replay runs
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # interrupted: it stops and closes the server
            try:
                proc.communicate(timeout=60)
            except (subprocess.TimeoutExpired, ValueError):
                proc.kill()
    assert log_time > 0
    # the reference models on the urban drive: tracked cars and people, from the drive's sensors
    assert {d.label for d in detections} & {"car", "pedestrian", "cyclist", "truck"}, detections
    assert all(
        d.sources
        # the drive's sensors, and the pseudo-source that marks a camera-guided lidar object (fusion.camera_guided)
        and set(d.sources) <= {"lidar_top", "cam_front", "cam_back", "radar_front", "radar_rear", CAMERA_GUIDED_SOURCE}
        for d in detections
    )
    assert all(d.id > 0 and 0 < d.score <= 1 for d in detections), detections
