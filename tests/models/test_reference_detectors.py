"""The reference lidar and radar models through the real embedded Triton server (session fixture)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

LIDAR_OUT = ("BOXES", "LABELS", "SCORES")
RADAR_OUT = ("POSITIONS", "RADIAL_VELOCITY", "VELOCITY", "RCS", "SCORES", "RETURNS")


def infer(
    client: grpcclient.InferenceServerClient, model: str, points: np.ndarray, outputs: tuple[str, ...]
) -> dict[str, np.ndarray]:
    inp = grpcclient.InferInput("POINTS", list(points.shape), np_to_triton_dtype(points.dtype))
    inp.set_data_from_numpy(points)
    result = client.infer(
        model, [inp], outputs=[grpcclient.InferRequestedOutput(o) for o in outputs], client_timeout=60.0
    )
    return {o: result.as_numpy(o) for o in outputs}


def car_sweep(x: float = 12.0, y: float = 4.0, n_ground: int = 20_000, seed: int = 0) -> np.ndarray:
    """Lidar-like ``[N,4]`` points: a flat road 1.8 m below the sensor and the two near faces of a car."""
    rng = np.random.default_rng(seed)
    r = rng.uniform(2.0, 60.0, n_ground)
    a = rng.uniform(-math.pi, math.pi, n_ground)
    ground = np.column_stack([r * np.cos(a), r * np.sin(a), np.full(n_ground, -1.8)])
    s, h = rng.uniform(0, 1, (2, 600))
    rear = np.column_stack([np.full(600, x - 2.25), y - 0.9 + 1.8 * s, -1.8 + 1.5 * h])
    side = np.column_stack([x - 2.25 + 4.5 * s, np.full(600, y - 0.9), -1.8 + 1.5 * h])
    xyz = np.concatenate([ground, rear, side]) + rng.normal(0, 0.01, (n_ground + 1200, 3))
    return np.column_stack([xyz, np.full(len(xyz), 0.3)]).astype(np.float32)


def radar_rows() -> np.ndarray:
    """Two objects: a car overtaking close on the left (24 returns) and a parked car ahead (5 returns)."""
    rng = np.random.default_rng(1)
    rows = []
    for (x, y, vx, vy, half), n in (((3.0, 3.0, 8.0, 0.0, 2.25), 24), ((30.0, -3.0, 0.0, 0.0, 1.0), 5)):
        p = np.column_stack([x + rng.uniform(-half, half, n), y + rng.uniform(-0.9, 0.9, n), np.zeros(n)])
        u = p / np.linalg.norm(p, axis=1, keepdims=True)
        rows.append(np.column_stack([p, u[:, 0] * vx + u[:, 1] * vy, np.full(n, 5.0)]))
    return np.concatenate(rows).astype(np.float32)


def assert_invalid_arg(exc: InferenceServerException, *fragments: str) -> None:
    assert "INVALID_ARGUMENT" in str(exc.status()), exc
    for fragment in fragments:
        assert fragment in exc.message(), exc.message()


# ---------------------------------------------------------------------------------------------- lidar


def test_lidar_detects_a_car(client: grpcclient.InferenceServerClient) -> None:
    out = infer(client, "lidar_detector", car_sweep(), LIDAR_OUT)
    assert out["BOXES"].dtype == np.float32 and out["BOXES"].shape == (1, 7)
    assert out["LABELS"].dtype == np.int32 and out["LABELS"].tolist() == [0]
    assert out["SCORES"].dtype == np.float32 and 0.0 < out["SCORES"][0] <= 1.0
    assert math.hypot(out["BOXES"][0, 0] - 12.0, out["BOXES"][0, 1] - 4.0) < 0.3


@pytest.mark.parametrize(
    ("points", "fragments"),
    [
        (np.zeros((10, 4), np.float64), ("POINTS", "FP64", "FP32")),
        (np.zeros((10, 3), np.float32), ("POINTS", "[-1,4]", "[10,3]")),
        (np.zeros((40,), np.float32), ("POINTS", "[-1,4]", "[40]")),
        (np.zeros((2, 10, 4), np.float32), ("POINTS", "[-1,4]")),
    ],
    ids=["fp64", "3-columns", "rank-1", "rank-3"],
)
def test_lidar_rejects_malformed_points(
    client: grpcclient.InferenceServerClient, points: np.ndarray, fragments: tuple[str, ...]
) -> None:
    with pytest.raises(InferenceServerException) as info:
        infer(client, "lidar_detector", points, LIDAR_OUT)
    assert_invalid_arg(info.value, *fragments)
    # The model keeps serving after a bad request.
    assert infer(client, "lidar_detector", car_sweep(n_ground=2000), LIDAR_OUT)["LABELS"].tolist() == [0]


@pytest.mark.parametrize(
    "points",
    [
        np.zeros((0, 4), np.float32),
        np.full((500, 4), np.nan, np.float32),
        np.array([[np.inf, 0, 0, 0], [0, -np.inf, 0, 0]], np.float32),
    ],
    ids=["empty", "all-nan", "inf"],
)
def test_lidar_answers_empty_for_no_usable_points(client: grpcclient.InferenceServerClient, points: np.ndarray) -> None:
    out = infer(client, "lidar_detector", points, LIDAR_OUT)
    assert out["BOXES"].shape == (0, 7)
    assert out["LABELS"].shape == (0,) and out["SCORES"].shape == (0,)


def test_lidar_nan_rows_are_ignored(client: grpcclient.InferenceServerClient) -> None:
    sweep = car_sweep()
    sweep[::7] = np.nan
    assert infer(client, "lidar_detector", sweep, LIDAR_OUT)["LABELS"].tolist() == [0]


def test_lidar_handles_250k_points(client: grpcclient.InferenceServerClient) -> None:
    out = infer(client, "lidar_detector", car_sweep(n_ground=250_000), LIDAR_OUT)
    assert out["LABELS"].tolist() == [0]


# ---------------------------------------------------------------------------------------------- radar


def test_radar_detects_objects_and_velocity(client: grpcclient.InferenceServerClient) -> None:
    out = infer(client, "radar_detector", radar_rows(), RADAR_OUT)
    assert out["POSITIONS"].shape == (2, 3) and out["VELOCITY"].shape == (2, 2)
    assert all(out[name].dtype == np.float32 for name in RADAR_OUT if name != "RETURNS")
    assert out["RETURNS"].dtype == np.int32
    mover = int(np.argmin(out["POSITIONS"][:, 0]))
    assert out["RETURNS"][mover] == 24 and out["RETURNS"][1 - mover] == 5
    np.testing.assert_allclose(out["VELOCITY"][mover], [8.0, 0.0], atol=0.3)
    parked = 1 - mover
    assert abs(out["RADIAL_VELOCITY"][parked]) < 0.1
    assert np.all((out["SCORES"] > 0) & (out["SCORES"] <= 1))


def test_radar_extra_columns_are_accepted(client: grpcclient.InferenceServerClient) -> None:
    rows = radar_rows()
    wide = np.column_stack([rows, np.ones((len(rows), 3), np.float32)])
    a = infer(client, "radar_detector", rows, RADAR_OUT)
    b = infer(client, "radar_detector", wide, RADAR_OUT)
    np.testing.assert_array_equal(a["POSITIONS"], b["POSITIONS"])


@pytest.mark.parametrize(
    ("points", "fragments"),
    [
        (np.zeros((10, 4), np.float32), ("POINTS", "at least 5 columns", "got 4")),
        (np.zeros((10, 5), np.float64), ("POINTS", "FP64", "FP32")),
        (np.zeros((50,), np.float32), ("POINTS", "[-1,-1]", "[50]")),
    ],
    ids=["4-columns", "fp64", "rank-1"],
)
def test_radar_rejects_malformed_points(
    client: grpcclient.InferenceServerClient, points: np.ndarray, fragments: tuple[str, ...]
) -> None:
    with pytest.raises(InferenceServerException) as info:
        infer(client, "radar_detector", points, RADAR_OUT)
    assert_invalid_arg(info.value, *fragments)
    assert infer(client, "radar_detector", radar_rows(), RADAR_OUT)["POSITIONS"].shape == (2, 3)


@pytest.mark.parametrize(
    "points",
    [np.zeros((0, 5), np.float32), np.full((30, 5), np.nan, np.float32)],
    ids=["empty", "all-nan"],
)
def test_radar_answers_empty_for_no_usable_rows(client: grpcclient.InferenceServerClient, points: np.ndarray) -> None:
    out = infer(client, "radar_detector", points, RADAR_OUT)
    assert out["POSITIONS"].shape == (0, 3) and out["VELOCITY"].shape == (0, 2)
    assert out["SCORES"].shape == (0,)


def test_lidar_keeps_serving_after_a_client_gives_up(client: grpcclient.InferenceServerClient) -> None:
    """A request abandoned by its client (deadline) is cancelled between stages; the model serves on."""
    big = car_sweep(n_ground=250_000)
    inp = grpcclient.InferInput("POINTS", list(big.shape), "FP32")
    inp.set_data_from_numpy(big)
    with pytest.raises(InferenceServerException) as info:
        client.infer("lidar_detector", [inp], client_timeout=0.005)
    assert "DEADLINE_EXCEEDED" in str(info.value.status())
    assert infer(client, "lidar_detector", car_sweep(n_ground=2000), LIDAR_OUT)["LABELS"].tolist() == [0]
