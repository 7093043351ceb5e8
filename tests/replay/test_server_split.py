"""Per-frame client/server split of every request, against the real embedded Triton.

The sleepy test models sleep a known time (lidar 20 ms, radar 30 ms, camera 40 ms), so Triton's
``compute_infer`` for each of their requests must be that long -- per frame, not on average.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from reliability_helpers import read_records, runtime_config, write_drive

from perception.cli import main
from perception.errors import ConfigError
from perception.metrics._server_split import OVERRUN_FRACTION, OVERRUN_NS
from perception.replay import ReplayOptions, each_frame, replay_drive
from perception.server import EmbeddedTriton
from perception.triton import ClientOptions, TritonClient
from perception.types import FrameResult, SensorStatus

SLEEPY = {"lidar_top": "sleepy_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"}
DELAY_MS = {"lidar_top": 20.0, "radar_front": 30.0, "cam_front": 40.0}
FRAMES = 6


@pytest.fixture(scope="module")
def drive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_drive(tmp_path_factory.mktemp("split") / "drive.mcap", FRAMES)


def _sensor(record: dict[str, Any], name: str) -> dict[str, Any]:
    tree: dict[str, Any] = record["latency_ms"]["sensors"][name]
    return tree


@pytest.mark.anyio
async def test_lockstep_replay_splits_each_request_into_client_and_server_time(
    triton: EmbeddedTriton, drive: Path, tmp_path: Path
) -> None:
    cfg = runtime_config(triton.grpc_url, SLEEPY)
    with anyio.fail_after(120):
        outcome = await replay_drive(
            drive,
            cfg,
            ReplayOptions(rate="lockstep", out_dir=tmp_path, report_md=False, evaluate=False, server_split=True),
        )
    records = read_records(tmp_path / "detections.jsonl")
    assert len(records) == FRAMES
    attributed = 0
    for rec in records:
        for name, delay in DELAY_MS.items():
            s = _sensor(rec, name)
            assert s["serialize"] > 0 and s["in_flight"] > 0
            assert s["request"] == pytest.approx(s["serialize"] + s["in_flight"], abs=0.002)
            if "server_unavailable" in s:
                continue  # allowed (with its reason), never guessed; but see the count below
            attributed += 1
            # The model sleeps `delay` ms: Triton's compute_infer of THIS frame's request says so; and the
            # server's time fits in the request's time in flight, up to the accounting overrun the split
            # tolerates (Triton closes a request's books a moment after answering; no wall-clock bound).
            assert delay <= s["server_compute_infer"], (rec["frame_id"], name, s)
            assert s["server_total"] <= s["in_flight"] * (1 + OVERRUN_FRACTION) + OVERRUN_NS / 1e6, (rec, name)
            parts = ("server_queue", "server_compute_input", "server_compute_infer", "server_compute_output")
            assert s["server_total"] == pytest.approx(sum(s[k] for k in parts), abs=0.005)
            assert s["overhead"] == pytest.approx(max(0.0, s["in_flight"] - s["server_total"]), abs=0.002)
            model = rec["latency_ms"]["server"][SLEEPY[name]]
            assert model["requests"] == 1 and model["compute_infer"] == s["server_compute_infer"]
    reasons = [r["latency_ms"].get("server_unavailable") for r in records]
    assert attributed >= len(records) * len(DELAY_MS) - 1, f"split unavailable too often: {reasons}"

    report = json.loads((tmp_path / "report.json").read_text())
    assert report["server_split"]["per_frame"] is True
    assert report["server_split"]["source"] == "statistics"  # an external server: its trace is not ours to read
    server = report["latency_ms"]["server"]
    for name, delay in DELAY_MS.items():
        p50 = server[SLEEPY[name]]["compute_infer"]["p50"]
        # at least the model's sleep, and part of the time the request was in flight (how close to the
        # sleep it stays is a speed, measured in bench/)
        assert delay <= p50 <= report["latency_ms"]["sensors"][name]["in_flight"]["max"]
        assert report["latency_ms"]["sensors"][name]["overhead"]["n"] >= FRAMES - 1
    assert outcome.latency.server_ns["sleepy_camera"]["compute_infer"]


@pytest.mark.anyio
async def test_other_clients_traffic_makes_the_split_unavailable_never_wrong(
    triton: EmbeddedTriton, drive: Path, tmp_path: Path
) -> None:
    """A second client keeps the radar model busy during the replay: the radar's server time cannot be
    attributed per frame and is reported unavailable with the reason; the other models still split."""
    cfg = runtime_config(triton.grpc_url, SLEEPY)
    done = anyio.Event()

    async def other_client() -> None:
        async with TritonClient(ClientOptions(urls=(triton.grpc_url,), channels=1)) as client:
            points = np.zeros((20, 5), np.float32)
            while not done.is_set():
                await client.infer("sleepy_radar", {"POINTS": points}, parameters={"delay_ms": 1})

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            tg.start_soon(other_client)
            outcome = await replay_drive(
                drive,
                cfg,
                ReplayOptions(rate="lockstep", out_dir=tmp_path, report_md=False, evaluate=False, server_split=True),
            )
            done.set()
    records = read_records(tmp_path / "detections.jsonl")
    radar_reasons = [r["latency_ms"].get("server_unavailable", {}).get("sleepy_radar") for r in records]
    assert all(reason is not None and reason.startswith("other traffic") for reason in radar_reasons), radar_reasons
    assert all("server_unavailable" in _sensor(r, "radar_front") for r in records)
    assert sum("server_total" in _sensor(r, "lidar_top") for r in records) >= FRAMES - 1
    assert outcome.report.server_split is not None
    split = outcome.report.server_split.models
    assert split["sleepy_radar"]["frames"] == 0
    assert split["sleepy_radar"]["unavailable"] == {"other traffic": FRAMES}


@pytest.mark.anyio
async def test_frames_in_flight_leave_server_time_to_the_run_mean_and_say_why(
    triton: EmbeddedTriton, drive: Path, tmp_path: Path
) -> None:
    cfg = runtime_config(triton.grpc_url, SLEEPY, pipeline={"max_in_flight": 2})
    with anyio.fail_after(120):
        results: list[FrameResult] = []
        outcome = await replay_drive(
            drive, cfg, ReplayOptions(rate="max", report_md=False, evaluate=False), sinks=[each_frame(results.append)]
        )
        with pytest.raises(ConfigError, match="one frame in flight"):
            await replay_drive(drive, cfg, ReplayOptions(rate="max", server_split=True, evaluate=False))
    split = outcome.report.server_split
    assert split is not None and split.per_frame is False and "2 frames in flight" in (split.why_not or "")
    assert split.source is None
    server_ms = outcome.report.server_ms or {}
    assert set(server_ms) == set(SLEEPY.values())  # the run's mean still there
    for name, model in SLEEPY.items():  # read once Triton had counted every answered request
        answered = sum(r.sensors[name].status is SensorStatus.OK for r in results)
        assert server_ms[model]["requests"] >= answered > 0
    assert not outcome.latency.server_ns
    assert "in_flight" in outcome.latency.sensor_ns["lidar_top"]  # the client side is still split


def test_budget_command_shows_the_split_and_gates(triton: EmbeddedTriton, drive: Path, tmp_path: Path) -> None:
    import yaml
    from reliability_helpers import profile_data

    data = profile_data(triton.grpc_url, SLEEPY)
    data["budget"]["stages"] = {"lidar_top.server_compute_infer": 500}
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(data))
    out = tmp_path / "ok"
    # the default: one frame in flight at full speed, under the real deadline, split per frame
    args = [str(drive), "--config", str(profile), "--no-progress"]
    assert main(["budget", *args, "--budget-ms", "1000", "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "## Triton server side" in md and "sleepy_lidar.compute_infer" in md
    assert "lidar_top.server_total" in md and "lidar_top.overhead" in md
    report = json.loads((out / "report.json").read_text())
    assert report["budget"]["passed"] is True
    assert any(r["stage"] == "lidar_top.server_compute_infer" for r in report["budget"]["rows"])

    # A stage budget on something never measured (a sensor that does not exist) is not a pass.
    data["budget"]["stages"] = {"no_such_sensor.server_total": 5}
    profile.write_text(yaml.safe_dump(data))
    out2 = tmp_path / "no_data"
    assert main(["budget", *args, "--budget-ms", "1000", "--out", str(out2)]) == 1
    report = json.loads((out2 / "report.json").read_text())
    assert report["budget"]["violations"] == ["no_such_sensor.server_total"]

    # Under pipelining the per-frame split is off, and the report says why.
    data["budget"]["stages"] = {}
    profile.write_text(yaml.safe_dump(data))
    out3 = tmp_path / "pipelined"
    assert main(["budget", *args, "--in-flight", "2", "--budget-ms", "1000", "--out", str(out3)]) == 0
    split = json.loads((out3 / "report.json").read_text())["server_split"]
    assert split["per_frame"] is False and "2 frames in flight" in split["why_not"]
    with pytest.raises(SystemExit) as usage:  # argparse's usage error naming the option
        main(["budget", *args, "--in-flight", "0", "--budget-ms", "1000", "--out", str(out3)])
    assert usage.value.code == 2


def test_against_an_external_server_the_per_frame_split_is_asked_for_not_paid_by_default(
    triton: EmbeddedTriton, drive: Path, tmp_path: Path
) -> None:
    """Triton's statistics after every frame cost a request a frame (client and server CPU) and hold the next
    frame back: a plain lockstep replay against an external server does without, says why and how to ask
    (its report keeps Triton's mean per request over the run); ``--server-split`` asks."""
    import yaml
    from reliability_helpers import profile_data

    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(profile_data(triton.grpc_url, SLEEPY)))
    args = [str(drive), "--config", str(profile), "--rate", "lockstep", "--no-progress", "--no-fused-mcap"]
    plain, asked = tmp_path / "plain", tmp_path / "asked"
    assert main(["replay", *args, "--out", str(plain)]) == 0
    report = json.loads((plain / "report.json").read_text())
    assert report["server_split"]["per_frame"] is False
    assert "--server-split" in report["server_split"]["why_not"]
    assert set(report["server_ms"]) >= set(SLEEPY.values())  # the run's mean per request is still there
    for rec in read_records(plain / "detections.jsonl"):
        assert "server_total" not in _sensor(rec, "lidar_top") and "server" not in rec["latency_ms"]

    assert main(["replay", *args, "--server-split", "--out", str(asked)]) == 0
    report = json.loads((asked / "report.json").read_text())
    assert report["server_split"]["per_frame"] is True and report["server_split"]["source"] == "statistics"
    records = read_records(asked / "detections.jsonl")
    assert sum("server_total" in _sensor(rec, "lidar_top") for rec in records) >= len(records) - 1
