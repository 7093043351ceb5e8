"""Reference radar detector: clustering in position + Doppler, least-squares velocity, clutter."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perception.modelkit import (
    RadarParams,
    cluster_radar,
    detect_radar,
    fit_velocity,
    split_by_motion,
    synthetic_radar_returns,
)


def test_least_squares_velocity_of_an_overtaking_car() -> None:
    # A car in the next lane, 3 m ahead, 3 m to the left, overtaking at 8 m/s: its returns span ~50 deg.
    rows = synthetic_radar_returns([(3.0, 3.0, 4.5, 1.8, 8.0, 0.5)], per_object=24, noise_vr=0.05, seed=3)
    det = detect_radar(rows)
    assert len(det) == 1
    np.testing.assert_allclose(det.velocity[0], [8.0, 0.5], atol=0.3)
    np.testing.assert_allclose(det.positions[0, :2], [3.0, 3.0], atol=1.5)


def test_fit_velocity_exact_and_degenerate() -> None:
    v_true = np.array([3.0, -2.0])
    pts = np.array([[10.0, -3.0, 0.0], [10.0, 0.0, 0.0], [9.0, 3.0, 0.0], [12.0, 1.0, 0.0]])
    u = pts / np.linalg.norm(pts, axis=1, keepdims=True)
    rows = np.column_stack([pts, u[:, :2] @ v_true, np.zeros(4)])
    v, std = fit_velocity(rows)
    np.testing.assert_allclose(v, v_true, atol=1e-9)
    assert math.isfinite(std) and std < 1.0
    # All returns on one line of sight: the tangential component is unobservable.
    same = np.array([[10.0, 0.0, 0.0, 2.0, 5.0], [20.0, 0.0, 0.0, 2.0, 5.0]])
    v, std = fit_velocity(same)
    assert np.isnan(v).all() and math.isinf(std)
    assert np.isnan(fit_velocity(same[:1])[0]).all()


def test_far_object_with_small_azimuth_spread_has_nan_velocity() -> None:
    rows = synthetic_radar_returns([(70.0, 5.0, 4.5, 1.8, 10.0, 0.0)], per_object=6, noise_vr=0.1, seed=4)
    det = detect_radar(rows)
    assert len(det) == 1
    assert np.isnan(det.velocity[0]).all()
    # The radial velocity is still measured: ~ v . u.
    u = np.array([70.0, 5.0]) / math.hypot(70.0, 5.0)
    assert det.radial_velocity[0] == pytest.approx(10.0 * u[0], abs=0.2)


def test_side_by_side_objects_with_different_speeds_separate() -> None:
    # Two cars 1.5 m apart laterally (closer than the position radius), one parked, one moving away.
    rows = synthetic_radar_returns(
        [(25.0, -1.0, 4.0, 1.2, 0.0, 0.0), (25.0, 1.0, 4.0, 1.2, 12.0, 0.0)], per_object=8, seed=5
    )
    labels, count = cluster_radar(rows.astype(np.float64))
    assert count == 2
    assert len(set(labels[:8])) == 1 and len(set(labels[8:])) == 1 and labels[0] != labels[8]
    det = detect_radar(rows)
    assert len(det) == 2
    order = np.argsort(det.radial_velocity)
    assert det.radial_velocity[order[0]] == pytest.approx(0.0, abs=0.2)
    assert det.radial_velocity[order[1]] == pytest.approx(12.0, abs=0.5)


def test_clutter_is_rejected() -> None:
    obj = synthetic_radar_returns([(20.0, 3.0, 4.5, 1.8, 5.0, 0.0)], per_object=8, seed=6)
    rng = np.random.default_rng(7)
    # Isolated weak static false alarms spread over the field of view (ego-compensated: ~0 m/s)...
    far = np.column_stack([
        rng.uniform(5, 80, 10), rng.uniform(-40, 40, 10), np.zeros(10), rng.normal(0, 0.15, 10), rng.uniform(-5, 5, 10)
    ])
    far = far[np.min(np.hypot(far[:, 0] - 20.0, far[:, 1] - 3.0)[:, None], axis=1) > 8.0]
    # ...and returns below the RCS floor right on the object.
    weak = obj.copy()
    weak[:, 4] = -30.0
    det = detect_radar(np.concatenate([obj, far, weak]).astype(np.float32))
    assert len(det) == 1
    np.testing.assert_allclose(det.positions[0, :2], [20.0, 3.0], atol=1.5)


def test_isolated_moving_return_is_an_object_with_a_low_score() -> None:
    # A far pedestrian often gives one return; its Doppler (static clutter reads ~0) makes it an object.
    walker = np.array([[40.0, -6.0, 0.0, -1.2, -4.0]], np.float32)
    car = synthetic_radar_returns([(20.0, 3.0, 4.5, 1.8, 5.0, 0.0)], per_object=8, seed=6)
    det = detect_radar(np.concatenate([car, walker]))
    assert len(det) == 2
    lone = int(np.argmin(det.scores))
    np.testing.assert_allclose(det.positions[lone], walker[0, :3])
    assert det.radial_velocity[lone] == pytest.approx(-1.2)
    assert np.isnan(det.velocity[lone]).all()
    assert det.scores[lone] < 0.5 * det.scores[1 - lone]
    # The same return reading ~0 m/s is clutter; and the rule can be switched off.
    assert len(detect_radar(np.concatenate([car, walker * [1, 1, 1, 0.1, 1]]))) == 1
    assert len(detect_radar(np.concatenate([car, walker]), RadarParams(single_min_speed=math.inf))) == 1


def test_radial_velocity_is_along_the_reported_line_of_sight() -> None:
    # A wide, close object crossing at 6 m/s with a small forward component: the returns' Doppler values
    # differ across its azimuth spread; the reported radial velocity is v . u at the reported position.
    v = np.array([1.0, 6.0])
    det = detect_radar(synthetic_radar_returns([(12.0, 4.0, 4.5, 1.8, *v)], per_object=5, noise_vr=0.02, seed=11))
    assert len(det) == 1
    u = det.positions[0, :2] / np.linalg.norm(det.positions[0, :2])
    assert det.radial_velocity[0] == pytest.approx(float(v @ u), abs=0.03)  # the plain mean is 0.08 off


def test_strong_single_return_is_kept() -> None:
    rows = np.array([[30.0, 2.0, 0.0, -3.0, 20.0]], np.float32)
    det = detect_radar(rows)
    assert len(det) == 1
    assert np.isnan(det.velocity[0]).all()
    assert det.rcs[0] == pytest.approx(20.0)


def test_position_is_rcs_weighted_and_rcs_is_total_power() -> None:
    rows = np.array([[10.0, 0.0, 0.0, 1.0, 20.0], [11.0, 0.0, 0.0, 1.0, 0.0]], np.float32)
    det = detect_radar(rows)
    assert len(det) == 1
    assert det.positions[0, 0] == pytest.approx((10.0 * 100 + 11.0 * 1) / 101, abs=1e-4)
    assert det.rcs[0] == pytest.approx(10 * math.log10(101), abs=1e-4)


def test_empty_invalid_and_extra_columns() -> None:
    assert len(detect_radar(np.zeros((0, 5), np.float32))) == 0
    assert len(detect_radar(np.full((20, 5), np.nan, np.float32))) == 0
    rows = synthetic_radar_returns([(15.0, -2.0, 4.5, 1.8, 0.0, 6.0)], per_object=8, seed=8)
    extra = np.column_stack([rows, np.full((rows.shape[0], 2), 7.0, np.float32)])
    with_nan = np.concatenate([extra, np.full((3, 7), np.nan, np.float32)])
    a, b = detect_radar(rows), detect_radar(with_nan)
    np.testing.assert_allclose(a.positions, b.positions)
    np.testing.assert_allclose(a.velocity, b.velocity)
    with pytest.raises(ValueError, match=">=5"):
        detect_radar(np.zeros((3, 4), np.float32))


def test_velocity_threshold_is_a_parameter() -> None:
    rows = synthetic_radar_returns([(40.0, 0.0, 4.5, 1.8, 0.0, 5.0)], per_object=8, seed=9)
    strict = detect_radar(rows, RadarParams(max_velocity_std=0.01))
    lenient = detect_radar(rows, RadarParams(max_velocity_std=100.0))
    assert np.isnan(strict.velocity).all()
    assert np.isfinite(lenient.velocity).all()


def test_cluster_of_two_motions_is_split() -> None:
    """A parked car and a mover on overlapping lines of sight: no single rigid velocity explains both."""
    az_static = np.radians(np.linspace(-20.0, -10.0, 6))
    az_moving = np.radians(np.array([-12.5, -10.5, -8.5]))
    def rows_at(az: np.ndarray, r: float, vr: float) -> np.ndarray:
        n = az.shape[0]
        return np.column_stack([r * np.cos(az), r * np.sin(az), np.zeros(n), np.full(n, vr), np.full(n, 5.0)])

    rows = np.concatenate([rows_at(az_static, 10.0, 0.0), rows_at(az_moving, 11.0, 3.0)])
    labels, count = cluster_radar(rows)
    assert count == 1  # close in space and Doppler-compatible pairwise: one spatial cluster...
    groups = split_by_motion(rows, np.flatnonzero(labels == 0))
    assert sorted(map(len, groups)) == [3, 6]  # ...but two motions
    det = detect_radar(rows.astype(np.float32))
    assert sorted(np.round(det.radial_velocity, 1).tolist()) == [0.0, 3.0]


def test_measured_priors_keep_near_isolated_static_returns() -> None:
    """With ``use_priors`` (real radars: parked cars give one or two returns each), an isolated static
    return near the sensor is an object scored by how often such returns lie on one (nuScenes scene
    0916: 67 % within 20 m, 5 % beyond 40 m); far static ones stay clutter; a mover scores its prior."""
    near = [12.0, 3.0, 0.0, 0.02, 2.0]
    far = [60.0, -10.0, 0.0, 0.0, 2.0]
    mover = [40.0, -6.0, 0.0, -1.2, -4.0]
    rows = np.array([near, far, mover], np.float32)
    assert len(detect_radar(rows)) == 1  # the default (simulator) rule: only the mover
    p = RadarParams(use_priors=1.0, single_static_range=25.0)
    det = detect_radar(rows, p)
    assert len(det) == 2
    by_x = {round(float(x)): float(s) for x, s in zip(det.positions[:, 0], det.scores, strict=True)}
    assert set(by_x) == {12, 40}
    r = math.hypot(12.0, 3.0)
    assert by_x[12] == pytest.approx(p.static_prior / (1 + math.exp((r - p.static_prior_range) / p.static_prior_width)))
    assert by_x[40] == pytest.approx(p.moving_prior)


def test_a_large_moving_cluster_is_split_in_memory_linear_in_its_returns() -> None:
    """An imaging radar's 1000 returns on one bus: every pair of returns was a hypothesis scored against every
    return (an [n, n(n-1)/2] array: ~8 GB here); a bounded number of pairs gives the same one motion."""
    import tracemalloc

    rng = np.random.default_rng(0)
    n = 1000
    xy = np.column_stack([rng.uniform(14.0, 17.0, n), rng.uniform(-5.0, 5.0, n)])
    u = xy / np.linalg.norm(xy, axis=1, keepdims=True)
    vr = u @ np.array([0.0, 8.0]) + rng.normal(0.0, 0.1, n)
    rows = np.column_stack([xy, np.zeros(n), vr, np.full(n, 5.0)])
    tracemalloc.start()
    try:
        groups = split_by_motion(rows, np.arange(n))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200e6, peak  # (n x 2048 pairs: ~16 MB an array)
    assert max(map(len, groups)) > 0.9 * n  # one motion explains nearly all of them
    best = max(groups, key=len)
    assert np.allclose(fit_velocity(rows[best])[0], [0.0, 8.0], atol=0.1)
