"""The one YAML-to-typed-config converter: enums, fixed-length tuples, errors pointing below a dataclass."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from perception.config import from_data
from perception.errors import ConfigError
from perception.types import SensorKind


@dataclass(frozen=True, slots=True)
class _Item:
    kind: SensorKind
    xyz: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class _Doc:
    items: tuple[_Item, ...]

    def __post_init__(self) -> None:
        kinds = [i.kind for i in self.items]
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"items[{len(kinds) - 1}].kind: repeated kind")


def test_enum_by_value_and_fixed_length_tuple() -> None:
    doc = from_data(_Doc, {"items": [{"kind": "radar", "xyz": [1, 2, 3.5]}, {"kind": "camera"}]})
    assert doc.items[0] == _Item(SensorKind.RADAR, (1.0, 2.0, 3.5))
    assert doc.items[1].kind == SensorKind.CAMERA and isinstance(doc.items[0].xyz[0], float)


@pytest.mark.parametrize(
    ("data", "key", "words"),
    [
        ({"items": [{"kind": "sonar"}]}, "items[0].kind", "one of 'camera', 'lidar', 'radar', got str 'sonar'"),
        ({"items": [{"kind": 1}]}, "items[0].kind", "got int 1"),
        ({"items": [{"kind": "lidar", "xyz": [1, 2]}]}, "items[0].xyz", "a list of 3 numbers, got a list of 2"),
        ({"items": [{"kind": "lidar", "xyz": [1, 2, "x"]}]}, "items[0].xyz[2]", "expected a number"),
        ({"items": [{"kind": "lidar"}, {"kind": "lidar"}]}, "items[1].kind", "repeated kind"),
    ],
)
def test_errors_name_the_key_path(data: object, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_data(_Doc, data, file="doc.yaml")
    assert info.value.key == key and info.value.file == "doc.yaml" and words in str(info.value)
