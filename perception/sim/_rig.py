"""Sensor rigs for the simulator: YAML (``launch/rigs/*.yaml``) -> validated :class:`RigConfig`.

A rig file looks like::

    name: default
    ego_pose_rate_hz: 50          # optional
    ground_truth_rate_hz: 10      # optional; default: at the first lidar's capture times
    sensors:
      - name: lidar_top
        kind: lidar               # lidar | radar | camera, or a kind given a model by register_sim_kind
        mount: {xyz: [1.0, 0.0, 1.9], rpy_deg: [0, 0, 0]}
        rate_hz: 10
        offset_ms: 4.0            # time of the first capture after t=0
        jitter_ms: 0.5            # 1-sigma capture-time jitter (clipped at 3 sigma)
        lidar: {beams: 32, fov_up_deg: 10, fov_down_deg: -30, azimuth_step_deg: 0.4}

A camera's ``mount.rpy_deg`` orients its *body* (x forward, y left, z up, like ``base_link``); the
optical frame (z forward, x right, y down) is derived from it, so ``[0, 0, 180]`` looks backwards.
Read with :func:`perception.config.load_yaml` and built by :func:`perception.config.from_data` (the
profiles' converter) into the frozen dataclasses below, whose ``__post_init__`` holds the range checks:
unknown keys, wrong types and out-of-range values raise :class:`ConfigError` naming the file and the
key path (``sensors[2].lidar.beams``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from perception.config import RuntimeConfig, from_data, load_yaml, reject_duplicates
from perception.drives import topic_for
from perception.errors import ConfigError
from perception.kinds import kind_def
from perception.sim._kinds import sim_kind, sim_kinds
from perception.types import CameraCalibration, SensorSpec, Transform

__all__ = [
    "RigConfig",
    "SimCameraParams",
    "SimLidarParams",
    "SimMount",
    "SimRadarParams",
    "SimSensor",
    "builtin_rig_path",
    "load_rig",
    "parse_rig",
]

#: Rotation base_link-aligned camera body -> optical frame (columns: optical x, y, z in body axes).
BODY_FROM_OPTICAL = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])

#: Where the bundled rigs live (the repository's ``launch/rigs``).
RIGS_DIR = Path(__file__).resolve().parents[2] / "launch" / "rigs"


def builtin_rig_path(name: str) -> Path:
    """Path of a bundled rig (``default``, ``dense``)."""
    return RIGS_DIR / f"{name}.yaml"


def _check_range(name: str, value: float | None, lo: float, hi: float, *, below: float | None = None) -> None:
    """``ValueError("name: ...")`` unless ``lo <= value <= hi`` (``None``: not set, fine)."""
    if value is None:
        return
    if not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    if value < lo:
        raise ValueError(f"{name}: must be >= {lo:g}, got {value:g}")
    if value > hi:
        raise ValueError(f"{name}: must be <= {hi:g}, got {value:g}")


def _check_fields(params: object, bounds: Mapping[str, tuple[float, float]]) -> None:
    for f in fields(params):  # type: ignore[arg-type]
        _check_range(f.name, getattr(params, f.name), *bounds[f.name])


@dataclass(frozen=True, slots=True)
class SimLidarParams:
    """Spinning multi-beam lidar. Beams are evenly spaced in elevation over ``[fov_down, fov_up]``."""

    beams: int = 32
    fov_up_deg: float = 10.0
    fov_down_deg: float = -30.0
    azimuth_step_deg: float = 0.4
    min_range_m: float = 1.0
    max_range_m: float = 100.0
    range_noise_m: float = 0.02
    dropout: float = 0.01  # base probability of a lost return (weak returns drop more)
    quantization_m: float = 1.0 / 256  # output xyz resolution (keeps drives compressible), 0 = off

    def __post_init__(self) -> None:
        _check_fields(self, _LIDAR_BOUNDS)
        if self.fov_down_deg >= self.fov_up_deg:
            raise ValueError("fov_down_deg: must be below fov_up_deg")
        if self.min_range_m >= self.max_range_m:
            raise ValueError("min_range_m: must be below max_range_m")


_LIDAR_BOUNDS: Mapping[str, tuple[float, float]] = {
    "beams": (1, 512),
    "fov_up_deg": (-90, 90),
    "fov_down_deg": (-90, 90),
    "azimuth_step_deg": (0.01, 10),
    "min_range_m": (0, 1000),
    "max_range_m": (0.1, 1000),
    "range_noise_m": (0, 10),
    "dropout": (0, 1),
    "quantization_m": (0, 1),
}


@dataclass(frozen=True, slots=True)
class SimRadarParams:
    """Automotive radar: few returns per object, Doppler, poor angular accuracy, clutter."""

    fov_deg: float = 120.0
    min_range_m: float = 0.5
    max_range_m: float = 90.0
    range_noise_m: float = 0.12
    azimuth_noise_deg: float = 1.5
    elevation_noise_deg: float = 5.0
    lateral_spread_m: float = 0.4  # extra tangential scatter of returns on an object
    velocity_noise_mps: float = 0.1
    rcs_noise_db: float = 2.0
    false_alarms_per_scan: float = 4.0
    detection_probability: float = 0.92

    def __post_init__(self) -> None:
        _check_fields(self, _RADAR_BOUNDS)
        if self.min_range_m >= self.max_range_m:
            raise ValueError("min_range_m: must be below max_range_m")


_RADAR_BOUNDS: Mapping[str, tuple[float, float]] = {
    "fov_deg": (1, 360),
    "min_range_m": (0, 1000),
    "max_range_m": (0.1, 1000),
    "range_noise_m": (0, 10),
    "azimuth_noise_deg": (0, 45),
    "elevation_noise_deg": (0, 90),
    "lateral_spread_m": (0, 20),
    "velocity_noise_mps": (0, 20),
    "rcs_noise_db": (0, 30),
    "false_alarms_per_scan": (0, 1000),
    "detection_probability": (0, 1),
}


@dataclass(frozen=True, slots=True)
class SimCameraParams:
    """Pinhole camera: intrinsics from ``hfov_deg`` unless ``fx`` (and optionally fy, cx, cy) given.

    ``render_scale`` < 1 renders at that fraction of the resolution and upsamples (bilinear) to
    ``width x height``: much cheaper, slightly soft images (the published calibration is unchanged).
    """

    width: int = 640
    height: int = 360
    hfov_deg: float = 90.0
    fx: float | None = None
    fy: float | None = None
    cx: float | None = None
    cy: float | None = None
    jpeg_quality: int = 80
    noise_sigma: float = 2.0
    render_scale: float = 1.0

    def __post_init__(self) -> None:
        _check_fields(self, _CAMERA_BOUNDS)

    def calibration(self) -> CameraCalibration:
        fx = self.fx if self.fx is not None else (self.width / 2) / math.tan(math.radians(self.hfov_deg) / 2)
        fy = self.fy if self.fy is not None else fx
        cx = self.cx if self.cx is not None else self.width / 2
        cy = self.cy if self.cy is not None else self.height / 2
        return CameraCalibration(
            width=self.width,
            height=self.height,
            k=(fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0),
            d=(0.0, 0.0, 0.0, 0.0, 0.0),
        )


_CAMERA_BOUNDS: Mapping[str, tuple[float, float]] = {
    "width": (16, 8192),
    "height": (16, 8192),
    "hfov_deg": (1, 170),
    "fx": (1, 1e6),
    "fy": (1, 1e6),
    "cx": (-1e5, 1e5),
    "cy": (-1e5, 1e5),
    "jpeg_quality": (1, 100),
    "noise_sigma": (0, 100),
    "render_scale": (0.1, 1.0),
}


@dataclass(frozen=True, slots=True)
class SimMount:
    """Where a sensor sits: ``base_link <- sensor body``, position (m) and roll, pitch, yaw (degrees)."""

    xyz: tuple[float, float, float]
    rpy_deg: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        for name, values in (("xyz", self.xyz), ("rpy_deg", self.rpy_deg)):
            for i, v in enumerate(values):
                _check_range(f"{name}[{i}]", v, -math.inf, math.inf)


@dataclass(frozen=True, slots=True)
class SimSensor:
    """One simulated sensor: its published :class:`SensorSpec` plus clock and model parameters.

    ``params`` is an instance of its kind's parameter class (:class:`~perception.sim._kinds.SimKind`:
    ``SimLidarParams`` for a lidar...), the kind's defaults when not given. In a rig file it is the key
    named after the kind (``lidar: {beams: 32}``).
    """

    name: str
    kind: str
    mount: SimMount
    rate_hz: float
    offset_ms: float = 0.0  # time of the first capture after t=0
    jitter_ms: float = 0.0  # 1-sigma capture-time jitter (clipped at 3 sigma)
    params: Any = None

    def __post_init__(self) -> None:
        if not self.name.replace("_", "").isalnum():
            raise ValueError(f"name: sensor names are letters, digits and '_', got {self.name!r}")
        _check_range("rate_hz", self.rate_hz, 0.1, 1000)
        _check_range("offset_ms", self.offset_ms, 0, 1000.0 / self.rate_hz)
        _check_range("jitter_ms", self.jitter_ms, 0, 100.0 / self.rate_hz)
        cls = sim_kind(self.kind).params
        if self.params is None:
            object.__setattr__(self, "params", cls())  # frozen: the one place the defaults are filled in
        elif not isinstance(self.params, cls):
            got = type(self.params).__name__
            raise ValueError(f"{self.kind}: a {self.kind} sensor takes {cls.__name__}, got {got}")

    @property
    def is_image(self) -> bool:
        """Image kinds publish in an optical frame (z forward, x right, y down) with a calibration."""
        return kind_def(self.kind).is_image

    @property
    def body(self) -> Transform:
        """``base_link <- sensor body`` (x forward for every kind)."""
        rpy = tuple(math.radians(a) for a in self.mount.rpy_deg)
        return Transform.from_xyz_rpy(self.mount.xyz, rpy)  # type: ignore[arg-type]

    @property
    def extrinsic(self) -> Transform:
        """``base_link <- sensor frame`` (optical frame for cameras)."""
        body = self.body
        if not self.is_image:
            return body
        m = body.matrix()
        m[:3, :3] = m[:3, :3] @ BODY_FROM_OPTICAL
        return Transform.from_matrix(m)

    @property
    def frame_id(self) -> str:
        return f"{self.name}_optical" if self.is_image else self.name

    @property
    def spec(self) -> SensorSpec:
        cal: CameraCalibration | None = self.params.calibration() if self.is_image else None
        return SensorSpec(
            name=self.name,
            kind=self.kind,
            frame_id=self.frame_id,
            extrinsic=self.extrinsic,
            topic=topic_for(self.kind, self.name),
            calibration=cal,
            rate_hz=self.rate_hz,
        )


@dataclass(frozen=True, slots=True)
class RigConfig:
    name: str
    sensors: tuple[SimSensor, ...]
    ego_pose_rate_hz: float = 50.0
    ground_truth_rate_hz: float | None = None  # None: at the first lidar's capture times (10 Hz if none)
    #: The file it came from (set by :func:`parse_rig`, never a key of the file).
    source: str = dataclasses.field(default="<builtin>", metadata={"yaml": False})

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name: expected a non-empty string")
        if not self.sensors:
            raise ValueError("sensors: expected a non-empty list of sensors")
        reject_duplicates([s.name for s in self.sensors], "sensors", "name", "sensor name")
        _check_range("ego_pose_rate_hz", self.ego_pose_rate_hz, 1, 1000)
        _check_range("ground_truth_rate_hz", self.ground_truth_rate_hz, 0.1, 1000)

    @property
    def specs(self) -> tuple[SensorSpec, ...]:
        return tuple(s.spec for s in self.sensors)

    def sensor(self, name: str) -> SimSensor:
        for s in self.sensors:
            if s.name == name:
                return s
        raise KeyError(name)


# ---------------------------------------------------------------------------------------------
# loading: perception.config's YAML reader and converter, the checks above in __post_init__
# ---------------------------------------------------------------------------------------------


#: A launch profile's sections (not its sensors, which a rig has too).
_PROFILE_SECTIONS = frozenset(f.name for f in fields(RuntimeConfig)) - {"sensors", "source"}


def parse_rig(raw: object, *, file: str = "<rig>") -> RigConfig:
    """Validate a rig document already loaded from YAML (``name`` defaults to the file's stem)."""
    data = {} if raw is None else raw
    if isinstance(data, Mapping):
        profile = [key for key in data if key in _PROFILE_SECTIONS]
        if profile:  # the one file given for the other: "server: unknown key (expected one of: ...)"
            raise ConfigError(
                "unknown key: a launch profile's section: this file is a profile (launch/replay.yaml: --config), "
                "not a sensor rig (launch/rigs/)",
                file=file,
                key=str(profile[0]),
            )
        data = {"name": Path(file).stem, **data}
        if isinstance(data.get("sensors"), list):
            data["sensors"] = [_with_params(s, i, file) for i, s in enumerate(data["sensors"])]
    return dataclasses.replace(from_data(RigConfig, data, file=file), source=file)


def _with_params(sensor: object, i: int, file: str) -> object:
    """A sensor entry with its kind's key (``lidar: {...}``) built into ``params`` by the kind's class."""
    if not isinstance(sensor, Mapping):
        return sensor  # the converter names the problem
    out = dict(sensor)
    if "params" in out:
        raise ConfigError(
            "unknown key (a sensor's parameters go under the key named after its kind, e.g. lidar: {...})",
            file=file,
            key=f"sensors[{i}].params",
        )
    kind = out.get("kind")
    if kind is None:
        raise ConfigError("required key is missing", file=file, key=f"sensors[{i}].kind")
    if not isinstance(kind, str):
        return out  # the converter names the problem
    for key in [k for k in out if k in sim_kinds()]:
        if key != kind:
            raise ConfigError(f"{key} parameters on a {kind} sensor", file=file, key=f"sensors[{i}].{key}")
        out["params"] = from_data(sim_kind(key).params, out.pop(key), file=file, path=f"sensors[{i}].{key}")
    return out


def load_rig(path: str | os.PathLike[str]) -> RigConfig:
    """Load and validate a rig YAML file (``yaml.safe_load``)."""
    return parse_rig(load_yaml(Path(path)), file=str(path))
