"""The one check of a sample against its sensor and the rig, wherever a host's samples enter: the live
intake (:class:`perception.live.LiveAssembler`, sample by sample) and a frame handed in whole
(:meth:`perception.scheduler.Runtime.process`, ``ThreadedRuntime.submit``, a host's stream to ``run``).

It is the intake check (:func:`perception.kinds.sample_check`: stamp, type, size, point columns it would
misread; with the camera's calibration, an image of another size) and the sample's frame: a sample whose
``frame_id`` is another sensor's frame in the rig, the vehicle's (``base_link``) or the map's would be taken
as in its own sensor's frame and moved by that sensor's extrinsic once more. (Another name of its own frame,
a driver's, goes on: only a frame the rig names is known to be another.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from perception.config import SensorConfig
from perception.drives import BASE_FRAME, MAP_FRAME
from perception.kinds import SensorKindDef, in_kind_order, kind_def, sample_check
from perception.types import CameraCalibration, PointCloudSample, Sample, SensorSpec

__all__ = ["RigCheck"]


class RigCheck:
    """Checks samples of ``sensors`` against ``rig`` (module docs). ``image_sizes``: an image
    must be of its camera's calibrated size (a host's: fusion places a camera's boxes with the calibration's
    intrinsics; a replay counts such images instead, ``image_size_mismatch``)."""

    def __init__(
        self, sensors: Iterable[SensorConfig], rig: Mapping[str, SensorSpec] | None, *, image_sizes: bool
    ) -> None:
        rig = rig or {}
        self.kinds: dict[str, SensorKindDef] = {s.name: kind_def(s.kind) for s in sensors}
        self._calibrations: dict[str, CameraCalibration] = {}
        if image_sizes:
            self._calibrations = {
                n: spec.calibration for n, spec in rig.items() if n in self.kinds and spec.calibration is not None
            }
        self._frames = {n: spec.frame_id for n, spec in rig.items() if n in self.kinds}
        self._known_frames = {spec.frame_id for spec in rig.values()} | {BASE_FRAME, MAP_FRAME}

    def problem(self, name: str, sample: Sample) -> str | None:
        """Why ``sample`` cannot be taken as sensor ``name``'s (one of ``sensors``), or None."""
        checked = self._check(name, sample)
        return checked if isinstance(checked, str) else None

    def taken(self, name: str, sample: Sample) -> Sample | str:
        """``sample`` as sensor ``name`` takes it (a point cloud naming its kind's fields in another order:
        reordered, :func:`perception.kinds.in_kind_order`), or why it cannot be (:meth:`problem`)."""
        checked = self._check(name, sample)
        if isinstance(checked, str):
            return checked
        if checked is not None:  # a point cloud's columns, worked out once (sample_check)
            assert isinstance(sample, PointCloudSample)
            return in_kind_order(sample, self.kinds[name], checked)
        return sample

    def _check(self, name: str, sample: Sample) -> str | tuple[int, ...] | None:
        """Why ``sample`` cannot be taken as sensor ``name``'s, else :func:`perception.kinds.sample_check`'s answer
        (a point cloud's columns, None for an image)."""
        checked = sample_check(sample, self.kinds[name], calibration=self._calibrations.get(name))
        if isinstance(checked, str):
            return checked
        own = self._frames.get(name)
        if own not in (None, sample.frame_id) and sample.frame_id in self._known_frames:
            return (
                f"sample in frame {sample.frame_id!r}, the rig's {name} in {own!r}: a sensor's samples are "
                f"taken in its own frame (its extrinsic moves them to {BASE_FRAME})"
            )
        return checked
