"""Ground truth's optional protocol fields (category, attribute, point counts) and regions round-trip; a
drive written without them reads back as ``None`` / no regions; the encoder's fast path stays byte-equal."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from perception.drives import DriveReader, DriveWriter
from perception.drives import _codec as codec
from perception.types import GroundTruth, GroundTruthObject, GroundTruthRegion

T0 = 1_000_000_000

FULL = GroundTruthObject(
    3,
    "cyclist",
    (12.5, -3.25, 0.6),
    (1.8, 0.6, 1.3),
    0.3,
    (math.nan, math.nan),
    category="vehicle.motorcycle",
    attribute="cycle.without_rider",
    num_lidar_pts=0,
    num_radar_pts=2,
)
NO_ATTRIBUTE = GroundTruthObject(4, "car", (5.0, 1.0, 0.8), (4.5, 1.9, 1.6), -1.0, (2.0, 0.5), "vehicle.car", "", 7, 0)
PLAIN = GroundTruthObject(5, "pedestrian", (8.0, 2.0, 0.9), (0.6, 0.6, 1.8), 0.0, (1.0, 0.0))
RACK = GroundTruthRegion("static_object.bicycle_rack", (12.0, -3.0, 0.5), (8.0, 2.5, 1.5), 0.25)


def _key(o: GroundTruthObject) -> GroundTruthObject:
    """``o`` with NaN velocities as 0 (NaN != NaN)."""
    return dataclasses.replace(o, velocity=(float(np.nan_to_num(o.velocity[0])), float(np.nan_to_num(o.velocity[1]))))


def test_protocol_fields_and_regions_round_trip(tmp_path: Path) -> None:
    gts = [GroundTruth(T0, (FULL, NO_ATTRIBUTE, PLAIN), (RACK,)), GroundTruth(T0 + 500_000_000, (PLAIN,))]
    with DriveWriter(tmp_path / "d.mcap", []) as w:
        for gt in gts:
            w.write_ground_truth(gt)
    with DriveReader(tmp_path / "d.mcap") as d:
        got = d.ground_truth()
    assert [g.t_ns for g in got] == [g.t_ns for g in gts]
    assert [_key(o) for o in got[0].objects] == [_key(o) for o in gts[0].objects]
    assert all(math.isnan(v) for v in got[0].objects[0].velocity)
    assert got[0].objects[1].attribute == "" and got[0].objects[0].num_lidar_pts == 0
    assert got[0].regions == (RACK,)
    assert got[1] == gts[1]  # no optional fields written: None again, no regions
    assert got[1].objects[0].category is None and got[1].objects[0].num_radar_pts is None


def test_fast_encoder_equals_the_plain_one_with_optional_fields() -> None:
    for obj in (FULL, NO_ATTRIBUTE, PLAIN):
        fast = codec.encode_ground_truth(GroundTruth(T0, (obj,))).entities[0]
        assert fast.SerializeToString(deterministic=True) == codec._gt_entity(T0, obj).SerializeToString(
            deterministic=True
        )
