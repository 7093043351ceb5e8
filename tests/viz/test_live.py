"""The live Foxglove WebSocket view: a real client connects, lists the channels and receives frames."""

from __future__ import annotations

import json
import socket
import struct
import time
from pathlib import Path

import pytest
from viz_fixtures import gt_results
from ws_client import SUBPROTOCOL, WsClient

from perception._lifetime import Lifetime
from perception.drives import DriveReader
from perception.errors import ConfigError
from perception.viz import LiveServer
from perception.viz._encode import DETECTIONS_TOPIC, FRAME_STATS_TOPIC
from perception.viz._record import VizRecorder

_MESSAGE_DATA = 0x01  # binary opcode of a message (0x02 is the server time)


def test_client_lists_channels_and_receives_frame_stats(small_drive: Path) -> None:
    with DriveReader(small_drive) as reader:
        results, rig = gt_results(reader), dict(reader.rig)
    with LiveServer(port=0) as server:
        port = server.port
        assert server.url == f"ws://127.0.0.1:{port}" and server.app_url is not None
        with VizRecorder(small_drive, rig, [server.output()]) as rec:
            client = WsClient("127.0.0.1", port)
            try:
                assert client.protocol == SUBPROTOCOL
                assert client.recv_json()["op"] == "serverInfo"
                wanted = {
                    DETECTIONS_TOPIC,
                    FRAME_STATS_TOPIC,
                    "/sensors/cam_front/detections",
                    "/sensors/lidar_top/points",
                }
                channels: dict[str, dict[str, object]] = {}
                while not wanted <= channels.keys():
                    msg = client.recv_json()
                    if msg["op"] == "advertise":
                        channels.update({c["topic"]: c for c in msg["channels"]})
                assert channels["/sensors/lidar_top/points"]["schemaName"] == "foxglove.PointCloud"
                assert channels["/sensors/lidar_top/points"]["encoding"] == "protobuf"
                assert channels[FRAME_STATS_TOPIC]["encoding"] == "json"
                assert channels[DETECTIONS_TOPIC]["schemaName"] == "foxglove.SceneUpdate"

                sub = {"id": 7, "channelId": channels[FRAME_STATS_TOPIC]["id"]}
                client.send_json({"op": "subscribe", "subscriptions": [sub]})
                client.sock.settimeout(0.5)
                received = None
                for result in results:  # the subscription is handled asynchronously: publish until one arrives
                    rec.write(result)
                    try:
                        while received is None:
                            opcode, payload = client.recv()
                            if opcode == 2 and payload[0] == _MESSAGE_DATA:
                                received = payload
                    except TimeoutError:
                        continue
                    break
                assert received is not None, "no frame stats reached the client"
                sub_id, log_time = struct.unpack_from("<IQ", received, 1)
                stats = json.loads(received[13:])
                assert sub_id == 7 and log_time == results[stats["frame_id"]].t_ns
                assert stats["latency_ms"]["total"] > 0
            finally:
                client.close()
    # Stopped: nothing listens on the port any more. The SDK's server shuts its listener down on its
    # own runtime thread, so allow it a bounded moment to do so (a watchdog, not a speed check). A reset
    # is a connection that reached the listener's backlog as it closed (a busy CI run saw one): try again.
    deadline = time.monotonic() + 30.0
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        except ConnectionRefusedError:
            break
        except ConnectionResetError:
            pass
        assert time.monotonic() < deadline, f"port {port} still accepts connections 30 s after stop"
        time.sleep(0.05)


def test_port_in_use_is_a_config_error() -> None:
    with LiveServer(port=0) as server, pytest.raises(ConfigError, match="--live-port"):
        LiveServer(port=server.port)
    with pytest.raises(ConfigError, match="port must be within"):
        LiveServer(port=70000)


def test_the_server_reports_closed_and_closes_idempotently() -> None:
    with LiveServer(port=0) as server:
        assert server.state is Lifetime.OPENED
    assert server.state is Lifetime.CLOSED
    server.close()
    assert server.state is Lifetime.CLOSED
