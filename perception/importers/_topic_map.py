"""``topics.yaml``: how the topics of a ROS 2 bag map onto the sensors of a drive.

::

    base_frame: base_link          # optional; the vehicle frame (drive's base_link)
    world_frame: map               # optional; default: 'map' if /tf reaches base_link from it, else 'odom'
    tf_topic: /tf                  # optional
    tf_static_topic: /tf_static    # optional
    sensors:
      - name: lidar_top            # drive sensor name (also its frame in the drive)
        kind: lidar                # lidar | radar | camera
        topic: /velodyne_points    # sensor_msgs/msg/PointCloud2
        intensity: intensity       # optional; default 'intensity' if the cloud has it, else 0
        rate_hz: 10                # optional; default: measured from the bag
      - name: radar_front
        kind: radar
        topic: /radar_front/points # sensor_msgs/msg/PointCloud2
        velocity: [vx_comp, vy_comp]   # or  radial_velocity: doppler
        rcs: rcs                   # optional; default 'rcs' if the cloud has it, else 0
        compensate_ego_motion: false   # true when the velocity is relative to the moving sensor
      - name: cam_front
        kind: camera
        topic: /cam_front/image_raw    # sensor_msgs/msg/Image or .../CompressedImage
        camera_info: /cam_front/camera_info   # optional; default: <image namespace>/camera_info
        frame: cam_front_optical   # optional; TF frame of the data instead of header.frame_id

Loaded with :func:`perception.config.load_yaml` + :func:`perception.config.from_data`, so a wrong
key or type is a :class:`ConfigError` naming the file and the key path.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from perception.config import from_data, load_yaml
from perception.errors import ConfigError

__all__ = ["TOPIC_MAP_HELP", "Ros2Sensor", "TopicMap", "check_unique", "load_topic_map"]

#: The format description above, for ``--help``.
TOPIC_MAP_HELP: str = __doc__ or ""

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")


def _topic(key: str, value: str | None) -> None:
    if value is not None and (not value.startswith("/") or value.rstrip("/") != value or " " in value):
        raise ValueError(f"{key}: must be an absolute ROS topic like /ns/name, got {value!r}")


@dataclass(frozen=True, slots=True)
class Ros2Sensor:
    """One mapped sensor. Kind-specific keys are refused on the other kinds."""

    name: str
    kind: Literal["camera", "lidar", "radar"]
    topic: str
    frame: str | None = None
    rate_hz: float | None = None
    camera_info: str | None = None
    intensity: str | None = None
    radial_velocity: str | None = None
    velocity: tuple[str, ...] | None = None
    rcs: str | None = None
    compensate_ego_motion: bool = False

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"name: must be letters, digits, '_' or '-', got {self.name!r}")
        _topic("topic", self.topic)
        _topic("camera_info", self.camera_info)
        if self.frame is not None and not self.frame.strip("/"):
            raise ValueError("frame: must be a non-empty frame id")
        if self.rate_hz is not None and not (math.isfinite(self.rate_hz) and 0 < self.rate_hz <= 100_000):
            raise ValueError(f"rate_hz: must be a positive number, got {self.rate_hz}")
        only = {
            "camera_info": ("camera", self.camera_info is not None),
            "intensity": ("lidar", self.intensity is not None),
            "radial_velocity": ("radar", self.radial_velocity is not None),
            "velocity": ("radar", self.velocity is not None),
            "rcs": ("radar", self.rcs is not None),
            "compensate_ego_motion": ("radar", self.compensate_ego_motion),
        }
        for key, (kind, given) in only.items():
            if given and self.kind != kind:
                raise ValueError(f"{key}: only applies to {kind} sensors (this one is a {self.kind})")
        if self.kind == "radar":
            if (self.radial_velocity is None) == (self.velocity is None):
                raise ValueError(
                    "radial_velocity: a radar needs exactly one of 'radial_velocity: <field>' (e.g. doppler) "
                    "or 'velocity: [<vx field>, <vy field>]' (e.g. [vx_comp, vy_comp])"
                )
            if self.velocity is not None and (len(self.velocity) != 2 or len(set(self.velocity)) != 2):
                raise ValueError(f"velocity: expected two different field names [vx, vy], got {list(self.velocity)}")


@dataclass(frozen=True, slots=True)
class TopicMap:
    sensors: tuple[Ros2Sensor, ...]
    base_frame: str = "base_link"
    world_frame: str | None = None
    tf_topic: str = "/tf"
    tf_static_topic: str = "/tf_static"
    #: The YAML file it came from (for error messages); not a YAML key.
    source: Path | None = dataclasses.field(default=None, metadata={"yaml": False})

    def __post_init__(self) -> None:
        if not self.sensors:
            raise ValueError("sensors: map at least one sensor")
        if not self.base_frame.strip("/"):
            raise ValueError("base_frame: must be a non-empty frame id")
        if self.world_frame is not None and not self.world_frame.strip("/"):
            raise ValueError("world_frame: must be a non-empty frame id")
        _topic("tf_topic", self.tf_topic)
        _topic("tf_static_topic", self.tf_static_topic)

    def key(self, index: int, field: str) -> str:
        """Key path of a sensor's field, for error messages."""
        return f"sensors[{index}].{field}"

    def error(self, message: str, key: str) -> ConfigError:
        return ConfigError(message, file=str(self.source) if self.source else None, key=key)


def check_unique(tmap: TopicMap) -> None:
    """Sensor names and topics must be unique (a ConfigError naming the second occurrence)."""
    names: dict[str, int] = {}
    topics: dict[str, int] = {}
    for i, s in enumerate(tmap.sensors):
        if s.name in names:
            raise tmap.error(f"duplicate sensor name {s.name!r} (also sensors[{names[s.name]}])", tmap.key(i, "name"))
        if s.topic in topics:
            raise tmap.error(f"topic {s.topic} is mapped twice (also sensors[{topics[s.topic]}])", tmap.key(i, "topic"))
        names[s.name] = i
        topics[s.topic] = i


def load_topic_map(path: str | Path) -> TopicMap:
    """Load and validate a ``topics.yaml`` (errors: :class:`ConfigError` with file and key path)."""
    p = Path(path)
    data = load_yaml(p)
    if not isinstance(data, Mapping):
        raise ConfigError("expected a mapping at the top level", file=str(p), key="<root>")
    tmap = dataclasses.replace(from_data(TopicMap, data, file=p), source=p)
    check_unique(tmap)
    return tmap
