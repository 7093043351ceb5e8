"""A cloud's columns are read by name when it names all of its kind's point fields, else by position unless a
column's name says it holds another field (perception.kinds.point_columns): refused or mapped, never misread."""

from __future__ import annotations

import numpy as np
import pytest

from perception.errors import InputError
from perception.kinds import SensorKindDef, in_kind_order, kind_def, point_columns, sample_problem
from perception.types import PointCloudSample

LIDAR = kind_def("lidar")
RADAR = kind_def("radar")
#: One radar return: x, y, z, RCS 12.5 dBsm, radial velocity -3 m/s (in the kind's order).
RETURN = (10.0, 1.0, 0.5, -3.0, 12.5)


def _cloud(fields: tuple[str, ...], row: tuple[float, ...], sensor: str = "radar_front") -> PointCloudSample:
    return PointCloudSample(sensor, 1, sensor, np.array([row], np.float32), fields)


@pytest.mark.parametrize(
    ("kind", "fields", "columns"),
    [
        (LIDAR, ("x", "y", "z", "intensity"), (0, 1, 2, 3)),
        (LIDAR, ("x", "y", "z", "i"), (0, 1, 2, 3)),  # by position: an abbreviation says nothing else
        (LIDAR, ("x", "y", "z", "intensity", "ring", "t"), (0, 1, 2, 3, 4, 5)),
        (LIDAR, ("intensity", "x", "y", "z"), (1, 2, 3, 0)),  # all named: by name
        (LIDAR, ("x", "y", "z", "ring", "intensity"), (0, 1, 2, 4, 3)),
        (RADAR, ("x", "y", "z", "v", "r"), (0, 1, 2, 3, 4)),
        (RADAR, ("x", "y", "z", "rcs", "radial_velocity"), (0, 1, 2, 4, 3)),
        (RADAR, ("x", "y", "z", "rcs", "radial_velocity", "snr"), (0, 1, 2, 4, 3, 5)),
    ],
)
def test_columns_read_by_name_or_position(
    kind: SensorKindDef, fields: tuple[str, ...], columns: tuple[int, ...]
) -> None:
    assert point_columns(fields, kind) == columns


@pytest.mark.parametrize(
    ("kind", "fields", "said"),
    [
        (RADAR, ("x", "y", "z", "rcs", "doppler"), "column 3 of ('x', 'y', 'z', 'rcs', 'doppler') is 'rcs'"),
        (RADAR, ("x", "y", "z", "intensity", "rcs"), "would read as 'radial_velocity'"),  # lidar's field
        (RADAR, ("x", "y", "z", "doppler", "power", "rcs"), "reads from column 4 ('power' here)"),
        (LIDAR, ("y", "x", "z", "i"), "column 0"),
        (LIDAR, ("x", "y", "z", "intensity", "intensity"), "names two columns"),
    ],
)
def test_columns_that_would_be_misread_are_refused(kind: SensorKindDef, fields: tuple[str, ...], said: str) -> None:
    problem = point_columns(fields, kind)
    assert isinstance(problem, str) and said in problem
    cloud = PointCloudSample("s", 1, "s", np.zeros((1, len(fields)), np.float32), fields)
    assert sample_problem(cloud, kind) == problem
    with pytest.raises(InputError, match=r"column|names two") as err:  # a frame handed in whole (submit)
        kind.prepare(cloud, None)
    assert err.value.sensor == "s"


def test_radar_named_in_another_order_is_sent_by_name() -> None:
    # Before: a radar pushed as x, y, z, rcs, radial_velocity passed the intake check (5 fields) and its
    # columns were sent by position: the model took its RCS (12.5) for the Doppler (-3 m/s).
    cloud = _cloud(("x", "y", "z", "rcs", "radial_velocity"), (10.0, 1.0, 0.5, 12.5, -3.0))
    assert sample_problem(cloud, RADAR) is None
    tensors, _ = RADAR.prepare(cloud, None)
    np.testing.assert_array_equal(tensors["POINTS"], np.array([RETURN], np.float32))
    ordered = in_kind_order(cloud, RADAR)
    assert ordered.fields == RADAR.point_fields
    np.testing.assert_array_equal(ordered.points, np.array([RETURN], np.float32))
    same = _cloud(RADAR.point_fields, RETURN)
    assert in_kind_order(same, RADAR) is same  # in order already: not copied


def test_lidar_named_in_another_order_is_sent_by_name() -> None:
    cloud = _cloud(("x", "y", "z", "ring", "intensity"), (1.0, 2.0, 3.0, 7.0, 0.25), sensor="lidar")
    tensors, _ = LIDAR.prepare(cloud, None)
    np.testing.assert_array_equal(tensors["POINTS"], np.array([[1.0, 2.0, 3.0, 0.25]], np.float32))


def test_in_kind_order_named_puts_the_kind_s_names_on_a_cloud_read_by_position() -> None:
    # As a drive holds a cloud (a run's recording: as the run took it): a lidar's x, y, z, i read by position is
    # the kind's x, y, z, intensity; its other columns keep their names, after the kind's.
    cloud = _cloud(("x", "y", "z", "i", "ring"), (1.0, 2.0, 3.0, 0.5, 7.0), sensor="lidar")
    named = in_kind_order(cloud, LIDAR, named=True)
    assert named.fields == ("x", "y", "z", "intensity", "ring") and named.points is cloud.points
    assert in_kind_order(cloud, LIDAR) is cloud  # (the runtime's: read by position as it is)
    moved = in_kind_order(_cloud(("ring", "intensity", "x", "y", "z"), (7.0, 0.5, 1.0, 2.0, 3.0)), LIDAR, named=True)
    assert moved.fields == ("x", "y", "z", "intensity", "ring")
    np.testing.assert_array_equal(moved.points, np.array([[1.0, 2.0, 3.0, 0.5, 7.0]], np.float32))


def test_a_cloud_whose_columns_share_a_name_or_have_none_is_refused_as_the_drive_writer_refuses_it() -> None:
    # The run took a cloud whose other columns shared a name (x y z intensity a a) or had none (x y z i ''),
    # which a recording (DriveWriter: its columns each named once) then refused: a gap in the recording,
    # --rerun-models finding the sensor's sample missing. One rule now: the intake refuses it, naming it.
    from perception.kinds import kind_def, point_columns

    lidar = kind_def("lidar")
    assert point_columns(("x", "y", "z", "intensity", "a", "a"), lidar) == (
        "point field 'a' names two columns of ('x', 'y', 'z', 'intensity', 'a', 'a')"
    )
    assert point_columns(("x", "y", "z", "i", ""), lidar) == "a column of ('x', 'y', 'z', 'i', '') has no name"
    assert point_columns(("x", "y", "z", "intensity", "ring", "t"), lidar) == (0, 1, 2, 3, 4, 5)
