"""Smoke test of ``perception bench``: every section's code path on a tiny drive against the session
Triton (sleepy test models, ``sink``). No timing assertions: speed lives in ``bench/``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perception._imageio import encode_jpeg
from perception.cli import main
from perception.drives import DriveWriter, topic_for
from perception.server import EmbeddedTriton
from perception.types import CameraCalibration, ImageSample, PointCloudSample, SensorKind, SensorSpec, Transform

T0 = 1_700_000_000_000_000_000
PERIOD = 100_000_000

CONFIG = """
server: {url: embedded, channels: 1}
sensors:
  - {name: lidar_top, kind: lidar, model: sleepy_lidar, transport: auto}
  - {name: cam_front, kind: camera, model: sleepy_camera}
  - {name: cam_back, kind: camera, model: sleepy_camera}
  - {name: radar_front, kind: radar, model: sleepy_radar, transport: grpc}
trigger: {sensor: lidar_top}
fusion: {enabled: false}
"""


def _camera(name: str, yaw: float) -> SensorSpec:
    calibration = CameraCalibration(64, 48, (40.0, 0.0, 32.0, 0.0, 40.0, 24.0, 0.0, 0.0, 1.0), (0.0,) * 5)
    extrinsic = Transform.from_xyz_rpy((1.0, 0.0, 1.5), (-np.pi / 2, 0.0, -np.pi / 2 + yaw))
    return SensorSpec(name, SensorKind.CAMERA, name, extrinsic, topic_for(SensorKind.CAMERA, name), calibration, 10.0)


def write_tiny_drive(path: Path, frames: int = 3) -> Path:
    rig = [
        SensorSpec(
            "lidar_top",
            SensorKind.LIDAR,
            "lidar_top",
            Transform.from_xyz_rpy((0.0, 0.0, 1.9), (0.0, 0.0, 0.0)),
            topic_for(SensorKind.LIDAR, "lidar_top"),
            None,
            10.0,
        ),
        _camera("cam_front", 0.0),
        _camera("cam_back", np.pi),
        SensorSpec(
            "radar_front",
            SensorKind.RADAR,
            "radar_front",
            Transform.from_xyz_rpy((3.7, 0.0, 0.5), (0.0, 0.0, 0.0)),
            topic_for(SensorKind.RADAR, "radar_front"),
            None,
            10.0,
        ),
    ]
    rng = np.random.default_rng(0)
    with DriveWriter(path, rig) as w:
        for i in range(frames):
            t = T0 + i * PERIOD
            w.write(
                PointCloudSample(
                    "lidar_top",
                    t,
                    "lidar_top",
                    rng.normal(size=(500, 4)).astype(np.float32),
                    ("x", "y", "z", "intensity"),
                    seq=i,
                )
            )
            for k, cam in enumerate(("cam_front", "cam_back")):
                image = encode_jpeg(rng.integers(0, 255, size=(48, 64, 3), dtype=np.uint8))
                w.write(ImageSample(cam, t + (2 + k) * 1_000_000, cam, image, seq=i))
            radar = rng.normal(size=(10, 5)).astype(np.float32)
            w.write(
                PointCloudSample(
                    "radar_front", t + 4_000_000, "radar_front", radar, ("x", "y", "z", "radial_velocity", "rcs"), seq=i
                )
            )
    return path


def test_bench_quick_runs_every_section(
    triton: EmbeddedTriton, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drive = write_tiny_drive(tmp_path / "tiny.mcap")
    config = tmp_path / "bench.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "results"
    argv = [
        "-q",
        "bench",
        str(drive),
        "--config",
        str(config),
        "--url",
        triton.grpc_url,
        "--quick",
        "--frames",
        "2",
        "--points",
        "1000",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    report = json.loads((out / "bench.json").read_text())
    sections = report["sections"]
    assert set(sections) == {"dispatch", "transport", "cameras", "pipelining"}
    assert not [name for name, s in sections.items() if "skipped" in s]
    assert set(sections["dispatch"]["variants"]) == {"sequential", "concurrent", "concurrent_grpc"}
    for variant in sections["dispatch"]["variants"].values():
        assert variant["latency"]["n"] == 2
        assert set(variant["sensor_status"]) == {"ok"}
    assert sections["transport"]["cases"][0]["points"] == 1000
    assert len(sections["pipelining"]["variants"]) == 6  # channels {1, 4} x in flight {1, 2, 4}
    assert report["environment"]["cpus"] >= 1 and report["server"]["embedded"] is False
    markdown = (out / "bench.md").read_text()
    assert "## Ratios" in markdown and "concurrent runtime / sequential sync client" in markdown
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--sections", "dispatch,nope"], ["--points", "10k"]])
def test_bench_bad_options_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    assert main(["bench", str(tmp_path / "none.mcap"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perception bench: error:") and err.count("\n") == 1
