"""Sensor rigs for the simulator: YAML (``launch/rigs/*.yaml``) -> validated :class:`RigConfig`.

A rig file looks like::

    name: default
    ego_pose_rate_hz: 50          # optional
    ground_truth_rate_hz: 10      # optional; default: at the first lidar's capture times
    sensors:
      - name: lidar_top
        kind: lidar               # lidar | radar | camera
        mount: {xyz: [1.0, 0.0, 1.9], rpy_deg: [0, 0, 0]}
        rate_hz: 10
        offset_ms: 4.0            # time of the first capture after t=0
        jitter_ms: 0.5            # 1-sigma capture-time jitter (clipped at 3 sigma)
        lidar: {beams: 32, fov_up_deg: 10, fov_down_deg: -30, azimuth_step_deg: 0.4}

A camera's ``mount.rpy_deg`` orients its *body* (x forward, y left, z up, like ``base_link``); the
optical frame (z forward, x right, y down) is derived from it, so ``[0, 0, 180]`` looks backwards.
Unknown keys and wrong types raise :class:`ConfigError` naming the file and the key path.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import yaml

from perception.drives import topic_for
from perception.errors import ConfigError
from perception.types import CameraCalibration, SensorKind, SensorSpec, Transform

__all__ = [
    "RigConfig",
    "SimCameraParams",
    "SimLidarParams",
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


SimParams = SimLidarParams | SimRadarParams | SimCameraParams
_PARAMS: Mapping[SensorKind, type[SimLidarParams] | type[SimRadarParams] | type[SimCameraParams]] = {
    SensorKind.LIDAR: SimLidarParams,
    SensorKind.RADAR: SimRadarParams,
    SensorKind.CAMERA: SimCameraParams,
}


@dataclass(frozen=True, slots=True)
class SimSensor:
    """One simulated sensor: its published :class:`SensorSpec` plus clock and model parameters."""

    name: str
    kind: SensorKind
    xyz: tuple[float, float, float]
    rpy_deg: tuple[float, float, float]
    rate_hz: float
    offset_ms: float
    jitter_ms: float
    params: SimParams

    @property
    def body(self) -> Transform:
        """``base_link <- sensor body`` (x forward for every kind)."""
        return Transform.from_xyz_rpy(self.xyz, tuple(math.radians(a) for a in self.rpy_deg))  # type: ignore[arg-type]

    @property
    def extrinsic(self) -> Transform:
        """``base_link <- sensor frame`` (optical frame for cameras)."""
        body = self.body
        if self.kind is not SensorKind.CAMERA:
            return body
        m = body.matrix()
        m[:3, :3] = m[:3, :3] @ BODY_FROM_OPTICAL
        return Transform.from_matrix(m)

    @property
    def frame_id(self) -> str:
        return f"{self.name}_optical" if self.kind is SensorKind.CAMERA else self.name

    @property
    def spec(self) -> SensorSpec:
        cal = self.params.calibration() if isinstance(self.params, SimCameraParams) else None
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
    source: str = "<builtin>"

    @property
    def specs(self) -> tuple[SensorSpec, ...]:
        return tuple(s.spec for s in self.sensors)

    def sensor(self, name: str) -> SimSensor:
        for s in self.sensors:
            if s.name == name:
                return s
        raise KeyError(name)


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------

T = TypeVar("T")


class _Ctx:
    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(message, file=self.file, key=key or "<root>")

    def mapping(self, value: object, key: str, allowed: Sequence[str], required: Sequence[str] = ()) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {type(value).__name__}")
        for k in value:
            if not isinstance(k, str) or k not in allowed:
                raise self.fail(_join(key, str(k)), f"unknown key (allowed: {', '.join(allowed)})")
        for k in required:
            if k not in value:
                raise self.fail(_join(key, k), "missing required key")
        return value

    def number(self, value: object, key: str, *, lo: float | None = None, hi: float | None = None,
               lo_open: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(key, f"expected a number, got {value!r}")
        v = float(value)
        if lo is not None and (v < lo or (lo_open and v == lo)):
            raise self.fail(key, f"must be {'>' if lo_open else '>='} {lo:g}, got {v:g}")
        if hi is not None and v > hi:
            raise self.fail(key, f"must be <= {hi:g}, got {v:g}")
        return v

    def integer(self, value: object, key: str, *, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, got {value!r}")
        if not lo <= value <= hi:
            raise self.fail(key, f"must be in [{lo}, {hi}], got {value}")
        return value

    def string(self, value: object, key: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"expected a non-empty string, got {value!r}")
        return value

    def triple(self, value: object, key: str) -> tuple[float, float, float]:
        if not isinstance(value, list | tuple) or len(value) != 3:
            raise self.fail(key, f"expected a list of 3 numbers, got {value!r}")
        a, b, c = (self.number(v, f"{key}[{i}]") for i, v in enumerate(value))
        return (a, b, c)


def _join(key: str, sub: str) -> str:
    return f"{key}.{sub}" if key else sub


#: Numeric bounds per parameter field (lo, hi); integers are recognised by the dataclass default.
_BOUNDS: Mapping[str, tuple[float, float]] = {
    "beams": (1, 512),
    "fov_up_deg": (-90, 90),
    "fov_down_deg": (-90, 90),
    "azimuth_step_deg": (0.01, 10),
    "min_range_m": (0, 1000),
    "max_range_m": (0.1, 1000),
    "range_noise_m": (0, 10),
    "dropout": (0, 1),
    "quantization_m": (0, 1),
    "fov_deg": (1, 360),
    "azimuth_noise_deg": (0, 45),
    "elevation_noise_deg": (0, 90),
    "lateral_spread_m": (0, 20),
    "velocity_noise_mps": (0, 20),
    "rcs_noise_db": (0, 30),
    "false_alarms_per_scan": (0, 1000),
    "detection_probability": (0, 1),
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


def _params(ctx: _Ctx, kind: SensorKind, raw: object, key: str) -> SimParams:
    cls = _PARAMS[kind]
    names = [f.name for f in fields(cls)]
    data = ctx.mapping({} if raw is None else raw, key, names)
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        lo, hi = _BOUNDS[f.name]
        sub = _join(key, f.name)
        if isinstance(f.default, int) and not isinstance(f.default, bool):
            values[f.name] = ctx.integer(data[f.name], sub, lo=int(lo), hi=int(hi))
        else:
            values[f.name] = ctx.number(data[f.name], sub, lo=lo, hi=hi)
    params = cls(**values)
    if isinstance(params, SimLidarParams):
        if params.fov_down_deg >= params.fov_up_deg:
            raise ctx.fail(_join(key, "fov_down_deg"), "must be below fov_up_deg")
        if params.min_range_m >= params.max_range_m:
            raise ctx.fail(_join(key, "min_range_m"), "must be below max_range_m")
    if isinstance(params, SimRadarParams) and params.min_range_m >= params.max_range_m:
        raise ctx.fail(_join(key, "min_range_m"), "must be below max_range_m")
    return params


_SENSOR_KEYS = ("name", "kind", "mount", "rate_hz", "offset_ms", "jitter_ms", "lidar", "radar", "camera")


def _sensor(ctx: _Ctx, raw: object, key: str) -> SimSensor:
    data = ctx.mapping(raw, key, _SENSOR_KEYS, required=("name", "kind", "mount", "rate_hz"))
    name = ctx.string(data["name"], _join(key, "name"))
    if not name.replace("_", "").isalnum():
        raise ctx.fail(_join(key, "name"), f"sensor names are letters, digits and '_', got {name!r}")
    kind_raw = ctx.string(data["kind"], _join(key, "kind"))
    try:
        kind = SensorKind(kind_raw)
    except ValueError:
        raise ctx.fail(_join(key, "kind"), f"unknown sensor kind {kind_raw!r} (lidar, radar, camera)") from None
    for other in SensorKind:
        if other is not kind and other.value in data:
            raise ctx.fail(_join(key, other.value), f"{other.value} parameters on a {kind.value} sensor")
    mount = ctx.mapping(data["mount"], _join(key, "mount"), ("xyz", "rpy_deg"), required=("xyz",))
    xyz = ctx.triple(mount["xyz"], _join(key, "mount.xyz"))
    rpy = ctx.triple(mount.get("rpy_deg", [0, 0, 0]), _join(key, "mount.rpy_deg"))
    rate = ctx.number(data["rate_hz"], _join(key, "rate_hz"), lo=0.1, hi=1000)
    offset = ctx.number(data.get("offset_ms", 0.0), _join(key, "offset_ms"), lo=0, hi=1000.0 / rate)
    jitter = ctx.number(data.get("jitter_ms", 0.0), _join(key, "jitter_ms"), lo=0, hi=100.0 / rate)
    params = _params(ctx, kind, data.get(kind.value), _join(key, kind.value))
    return SimSensor(name, kind, xyz, rpy, rate, offset, jitter, params)


def parse_rig(raw: object, *, file: str = "<rig>") -> RigConfig:
    """Validate a rig document already loaded from YAML."""
    ctx = _Ctx(file)
    data = ctx.mapping(raw, "", ("name", "sensors", "ego_pose_rate_hz", "ground_truth_rate_hz"), required=("sensors",))
    name = ctx.string(data.get("name", Path(file).stem), "name")
    sensors_raw = data["sensors"]
    if not isinstance(sensors_raw, list) or not sensors_raw:
        raise ctx.fail("sensors", "expected a non-empty list of sensors")
    sensors = tuple(_sensor(ctx, s, f"sensors[{i}]") for i, s in enumerate(sensors_raw))
    seen: set[str] = set()
    for i, s in enumerate(sensors):
        if s.name in seen:
            raise ctx.fail(f"sensors[{i}].name", f"duplicate sensor name {s.name!r}")
        seen.add(s.name)
    ego_rate = ctx.number(data.get("ego_pose_rate_hz", 50.0), "ego_pose_rate_hz", lo=1, hi=1000)
    gt_raw = data.get("ground_truth_rate_hz")
    gt_rate = None if gt_raw is None else ctx.number(gt_raw, "ground_truth_rate_hz", lo=0.1, hi=1000)
    return RigConfig(name, sensors, ego_rate, gt_rate, source=file)


def load_rig(path: str | os.PathLike[str]) -> RigConfig:
    """Load and validate a rig YAML file (``yaml.safe_load``)."""
    file = str(path)
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read rig: {exc.strerror or exc}", file=file) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"invalid YAML{where}: {getattr(exc, 'problem', None) or exc}", file=file) from exc
    return parse_rig(raw, file=file)
