"""Struct-of-arrays object set passed between fusion steps and to the tracker (internal)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.types import LABELS

__all__ = ["Objects", "Origin", "SourceNames", "filled"]

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
I8 = npt.NDArray[np.int8]
_NUM_LABELS = len(LABELS)


def filled(shape: int | tuple[int, ...], value: float, dtype: npt.DTypeLike = np.float64) -> npt.NDArray[Any]:
    """``np.full(shape, value, dtype)`` for the small arrays of one frame: ``np.full`` and ``np.ones`` are
    Python-level wrappers that cost ~4x an ``empty`` + ``fill`` (~2 us per call on our hosts)."""
    out = np.empty(shape, dtype)
    out.fill(value)
    return out


def _identity_covariances(n: int) -> F64:
    cov = np.zeros((n, 2, 2))
    cov[:, 0, 0] = cov[:, 1, 1] = 1.0
    return cov


class Origin(enum.IntEnum):
    """Which sensor kind established an object (what it is anchored on)."""

    LIDAR = 0
    CAMERA = 1  # camera-only candidate (ground-plane depth); may gain radar
    RADAR = 2  # radar-only


@dataclass(slots=True)
class Objects:
    """``N`` objects in ``base_link`` at the frame time (arrays are owned and mutated in place)."""

    center: F64  # [N,3]
    size: F64  # [N,3] l, w, h
    yaw: F64  # [N]
    velocity: F64  # [N,2] over ground; meaningful where vel_var is finite
    vel_var: F64  # [N] per-axis velocity variance (inf = unknown)
    vel_full: B  # [N] velocity is a full 2D (radar) measurement
    radial: F64  # [N,3] (vr, ux, uy): radial speed along the unit line of sight; NaN = none
    cov: F64  # [N,2,2] BEV position covariance
    score: F64  # [N]
    votes: F64  # [N,L] class evidence
    sources: B  # [N,S] contributing sensors, in rig order
    age: F64  # [N] s; the position is that of (frame time - age): not yet propagated
    origin: I8  # [N] Origin

    def __len__(self) -> int:
        return int(self.score.shape[0])

    @staticmethod
    def empty(num_sensors: int, n: int = 0) -> Objects:
        return Objects(
            center=np.zeros((n, 3)),
            size=filled((n, 3), 1.0),
            yaw=np.zeros(n),
            velocity=np.zeros((n, 2)),
            vel_var=filled(n, np.inf),
            vel_full=np.zeros(n, bool),
            radial=filled((n, 3), np.nan),
            cov=_identity_covariances(n),
            score=np.zeros(n),
            votes=np.zeros((n, _NUM_LABELS)),
            sources=np.zeros((n, num_sensors), bool),
            age=np.zeros(n),
            origin=np.zeros(n, np.int8),
        )

    def take(self, index: npt.NDArray[np.intp] | B) -> Objects:
        # take / compress: a third of the cost of a[index] on the 2-D and 3-D fields
        if index.dtype == np.bool_:
            return Objects(*(getattr(self, f.name).compress(index, axis=0) for f in fields(self)))
        return Objects(*(getattr(self, f.name).take(index, axis=0) for f in fields(self)))

    @staticmethod
    def concat(parts: Sequence[Objects], num_sensors: int) -> Objects:
        parts = [p for p in parts if len(p)]
        if not parts:
            return Objects.empty(num_sensors)
        if len(parts) == 1:
            return parts[0]
        return Objects(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Objects)))

    @property
    def labels(self) -> npt.NDArray[np.intp]:
        out: npt.NDArray[np.intp] = self.votes.argmax(axis=1)
        return out

    def boxes(self) -> F64:
        """``[N,7]`` boxes."""
        return np.column_stack([self.center, self.size, self.yaw])


class SourceNames:
    """Maps rows of a sources mask to tuples of sensor names (cached per combination)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._bits = (1 << np.arange(len(self.names), dtype=np.int64)).astype(np.int64)
        self._cache: dict[int, tuple[str, ...]] = {0: ()}

    def __call__(self, mask: B) -> list[tuple[str, ...]]:
        if mask.shape[0] == 0:
            return []
        codes = (mask.astype(np.int64) @ self._bits).tolist()
        try:
            return list(map(self._cache.__getitem__, codes))
        except KeyError:  # a combination not seen yet
            for code in set(codes) - self._cache.keys():
                self._cache[code] = tuple(n for i, n in enumerate(self.names) if code >> i & 1)
            return list(map(self._cache.__getitem__, codes))
