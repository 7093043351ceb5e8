"""RigCheck.taken: a cloud's columns are worked out once a sample (the check and the reorder share them), and
what it takes or refuses is as before: reordered into its kind's order, or refused with the reason."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from perception.config import SensorConfig
from perception.kinds import _intake, _points
from perception.scheduler import RigCheck
from perception.types import PointCloudSample, SensorSpec, Transform

RIG = {"radar": SensorSpec("radar", "radar", "radar_link", Transform(), "/r")}
ROW = (10.0, 1.0, 0.5, 12.5, -3.0)


def _cloud(fields: tuple[str, ...], frame_id: str = "radar_link") -> PointCloudSample:
    return PointCloudSample("radar", 1, frame_id, np.array([ROW], np.float32), fields)


@pytest.fixture
def columns_found(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The clouds' fields each time their columns are worked out (``point_columns``, wherever it is called)."""
    found: list[tuple[str, ...]] = []
    real = _points.point_columns

    def counted(fields: Any, kind: Any) -> Any:
        found.append(tuple(fields))
        return real(fields, kind)

    monkeypatch.setattr(_points, "point_columns", counted)
    monkeypatch.setattr(_intake, "point_columns", counted)
    return found


@pytest.mark.parametrize(
    "fields", [("x", "y", "z", "radial_velocity", "rcs"), ("x", "y", "z", "rcs", "radial_velocity")]
)
def test_a_clouds_columns_are_worked_out_once_a_sample(
    columns_found: list[tuple[str, ...]], fields: tuple[str, ...]
) -> None:
    # Before: the check (sample_problem) and the reorder (in_kind_order) each worked them out, ~1.5 us a cloud.
    check = RigCheck([SensorConfig("radar", "radar", "rad")], RIG, image_sizes=True)
    taken = check.taken("radar", _cloud(fields))
    kind_order = ("x", "y", "z", "radial_velocity", "rcs")
    assert isinstance(taken, PointCloudSample) and taken.fields == kind_order
    np.testing.assert_array_equal(taken.points, np.array([ROW], np.float32)[:, [fields.index(f) for f in kind_order]])
    assert columns_found == [fields]


def test_a_cloud_it_would_misread_or_in_another_frame_is_refused(columns_found: list[tuple[str, ...]]) -> None:
    check = RigCheck([SensorConfig("radar", "radar", "rad")], RIG, image_sizes=True)
    said = check.taken("radar", _cloud(("x", "y", "z", "rcs", "doppler")))
    assert isinstance(said, str) and "column 3 of ('x', 'y', 'z', 'rcs', 'doppler') is 'rcs'" in said
    said = check.taken("radar", _cloud(("x", "y", "z", "radial_velocity", "rcs"), frame_id="base_link"))
    assert isinstance(said, str) and "sample in frame 'base_link', the rig's radar in 'radar_link'" in said
    assert check.problem("radar", _cloud(("x", "y", "z", "radial_velocity", "rcs"))) is None
    assert len(columns_found) == 3
