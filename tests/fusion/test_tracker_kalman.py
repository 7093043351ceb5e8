"""The tracker's array shortcuts equal the textbook formulas they replace (Kalman update, rotations)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from perception.fusion._tracker import _rotate_covariances, _rotated_variances, _scalar_update

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
    for j in (2, 3):
        _scalar_update(got_x, got_p, got_p[:, :, j], got_p[:, j, j], got_x[:, j], z[:, j - 2], var)
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
    got_x, got_p = x.copy(), p.copy()
    _scalar_update(got_x, got_p, ph, (h @ ph[:, :, None])[:, 0, 0], (h @ x[:, :, None])[:, 0, 0], z, r)
    np.testing.assert_allclose(got_x, want_x, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got_p, want_p, rtol=1e-9, atol=1e-9)


@FAST
@given(seed=SEEDS, theta=st.floats(-np.pi, np.pi))
def test_rotated_covariances_and_variances(seed: int, theta: float) -> None:
    rng = np.random.default_rng(seed)
    cov, r = _spd(rng, 6, 2), _rotation(theta)
    np.testing.assert_allclose(_rotate_covariances(r, cov), r @ cov @ r.T, rtol=1e-12, atol=1e-12)
    back = r.T @ cov @ r
    np.testing.assert_allclose(_rotated_variances(r, cov), np.diagonal(back, axis1=1, axis2=2), rtol=1e-12, atol=1e-12)
