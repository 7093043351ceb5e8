"""Properties of profile errors (hypothesis): whatever one value of a valid profile is changed to, the
profile loads or fails with one ``ConfigError`` line naming the file and the key it changed (or, for a
check across keys, the section that holds them) -- never another exception, never a traceback."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perception.config import load_config
from perception.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

PROFILE: dict[str, Any] = {
    **yaml.safe_load((ROOT / "launch" / "replay.yaml").read_text()),
    "sensors": [
        {"name": "lidar", "kind": "lidar", "model": "lidar_detector", "sync_window_ms": 60},
        {"name": "cam", "kind": "camera", "model": "camera_detector", "transport": "shm"},
    ],
    "trigger": {"sensor": "lidar"},
}
PROFILE["server"]["models"] = [str(ROOT / "models")]

#: Checks that span several keys name the section holding them, not the key that was changed.
CROSS_KEY = {"trigger", "sensors", "budget", "pipeline", "live", "fusion", "server"}


def _leaves(data: Any, path: str = "") -> list[tuple[str, tuple[Any, ...]]]:
    """``(key path as errors name it, index path)`` of every scalar or empty container in ``data``."""
    if isinstance(data, dict) and data:
        return [
            leaf
            for k, v in data.items()
            for leaf in [(p, (k, *i)) for p, i in _leaves(v, f"{path}.{k}" if path else str(k))]
        ]
    if isinstance(data, list) and data:
        return [leaf for n, v in enumerate(data) for leaf in [(p, (n, *i)) for p, i in _leaves(v, f"{path}[{n}]")]]
    return [(path, ())]


LEAVES = _leaves(PROFILE)
BAD_VALUES = st.sampled_from(["bogus", "", -1, 0, 10**12, -0.5, True, None, [], {}, [1, 2], {"x": 1}, "12ms"])


def _set(data: Any, index: tuple[Any, ...], value: Any) -> None:
    for i in index[:-1]:
        data = data[i]
    data[index[-1]] = value


def _copy() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(yaml.safe_dump(PROFILE))
    return loaded


def _load(data: dict[str, Any]) -> tuple[Path, ConfigError | None]:
    path = Path(tempfile.mkdtemp()) / "profile.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        load_config(path)
    except ConfigError as err:
        return path, err
    return path, None


def test_the_profile_the_properties_start_from_is_valid() -> None:
    _, err = _load(_copy())
    assert err is None, err


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(leaf=st.sampled_from(LEAVES), value=BAD_VALUES)
def test_any_changed_value_loads_or_names_file_and_key(leaf: tuple[str, tuple[Any, ...]], value: Any) -> None:
    key, index = leaf
    data = _copy()
    _set(data, index, value)
    path, err = _load(data)
    if err is None:
        return  # a value that happens to be valid there
    msg = str(err)
    assert "\n" not in msg and "Traceback" not in msg
    assert err.file == str(path) and msg.startswith(f"{path}: {err.key}: "), msg
    # the error names the changed key, a key above it, or a part of the value put there (a list's item)
    assert key == err.key or key.startswith(f"{err.key}.") or key.startswith(f"{err.key}[") or (
        err.key.startswith((f"{key}.", f"{key}[")) or err.key in CROSS_KEY
    ), (key, msg)


@settings(max_examples=100, deadline=None)
@given(
    section=st.sampled_from([p for p, _ in _leaves(PROFILE)]).map(lambda p: re.sub(r"(\.[^.\[]+|\[\d+\])$", "", p)),
    name=st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
)
def test_an_unknown_key_is_named_with_its_section(section: str, name: str) -> None:
    data = _copy()
    target: Any = data
    for part in re.findall(r"[^.\[\]]+", section):
        target = target[int(part)] if part.isdigit() else target[part]
    if not isinstance(target, dict) or name in target:
        return
    target[name] = 1
    path, err = _load(data)
    if err is None:
        pytest.fail(f"unknown key {section}.{name} was accepted")
    expected = f"{section}.{name}" if section else name
    assert str(err).startswith(f"{path}: {expected}: unknown key"), str(err)
