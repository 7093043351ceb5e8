"""Which topic carries which sensor: defaults from the sensor names, overrides from the profile."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from perception.config import RosConfig
from perception.drives import topic_for
from perception.errors import ConfigError
from perception.kinds import kind_def
from perception.types import SensorSpec

__all__ = ["SensorTopics", "sensor_topics"]


@dataclass(frozen=True, slots=True)
class SensorTopics:
    sensor: str
    kind: str
    data: str  # PointCloud2, CompressedImage or Image
    image: Literal["compressed", "raw"] | None = None  # image kinds only
    camera_info: str | None = None  # image kinds only: image_transport's sibling camera_info


def _camera_info(topic: str) -> str:
    base = topic.removesuffix("/compressed")
    return f"{base.rpartition('/')[0]}/camera_info"


def sensor_topics(rig: Mapping[str, SensorSpec], ros: RosConfig, *, file: str | None = None) -> dict[str, SensorTopics]:
    """Each sensor's topics: ``ros.topics`` where it names the sensor, else ``/sensors/<name>/points``
    or ``/sensors/<name>/image/compressed``; a name the rig lacks, or a default that is no ROS 2 topic name
    (a sensor named so), is a :class:`ConfigError`."""
    unknown = sorted(set(ros.topics) - set(rig))
    if unknown:
        raise ConfigError(
            f"no such sensor in the rig: {', '.join(unknown)} (it has: {', '.join(rig)})", file=file, key="ros.topics"
        )
    resolved = {name: ros.topics.get(name, topic_for(spec.kind, name)) for name, spec in rig.items()}
    try:  # a default made of a sensor's name, checked as the profile's topics are
        dataclasses.replace(ros, topics=resolved)
    except ValueError as exc:
        key, _, why = str(exc).partition(": ")
        raise ConfigError(f"{why} (set the sensor's topic in ros.topics)", file=file, key=f"ros.{key}") from None
    out: dict[str, SensorTopics] = {}
    for name, spec in rig.items():
        topic = resolved[name]
        if kind_def(spec.kind).is_image:
            image: Literal["compressed", "raw"] = "compressed" if topic.endswith("/compressed") else "raw"
            out[name] = SensorTopics(name, spec.kind, topic, image, _camera_info(topic))
        else:
            out[name] = SensorTopics(name, spec.kind, topic)
    return out
