"""The column-by-column lidar caster against a brute-force reference (every ray against every box)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from perception.sim._lidar import LidarModel
from perception.sim._raycast import slab
from perception.sim._rig import SimLidarParams, SimMount, SimSensor
from perception.sim._world import Scene
from perception.types import GroundTruthObject, SensorKind


def _lidar(yaw_deg: float = 0.0, pitch_deg: float = 0.0, **params: float) -> LidarModel:
    p = {"beams": 24, "fov_up_deg": 20.0, "fov_down_deg": -30.0, "azimuth_step_deg": 1.5, "range_noise_m": 0.0,
         "quantization_m": 0.0, "dropout": 0.0, "max_range_m": 60.0, **params}
    cfg = SimSensor("lidar_top", SensorKind.LIDAR, SimMount((1.0, 0.3, 1.9), (0.0, pitch_deg, yaw_deg)), 10.0,
                    params=SimLidarParams(**p))  # type: ignore[arg-type]
    return LidarModel(cfg)


def _scene() -> Scene:
    """Rotated objects all around (across the +-pi azimuth seam too), tall and low boxes, a roof below
    and a sign gantry above the sensor (bottom-face hits), and a canopy the sensor stands under."""
    objs = [
        GroundTruthObject(1, "car", (9.0, 0.5, 0.8), (4.5, 1.9, 1.6), 0.4, (0.0, 0.0)),
        GroundTruthObject(2, "truck", (-12.0, 0.2, 1.75), (10.0, 2.5, 3.5), -0.1, (0.0, 0.0)),  # behind: the seam
        GroundTruthObject(3, "pedestrian", (4.0, -5.0, 0.9), (0.5, 0.6, 1.8), 1.2, (0.0, 0.0)),
        GroundTruthObject(4, "car", (14.0, 2.0, 0.75), (4.2, 1.8, 1.5), 2.9, (0.0, 0.0)),  # partly behind car 1
        GroundTruthObject(5, "cyclist", (3.0, 3.0, 0.8), (1.8, 0.6, 1.6), -0.7, (0.0, 0.0)),
    ]
    scenery = [
        ((20.0, 18.0, 6.0), (30.0, 8.0, 12.0), 0.05),  # building facade
        ((25.0, 0.0, 6.5), (1.0, 20.0, 1.0), 0.0),  # gantry above the road: hit from below
        ((1.5, 0.0, 4.0), (16.0, 14.0, 0.3), 0.2),  # canopy over the sensor
        ((-4.0, -9.0, 0.4), (3.0, 3.0, 0.8), -0.3),  # low block: its top is seen
    ]
    return Scene.from_boxes(objs, scenery=scenery)


def _reference(model: LidarModel, scene: Scene) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Every ray against every part box (slab method), nearest wins, over the ground."""
    t = slab(model.origin, model.dirs, scene.part_center, scene.part_half, scene.part_yaw)  # [P, R]
    part = np.argmin(t, axis=0)
    best = t[part, np.arange(t.shape[1])]
    on_box = best < model.ground_t
    return np.where(on_box, best, model.ground_t).astype(np.float32), np.where(on_box, part, -1)


@pytest.mark.parametrize("yaw_deg", [0.0, 31.7])
def test_column_caster_matches_brute_force(yaw_deg: float) -> None:
    model = _lidar(yaw_deg)
    scene = _scene()
    assert model.columns is not None
    t, hit, part, cos = model.cast(scene)
    ref_t, ref_part = _reference(model, scene)
    finite = np.isfinite(ref_t)
    np.testing.assert_array_equal(np.isfinite(t), finite)
    np.testing.assert_allclose(t[finite], ref_t[finite], rtol=2e-6, atol=2e-5)
    mine = np.full(t.size, -1)
    mine[hit] = part
    # the same box, except where two boxes are equally near (touching faces)
    differ = np.nonzero(mine != ref_part)[0]
    assert differ.size <= 2
    assert hit.size > 1000 and set(np.unique(ref_part[ref_part >= 0])) == set(np.unique(part))
    # incidence: |cos| between the ray and the normal of the face it enters, as the general caster says
    _, g_hit, g_part, g_cos = model.cast(scene, general=True)
    _, a, b = np.intersect1d(hit, g_hit, return_indices=True)
    same = part[a] == g_part[b]
    close = np.abs(cos[a] - g_cos[b]) < 1e-4
    assert np.mean(close[same]) > 0.995  # edges may be entered through either face


def test_column_caster_points_equal_the_general_caster() -> None:
    model = _lidar(21.0, range_noise_m=0.02, dropout=0.05, quantization_m=1 / 256)
    scene = _scene()
    fast = model.capture(scene, np.random.default_rng(3))
    ref = model.capture(scene, np.random.default_rng(3), general=True)
    assert fast.shape == ref.shape and fast.shape[0] > 1000
    # same rays kept, same ranges up to float rounding (which may move a coordinate by one 1/256 m step)
    np.testing.assert_allclose(fast, ref, atol=1 / 256 + 1e-6)
    assert np.mean(np.all(fast == ref, axis=1)) > 0.99


def test_tilted_lidar_uses_the_general_caster() -> None:
    model = _lidar(pitch_deg=5.0)
    assert model.columns is None
    pts = model.capture(_scene(), np.random.default_rng(0))
    assert pts.shape[0] > 1000
