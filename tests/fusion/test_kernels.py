"""The compiled loops (perception.fusion._kernels, behind project_homogeneous, occlusion_coverage and
box_iou_2d) against plain whole-array references, on random boxes: cameras seeing them from every side,
boxes reaching behind the near plane, empty inputs."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from perception.fusion import _kernels
from perception.fusion._geometry import box_corners, box_iou_2d, project_homogeneous

F64 = npt.NDArray[np.float64]
_EDGES = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [5, 6], [6, 7], [7, 4], [0, 4], [1, 5], [2, 6], [3, 7]])
_K = np.array([[500.0, 0.0, 320.0], [0.0, 500.0, 180.0], [0.0, 0.0, 1.0]])


def _reference_projection(h: F64, size: F64, near: float) -> tuple[F64, npt.NDArray[np.bool_], F64, F64]:
    """Front corners plus the near-plane crossings of every edge, bounded and clipped to the image."""
    m = h.shape[0]
    boxes, in_image, frac = np.zeros((m, 4)), np.zeros(m, bool), np.zeros(m)
    for i in range(m):
        z = h[i, :, 2]
        pts = [h[i, k] for k in range(8) if z[k] >= near]
        for a, b in _EDGES:
            if (z[a] - near) * (z[b] - near) < 0:
                t = (near - z[a]) / (z[b] - z[a])
                pts.append(h[i, a] + t * (h[i, b] - h[i, a]))
        if not pts:
            continue
        p = np.array(pts)
        uv = p[:, :2] / p[:, 2:]
        lo, hi = uv.min(0), uv.max(0)
        clipped = np.concatenate([np.clip(lo, 0, size[i]), np.clip(hi, 0, size[i])])
        area = (clipped[2] - clipped[0]) * (clipped[3] - clipped[1])
        full = (hi[0] - lo[0]) * (hi[1] - lo[1])
        frac[i] = area / full if full > 0 else 0.0
        if area > 0:
            boxes[i], in_image[i] = clipped, True
    return boxes, in_image, h[..., 2].mean(axis=1), frac


@pytest.mark.parametrize("seed", range(6))
def test_projection_matches_the_reference_including_boxes_behind_the_camera(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    boxes = np.column_stack(
        [
            rng.uniform(-3, 30, n),  # depth (optical z): some boxes straddle or sit behind the camera
            rng.uniform(-15, 15, n),
            rng.uniform(-1, 3, n),
            rng.uniform(0.5, 12, (n, 3)),
            rng.uniform(-np.pi, np.pi, n),
        ]
    )
    corners = box_corners(boxes)[..., [1, 2, 0]]  # (x, y, z) -> optical (right, down, forward)
    h = corners @ _K.T
    size = np.tile([640.0, 360.0], (n, 1))
    got = project_homogeneous(h, size)
    want = _reference_projection(h, size, 0.1)
    assert (h[..., 2] < 0.1).any(axis=1).sum() > 3  # the clipping path is exercised
    np.testing.assert_allclose(got.boxes, want[0], atol=1e-6)
    np.testing.assert_array_equal(got.in_image, want[1])
    np.testing.assert_allclose(got.depth, want[2], atol=1e-9)
    np.testing.assert_allclose(got.visible_fraction, want[3], atol=1e-9)


def occlusion_coverage(boxes: F64, depth: F64, valid: npt.NDArray[np.bool_], group: npt.NDArray[np.intp]) -> F64:
    cover = np.empty(boxes.shape[0])
    _kernels.occlusion(_kernels.c_array(boxes), _kernels.c_array(depth), valid, _kernels.c_array(group, np.intp), cover)
    return cover


def _random_boxes(rng: np.random.Generator, n: int) -> F64:
    xy = rng.uniform(0, 300, (n, 2))
    return np.concatenate([xy, xy + rng.uniform(0, 80, (n, 2))], axis=1)


@pytest.mark.parametrize("seed", range(6))
def test_occlusion_and_iou_match_whole_array_references(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = _random_boxes(rng, 30), _random_boxes(rng, 25)
    a[:3] = 0.0  # zero-area boxes (out of view)
    depth, valid, group = rng.uniform(1, 50, 30), rng.random(30) > 0.2, rng.integers(0, 2, 30)

    def inter(p: F64, q: F64) -> F64:
        w = np.minimum(p[:, None, 2], q[None, :, 2]) - np.maximum(p[:, None, 0], q[None, :, 0])
        h = np.minimum(p[:, None, 3], q[None, :, 3]) - np.maximum(p[:, None, 1], q[None, :, 1])
        out: F64 = np.maximum(w, 0) * np.maximum(h, 0)
        return out

    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter(a, b)
    want_iou = np.divide(inter(a, b), union, out=np.zeros_like(union), where=union > 0)
    np.testing.assert_allclose(box_iou_2d(a, b), want_iou, atol=1e-12)

    occluder = (depth[None, :] < depth[:, None]) & valid[None, :] & (group[None, :] == group[:, None])
    cover = np.where(occluder, inter(a, a), 0.0).max(axis=1)
    want_cover = np.divide(cover, area_a, out=np.zeros_like(cover), where=area_a > 0)
    np.testing.assert_allclose(occlusion_coverage(a, depth, valid, group), want_cover, atol=1e-12)


def test_empty_inputs() -> None:
    assert box_iou_2d(np.zeros((0, 4)), np.zeros((3, 4))).shape == (0, 3)
    assert occlusion_coverage(np.zeros((0, 4)), np.zeros(0), np.zeros(0, bool), np.zeros(0, np.intp)).shape == (0,)
    p = project_homogeneous(np.zeros((0, 8, 3)), np.zeros((0, 2)))
    assert p.boxes.shape == (0, 4) and p.in_image.shape == (0,)


def test_a_point_inside_a_box_is_exactly_zero_off_it() -> None:
    """Inside a (rotated) box the offset is 0.0, not rounding noise: radar objects inside one box tie
    exactly (the later index wins, as documented) instead of by noise that a 1e-13 m shift reorders."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        yaw = rng.uniform(-np.pi, np.pi)
        length, width = rng.uniform(1.0, 6.0), rng.uniform(0.5, 2.5)
        along, across = rng.uniform(-0.49, 0.49) * length, rng.uniform(-0.49, 0.49) * width
        c, s = np.cos(yaw), np.sin(yaw)
        dx, dy = c * along - s * across + 1e-13, s * along + c * across
        assert _kernels._off_box(dx, dy, c, s, length, width) == (0.0, 0.0)
    # outside: the offset to the nearest face
    ex, ey = _kernels._off_box(3.0, 0.0, 1.0, 0.0, 4.0, 2.0)
    assert (ex, ey) == pytest.approx((1.0, 0.0))


