"""A drive replayed faster than the models finish it, against the real server: whole frames are shed
before any request is sent, each still one record (reason overload, the tracker's prediction), and
load opens no circuit. Structure only: how many frames are shed depends on the host."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from perception.config import load_config, with_overrides
from perception.drives import DriveReader
from perception.replay import ReplayOptions, each_frame, replay_drive
from perception.server import EmbeddedTriton
from perception.sim import generate_drive
from perception.types import FrameResult, FrameStatus, SensorStatus

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "launch" / "replay.yaml"


@pytest.fixture(scope="module")
def drive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("overload") / "urban.mcap"
    generate_drive(out, scenario="urban", seed=5, duration_s=2.0)
    return out


def test_an_over_rate_replay_sheds_whole_frames_with_predicted_records(drive: Path, triton: EmbeddedTriton) -> None:
    # 10x the recorded speed: a 10 Hz lidar offered at 100 Hz, faster than any host runs the models. The
    # budget is generous (1 s) so that a busy host's late answers are not what this test is about.
    cfg = with_overrides(load_config(DEFAULT), budget_ms=1000)
    cfg = replace(cfg, server=replace(cfg.server, url=triton.grpc_url))
    results: list[FrameResult] = []

    async def main() -> None:
        with anyio.fail_after(240):
            outcome = await replay_drive(
                drive, cfg, ReplayOptions(rate=10.0, progress=False), sinks=[each_frame(results.append)]
            )
        counters = outcome.report.counters
        shed = [r for r in results if r.status is FrameStatus.DROPPED]
        assert counters.drop_reasons.get("overload", 0) == len(shed) == counters.dropped
        admission = outcome.report.admission
        assert admission is not None
        overload = admission["overload"]  # the policy's counts in report.json
        assert overload["superseded"] + overload["too_late"] + overload["queue_overflow"] == len(shed)

    anyio.run(main)
    with DriveReader(drive) as reader:
        lidar_sweeps = sum(1 for s in reader.samples() if s.sensor == "lidar_top")
    assert [r.frame_id for r in results] == list(range(len(results)))  # one record per frame, in order
    assert len(results) >= lidar_sweeps - 1
    shed = [r for r in results if r.status is FrameStatus.DROPPED]
    processed = [r for r in results if r.status is not FrameStatus.DROPPED]
    assert shed and processed
    for r in shed:  # shed before any request was sent, answered by the tracker's prediction
        assert (r.reason or "").startswith("overload") and r.predicted and not r.sensors
    for r in processed:  # no circuit opened: no sensor skipped
        assert all(s.status is not SensorStatus.SKIPPED for s in r.sensors.values()), r.sensors
    assert any(r.detections for r in shed[len(shed) // 2 :])  # once tracks exist, predictions have them
