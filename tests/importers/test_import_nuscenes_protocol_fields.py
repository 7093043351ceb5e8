"""``import_nuscenes`` keeps what the nuScenes detection protocol needs: each object's category,
attribute and lidar/radar point counts, and bicycle racks as ground-truth regions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from import_fixtures import NuScenes, write_nuscenes

from perception.drives import DriveReader
from perception.errors import DriveError
from perception.importers import import_nuscenes

PARKED = "58aa28b1c2a54dc88e169808c07331e3"  # nuScenes' vehicle.parked


def _tables(ds: NuScenes, name: str) -> tuple[Path, list[dict[str, Any]]]:
    path = ds.root / ds.version / f"{name}.json"
    return path, json.loads(path.read_text())


def _with_rack_and_attributes(ds: NuScenes, attribute_table: bool) -> None:
    path, anns = _tables(ds, "sample_annotation")
    for a in anns:
        if a["token"] == "ann-car-1":
            a["attribute_tokens"] = [PARKED]
    rack = dict(next(a for a in anns if a["token"] == "ann-car-0"))
    rack.update(token="ann-rack-0", instance_token="inst-rack", size=[2.0, 6.0, 1.2], prev="", next="")
    rack.update(num_lidar_pts=30, num_radar_pts=0, attribute_tokens=[])
    path.write_text(json.dumps([*anns, rack]))
    path, cats = _tables(ds, "category")
    path.write_text(json.dumps([*cats, {"token": "cat-rack", "name": "static_object.bicycle_rack", "description": ""}]))
    path, inst = _tables(ds, "instance")
    path.write_text(json.dumps([*inst, {"token": "inst-rack", "category_token": "cat-rack", "nbr_annotations": 1}]))
    path = ds.root / ds.version / "attribute.json"
    if attribute_table:
        path.write_text(json.dumps([{"token": PARKED, "name": "vehicle.parked", "description": ""}]))
    else:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("attribute_table", [True, False])
def test_category_attribute_points_and_racks(tmp_path: Path, attribute_table: bool) -> None:
    ds = write_nuscenes(tmp_path / "ds")
    _with_rack_and_attributes(ds, attribute_table)
    summary = import_nuscenes(ds.root, ds.scene, tmp_path / "n.mcap")
    with DriveReader(tmp_path / "n.mcap") as d:
        gts = d.ground_truth()
    car0, ped = gts[0].objects
    assert (car0.category, car0.attribute, car0.num_lidar_pts, car0.num_radar_pts) == ("vehicle.car", "", 10, 1)
    assert gts[1].objects[0].attribute == "vehicle.parked"  # from the table, or nuScenes' own tokens without it
    assert ped.category == "human.pedestrian.adult"
    assert (ped.attribute, ped.num_lidar_pts, ped.num_radar_pts) == (None, None, None)  # fields absent: unknown
    assert any("unknown attribute (no attribute_tokens field)" in n for n in summary.notes)
    (rack,) = gts[0].regions
    assert rack.kind == "static_object.bicycle_rack" and rack.size == (6.0, 2.0, 1.2)
    np.testing.assert_allclose(rack.center, car0.center, atol=1e-9)  # placed where the car annotation was
    assert gts[1].regions == () and not any("bicycle_rack" in k for k in summary.skipped)


def test_bad_point_count_names_the_table(tmp_path: Path) -> None:
    ds = write_nuscenes(tmp_path / "ds")
    path, anns = _tables(ds, "sample_annotation")
    anns[0]["num_lidar_pts"] = -3
    path.write_text(json.dumps(anns))
    with pytest.raises(DriveError, match="num_lidar_pts must be a non-negative integer") as err:
        import_nuscenes(ds.root, ds.scene, tmp_path / "n.mcap")
    assert "sample_annotation.json" in str(err.value)
