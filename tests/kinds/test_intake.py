"""The one intake check (perception.kinds.sample_problem / ego_problem): what it refuses and why."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perception._imageio import encode_jpeg
from perception.kinds import MAX_SAMPLE_BYTES, MAX_STAMP_NS, ego_problem, kind_def, sample_problem
from perception.kinds._intake import stamp_problem
from perception.types import EgoPose, ImageSample, PointCloudSample, Transform

LIDAR = kind_def("lidar")
RADAR = kind_def("radar")
CAMERA = kind_def("camera")


def cloud(t: object = 1, cols: int = 4, n: int = 3, fill: float = 1.0) -> PointCloudSample:
    fields = ("x", "y", "z", "intensity", "ring", "t")[:cols]
    return PointCloudSample("l", t, "l", np.full((n, cols), fill, np.float32), fields)  # type: ignore[arg-type]


def png_header(width: int, height: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes(8)


IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # a PNG's last chunk: without it, the file was cut short
JPEG = encode_jpeg(np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8))


@pytest.mark.parametrize(
    ("stamp", "problem"),
    [
        (float("nan"), "integer nanoseconds"),
        (1e18, "integer nanoseconds"),
        ("17", "integer nanoseconds"),
        (None, "integer nanoseconds"),
        (True, "integer nanoseconds"),
        (-1, "outside"),
        (MAX_STAMP_NS + 1, "outside"),
    ],
)
def test_bad_stamps(stamp: object, problem: str) -> None:
    assert problem in (stamp_problem(stamp) or "")
    assert problem in (sample_problem(cloud(stamp), LIDAR) or "")


def test_good_samples_pass() -> None:
    assert stamp_problem(0) is None and stamp_problem(np.uint64(MAX_STAMP_NS)) is None
    assert sample_problem(cloud(), LIDAR) is None
    assert sample_problem(cloud(cols=5), LIDAR) is None  # extra columns are the kind's to ignore
    assert sample_problem(cloud(fill=np.nan), LIDAR) is None  # missing returns: the models drop them
    assert sample_problem(cloud(n=0), LIDAR) is None
    assert sample_problem(ImageSample("c", 1, "c", png_header(7680, 4320) + IEND, "png"), CAMERA) is None
    assert sample_problem(ImageSample("c", 1, "c", JPEG), CAMERA) is None
    assert sample_problem(ImageSample("c", 1, "c", JPEG + bytes(3)), CAMERA) is None  # a camera's zero padding
    assert sample_problem(ImageSample("c", 1, "c", b"not an image"), CAMERA) is None  # the decode says why


@pytest.mark.parametrize(
    ("sample", "kind", "problem"),
    [
        (cloud(cols=2), LIDAR, "needs at least 4 fields"),
        (cloud(cols=4), RADAR, "needs at least 5 fields"),
        (ImageSample("l", 1, "l", b"x"), LIDAR, "not a sample of a lidar sensor"),
        (cloud(), CAMERA, "not a sample of a camera sensor"),
        (ImageSample("c", 1, "c", b""), CAMERA, "empty image data"),
        (ImageSample("c", 1, "c", png_header(10_000, 10_000), "png"), CAMERA, "exceeds the limit"),
        (ImageSample("c", 1, "c", png_header(9000, 10), "png"), CAMERA, "exceeds the limit"),
        (ImageSample("c", 1, "c", png_header(0, 10), "png"), CAMERA, "zero size"),
        # a header (within the limits) and no more; a JPEG's first 60 %: taken, each failed its decode later
        (ImageSample("c", 1, "c", png_header(7680, 4320), "png"), CAMERA, "PNG image does not end with an IEND"),
        (ImageSample("c", 1, "c", JPEG[: len(JPEG) * 6 // 10]), CAMERA, "JPEG image does not end with its end-of"),
        (ImageSample("c", 1, "c", memoryview(JPEG)[:-2]), CAMERA, "cut short"),
        (ImageSample("c", 1, "c", bytes(MAX_SAMPLE_BYTES + 1)), CAMERA, "byte limit"),
        ("not a sample", LIDAR, "not a sample"),
    ],
)
def test_bad_samples(sample: object, kind: object, problem: str) -> None:
    assert problem in (sample_problem(sample, kind) or "")  # type: ignore[arg-type]


def test_a_points_array_swapped_after_construction_is_refused() -> None:
    s = cloud()
    object.__setattr__(s, "points", np.ones((3, 4), np.float64))  # past the constructor's conversion
    assert "float32" in (sample_problem(s, LIDAR) or "")
    object.__setattr__(s, "points", np.ones((3, 3), np.float32))
    assert "3 columns for 4 fields" in (sample_problem(s, LIDAR) or "")
    big = cloud(n=MAX_SAMPLE_BYTES // 16 + 1)
    assert "byte limit" in (sample_problem(big, LIDAR) or "")


@pytest.mark.parametrize(
    ("pose", "problem"),
    [
        (EgoPose(1, Transform((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0))), "the zero quaternion"),
        (EgoPose(1, Transform((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 7.0))), "outside 0.5..2.0"),
        (EgoPose(1, Transform((0.0, 0.0, 0.0), (0.0, 0.0, float("nan"), 1.0))), "non-finite quaternion"),
        (EgoPose(1, Transform((float("inf"), 0.0, 0.0))), "non-finite translation"),
        (EgoPose(1, Transform(), (0.0, float("nan"), 0.0)), "non-finite"),
        (EgoPose(1, Transform(), yaw_rate=float("nan")), "non-finite"),
        (EgoPose(float("nan"), Transform()), "integer nanoseconds"),  # type: ignore[arg-type]
        (EgoPose(1, Transform((0.0, 0.0), (0.0, 0.0, 0.0, 1.0))), "3-vector"),  # type: ignore[arg-type]
        (EgoPose(1, "identity"), "Transform"),  # type: ignore[arg-type]
        (Transform(), "not an EgoPose"),
    ],
)
def test_bad_ego_poses(pose: object, problem: str) -> None:
    assert problem in (ego_problem(pose) or "")


def test_good_ego_poses_pass() -> None:
    assert ego_problem(EgoPose(1, Transform.from_xyz_rpy((1.0, 2.0, 0.0), (0.0, 0.0, 3.0)), (5.0, 0.0, 0.0))) is None
    assert ego_problem(EgoPose(1, Transform((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.98)))) is None  # not quite unit


@settings(max_examples=300, deadline=None)
@given(
    t=st.one_of(st.integers(), st.floats(), st.none(), st.text(max_size=3)),
    cols=st.integers(0, 7),
    n=st.integers(0, 5),
    q=st.tuples(*[st.floats(allow_nan=True, allow_infinity=True)] * 4),
)
def test_the_intake_check_answers_anything_and_never_raises(t: object, cols: int, n: int, q: tuple[float, ...]) -> None:
    fields = tuple(f"f{i}" for i in range(cols))
    sample = PointCloudSample("l", t, "l", np.zeros((n, cols), np.float32), fields)  # type: ignore[arg-type]
    for kind in (LIDAR, RADAR, CAMERA):
        problem = sample_problem(sample, kind)
        assert problem is None or isinstance(problem, str)
    pose = EgoPose(t, Transform((0.0, 0.0, 0.0), q))  # type: ignore[arg-type]
    assert ego_problem(pose) is None or isinstance(ego_problem(pose), str)


def test_an_accumulated_cloud_is_held_to_the_byte_limit_per_sweep() -> None:
    # The runtime checks the frames it takes (RigCheck), clouds its accumulator made of sweeps within the limit
    # among them: one over the limit of a single sample was refused, the lidar an input error in every frame.
    n = MAX_SAMPLE_BYTES // 16  # rows of one sweep at the limit
    eye = tuple(np.eye(4).ravel())
    pts = np.zeros((2 * n, 4), np.float32)
    merged = PointCloudSample("l", 1, "l", pts, ("x", "y", "z", "intensity"), merged_from=((0, n, eye),))
    assert sample_problem(merged, LIDAR) is None
    more = dataclasses.replace(merged, points=np.zeros((2 * n + 1, 4), np.float32))
    assert "byte limit" in (sample_problem(more, LIDAR) or "")
