"""A View-of-Delft tree imported and replayed: the radar's over-ground radial velocity reaches the fused
objects. The synthetic tree of ``kitti_fixtures.write_vod`` (frame 1: a car at 10 m), with radar returns
written on that car, all with the same compensated radial velocity."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from kitti_fixtures import VOD_CAM_LIDAR, VOD_CAM_RADAR, write_vod

from perception.cli import main
from perception.importers import import_kitti
from perception.server import EmbeddedTriton

#: Where frame 1's car is (base_link, x y): see ``write_vod``.
CAR_XY = (10.0, 2.0)
#: The car's over-ground radial velocity as the radar measures it (m/s, away from the radar).
V_R = 6.0


@pytest.fixture(scope="module")
def vod_drive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = write_vod(tmp_path_factory.mktemp("vod_replay"))
    (car,) = [b for b in tree.boxes[1] if b.kind == "Car"]
    assert car.centre[:2] == CAR_XY
    # radar returns on the car's surface (base_link), written in the radar frame: x, y, z, RCS, v_r,
    # v_r_compensated, time (0: this scan)
    on_car = car.points(3)[::3]
    radar_from_base = np.linalg.inv(VOD_CAM_RADAR) @ VOD_CAM_LIDAR
    xyz = on_car @ radar_from_base[:3, :3].T + radar_from_base[:3, 3]
    n = len(xyz)
    rows = np.column_stack([xyz, np.full(n, 10.0), np.full(n, V_R - 1.0), np.full(n, V_R), np.zeros(n)])
    (tree.root / "radar" / "training" / "velodyne" / "00001.bin").write_bytes(rows.astype("<f4").tobytes())
    out = tree.root.parent / "vod.mcap"
    import_kitti(tree.root, out)
    return out


def test_a_replayed_vod_drive_carries_radar_velocity_into_the_fused_car(
    vod_drive: Path, triton: EmbeddedTriton, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    argv = ["replay", str(vod_drive), "--url", triton.grpc_url, "--rate", "lockstep", "--out", str(out)]
    assert main([*argv, "--no-progress", "--no-fused-mcap"]) == 0
    records = [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(s["status"] == "ok" for r in records for s in r["sensors"].values())
    # frame 0 (the tree's frame 1): the car, fused from the lidar and the radar, moves away from the radar
    # at the radar's compensated radial velocity (not its uncompensated v_r, 1 m/s less)
    cars = [d for d in records[0]["detections"] if d["label"] == "car" and math.dist(d["center"][:2], CAR_XY) < 2.0]
    assert len(cars) == 1, records[0]["detections"]
    (car,) = cars
    assert "radar_front" in car["sources"], car
    radar_xy = (np.linalg.inv(VOD_CAM_LIDAR) @ VOD_CAM_RADAR)[:2, 3]
    sight = np.asarray(car["center"][:2]) - radar_xy
    radial = float(np.dot(car["velocity"], sight / np.linalg.norm(sight)))
    assert radial == pytest.approx(V_R, abs=0.5), car
    assert math.hypot(*car["velocity"]) == pytest.approx(V_R, abs=1.0), car
