"""Rig YAML loading: the bundled rigs, and errors that name the file and the key path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perception.errors import ConfigError
from perception.sim import SimRadarParams
from perception.sim._rig import SimCameraParams, SimLidarParams, builtin_rig_path, load_rig, parse_rig
from perception.types import SensorKind


def test_bundled_rigs_load() -> None:
    default = load_rig(builtin_rig_path("default"))
    dense = load_rig(builtin_rig_path("dense"))
    kinds = [s.kind for s in default.sensors]
    assert kinds.count(SensorKind.CAMERA) >= 2 and kinds.count(SensorKind.RADAR) == 2
    assert {s.name for s in default.sensors} == {"lidar_top", "cam_front", "cam_back", "radar_front", "radar_rear"}
    lidar = dense.sensor("lidar_top").params
    assert isinstance(lidar, SimLidarParams) and lidar.beams == 128
    # every sensor has its own clock
    assert len({(s.rate_hz, s.offset_ms) for s in default.sensors}) == len(default.sensors)


def test_camera_spec_is_optical_frame() -> None:
    rig = load_rig(builtin_rig_path("default"))
    front, back = rig.sensor("cam_front").spec, rig.sensor("cam_back").spec
    assert front.frame_id == "cam_front_optical" and front.calibration is not None
    assert front.calibration.width == 640 and front.calibration.height == 360
    # optical z (viewing direction) is base_link +x for the front camera, -x for the back camera
    z_front = front.extrinsic.rotation_matrix() @ np.array([0.0, 0.0, 1.0])
    z_back = back.extrinsic.rotation_matrix() @ np.array([0.0, 0.0, 1.0])
    assert z_front[0] > 0.99 and z_back[0] < -0.99
    # optical y (image down) is base_link -z
    assert (front.extrinsic.rotation_matrix() @ np.array([0.0, 1.0, 0.0]))[2] < -0.99
    assert front.topic == "/sensors/cam_front/image/compressed"


def test_camera_intrinsics_from_fov() -> None:
    cal = SimCameraParams(width=640, height=360, hfov_deg=90.0).calibration()
    assert cal.k[0] == pytest.approx(320.0) and cal.k[2] == 320.0 and cal.k[5] == 180.0


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rig.yaml"
    path.write_text(text)
    return path


_GOOD = """
sensors:
  - name: lidar
    kind: lidar
    mount: {xyz: [0, 0, 2]}
    rate_hz: 10
