"""Parsers for the KITTI file formats (object and tracking devkits, and View-of-Delft's radar files).

Every parser raises :class:`DriveError` naming the file, and the line for the text formats
(``<file>: line 3: expected 15 or 16 values, got 14``).

* **calib** (``calib/<frame>.txt``, ``calib/<sequence>.txt``): one ``KEY: v1 v2 ...`` per line,
  row-major. The object devkit spells ``P0..P3``, ``R0_rect``, ``Tr_velo_to_cam``,
  ``Tr_imu_to_velo``; the tracking devkit ``R_rect``, ``Tr_velo_cam``, ``Tr_imu_velo`` (and drops
  the colon after them) — both are accepted and read under the object devkit's names. ``P*`` and
  ``Tr_*`` are 3x4 (12 values), ``R0_rect`` 3x3 (9 values). A key without values (View-of-Delft
  writes ``Tr_imu_to_velo:``) is absent. Other keys are kept if numeric.
* **labels** (``label_2/<frame>.txt``: 15 values a line, 16 with a score; ``label_02/<seq>.txt``:
  17, 18 with a score, the first two being frame and track id): ``type truncated occluded alpha
  left top right bottom height width length x y z rotation_y [score]`` with the box's bottom-face
  centre ``x y z`` in the rectified camera frame.
* **oxts** (``oxts/<sequence>.txt``): one line of 30 values per frame (raw-data devkit order: lat,
  lon, alt, roll, pitch, yaw, vn, ve, vf, vl, vu, ax, ay, az, af, al, au, wx, wy, wz, wf, wl, wu,
  pos_accuracy, vel_accuracy, navstat, numsats, posmode, velmode, orimode).
* **point clouds** (``velodyne/<frame>.bin``): little-endian float32, 4 a point (x, y, z,
  reflectance) for a lidar, 7 (x, y, z, RCS, v_r, v_r_compensated, time) for a View-of-Delft radar.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from perception.errors import DriveError

__all__ = [
    "CALIB_ALIASES",
    "OXTS_FIELDS",
    "Calib",
    "KittiLabel",
    "parse_calib",
    "parse_labels",
    "parse_oxts",
    "read_points",
]

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]

#: Tracking-devkit spellings -> object-devkit names.
CALIB_ALIASES: Mapping[str, str] = {
    "R_rect": "R0_rect",
    "Tr_velo_cam": "Tr_velo_to_cam",
    "Tr_imu_velo": "Tr_imu_to_velo",
}
_SIZES: Mapping[str, int] = {
    "P0": 12,
    "P1": 12,
    "P2": 12,
    "P3": 12,
    "R0_rect": 9,
    "Tr_velo_to_cam": 12,
    "Tr_imu_to_velo": 12,
}
#: Rotations whose ``R^T R`` is farther than this from identity are refused (KITTI's are ~1e-6 off).
_ORTHONORMAL_TOL = 1e-3

OXTS_FIELDS: tuple[str, ...] = (
    "lat", "lon", "alt", "roll", "pitch", "yaw", "vn", "ve", "vf", "vl", "vu", "ax", "ay", "az", "af", "al", "au",
    "wx", "wy", "wz", "wf", "wl", "wu", "pos_accuracy", "vel_accuracy", "navstat", "numsats", "posmode", "velmode",
    "orimode",
)  # fmt: skip


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DriveError("file not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DriveError(f"cannot read: {getattr(exc, 'strerror', None) or exc}", file=str(path)) from exc


def _floats(values: list[str], path: Path, line: int, what: str) -> list[float]:
    try:
        out = [float(v) for v in values]
    except ValueError:
        bad = next(v for v in values if not _is_float(v))
        raise DriveError(f"line {line}: {what}: {bad!r} is not a number", file=str(path)) from None
    if not all(math.isfinite(v) for v in out):
        raise DriveError(f"line {line}: {what}: values must be finite", file=str(path))
    return out


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------------------------------
# calib
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calib:
    """One calib file: matrices by object-devkit name, 4x4 homogeneous for ``R0_rect`` and ``Tr_*``."""

    path: Path
    values: Mapping[str, F64]

    def has(self, key: str) -> bool:
        return key in self.values

    def projection(self, key: str = "P2") -> F64:
        """A 3x4 camera projection matrix (``P0``..``P3``)."""
        return self._need(key).reshape(3, 4)

    def rigid(self, key: str) -> F64:
        """``R0_rect`` or a ``Tr_*`` as a 4x4 rigid transform (rotation re-orthonormalised)."""
        v = self._need(key)
        m = np.eye(4)
        if key == "R0_rect":
            m[:3, :3] = v.reshape(3, 3)
        else:
            m[:3, :] = v.reshape(3, 4)
        r = m[:3, :3]
        if not np.allclose(r.T @ r, np.eye(3), atol=_ORTHONORMAL_TOL) or np.linalg.det(r) <= 0:
            raise DriveError(f"{key} is not a rotation (R^T R != I or det <= 0)", file=str(self.path))
        u, _, vt = np.linalg.svd(r)
        m[:3, :3] = u @ vt
        return m

    def _need(self, key: str) -> F64:
        v = self.values.get(key)
        if v is None:
            have = ", ".join(self.values) or "none"
            raise DriveError(f"calibration {key} is missing (has: {have})", file=str(self.path))
        return v


def parse_calib(path: Path) -> Calib:
    """Parse a KITTI calib file (either devkit's spelling; see the module docs)."""
    values: dict[str, F64] = {}
    for n, raw in enumerate(_read_text(path).splitlines(), start=1):
        text = raw.strip()
        if not text:
            continue
        if ":" in text.split()[0]:
            key, _, rest = text.partition(":")
        else:
            key, _, rest = text.partition(" ")
        key = key.strip()
        if not key or _is_float(key) or " " in key:
            raise DriveError(f"line {n}: expected 'KEY: values', got {raw.strip()[:40]!r}", file=str(path))
        name = CALIB_ALIASES.get(key, key)
        parts = rest.split()
        if not parts:
            continue  # "Tr_imu_to_velo:" with nothing after it: not given
        numbers = _floats(parts, path, n, key)
        want = _SIZES.get(name)
        if want is not None and len(numbers) != want:
            raise DriveError(f"line {n}: {key} needs {want} values, got {len(numbers)}", file=str(path))
        if name in values:
            raise DriveError(f"line {n}: {key} is given twice", file=str(path))
        values[name] = np.asarray(numbers, dtype=np.float64)
    return Calib(path, values)


# --------------------------------------------------------------------------------------------------
# labels
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KittiLabel:
    """One label line. ``location`` is the bottom-face centre in the rectified camera frame."""

    line: int
    type: str
    truncated: float
    occluded: int
    alpha: float
    bbox: tuple[float, float, float, float]
    size_hwl: tuple[float, float, float]
    location: tuple[float, float, float]
    rotation_y: float
    frame: int = -1  # tracking labels only
    track_id: int = -1  # tracking labels only
    score: float | None = None

    @property
    def has_box(self) -> bool:
        """False for 2D-only lines (DontCare and friends: size -1, location -1000)."""
        return min(self.size_hwl) > 0 and max(abs(v) for v in self.location) < 999.0


def parse_labels(path: Path, *, tracking: bool) -> list[KittiLabel]:
    """Parse a label file: ``label_2`` (``tracking=False``) or ``label_02`` (``tracking=True``)."""
    base = 17 if tracking else 15
    out: list[KittiLabel] = []
    for n, raw in enumerate(_read_text(path).splitlines(), start=1):
        cols = raw.split()
        if not cols:
            continue
        if len(cols) not in (base, base + 1):
            raise DriveError(
                f"line {n}: expected {base} or {base + 1} values (with a score), got {len(cols)}", file=str(path)
            )
        head: list[int] = []
        if tracking:
            try:
                head = [int(cols[0]), int(cols[1])]
            except ValueError:
                raise DriveError(
                    f"line {n}: frame and track id must be integers, got {cols[:2]}", file=str(path)
                ) from None
            cols = cols[2:]
        kind = cols[0]
        if _is_float(kind):
            raise DriveError(f"line {n}: the first value must be the object type, got {kind!r}", file=str(path))
        v = _floats(cols[1:], path, n, kind)
        if v[1] != int(v[1]):
            raise DriveError(f"line {n}: occluded must be an integer, got {cols[2]!r}", file=str(path))
        out.append(
            KittiLabel(
                line=n,
                type=kind,
                truncated=v[0],
                occluded=int(v[1]),
                alpha=v[2],
                bbox=(v[3], v[4], v[5], v[6]),
                size_hwl=(v[7], v[8], v[9]),
                location=(v[10], v[11], v[12]),
                rotation_y=v[13],
                frame=head[0] if head else -1,
                track_id=head[1] if head else -1,
                score=v[14] if len(v) > 14 else None,
            )
        )
    return out


# --------------------------------------------------------------------------------------------------
# oxts
# --------------------------------------------------------------------------------------------------


def parse_oxts(path: Path) -> F64:
    """``[frames, 30]`` OXTS values of a tracking sequence, one line a frame."""
    rows: list[list[float]] = []
    for n, raw in enumerate(_read_text(path).splitlines(), start=1):
        cols = raw.split()
        if not cols:
            continue
        if len(cols) != len(OXTS_FIELDS):
            raise DriveError(f"line {n}: expected {len(OXTS_FIELDS)} OXTS values, got {len(cols)}", file=str(path))
        rows.append(_floats(cols, path, n, "oxts"))
    return np.asarray(rows, dtype=np.float64).reshape(-1, len(OXTS_FIELDS))


# --------------------------------------------------------------------------------------------------
# point clouds
# --------------------------------------------------------------------------------------------------


def read_points(path: Path, columns: int, what: str, *, empty_ok: bool = False) -> F32:
    """``[N, columns]`` float32 points of a ``.bin`` file (size checked). An empty (0-byte) file is an error
    unless ``empty_ok``: a lidar sweep always has points, so a 0-byte one is a file cut short (a failed copy
    or download), as a file of a partial point is; a radar may see nothing."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DriveError("file not found", file=str(path)) from None
    except OSError as exc:
        raise DriveError(f"cannot read: {exc.strerror or exc}", file=str(path)) from exc
    stride = 4 * columns
    if not raw and not empty_ok:
        raise DriveError(f"empty file (0 bytes): a {what} sweep has points (a file cut short?)", file=str(path))
    if len(raw) % stride:
        raise DriveError(
            f"{len(raw)} bytes is not a whole number of {what} points ({columns} x float32 = {stride} bytes each)",
            file=str(path),
        )
    points: F32 = np.frombuffer(raw, dtype="<f4").reshape(-1, columns).astype(np.float32)
    return points
