"""Names a profile gives that nothing knows are ConfigErrors at load, naming the file and key: a second
fault on one model (the last one won, silently), a fault on a model no sensor uses (it never applied), a
required sensor that is not configured (``perception config`` said ok; replay refused it), and
``source`` (the profile's own file, set by the loader: a ``source:`` key was dropped without a word) and
``output`` (accepted and never used)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perception.config import load_config, resolve_sensors
from perception.errors import ConfigError
from perception.types import SensorKind, SensorSpec, Transform

SENSORS = "sensors: [{name: lidar_top, kind: lidar, model: lidar_detector}]\ntrigger: {rate_hz: 10}\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        (
            "faults:\n  - {model: lidar_detector, delay_ms: 30}\n  - {model: lidar_detector, error_probability: 0.5}\n",
            "faults[1].model",
            "duplicate fault model 'lidar_detector' (also faults[0])",
        ),
        (
            SENSORS + "faults: [{model: lidar_detector, delay_ms: 5}, {model: radar_detector, delay_ms: 5}]\n",
            "faults[1].model",
            "no sensor uses model 'radar_detector' (the sensors' models: lidar_detector)",
        ),
        (
            SENSORS + "pipeline: {required_sensors: [zz]}\n",
            "pipeline.required_sensors",
            "'zz' is not a configured sensor (configured: lidar_top)",
        ),
        ("source: 5\nsensors: []\n", "source", "unknown key: the profile's own file is its source"),
        ("source: other.yaml\n", "source", "unknown key"),
        # accepted and never used: a run's outputs are the command line's
        ("output: {dir: results, write_fused_mcap: false}\n", "output", "--out DIR"),
        ("output: {}\n", "output", "--no-fused-mcap"),
    ],
)
def test_an_unknown_name_is_a_config_error_at_load(tmp_path: Path, text: str, key: str, fragment: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.file == str(path) and info.value.key == key, str(info.value)
    assert fragment in info.value.message


def test_the_unknown_key_message_does_not_offer_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, "sourc: 5\n"))
    assert "sensors" in info.value.message and "source" not in info.value.message


def test_the_loaded_profile_still_knows_its_file(tmp_path: Path) -> None:
    path = _write(tmp_path, SENSORS + "faults: [{model: lidar_detector, delay_ms: 5}]\n")
    cfg = load_config(path)
    assert cfg.source == path and [f.model for f in cfg.faults] == ["lidar_detector"]


def test_names_checked_against_the_drive_s_sensors(tmp_path: Path) -> None:
    # a profile that leaves its sensors to the drive: checked once they are known
    rig = {"lidar_top": SensorSpec("lidar_top", SensorKind.LIDAR, "lidar_top", Transform.identity(), "/l")}
    path = _write(tmp_path, "faults: [{model: camera_detector, delay_ms: 5}]\n")
    with pytest.raises(ConfigError) as info:
        resolve_sensors(load_config(path), rig, where="drive d.mcap")
    assert info.value.file == str(path) and info.value.key == "faults[0].model", str(info.value)
    assert "no sensor uses model 'camera_detector'" in info.value.message and "drive d.mcap" in info.value.message
    path = _write(tmp_path, "pipeline: {required_sensors: [cam_front]}\n")
    with pytest.raises(ConfigError) as info:
        resolve_sensors(load_config(path), rig, where="drive d.mcap")
    assert info.value.key == "pipeline.required_sensors", str(info.value)
    assert "'cam_front' is not a configured sensor (configured: lidar_top)" in info.value.message
    resolve_sensors(load_config(_write(tmp_path, "faults: [{model: lidar_detector, delay_ms: 5}]\n")), rig)