"""


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        (_GOOD + "    lidar: {beams: 32, colour: red}\n", "sensors[0].lidar.colour", "unknown key"),
        (_GOOD + "    lidar: {beams: many}\n", "sensors[0].lidar.beams", "integer"),
        (_GOOD + "    lidar: {beams: 32.5}\n", "sensors[0].lidar.beams", "integer"),
        (_GOOD.replace("rate_hz: 10", "rate_hz: fast"), "sensors[0].rate_hz", "number"),
        (_GOOD.replace("rate_hz: 10", "rate_hz: -1"), "sensors[0].rate_hz", ">="),
        (_GOOD.replace("kind: lidar", "kind: sonar"), "sensors[0].kind", "sonar"),
        (_GOOD.replace("    rate_hz: 10\n", ""), "sensors[0].rate_hz", "missing"),
        (_GOOD.replace("[0, 0, 2]", "[0, 2]"), "sensors[0].mount.xyz", "3 numbers"),
        (_GOOD + "    camera: {width: 640}\n", "sensors[0].camera", "camera parameters"),
        (_GOOD + "    lidar: {fov_up_deg: -40}\n", "sensors[0].lidar.fov_down_deg", "below"),
        (_GOOD + "extra: 1\n", "extra", "unknown key"),
        (_GOOD + _GOOD.split("sensors:\n")[1], "sensors[1].name", "duplicate"),
        ("sensors: []\n", "sensors", "non-empty"),
        ("- just\n- a list\n", "<root>", "mapping"),
        ("", "sensors", "missing"),
        (_GOOD + "source: x.yaml\n", "source", "unknown key"),
        # a launch profile given for the rig said "server: unknown key (expected one of: ego_pose_rate_hz, ...)"
        (_GOOD + "server: {url: embedded}\n", "server", "unknown key: a launch profile's section: this file is a"),
        (_GOOD.replace("name: lidar", "name: lidar top"), "sensors[0].name", "letters, digits"),
        (_GOOD.replace("rate_hz: 10", "rate_hz: 10\n    offset_ms: 150"), "sensors[0].offset_ms", "<= 100"),
        (_GOOD.replace("[0, 0, 2]", "[0, .nan, 2]"), "sensors[0].mount.xyz[1]", "finite"),
        (_GOOD.replace("[0, 0, 2]", "[0, 0, 2], roll: 1"), "sensors[0].mount.roll", "unknown key"),
        (_GOOD + "    radar: {fov_deg: 90}\n", "sensors[0].radar", "radar parameters on a lidar sensor"),
        (
            _GOOD.replace("kind: lidar", "kind: radar") + "    radar: {min_range_m: 5, max_range_m: 2}\n",
            "sensors[0].radar.min_range_m",
            "below",
        ),
        (_GOOD + "    lidar: {dropout: 2}\n", "sensors[0].lidar.dropout", "<= 1"),
        (
            _GOOD.replace("kind: lidar", "kind: camera") + "    camera: {jpeg_quality: 0}\n",
            "sensors[0].camera.jpeg_quality",
            ">= 1",
        ),
        (_GOOD + "ground_truth_rate_hz: 0\n", "ground_truth_rate_hz", ">= 0.1"),
        ("sensors: {lidar: 1}\n", "sensors", "list"),
        (_GOOD + "    params: {beams: 32}\n", "sensors[0].params", "key named after its kind"),
        (_GOOD.replace("kind: lidar", "kind: thermal"), "sensors[0].kind", "no model for sensor kind 'thermal'"),
        (_GOOD.replace("    kind: lidar\n", "") + "    lidar: {beams: 32}\n", "sensors[0].kind", "missing"),
        (_GOOD.replace("kind: lidar", "kind: [lidar]") + "    lidar: {beams: 32}\n", "sensors[0].kind", "string"),
    ],
)
def test_rig_errors_name_file_and_key(tmp_path: Path, text: str, key: str, words: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_rig(path)
    err = info.value
    assert err.file == str(path) and err.key == key
    assert words in str(err) and str(path) in str(err) and key in str(err)
    assert "\n" not in str(err)


def test_the_bundled_profile_given_for_a_rig_is_said_to_be_a_profile() -> None:
    profile = Path(__file__).resolve().parents[2] / "launch" / "replay.yaml"
    with pytest.raises(ConfigError) as info:
        load_rig(profile)
    assert info.value.key == "server" and "this file is a profile (launch/replay.yaml: --config)" in str(info.value)


def test_an_unknown_key_s_message_lists_only_keys_a_rig_may_have(tmp_path: Path) -> None:
    # It listed 'source' among them, which is refused as a key ('the file it came from'): add it, be refused.
    with pytest.raises(ConfigError) as info:
        load_rig(_write(tmp_path, _GOOD + "extra: 1\n"))
    assert str(info.value).endswith(
        "extra: unknown key (expected one of: ego_pose_rate_hz, ground_truth_rate_hz, name, sensors)"
    )


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"line \d+, column \d+: invalid YAML") as info:
        load_rig(_write(tmp_path, "sensors: [\n"))
    assert info.value.file == str(tmp_path / "rig.yaml")
    with pytest.raises(ConfigError, match="file not found") as info:
        load_rig(tmp_path / "nope.yaml")
    assert info.value.file == str(tmp_path / "nope.yaml")


def test_defaults_and_file_name() -> None:
    rig = parse_rig(
        {"sensors": [{"name": "r", "kind": "radar", "mount": {"xyz": [1, 0, 0.5]}, "rate_hz": 13}]},
        file="launch/rigs/tiny.yaml",
    )
    assert rig.name == "tiny" and rig.source == "launch/rigs/tiny.yaml" and rig.ego_pose_rate_hz == 50.0
    (radar,) = rig.sensors
    assert radar.kind == SensorKind.RADAR and radar.params == SimRadarParams()
    assert radar.mount.rpy_deg == (0.0, 0.0, 0.0) and radar.offset_ms == 0.0
    assert rig.sensor("r").spec.topic == "/sensors/r/points"
    with pytest.raises(KeyError):
        rig.sensor("nope")
