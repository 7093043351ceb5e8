"""Sweep accumulation: a point sensor's earlier sweeps merged into the one a frame uses.

A sensor whose ``SensorConfig.accumulate_ns`` is above 0 (lidar by default: its kind's
``accumulate_ms``) gets, in each frame, its chosen sweep plus every earlier sweep of it captured at
most that long before, each moved into the chosen sweep's sensor frame by the ego motion between the
two capture times (:class:`perception.fusion.EgoMotion`: the drive's ego poses, else the frame's ego
twist). The merged sample keeps the chosen sweep's time, frame and fields; columns after ``x, y, z``
(intensity, radial velocity) are copied as measured. This is how sparse lidars are densified
(nuScenes keeps 20 Hz sweeps between its 2 Hz keyframes): a static object gains returns, a moving one
smears by its speed times the window, so the window is short.

Without a known ego motion (no poses and no twist) the sweep is sent alone, since merging would smear
the whole scene by the ego's own motion: counted in :attr:`AccumulateStats.no_ego_motion` and warned
once per sensor.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from perception.config import SensorConfig
from perception.errors import ConfigError
from perception.types import EgoPose, Frame, PointCloudSample, Sample, Transform

if TYPE_CHECKING:
    from perception.fusion import EgoMotion

# perception.fusion (numba kernels, ~1.5 s to import) is imported where a window is in use, not at
# module level: a host importing the scheduler does not pay for fusion before it needs it.

__all__ = ["AccumulateStats", "SweepAccumulator"]

log = logging.getLogger(__name__)


@dataclass
class AccumulateStats:
    sweeps: int = 0  # sweeps sent with earlier ones merged into them
    merged: int = 0  # earlier sweeps merged, in all
    no_ego_motion: int = 0  # sweeps sent alone although earlier ones were in the window: no ego motion


class SweepAccumulator:
    """Merges earlier sweeps into a frame's point clouds (module docstring).

    ``extrinsics``: ``base_link <- sensor`` per sensor (the rig's). A sensor on its kind's default
    (``accumulate_ms: None``) accumulates where its extrinsic is known; one that asks for a window
    without it is a :class:`ConfigError`. ``ego_at``: the ego pose at a time, as
    :class:`~perception.fusion.EgoMotion` takes it.
    """

    def __init__(
        self,
        sensors: Sequence[SensorConfig],
        extrinsics: Mapping[str, Transform] | None,
        *,
        ego_at: Callable[[int], EgoPose | None] | None = None,
    ) -> None:
        ext = extrinsics or {}
        self.windows: dict[str, int] = {}
        for s in sensors:
            window = s.accumulate_ns if s.enabled else 0
            if not window or (s.name not in ext and s.accumulate_ms is None):
                continue  # off, or the kind's default where the sensor's mount is not known
            if s.name not in ext:
                raise ConfigError(
                    f"sensor {s.name!r}: accumulating its sweeps needs its extrinsic, and the rig given has "
                    "none for it (pass the rig, or set accumulate_ms: 0)",
                    key="accumulate_ms",
                    sensor=s.name,
                )
            self.windows[s.name] = window
        #: How long before a frame's time an assembler must keep samples for the windows (0: none).
        self.keep_ns = max(
            (s.sync_window_ns + self.windows[s.name] for s in sensors if s.name in self.windows), default=0
        )
        self._ext = {n: ext[n].matrix() for n in self.windows}
        self._ext_inv: dict[str, npt.NDArray[np.float64]] = {}
        if self.windows:
            from perception.fusion import invert_transform

            self._ext_inv = {n: invert_transform(m) for n, m in self._ext.items()}
        self._ego_at = ego_at
        self._warned: set[str] = set()
        self.stats = AccumulateStats()

    def __bool__(self) -> bool:
        return bool(self.windows)

    def report(self) -> dict[str, object]:
        """The windows (ms) per accumulating sensor and the counters, for run reports."""
        return {"window_ms": {n: w / 1e6 for n, w in self.windows.items()}, **vars(self.stats)}

    @staticmethod
    def moved(
        points: npt.NDArray[np.float32], m: npt.ArrayLike, *, out: npt.NDArray[np.float32] | None = None
    ) -> npt.NDArray[np.float32]:
        """An earlier sweep's ``points`` with x, y, z moved by the 4x4 transform ``m`` (the other columns as
        measured): the rows accumulation merges, and what a recording's replay rebuilds them with.
        ``out``: the rows of the merged cloud to write them into (else a new array)."""
        from perception.fusion import transform_cloud

        return transform_cloud(m, points, out=out)  # one compiled float32 pass (no BLAS on the frame path)

    def apply(self, frame: Frame, buffers: Mapping[str, Iterable[Sample]]) -> Frame:
        """``frame`` with each accumulating sensor's sweep merged with its earlier ones in ``buffers``."""
        if not self.windows:
            return frame
        from perception.fusion import EgoMotion, invert_transform

        samples = dict(frame.samples)
        motion: EgoMotion | None = None
        for name, window in self.windows.items():
            cur = samples.get(name)
            if not isinstance(cur, PointCloudSample):
                continue
            earlier = [
                s
                for s in buffers.get(name, ())
                if isinstance(s, PointCloudSample) and 0 < cur.t_ns - s.t_ns <= window and s.fields == cur.fields
            ]
            if not earlier:
                continue
            if motion is None:
                motion = EgoMotion(frame, self._ego_at)
            if motion.source == "static":
                self.stats.no_ego_motion += 1
                if name not in self._warned:
                    self._warned.add(name)
                    log.warning(
                        "sensor %s: no ego poses or ego velocity, so its sweeps are not accumulated (counted)", name
                    )
                continue
            to_cur = self._ext_inv[name] @ invert_transform(motion.relative(cur.t_ns))
            # the merged cloud written once, in place: the sweep, then each earlier one moved into its rows
            # (no moved copy per sweep and no concatenation of them: a cloud is hundreds of KiB)
            rows = cur.points.shape[0]
            points = np.empty((rows + sum(s.points.shape[0] for s in earlier), cur.points.shape[1]), np.float32)
            points[:rows] = cur.points
            merged: list[tuple[int, int, tuple[float, ...]]] = []
            for s in earlier:
                m = to_cur @ motion.relative(s.t_ns) @ self._ext[name]
                n = s.points.shape[0]
                self.moved(s.points, m, out=points[rows : rows + n])
                rows += n
                merged.append((s.t_ns, n, tuple(float(v) for v in m.ravel())))
            points.setflags(write=False)  # the sample takes it as it is (read-only, its own), not a copy
            sources = (points, cur.points, *[s.points for s in earlier])  # its provenance, by identity
            samples[name] = dataclasses.replace(cur, points=points, merged_from=tuple(merged), merged_points=sources)
            self.stats.sweeps += 1
            self.stats.merged += len(earlier)
        return dataclasses.replace(frame, samples=samples)
