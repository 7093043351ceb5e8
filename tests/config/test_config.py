from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perception.config import RuntimeConfig, load_config, load_yaml, url_problem, with_overrides
from perception.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
sensors:
  - {name: lidar, kind: lidar, model: lidar_detector}
  - {name: cam, kind: camera, model: camera_detector, transport: shm}
trigger: {sensor: lidar}
budget: {total_ms: 100, fusion_reserve_ms: 10}
"""


def write(tmp_path: Path, text: str, name: str = "profile.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_bundled_profile_loads() -> None:
    cfg = load_config(ROOT / "launch" / "replay.yaml")
    assert isinstance(cfg, RuntimeConfig)
    assert cfg.server.embedded
    assert cfg.server.models[0] == ROOT / "models"
    # The default profile names no sensor: they come from the drive it runs on.
    assert cfg.sensors == () and not cfg.resolved
    assert cfg.sensor_defaults.of("lidar").model == "lidar_detector"


def test_good_profile_types_and_units(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, GOOD))
    assert cfg.sensors[1].transport == "shm"
    assert cfg.budget.join_ns == 90_000_000
    assert isinstance(cfg.budget.join_ns, int)
    assert cfg.sensors[0].sync_window_ns == 50_000_000
    with pytest.raises(AttributeError):
        cfg.budget.total_ms = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        (GOOD.replace("model: camera_detector", "modle: camera_detector"), "sensors[1].modle", "unknown key"),
        (GOOD.replace("model: camera_detector", "model: 3"), "sensors[1].model", "expected a string"),
        (GOOD.replace("kind: lidar", "kind: sonar"), "sensors[0].kind", "expected one of"),
        (GOOD.replace("total_ms: 100", "total_ms: -1"), "budget.total_ms", "must be > 0"),
        (GOOD.replace("fusion_reserve_ms: 10", "fusion_reserve_ms: 200"), "budget.fusion_reserve_ms", "below"),
        (GOOD.replace("fusion_reserve_ms: 10", "fusion_reserve_ms: 10, stages: {fusion: 0}"), "budget.stages", "> 0"),
        (GOOD.replace("{sensor: lidar}", "{sensor: radar}"), "trigger", "not one of the sensors"),
        (GOOD.replace("{sensor: lidar}", "{sensor: lidar, rate_hz: 10}"), "trigger", "at most one"),
        (GOOD + "pipeline: {overflow: sometimes}\n", "pipeline.overflow", "drop-oldest"),
        (GOOD + "pipeline: {max_in_flight: true}\n", "pipeline.max_in_flight", "expected an integer"),
        (GOOD.replace("- {name: lidar, kind: lidar, model: lidar_detector}\n", ""), "trigger", "not one of"),
        ("sensors: [{name: a, model: m}]\n", "sensors[0].kind", "required key is missing"),
        ("sensor_defaults: {lidar: {model: ''}}\n", "sensor_defaults.lidar.model", "non-empty"),
        ("sensor_defaults: {sonar: {model: m}}\n", "sensor_defaults.sonar", "unknown key"),
        ("sensors: 5\ntrigger: {rate_hz: 10}\n", "sensors", "expected a list"),
        ("- 1\n- 2\n", "<root>", "mapping at the top level"),
    ],
)
def test_bad_profile_names_file_and_key(tmp_path: Path, text: str, key: str, fragment: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: {key}: "), msg
    assert fragment in msg
    assert "\n" not in msg


def test_a_sensor_rig_given_for_a_profile_is_said_to_be_one() -> None:
    # Both live in launch/: the rig given to --config said "name: unknown key (expected one of: budget, ...)".
    rig = ROOT / "launch" / "rigs" / "default.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(rig)
    assert info.value.file == str(rig) and info.value.key == "name"
    assert "unknown key: a sensor rig's key: this file is a rig (launch/rigs/: perception sim --rig" in str(info.value)


def test_duplicate_sensor_names(tmp_path: Path) -> None:
    text = GOOD.replace("name: cam,", "name: lidar,")
    with pytest.raises(ConfigError, match="duplicate sensor name 'lidar'"):
        load_config(write(tmp_path, text))


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"line \d+, column \d+: invalid YAML"):
        load_config(write(tmp_path, "sensors:\n  - {name: [\n"))


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "1" + "0" * 400])
def test_a_number_that_is_not_finite_names_the_key(tmp_path: Path, value: str) -> None:
    # YAML's .nan passed every limit check (NaN > 0 is False, so no check fired): `perception config`
    # printed "total_ms": NaN, exit 0, and a run had a NaN ms budget; .inf the same; an integer too large
    # for a float was an OverflowError traceback.
    path = write(tmp_path, GOOD.replace("total_ms: 100", f"total_ms: {value}"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: budget.total_ms: expected a finite number, got "), info.value


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("budget: {total_ms: !!float abc}\n", "could not convert string to float: 'abc'"),
        ("server: {url: 2001-02-30}\n", "day is out of range for month"),
        ("budget: {total_ms: 1" + "0" * 5000 + "}\n", "Exceeds the limit (4300 digits)"),
        ("a: " + "[" * 20000 + "]" * 20000 + "\n", "nested too deeply"),
    ],
)
def test_yaml_that_pyyaml_cannot_construct_is_one_line(tmp_path: Path, text: str, words: str) -> None:
    # PyYAML raises these as ValueError / RecursionError, not YAMLError: each was a traceback.
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: invalid YAML: ") and words in msg and "\n" not in msg, msg


@pytest.mark.parametrize(
    ("text", "where", "key"),
    [
        ("ros:\n  odometry_topic: /a\nros:\n  odometry_topic: /b\n", "line 3, column 1", "'ros'"),
        ("budget: {total_ms: 100, total_ms: 50}\n", "line 1, column 25", "'total_ms'"),
        ("a: {1: x, 1.0: y}\n", "line 1, column 11", "1.0"),
    ],
)
def test_a_key_given_twice_is_refused_naming_its_line(tmp_path: Path, text: str, where: str, key: str) -> None:
    # PyYAML keeps the last of two equal keys: a second ros: section silently replaced the first
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: {where}: invalid YAML: key {key} given twice"


def test_a_merged_key_may_be_given_again(tmp_path: Path) -> None:
    # YAML's merge ('<<') gives keys that the mapping itself may override: not a key given twice
    path = write(tmp_path, "base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  x: 3\n")
    assert load_yaml(path) == {"base": {"x": 1, "y": 2}, "other": {"x": 3, "y": 2}}


def test_yaml_is_loaded_safely(tmp_path: Path) -> None:
    text = GOOD + "output: !!python/object/apply:os.system ['echo pwned']\n"
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(write(tmp_path, text))


def test_overrides(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, GOOD))
    cfg2 = with_overrides(cfg, url="10.0.0.1:8001", sensors=["cam"])
    assert cfg2.server.url == "10.0.0.1:8001"
    assert not cfg2.server.embedded
    assert [s.name for s in cfg2.active_sensors] == ["cam"]
    with pytest.raises(ConfigError, match="unknown sensor") as exc:
        with_overrides(cfg, sensors=["sonar"])
    # the option is wrong, not the profile: it named the profile's 'sensors' key, and not what there is
    assert exc.value.key == "--sensors" and exc.value.file is None
    assert exc.value.message.startswith("unknown sensor(s): sonar (the sensors: ")


def test_cli_reports_one_line_and_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("model: lidar_detector", "modle: lidar_detector"))
    proc = subprocess.run(
        [sys.executable, "-m", "perception", "config", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "sensors[0].modle: unknown key" in lines[0]
    assert "Traceback" not in proc.stderr


def test_decode_is_a_sensor_setting_with_errors_naming_the_sensor(tmp_path: Path) -> None:
    """Issue 44 item 5: where a camera's images are decoded is its sensor's ``decode`` (default auto)."""
    head = "server: {url: embedded}\n"
    cfg = load_config(write(tmp_path, head + "sensors:\n  - {name: cam, kind: camera, model: m, decode: server}\n"))
    assert cfg.sensors[0].decode == "server"
    assert load_config(write(tmp_path, head)).sensor_defaults.camera.decode == "auto"
    with pytest.raises(ConfigError, match=r"sensors\[0\]\.decode: .*sensor 'lidar_top' is a lidar"):
        load_config(write(tmp_path, head + "sensors:\n  - {name: lidar_top, kind: lidar, model: m, decode: server}\n"))
    with pytest.raises(ConfigError, match=r"sensor_defaults\.camera\.decode: expected one of 'auto', 'client'"):
        load_config(write(tmp_path, head + "sensor_defaults:\n  camera: {model: auto, decode: gpu}\n"))


@pytest.mark.parametrize("url", ["host:99999", "host:0", "not a url", "host:", ":8001", "http://host:8001", ""])
def test_a_url_of_the_wrong_form_is_refused_naming_the_option_or_key(tmp_path: Path, url: str) -> None:
    # --url host:99999 (or a profile's server.url) was taken: the run waited 10 s for a name that cannot
    # resolve, then "no answer for 10 s: server unavailable: errors resolving host:99999" (exit 1); an
    # http:// one was refused by the client as "triton.urls: ...", a key no one wrote.
    cfg = load_config(write(tmp_path, GOOD))
    with pytest.raises(ConfigError) as info:
        with_overrides(cfg, url=url)
    assert info.value.key == "--url" and repr(url) in info.value.message, info.value
    profile = write(tmp_path, GOOD + f"server: {{url: {url!r}}}\n", "url.yaml")
    with pytest.raises(ConfigError) as info:
        load_config(profile)
    assert str(info.value).startswith(f"{profile}: server.url: "), info.value
    assert info.value.message == url_problem(url), info.value  # the one check's message, for "" too
    with pytest.raises(ConfigError, match=r"server\.replicas: "):
        load_config(write(tmp_path, GOOD + f"server: {{url: 'h:1', replicas: [{url!r}]}}\n", "replicas.yaml"))


@pytest.mark.parametrize("url", ["embedded", "127.0.0.1:8001", "[::1]:8001", "triton.local:1", "unix:/run/triton.sock"])
def test_a_url_of_a_good_form_is_taken(tmp_path: Path, url: str) -> None:
    cfg = with_overrides(load_config(write(tmp_path, GOOD)), url=url)
    assert cfg.server.url == url