def test_fusion_compiles_each_kernel_once() -> None:
    """Every kernel sees one argument layout (C-contiguous, fixed dtypes) from the fuser: a second
    specialization would mean a multi-second compile in the middle of a drive."""
    from perception.config import FusionConfig
    from perception.fusion import Fuser
    from perception.fusion._testing import make_rig, scene_results, traffic_scene
    from perception.types import Frame

    rig = make_rig(cameras=2, radars=2)
    scene = traffic_scene(30, seed=3, ego_speed=8.0)
    for config in (FusionConfig(), FusionConfig(camera_only=False, radar_only=False, tracking=False)):
        fuser = Fuser(config, rig, ego_at=scene.ego_at)
        for k in range(8):
            results = scene_results(scene, rig, k * 100_000_000, offsets_ns={"cam_front": -15_000_000}, seed=k)
            fuser(Frame(k, k * 100_000_000, {}), results)
    kernels = (
        _kernels.project,
        _kernels.box_iou,
        _kernels.attach_radar,
        _kernels.camera_pairs,
        _kernels.camera_evidence,
    )
    for kernel in kernels:
        assert len(getattr(kernel, "signatures")) == 1, getattr(kernel, "signatures")  # noqa: B009


def test_a_frame_without_the_lidar_compiles_nothing_new() -> None:
    """A frame whose lidar answered late (overload, a slow model) has no lidar objects: the fuser's
    shared empty objects are read-only, and camera_candidates took them as they are, a second
    specialization (read-only arrays) compiled in the middle of the drive. Measured on
    ``perception replay --rate 2`` of the bundled drive: 3.9 s of fusion on its first lidar-late frame,
    which the overload policy then took as the frames' service time and shed 94 of 100 frames."""
    import dataclasses

    from perception.config import FusionConfig
    from perception.fusion import Fuser, _point_kernels
    from perception.fusion._testing import make_rig, scene_results, traffic_scene
    from perception.types import Frame, SensorStatus

    rig = make_rig(cameras=2, radars=2)
    scene = traffic_scene(30, seed=3, ego_speed=8.0)
    fuser = Fuser(FusionConfig(), rig, ego_at=scene.ego_at)
    for k in range(6):
        results = scene_results(scene, rig, k * 100_000_000, seed=k)
        if k % 2:  # the lidar late: no answer, so no lidar object
            results["lidar_top"] = dataclasses.replace(
                results["lidar_top"], status=SensorStatus.LATE, outputs={}, error="late"
            )
        fuser(Frame(k, k * 100_000_000, {}), results)
    for module in (_kernels, _point_kernels):
        for name in module.__all__:
            kernel = getattr(module, name)
            if hasattr(kernel, "signatures"):
                assert len(getattr(kernel, "signatures")) <= 1, (name, getattr(kernel, "signatures"))  # noqa: B009


