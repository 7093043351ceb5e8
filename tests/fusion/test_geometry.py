"""Fusion geometry: transforms, box corners, camera projection, ground back-projection, BEV IoU."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perception.fusion import (
    box_corners,
    invert_transform,
    project_boxes,
    project_points,
    transform_cloud,
    transform_points,
)
from perception.fusion._geometry import (
    bev_iou,
    bev_iou_pairs,
    box_iou_2d,
    pixel_rays,
    ray_ground_intersection,
    wrap_angle,
)
from perception.fusion._motion import twist_transform
from perception.fusion._testing import make_rig
from perception.types import Transform

FAST = settings(max_examples=60, deadline=None)

# A camera at base_link's origin looking along +x: optical z = x, optical x = -y, optical y = -z.
OPTICAL_FROM_BASE = np.array([[0.0, -1.0, 0.0, 0.0], [0.0, 0.0, -1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0, 0, 0, 1.0]])
K = np.array([[100.0, 0.0, 320.0], [0.0, 100.0, 240.0], [0.0, 0.0, 1.0]])

finite = st.floats(-50, 50, allow_nan=False, allow_infinity=False)
angle = st.floats(-math.pi, math.pi, allow_nan=False)
rect = st.tuples(finite, finite, st.floats(0.2, 10), st.floats(0.2, 10), angle)


def test_known_box_projects_to_its_known_image_box() -> None:
    # 2 m cube at 10 m straight ahead: the near face (x = 9) spans +-1 m -> +-100/9 px around the centre
    proj = project_boxes([[10.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0]], OPTICAL_FROM_BASE, K, 640, 480)
    assert proj.in_image.tolist() == [True]
    np.testing.assert_allclose(proj.boxes[0], [320 - 100 / 9, 240 - 100 / 9, 320 + 100 / 9, 240 + 100 / 9])
    assert proj.depth[0] == pytest.approx(10.0)
    assert proj.visible_fraction[0] == pytest.approx(1.0)


def test_projection_is_truncated_at_the_image_border_and_behind_the_camera() -> None:
    boxes = [
        [10.0, 32.0, 0.0, 2.0, 2.0, 2.0, 0.0],  # partly left of the image
        [-10.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0],  # behind
        [0.0, 0.0, 0.0, 4.0, 2.0, 2.0, 0.0],  # straddles the camera: cut at the near plane, fills the view
    ]
    proj = project_boxes(boxes, OPTICAL_FROM_BASE, K, 640, 480)
    assert proj.in_image.tolist() == [True, False, True]
    assert proj.boxes[0, 0] == 0.0 and 0.0 < proj.visible_fraction[0] < 1.0
    np.testing.assert_allclose(proj.boxes[1], 0.0)
    np.testing.assert_allclose(proj.boxes[2], [0.0, 0.0, 640.0, 480.0])


def test_rig_camera_projects_an_object_ahead_into_the_image_centre() -> None:
    rig = make_rig(cameras=2, radars=0)
    spec = rig["cam_front"]
    assert spec.calibration is not None
    cam_from_base = invert_transform(spec.extrinsic.matrix())
    proj = project_boxes([[20.0, 0.0, 1.6, 4.5, 1.8, 1.5, 0.0]], cam_from_base, spec.calibration.matrix(), 640, 360)
    u = 0.5 * (proj.boxes[0, 0] + proj.boxes[0, 2])
    assert proj.in_image[0] and u == pytest.approx(320.0)
    back = project_boxes([[20.0, 0.0, 1.6, 4.5, 1.8, 1.5, 0.0]], invert_transform(rig["cam_back"].extrinsic.matrix()),
                         spec.calibration.matrix(), 640, 360)  # fmt: skip
    assert not back.in_image[0]


def test_box_corners_and_2d_iou() -> None:
    c = box_corners([[1.0, 2.0, 3.0, 4.0, 2.0, 1.0, math.pi / 2]])[0]
    np.testing.assert_allclose(c.min(axis=0), [0.0, 0.0, 2.5], atol=1e-12)
    np.testing.assert_allclose(c.max(axis=0), [2.0, 4.0, 3.5], atol=1e-12)
    iou = box_iou_2d([[0, 0, 10, 10]], [[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30]])
    np.testing.assert_allclose(iou, [[1.0, 1 / 3, 0.0]])


def test_bev_iou_known_values() -> None:
    a = [0.0, 0.0, 4.0, 2.0, 0.0]
    assert bev_iou_pairs([a], [a])[0] == pytest.approx(1.0)
    assert bev_iou_pairs([a], [[2.0, 0.0, 4.0, 2.0, 0.0]])[0] == pytest.approx(1 / 3)
    assert bev_iou_pairs([a], [[0.0, 0.0, 4.0, 2.0, math.pi / 2]])[0] == pytest.approx(4 / 12)
    assert bev_iou_pairs([a], [[0.0, 0.0, 4.0, 2.0, math.pi]])[0] == pytest.approx(1.0)
    assert bev_iou_pairs([a], [[10.0, 0.0, 4.0, 2.0, 0.3]])[0] == 0.0


@FAST
@given(st.lists(rect, min_size=1, max_size=5), st.lists(rect, min_size=1, max_size=5))
def test_bev_iou_is_symmetric_and_bounded(a: list[tuple[float, ...]], b: list[tuple[float, ...]]) -> None:
    ab = bev_iou(a, b)
    ba = bev_iou(b, a)
    assert ab.shape == (len(a), len(b))
    assert np.all(ab >= 0.0) and np.all(ab <= 1.0)
    np.testing.assert_allclose(ab, ba.T, atol=1e-9)
    np.testing.assert_allclose(np.diag(bev_iou(a, a)), 1.0, atol=1e-9)


@FAST
@given(rect, rect)
def test_bev_iou_never_exceeds_the_smaller_over_the_larger_area(a: tuple[float, ...], b: tuple[float, ...]) -> None:
    iou = bev_iou_pairs([a], [b])[0]
    area_a, area_b = a[2] * a[3], b[2] * b[3]
    assert iou <= min(area_a, area_b) / max(area_a, area_b) + 1e-9


@FAST
@given(st.tuples(finite, finite, finite), st.tuples(angle, angle, angle), st.lists(st.tuples(finite, finite, finite),
       min_size=1, max_size=8))  # fmt: skip
def test_transform_round_trip(
    xyz: tuple[float, float, float], rpy: tuple[float, float, float], points: list[tuple[float, float, float]]
) -> None:
    m = Transform.from_xyz_rpy(xyz, rpy).matrix()
    p = np.asarray(points)
    np.testing.assert_allclose(transform_points(invert_transform(m), transform_points(m, p)), p, atol=1e-9)
    np.testing.assert_allclose(invert_transform(m) @ m, np.eye(4), atol=1e-12)


@FAST
@given(
    st.floats(-1.0, 1.0), st.floats(-0.3, 0.3), st.floats(-math.pi, math.pi), st.floats(1.0, 2.5),
    st.floats(4.0, 60.0), st.floats(-0.6, 0.6),
)  # fmt: skip
def test_projection_and_ground_back_projection_agree(
    x: float, y: float, yaw: float, height: float, distance: float, bearing: float
) -> None:
    # a camera at some height and heading, looking slightly down; a ground point in front of it
    body = Transform.from_xyz_rpy((x, y, height), (0.0, 0.1, yaw)).matrix()
    optical = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
    ext = body.copy()
    ext[:3, :3] = body[:3, :3] @ optical  # base_link <- optical
    ground = np.array([x + distance * math.cos(yaw + bearing), y + distance * math.sin(yaw + bearing), 0.0])
    pix = project_points(K, transform_points(invert_transform(ext), ground))
    rays = pixel_rays(K, pix[None]) @ ext[:3, :3].T
    lam = ray_ground_intersection(ext[:3, 3], rays)
    np.testing.assert_allclose(ext[:3, 3] + lam[0] * rays[0], ground, atol=1e-6)


def test_ray_above_the_horizon_never_meets_the_ground() -> None:
    lam = ray_ground_intersection([0.0, 0.0, 1.5], [[1.0, 0.0, 0.1], [1.0, 0.0, -0.1], [1.0, 0.0, 0.0]])
    assert math.isnan(lam[0]) and lam[1] == pytest.approx(15.0) and math.isnan(lam[2])


@FAST
@given(st.floats(-20, 20), st.floats(-3, 3), st.floats(-1.0, 1.0), st.floats(-0.5, 0.5))
def test_twist_transform_matches_integration(vx: float, vy: float, yaw_rate: float, dt: float) -> None:
    steps = 500
    x = y = th = 0.0
    h = dt / steps
    for _ in range(steps):  # midpoint integration of the planar unicycle
        mid = th + 0.5 * yaw_rate * h
        x += (vx * math.cos(mid) - vy * math.sin(mid)) * h
        y += (vx * math.sin(mid) + vy * math.cos(mid)) * h
        th += yaw_rate * h
    m = twist_transform(vx, vy, yaw_rate, dt)
    np.testing.assert_allclose(m[:2, 3], [x, y], atol=1e-4)
    assert math.atan2(m[1, 0], m[0, 0]) == pytest.approx(float(wrap_angle(th)), abs=1e-9)


@FAST
@given(st.tuples(finite, finite, finite), st.tuples(angle, angle, angle))
def test_pose_matrix_matches_transform_matrix(xyz: tuple[float, float, float], rpy: tuple[float, float, float]) -> None:
    from perception.fusion._motion import pose_matrix

    t = Transform.from_xyz_rpy(xyz, rpy)
    np.testing.assert_allclose(pose_matrix(t), t.matrix(), atol=1e-12)


def test_transform_cloud_moves_xyz_in_one_pass_and_keeps_the_other_columns() -> None:
    """A float32 cloud (read-only, as samples hold them) moved by a rigid transform: x, y, z as the
    float64 product rounded to float32, intensity untouched, the input left as it was."""
    rng = np.random.default_rng(3)
    cloud = rng.normal(scale=30.0, size=(500, 4)).astype(np.float32)
    cloud.setflags(write=False)
    yaw = 0.7
    m = np.eye(4)
    m[:2, :2] = [[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]]
    m[:3, 3] = [1.5, -2.0, 0.3]
    out = transform_cloud(m, cloud)
    assert out.dtype == np.float32 and out.shape == cloud.shape and out.flags.writeable
    np.testing.assert_allclose(out[:, :3], transform_points(m, cloud[:, :3]).astype(np.float32), rtol=0, atol=1e-5)
    np.testing.assert_array_equal(out[:, 3], cloud[:, 3])
    assert transform_cloud(m, np.zeros((0, 4), np.float32)).shape == (0, 4)


def test_transform_cloud_writes_into_the_rows_given_exactly_what_it_returns_otherwise() -> None:
    """``out=``: the moved cloud written into rows of a larger one (the merged cloud of a sweep accumulation),
    bit for bit what a new array gets, the rows around it untouched; an ``out`` of another shape is refused."""
    rng = np.random.default_rng(5)
    cloud = rng.normal(scale=40.0, size=(300, 4)).astype(np.float32)
    cloud.setflags(write=False)
    m = np.eye(4)
    m[:2, :2] = [[np.cos(-1.1), -np.sin(-1.1)], [np.sin(-1.1), np.cos(-1.1)]]
    m[:3, 3] = [0.25, 3.0, -1.0]
    merged = np.full((310, 4), 7.0, np.float32)
    assert transform_cloud(m, cloud, out=merged[5:305]) is not None
    np.testing.assert_array_equal(merged[5:305], transform_cloud(m, cloud))
    assert (merged[:5] == 7.0).all() and (merged[305:] == 7.0).all()
    with pytest.raises(ValueError, match="shape"):
        transform_cloud(m, cloud, out=merged[:10])
