"""Sensors come from the drive: the default profile replays a drive whatever its rig is named."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from perception.config import load_config
from perception.drives import DriveReader
from perception.errors import ConfigError
from perception.replay import DriveSource, ReplayOptions, each_frame, replay_drive
from perception.server import EmbeddedTriton
from perception.sim import generate_drive
from perception.types import FrameResult

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "replay_data" / "urban_seed7_10s.mcap"
DEFAULT = ROOT / "launch" / "replay.yaml"

# The default rig with its sensors renamed and one camera and one radar fewer: nothing in the default
# profile names them.
RIG = (ROOT / "launch" / "rigs" / "default.yaml").read_text()
RIG = RIG.replace("name: lidar_top", "name: roof_lidar").replace("name: cam_front", "name: front_cam")
RIG = RIG.replace("name: radar_front", "name: bumper_radar")
_CUT = RIG.index("  - name: cam_back")
_END = RIG.index("  - name: bumper_radar")
RIG = RIG[:_CUT] + RIG[_END:]
_RR = RIG.index("  - name: radar_rear")
RIG = RIG[:_RR]


@pytest.fixture(scope="module")
def renamed_drive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("renamed")
    (d / "rig.yaml").write_text(RIG)
    out = d / "renamed.mcap"
    generate_drive(out, scenario="urban", seed=3, duration_s=2.0, rig=d / "rig.yaml")
    return out


def test_the_default_profile_runs_the_drive_s_own_sensors(renamed_drive: Path) -> None:
    with DriveReader(renamed_drive) as reader:
        source = DriveSource(reader, load_config(DEFAULT))
    assert sorted((s.name, s.kind, s.model) for s in source.config.sensors) == [
        ("bumper_radar", "radar", "radar_detector"),
        ("front_cam", "camera", "camera_detector"),
        ("roof_lidar", "lidar", "lidar_detector"),
    ]
    assert source.config.trigger.sensor == "roof_lidar"
    assert sorted(source.rig) == ["bumper_radar", "front_cam", "roof_lidar"]


def test_a_profile_naming_a_sensor_the_drive_lacks_lists_both_sides(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "sensors:\n"
        "  - {name: lidar_top, kind: lidar, model: lidar_detector}\n"
        "  - {name: cam_left, kind: camera, model: camera_detector}\n"
    )
    with DriveReader(BUNDLED) as reader, pytest.raises(ConfigError) as info:
        DriveSource(reader, load_config(profile))
    msg = str(info.value)
    assert msg.startswith(f"{profile}: sensors[1]: sensor 'cam_left' is not in drive {BUNDLED} (it has: ")
    for name in ("lidar_top (lidar)", "cam_front (camera)", "cam_back (camera)", "radar_rear (radar)"):
        assert name in msg


def test_replay_of_a_renamed_rig_with_the_default_profile(renamed_drive: Path, triton: EmbeddedTriton) -> None:
    cfg = load_config(DEFAULT)
    cfg = replace(cfg, server=replace(cfg.server, url=triton.grpc_url))

    async def main() -> tuple[list[int], dict[str, int], dict[str, Any]]:
        with anyio.fail_after(240):
            results: list[FrameResult] = []
            outcome = await replay_drive(
                renamed_drive, cfg, ReplayOptions(rate="lockstep", progress=False), sinks=[each_frame(results.append)]
            )
        assert {r.status.value for r in results} == {"ok"}
        for r in results:
            assert set(r.sensors) == {"roof_lidar", "front_cam", "bumper_radar"}
        # the drive's lidar accumulates by its kind's default: each sweep with the one before it
        acc = outcome.report.accumulation
        assert acc is not None
        assert acc["window_ms"] == {"roof_lidar": 120.0}
        assert acc["merged"] == acc["sweeps"] == len(results) - 1 and acc["no_ego_motion"] == 0
        sources = {name: sum(name in d.sources for r in results for d in r.detections) for name in r.sensors}
        assert outcome.evaluation is not None
        return [len(r.detections) for r in results], sources, outcome.evaluation

    counts, sources, quality = anyio.run(main)
    assert len(counts) >= 15  # 2 s of 10 Hz lidar sweeps
    # The models saw the renamed sensors' data and fusion made objects of it: each renamed sensor is a
    # source of detections, and they are the drive's objects (ground truth). Measured (urban, seed 3, 20
    # frames): detections from roof_lidar 289, front_cam 114, bumper_radar 70; fused mAP 0.74. Floors with
    # a wide margin: nothing detected, a sensor ignored, or detections away from the objects fail.
    assert all(n >= 10 for n in sources.values()), sources
    assert quality["mAP"] >= 0.4, quality