def _refine_inside(r_xy: list[tuple[float, float]], surface_factor: float = 0.75) -> F64:
    """One camera candidate (a car 4.5 x 1.9 m, 20 m ahead, heading along the ray, covariance long along
    it) refined by radar objects seen straight ahead (line of sight +x) at ``r_xy``; its new centre."""
    center = np.array([[20.0, 0.0, 0.8]])
    cov = np.array([[[4.0, 0.0], [0.0, 0.1]]])
    k = len(r_xy)
    r_cov = np.tile(np.array([[0.04, 0.0], [0.0, 0.09]]), (k, 1, 1))
    los = np.tile(np.array([1.0, 0.0]), (k, 1))
    speeds = np.full(8, 60.0)
    _kernels.attach_radar(
        center, np.array([[4.5, 1.9, 1.6]]), np.zeros(1), cov, np.zeros(1, np.intp), np.array([0.3]),
        np.zeros((1, 2), bool), np.zeros((1, 2)), np.full(1, np.inf), np.zeros(1, bool), np.full((1, 3), np.nan),
        np.array(r_xy, np.float64), r_cov, np.zeros((k, 2)), np.ones(k, bool), np.zeros(k), np.full(k, 0.9),
        np.zeros((k, 3)), los, np.ones(k, np.intp), np.ones(k, bool), 9.21, 0.5, 0.15, 2, speeds,
        np.full(8, 0.5), np.full(8, 0.5), surface_factor, True,
    )  # fmt: skip
    return center[0, :2].copy()


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_of_two_radar_objects_inside_a_candidate_the_one_whose_centre_estimate_fits_refines_it(
    order: tuple[int, int],
) -> None:
    """Both radar objects lie inside the candidate's box (0 off it: a tie). A return comes from the near
    surface, so the radar's estimate of the centre is its point moved 0.75 half-lengths into the box: from
    the one 0.75 m behind the near face it lands 0.19 m from the centre, from the one 0.3 m behind the
    centre 2 m behind it. The first refines the candidate, whatever the order (the old tie-break, the raw
    point's distance to the centre, took the second and moved the candidate 2 m back)."""
    near_face, at_centre = (18.5, 0.0), (20.3, 0.0)
    points = [(near_face, at_centre)[i] for i in order]
    x, y = _refine_inside(points)
    assert x == pytest.approx(18.5 + 0.75 * 2.25, abs=0.02) and y == pytest.approx(0.0, abs=1e-9)
    x_alone, _ = _refine_inside([near_face])
    assert x == x_alone
