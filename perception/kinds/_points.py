"""Helpers of the point-cloud kinds (lidar, radar): which columns hold a kind's point fields, request
tensors and warm-up samples."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.errors import InputError
from perception.types import PointCloudSample, Sample, SensorSpec

from ._kind import SensorKindDef

__all__ = ["in_kind_order", "point_columns", "points_tensor", "warmup_points"]


def point_columns(fields: Any, kind: SensorKindDef) -> tuple[int, ...] | str:
    """The columns of a cloud of columns ``fields`` that hold ``kind``'s point fields, in the kind's order,
    then its other columns in theirs (``0, 1, ...``: the cloud is in the kind's order); or why the cloud
    would be misread (the one rule of the intake check, the live push and the models' POINTS tensors).

    A cloud naming every one of the kind's fields is read by name, whatever their order (a radar's ``rcs``
    before its ``radial_velocity``). Otherwise it is read by position (a lidar's ``x, y, z, i``), unless a
    column says by its name that it holds something else: a field of the kind's in another column than the
    kind's (a radar's ``x, y, z, doppler, power, rcs``), or a field another point kind reads (a lidar's
    ``intensity``, a radar's ``rcs``) in a column the kind reads as another (a radar's ``x, y, z, rcs, v``:
    its RCS taken for the Doppler). Too few columns are :func:`perception.kinds.sample_problem`'s to say."""
    try:
        names = tuple(fields)
    except TypeError:
        return f"point fields must be a sequence of names, got a {type(fields).__name__}"
    if not all(isinstance(name, str) for name in names):
        return f"point field names must be strings, got {names!r:.80}"
    want = kind.point_fields
    n = len(want)
    if len(set(names)) != len(names) or "" in names:  # (a run's recording holds its columns by name: DriveWriter)
        twice = [name for name in names if names.count(name) > 1]
        return f"point field {twice[0]!r} names two columns of {names}" if twice else f"a column of {names} has no name"
    if names[:n] == want:
        return tuple(range(len(names)))
    if all(name in names for name in want):
        first = tuple(names.index(name) for name in want)
        return first + tuple(i for i in range(len(names)) if i not in first)
    from ._registry import kind_def, known_kinds  # (registered kinds: a lazy look, at most once a cloud)

    known = {name for k in known_kinds() for name in kind_def(k).point_fields}
    for i, name in enumerate(names):
        if name in want or (i < n and name in known):
            if i < n and name != want[i]:
                return (
                    f"column {i} of {names} is {name!r}, which a {kind.name} would read as {want[i]!r}: name "
                    f"all of {want} to have them read by name, or give them in that order"
                )
            if i >= n:
                return (
                    f"column {i} of {names} is {name!r}, which a {kind.name} reads from column {want.index(name)} "
                    f"({names[want.index(name)]!r} here): name all of {want} to have them read by name, or give "
                    "them in that order"
                )
    return tuple(range(len(names)))


def in_kind_order(
    sample: PointCloudSample,
    kind: SensorKindDef,
    columns: tuple[int, ...] | str | None = None,
    *,
    named: bool = False,
) -> PointCloudSample:
    """``sample`` with ``kind``'s point fields as its first columns, in the kind's order (:func:`point_columns`:
    a cloud naming them all in another order), its other columns after them; ``sample`` itself when it is in
    that order already or would be misread (the intake check refuses it then). ``columns``: the cloud's, as
    :func:`point_columns` found them (:func:`perception.kinds.sample_check`'s), not worked out again.
    ``named``: those first columns under the kind's names too (a cloud read by position names them otherwise:
    a lidar's ``x, y, z, i``), as a drive holds them (a run's recording: ``perception.record``)."""
    if columns is None:
        columns = point_columns(sample.fields, kind)
    if isinstance(columns, str) or (not named and columns == tuple(range(len(columns)))):
        return sample  # (the run's every cloud: in order already)
    fields = tuple(sample.fields)
    n = len(kind.point_fields)
    if len(fields) < n:
        return sample
    out = tuple(fields[i] for i in columns)
    if named:
        out = kind.point_fields + out[n:]
    if columns == tuple(range(len(columns))):
        return sample if out == fields else dataclasses.replace(sample, fields=out)
    return dataclasses.replace(sample, points=sample.points[:, list(columns)], fields=out)


def points_tensor(sample: Sample, kind: SensorKindDef, *, keep_extra: bool) -> npt.NDArray[np.float32]:
    """A point cloud's ``POINTS`` tensor: the columns of ``kind``'s point fields (:func:`point_columns`: by
    name when the cloud names them all), then, with ``keep_extra``, its other columns. Raises
    :class:`InputError` for another sample type, too few columns or columns that would be misread."""
    if not isinstance(sample, PointCloudSample):
        raise InputError(f"expected a point cloud for a {kind.name}, got {type(sample).__name__}", sensor=sample.sensor)
    pts = sample.points
    need = len(kind.point_fields)
    if pts.shape[1] < need:
        raise InputError(
            f"{kind.name} points need at least {need} columns, got {pts.shape[1]}",
            sensor=sample.sensor,
            tensor="POINTS",
        )
    columns = point_columns(sample.fields, kind)
    if isinstance(columns, str):
        raise InputError(columns, sensor=sample.sensor, tensor="POINTS")
    if columns != tuple(range(len(columns))):
        pts = pts[:, list(columns)]
    cols = pts if keep_extra else pts[:, :need]
    return np.ascontiguousarray(cols, dtype=np.float32)


def warmup_points(sensor: str, spec: SensorSpec | None, count: int, fields: tuple[str, ...]) -> PointCloudSample:
    """``count`` deterministic points spread over +-40 m (z in [-1.5, 1]) with columns ``fields``."""
    rng = np.random.default_rng(0)
    pts = rng.uniform(-40.0, 40.0, (count, len(fields))).astype(np.float32)
    pts[:, 2] = rng.uniform(-1.5, 1.0, len(pts))
    frame_id = spec.frame_id if spec is not None else sensor
    return PointCloudSample(sensor, 0, frame_id, pts, fields)
