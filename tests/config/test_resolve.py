"""A profile that leaves its sensors to the drive: one sensor per rig sensor, default model per kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from perception.config import load_config, resolve_sensors
from perception.errors import ConfigError
from perception.scheduler import Runtime
from perception.types import SensorKind, SensorSpec, Transform

ROOT = Path(__file__).resolve().parents[2]


def _spec(name: str, kind: str) -> SensorSpec:
    return SensorSpec(name=name, kind=kind, frame_id=name, extrinsic=Transform.identity(), topic=f"/sensors/{name}")


RIG = {
    s.name: s
    for s in (
        _spec("cam_front", SensorKind.CAMERA),
        _spec("radar_front", SensorKind.RADAR),
        _spec("lidar_top", SensorKind.LIDAR),
        _spec("cam_back", SensorKind.CAMERA),
    )
}


def test_default_profile_takes_every_sensor_of_the_rig() -> None:
    cfg = resolve_sensors(load_config(ROOT / "launch" / "replay.yaml"), RIG)
    assert [(s.name, s.kind, s.model) for s in cfg.sensors] == [
        ("cam_front", "camera", "yolox_nano"),  # no drive metadata: a recording of real cameras
        ("radar_front", "radar", "radar_detector"),
        ("lidar_top", "lidar", "lidar_detector"),
        ("cam_back", "camera", "yolox_nano"),
    ]
    assert cfg.trigger.sensor == "lidar_top"
    assert cfg.sensor("radar_front").transport == "grpc"
    assert cfg.sensor("lidar_top").sync_window_ms == 60
    assert cfg.resolved
    assert resolve_sensors(cfg, {}) is cfg  # resolved: nothing more to do


def test_sensor_defaults_and_trigger_from_the_profile(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "sensor_defaults:\n"
        "  camera: {model: my_camera, transport: shm, sync_window_ms: 30, max_staleness_ms: 90}\n"
        "trigger: {rate_hz: 10}\n"
    )
    cfg = resolve_sensors(load_config(profile), RIG)
    cam = cfg.sensor("cam_back")
    assert (cam.model, cam.transport, cam.sync_window_ms, cam.max_staleness_ms) == ("my_camera", "shm", 30, 90)
    assert cfg.sensor("lidar_top").model == "lidar_detector"  # kinds not named keep the built-in default
    assert cfg.trigger.rate_hz == 10 and cfg.trigger.sensor is None


def test_auto_trigger_without_a_lidar_is_the_first_camera() -> None:
    rig = {n: s for n, s in RIG.items() if s.kind != SensorKind.LIDAR}
    cfg = resolve_sensors(load_config(ROOT / "launch" / "replay.yaml"), rig)
    assert cfg.trigger.sensor == "cam_back"  # first by name


def test_listed_sensors_are_kept_as_listed(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("sensors:\n  - {name: cam_front, kind: camera, model: other}\n")
    cfg = resolve_sensors(load_config(profile), RIG)
    assert [s.name for s in cfg.sensors] == ["cam_front"]
    assert cfg.trigger.sensor == "cam_front"


def test_a_rig_without_sensors_is_an_error_naming_the_profile(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("budget: {total_ms: 100}\n")
    with pytest.raises(ConfigError) as info:
        resolve_sensors(load_config(profile), {}, where="drive x.mcap")
    assert str(info.value) == f"{profile}: sensors: the profile lists no sensors and drive x.mcap has none"


def test_runtime_without_sensors_or_rig_is_an_error() -> None:
    cfg = load_config(ROOT / "launch" / "replay.yaml")
    with pytest.raises(ConfigError, match=r"lists no sensors .* pass the source .*rig="):
        Runtime(cfg)
    runtime = Runtime(cfg, rig=RIG, fusion=None)  # not opened: no server (no fusion: no camera calibration here)
    assert [s.name for s in runtime.config.sensors] == list(RIG)


def test_auto_camera_model_follows_the_drive_s_source() -> None:
    cfg = load_config(ROOT / "launch" / "replay.yaml")
    sim = resolve_sensors(cfg, RIG, metadata={"generator": "perception sim"})
    real = resolve_sensors(cfg, RIG, metadata={"source": "nuscenes"})
    assert sim.sensor("cam_front").model == "camera_detector"
    assert real.sensor("cam_front").model == "yolox_nano"
    assert sim.sensor("lidar_top").model == real.sensor("lidar_top").model == "lidar_detector"


def test_a_registered_kind_gets_its_default_model_and_can_trigger() -> None:
    import dataclasses

    from perception.kinds import CAMERA, register_kind, unregister_kind

    register_kind(dataclasses.replace(CAMERA, name="thermal_rs", default_model="thermal_rs_detector"))
    try:
        rig = {"th": _spec("th", "thermal_rs")}
        cfg = resolve_sensors(load_config(ROOT / "launch" / "replay.yaml"), rig)
        assert [(s.name, s.kind, s.model) for s in cfg.sensors] == [("th", "thermal_rs", "thermal_rs_detector")]
        assert cfg.trigger.sensor == "th"
    finally:
        unregister_kind("thermal_rs")


def test_a_vehicle_s_cameras_get_the_real_camera_model() -> None:
    # A live rig is a vehicle's real sensors: its cameras are served the model for real cameras (the
    # COCO-trained YOLOX-Nano), never the simulator-trained CNN, which finds nothing on real images. The
    # names are written out, not read from the constants the code resolves with.
    from perception.live import LiveRuntime
    from perception.scheduler import Session
    from perception.types import SessionSource

    cfg = load_config(ROOT / "launch" / "replay.yaml")
    for session in (
        Session.assemble(cfg, SessionSource.live(RIG)),
        Runtime(cfg, rig=RIG, fusion=None).session,  # not opened: no server
        Runtime(cfg, source=SessionSource.live(RIG), fusion=None).session,
    ):
        assert [s.model for s in session.config.sensors if s.kind == "camera"] == ["yolox_nano", "yolox_nano"]
        assert session.config.sensor("lidar_top").model == "lidar_detector"
    live = LiveRuntime(cfg, RIG, fusion=None)  # not started
    assert [s.model for s in live.config.sensors if s.kind == "camera"] == ["yolox_nano", "yolox_nano"]


def test_sensors_enabled_by_a_run_choose_a_trigger_left_to_the_drive(tmp_path: Path) -> None:
    # Session.with_overrides(sensors=...) (every command's --sensors) kept the trigger chosen from all the
    # rig's sensors: the lidar, even when the run left it out. A trigger the profile names, or a rate, stays.
    from perception.scheduler import Session
    from perception.types import SessionSource

    session = Session.assemble(load_config(ROOT / "launch" / "replay.yaml"), SessionSource.live(RIG))
    assert session.config.trigger.sensor == "lidar_top"
    assert session.with_overrides(sensors=["radar_front", "cam_front"]).config.trigger.sensor == "cam_front"
    assert session.with_overrides(sensors=["radar_front"]).config.trigger.sensor == "radar_front"
    assert session.with_overrides(sensors=["lidar_top", "cam_back"]).config.trigger.sensor == "lidar_top"
    assert session.with_overrides(url="127.0.0.1:1").config.trigger.sensor == "lidar_top"
    for text, trigger in (("{sensor: lidar_top}", ("lidar_top", None)), ("{rate_hz: 10}", (None, 10))):
        profile = tmp_path / "p.yaml"
        profile.write_text(f"trigger: {text}\n")
        named = Session.assemble(load_config(profile), SessionSource.live(RIG)).with_overrides(sensors=["cam_front"])
        assert (named.config.trigger.sensor, named.config.trigger.rate_hz) == trigger
