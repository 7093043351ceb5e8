"""``DriveOutput``: the importers' all-or-nothing drive file, and the errors of its writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from perception.errors import DriveError
from perception.importers._output import DriveOutput
from perception.types import EgoPose, GroundTruth, GroundTruthObject, Transform


def test_writer_errors_name_the_output_not_the_hidden_partial_file(tmp_path: Path) -> None:
    out_path = tmp_path / "out.mcap"
    car = GroundTruthObject(1, "car", (10.0, 0.0, 0.8), (4.5, 1.9, 1.6), 0.0, (0.0, 0.0))
    for write in (
        lambda out: out.write_ego_pose(EgoPose(-1, Transform())),
        lambda out: out.write_ground_truth(GroundTruth(0, (car, car))),
    ):
        with pytest.raises(DriveError) as exc, DriveOutput(out_path, [], source="test") as out:
            write(out)
        assert exc.value.file == str(out_path)
        assert str(exc.value).startswith(f"{out_path}: /")  # then the drive topic and what is wrong
        assert not list(tmp_path.iterdir())  # the partial file is gone
