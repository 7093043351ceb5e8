"""The tracker's compiled loops (perception.fusion._track_kernels) equal the textbook formulas: Kalman
updates, the constant-velocity prediction, rotations into and out of the world frame."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from perception.fusion import _track_kernels as tk

FAST = settings(max_examples=40, deadline=None)
SEEDS = st.integers(0, 2**32 - 1)
F64 = npt.NDArray[np.float64]


def _spd(rng: np.random.Generator, k: int, n: int) -> F64:
    """``k`` random symmetric positive-definite ``n x n`` matrices."""
    a = rng.normal(size=(k, n, n))
    out: F64 = a @ a.swapaxes(1, 2) + 0.1 * np.eye(n)
    return out


def _rotation(theta: float) -> F64:
    c, s = np.cos(theta), np.sin(theta)
    return np.array([[c, -s], [s, c]])


@FAST
@given(seed=SEEDS)
def test_two_scalar_velocity_updates_equal_the_2d_update(seed: int) -> None:
    """A full velocity with isotropic noise: updating vx then vy equals one 2D measurement update."""
    rng = np.random.default_rng(seed)
    k = 5
    p, x = _spd(rng, k, 4), rng.normal(size=(k, 4))
    z, var = rng.normal(size=(k, 2)), rng.uniform(0.01, 4.0, k)
    # textbook: H = [0 I], R = var I
    s = p[:, 2:, 2:] + var[:, None, None] * np.eye(2)
    gain = p[:, :, 2:] @ np.linalg.inv(s)
    want_x = x + (gain @ (z - x[:, 2:])[:, :, None])[:, :, 0]
    want_p = p - gain @ p[:, 2:, :]
    got_x, got_p = x.copy(), p.copy()
    for i in range(k):
        for j in (2, 3):
            ph = got_p[i, :, j].copy()
            tk._scalar_update(got_x[i], got_p[i], ph, ph[j], got_x[i, j], z[i, j - 2], var[i])
    np.testing.assert_allclose(got_x, want_x, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got_p, want_p, rtol=1e-9, atol=1e-9)


@FAST
@given(seed=SEEDS)
def test_scalar_update_along_a_direction(seed: int) -> None:
    """A radial velocity ``u . v``: the scalar update equals the general formula with ``h = [0, 0, ux, uy]``."""
    rng = np.random.default_rng(seed)
    k = 4
    p, x = _spd(rng, k, 4), rng.normal(size=(k, 4))
    theta = rng.uniform(-np.pi, np.pi, k)
    h = np.zeros((k, 1, 4))
    h[:, 0, 2], h[:, 0, 3] = np.cos(theta), np.sin(theta)
    z, r = rng.normal(size=k), rng.uniform(0.01, 1.0, k)
    s = (h @ p @ h.swapaxes(1, 2))[:, 0, 0] + r
    gain = (p @ h.swapaxes(1, 2))[:, :, 0] / s[:, None]
    want_x = x + gain * (z - (h @ x[:, :, None])[:, 0, 0])[:, None]
    want_p = p - gain[:, :, None] * (h @ p)[:, 0, None, :]
    ph = (p @ h.swapaxes(1, 2))[:, :, 0]
    hph, hx = (h @ ph[:, :, None])[:, 0, 0], (h @ x[:, :, None])[:, 0, 0]
    got_x, got_p = x.copy(), p.copy()
    for i in range(k):
        tk._scalar_update(got_x[i], got_p[i], ph[i], hph[i], hx[i], z[i], r[i])
    np.testing.assert_allclose(got_x, want_x, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got_p, want_p, rtol=1e-9, atol=1e-9)


def _pose(rng: np.random.Generator, theta: float) -> F64:
    w = np.eye(4)
    w[:2, :2] = _rotation(theta)
    w[:3, 3] = rng.normal(size=3) * 10
    return w


@FAST
@given(seed=SEEDS, theta=st.floats(-np.pi, np.pi))
def test_detections_into_the_world_and_tracks_out_of_it(seed: int, theta: float) -> None:
    rng = np.random.default_rng(seed)
    n = 6
    w, r = _pose(rng, theta), _rotation(theta)
    center, cov = rng.normal(size=(n, 3)) * 10, _spd(rng, n, 2)
    z, rw = np.empty((n, 3)), np.empty((n, 2, 2))
    tk.to_world(center, cov, w, z, rw)
    np.testing.assert_allclose(z, center @ w[:3, :3].T + w[:3, 3], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rw, r @ cov @ r.T, rtol=1e-12, atol=1e-12)
    # tracks (confirmed, all shown) back into base_link: centre, velocity and the rotated variances
    table, p = np.zeros((n, tk.NCOL)), np.zeros((n, 4, 4))
    table[:, :4], table[:, tk.Z] = rng.normal(size=(n, 4)), rng.normal(size=n)
    table[:, tk.SCORE], table[:, tk.HITS], table[:, tk.ID] = 1.0, 5.0, np.arange(n)
    p[:] = _spd(rng, n, 4)
    idx, ints, out = np.empty(n, np.intp), np.empty((n, 2), np.int64), np.empty((n, tk.OUT_COLS))
    assert tk.track_rows(table, p, w, theta, 2, True, 0.6, 0.8, 0.0, 100.0, idx, ints, out) == n
    xyz = table[:, [0, 1, tk.Z]]
    np.testing.assert_allclose(out[:, 1:4], (xyz - w[:3, 3]) @ w[:3, :3], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out[:, 8:10], table[:, 2:4] @ r, rtol=1e-12, atol=1e-12)
    back = r.T @ p[:, :2, :2] @ r
    np.testing.assert_allclose(out[:, 10:12] ** 2, np.diagonal(back, axis1=1, axis2=2), rtol=1e-12, atol=1e-12)


@FAST
@given(seed=SEEDS, dt=st.floats(0.01, 1.0))
def test_prediction_is_f_p_ft_plus_q(seed: int, dt: float) -> None:
    rng = np.random.default_rng(seed)
    n = 5
    table, p = np.zeros((n, tk.NCOL)), _spd(rng, n, 4)
    table[:, :4] = rng.normal(size=(n, 4))
    table[np.arange(n), tk.VOTES + rng.integers(0, tk.NCOL - tk.VOTES, n)] = 1.0  # a label each
    accel_var = rng.uniform(0.5, 9.0, tk.NCOL - tk.VOTES)
    f = np.eye(4)
    f[0, 2] = f[1, 3] = dt
    g = np.array([[dt**2 / 2, 0], [0, dt**2 / 2], [dt, 0], [0, dt]])  # white-noise acceleration
    q = accel_var[table[:, tk.VOTES :].argmax(axis=1)][:, None, None] * (g @ g.T)
    want_x, want_p = table[:, :4] @ f.T, f @ p @ f.T + q
    # the standing-still model: its position stays, its variance grows by the random walk; errors discounted
    table[:, tk.STILL_XY : tk.STILL_XY + 2] = rng.normal(size=(n, 2))
    table[:, tk.STILL_P : tk.STILL_P + 3] = rng.uniform(0.1, 1.0, (n, 3))
    table[:, tk.ERR_STILL], table[:, tk.ERR_MOVING] = rng.uniform(0, 20, n), rng.uniform(0, 20, n)
    still0 = table[:, tk.STILL_XY : tk.ERR_MOVING + 1].copy()
    tk.predict(table, p, dt, accel_var, 0.04, 0.9)
    np.testing.assert_allclose(table[:, :4], want_x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(p, want_p, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(table[:, tk.STILL_XY : tk.STILL_XY + 2], still0[:, :2])
    np.testing.assert_allclose(table[:, tk.STILL_P : tk.STILL_P + 3], still0[:, 2:5] + [0.04 * dt, 0.0, 0.04 * dt])
    np.testing.assert_allclose(table[:, [tk.ERR_STILL, tk.ERR_MOVING]], 0.9 * still0[:, 5:7])


@FAST
@given(seed=SEEDS)
def test_position_update_is_the_textbook_kalman_update(seed: int) -> None:
    """A detection without velocity: ``K = P H^T (H P H^T + R)^-1``, ``x + K (z - H x)``, ``(I - K H) P``;
    the detection is moved by the track velocity over its age; attributes as documented."""
    rng = np.random.default_rng(seed)
    n = 4
    table, p = np.zeros((n, tk.NCOL)), _spd(rng, n, 4)
    table[:, :4], table[:, tk.HITS], table[:, tk.SCORE] = rng.normal(size=(n, 4)), 1.0, 0.5
    s0, ps0 = rng.normal(size=(n, 2)), _spd(rng, n, 2)
    table[:, tk.STILL_XY : tk.STILL_XY + 2] = s0
    table[:, tk.STILL_P : tk.STILL_P + 3] = ps0[:, [0, 0, 1], [0, 1, 1]]
    x0, p0 = table[:, :4].copy(), p.copy()
    z, r, age = rng.normal(size=(n, 3)), _spd(rng, n, 2), rng.uniform(0, 0.05, n)
    ti = di = np.arange(n, dtype=np.intp)
    labels = np.zeros(n, np.intp)
    nan3 = np.full((n, 3), np.nan)
    votes, sources = np.eye(n, tk.NCOL - tk.VOTES), np.ones((n, 2), bool)
    alive = np.empty(n, bool)
    dead = tk.update(
        table, p, np.zeros((n, 2), bool), ti, di, z, r, age, labels, np.zeros((n, 2)), np.full(n, np.inf),
        np.zeros(n, bool), nan3, np.ones((n, 3)), np.zeros(n), np.ones(n), votes, sources,
        np.ones(n, np.int8), np.eye(2), 0.0, np.ones(4), np.zeros((4, 3)), 0.5, 0.8, 2, 3, np.full(4, 6.0), 25.0,
        alive,
    )  # fmt: skip
    h = np.zeros((2, 4))
    h[0, 0] = h[1, 1] = 1.0
    gain = p0 @ h.T @ np.linalg.inv(h @ p0 @ h.T + r)
    zt = z[:, :2] + age[:, None] * x0[:, 2:]
    want_x = x0 + (gain @ (zt - x0[:, :2])[:, :, None])[:, :, 0]
    want_p = (np.eye(4) - gain @ h) @ p0
    np.testing.assert_allclose(table[:, :4], want_x, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(p, 0.5 * (want_p + want_p.swapaxes(1, 2)), rtol=1e-9, atol=1e-9)
    assert dead == 0 and alive.all()
    np.testing.assert_array_equal(table[:, tk.HITS], 2.0)
    np.testing.assert_array_equal(table[:, tk.MISSES], 0.0)
    np.testing.assert_allclose(table[:, tk.SCORE], 0.75)
    np.testing.assert_allclose(table[:, tk.VOTES :], votes)
    # the standing-still model: the textbook update with the detection where it was (not moved)
    gain_s = ps0 @ np.linalg.inv(ps0 + r)
    want_s = s0 + (gain_s @ (z[:, :2] - s0)[:, :, None])[:, :, 0]
    want_ps = (np.eye(2) - gain_s) @ ps0
    np.testing.assert_allclose(table[:, tk.STILL_XY : tk.STILL_XY + 2], want_s, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(table[:, tk.STILL_P : tk.STILL_P + 3], want_ps[:, [0, 0, 1], [0, 1, 1]], atol=1e-9)
    # each model's error: the offset from its prediction under r, at most the cap (25); then the judgement
    r_inv = np.linalg.inv(r)
    moving = np.einsum("ni,nij,nj->n", zt - x0[:, :2], r_inv, zt - x0[:, :2])
    still = np.einsum("ni,nij,nj->n", z[:, :2] - s0, r_inv, z[:, :2] - s0)
    np.testing.assert_allclose(table[:, tk.ERR_MOVING], np.minimum(moving, 25.0), rtol=1e-9)
    np.testing.assert_allclose(table[:, tk.ERR_STILL], np.minimum(still, 25.0), rtol=1e-9)
    np.testing.assert_array_equal(table[:, tk.STILL], np.minimum(still, 25) <= np.minimum(moving, 25) + 6.0)


def test_the_tracker_compiles_each_kernel_once() -> None:
    """Every tracker kernel sees one argument layout (C-contiguous, fixed dtypes), also on the read-only
    path of an out-of-order frame and the untracked output: a second specialization would mean a
    multi-second compile in the middle of a drive."""
    from perception.config import FusionConfig
    from perception.fusion import Fuser
    from perception.fusion._testing import make_rig, missing, scene_results, traffic_scene
    from perception.types import Frame

    rig = make_rig(cameras=2, radars=2)
    scene = traffic_scene(30, seed=3, ego_speed=8.0)
    for config in (FusionConfig(), FusionConfig(tracking=False)):
        fuser = Fuser(config, rig, ego_at=scene.ego_at)
        for k in (0, 1, 2, 3, 2, 4, 5):
            results = scene_results(scene, rig, k * 100_000_000, offsets_ns={"cam_front": -15_000_000}, seed=k)
            if k == 4:
                results["lidar_top"] = missing("lidar_top")
            fuser(Frame(k, k * 100_000_000, {}), results)
    kernels = [getattr(tk, name) for name in tk.__all__ if hasattr(getattr(tk, name), "signatures")]
    assert len(kernels) == 8
    for kernel in kernels:
        assert len(getattr(kernel, "signatures")) == 1, getattr(kernel, "signatures")  # noqa: B009
