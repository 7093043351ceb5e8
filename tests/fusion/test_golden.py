"""Regression lock on fusion + tracking output: detections equal a recorded golden run.

The golden file was recorded from the reference (pre-optimisation) implementation, on the benchmark's
traffic scene with randomised sensor outputs (dropped rows, random scores, wrong camera classes,
radar clutter), missing sensors, an out-of-order frame, twist-only ego motion and the untracked path.
Any change to fusion or tracking that alters what is emitted (ids, labels, sources, or geometry beyond
float noise) fails here; a deliberate behaviour change re-records it:

    .venv/bin/python tests/fusion/test_golden.py   # rewrites tests/fusion/data/golden.npz
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

from perception.config import FusionConfig
from perception.fusion import Fuser
from perception.fusion._testing import imperfect, make_rig, missing, scene_results, traffic_scene
from perception.types import LABELS, Detection3D, Frame

GOLDEN = Path(__file__).resolve().parent / "data" / "golden.npz"
RIG = make_rig(cameras=2, radars=2)
NAMES = tuple(RIG)
OFFSETS_NS = {"cam_front": -15_000_000, "cam_back": -15_000_000, "radar_front": -30_000_000, "radar_rear": -30_000_000}
FRAME_NS = 100_000_000
FLOATS = ("score", "center", "size", "yaw", "velocity", "uncertainty")


def _scenarios() -> Iterator[tuple[str, list[tuple[Detection3D, ...]]]]:
    scene = traffic_scene(50, seed=7, ego_speed=10.0)

    # 1. the benchmark: every sensor, time offsets, ego poses
    fuser = Fuser(FusionConfig(), RIG, ego_at=scene.ego_at)
    yield (
        "bench",
        [
            fuser(Frame(k, k * FRAME_NS, {}), scene_results(scene, RIG, k * FRAME_NS, offsets_ns=OFFSETS_NS, seed=k))[0]
            for k in range(40)
        ],
    )

    # 2. imperfect sensors that come and go, an out-of-order frame, ego motion from the twist only
    rng = np.random.default_rng(42)
    fuser = Fuser(FusionConfig(), RIG)
    stream = []
    for k in [*range(12), 9, *range(12, 40)]:
        t = k * FRAME_NS
        res = imperfect(scene_results(scene, RIG, t, offsets_ns=OFFSETS_NS, seed=100 + k), RIG, rng)
        for name in NAMES:
            if rng.random() < (0.3 if name == "lidar_top" else 0.2):
                res[name] = missing(name)
        stream.append(fuser(Frame(k, t, {}, ego=scene.ego_at(t)), res)[0])
    yield "degraded", stream

    # 3. no tracking (the fused objects themselves), no camera-only / radar-only output on odd frames
    rng = np.random.default_rng(3)
    untracked = Fuser(FusionConfig(tracking=False, score_threshold=0.0), RIG, ego_at=scene.ego_at)
    strict = Fuser(FusionConfig(tracking=False, camera_only=False, radar_only=False), RIG, ego_at=scene.ego_at)
    stream = []
    for k in range(20):
        t = k * FRAME_NS
        res = imperfect(scene_results(scene, RIG, t, offsets_ns=OFFSETS_NS, seed=200 + k), RIG, rng)
        if k % 3 == 2:
            res["lidar_top"] = missing("lidar_top")
        stream.append((untracked if k % 2 == 0 else strict)(Frame(k, t, {}), res)[0])
    yield "untracked", stream


def _table(stream: list[tuple[Detection3D, ...]]) -> dict[str, npt.NDArray[np.generic]]:
    dets = [(k, d) for k, frame in enumerate(stream) for d in frame]
    return {
        "frame": np.array([k for k, _ in dets], np.int32).reshape(-1),
        "id": np.array([d.id for _, d in dets], np.int64).reshape(-1),
        "label": np.array([LABELS.index(d.label) for _, d in dets], np.int8).reshape(-1),
        "sources": np.array([sum(1 << NAMES.index(s) for s in d.sources) for _, d in dets], np.int8).reshape(-1),
        "floats": np.array(
            [[d.score, *d.center, *d.size, d.yaw, *d.velocity, *d.uncertainty] for _, d in dets], np.float64
        ).reshape(-1, 12),
    }


def _record() -> None:
    arrays = {f"{name}.{key}": value for name, stream in _scenarios() for key, value in _table(stream).items()}
    GOLDEN.parent.mkdir(exist_ok=True)
    np.savez_compressed(GOLDEN, **arrays)


def test_fusion_and_tracking_reproduce_the_golden_run() -> None:
    golden = np.load(GOLDEN)
    for name, stream in _scenarios():
        got = _table(stream)
        for key in ("frame", "id", "label", "sources"):
            np.testing.assert_array_equal(got[key], golden[f"{name}.{key}"], err_msg=f"{name}: {key}")
        want = np.asarray(golden[f"{name}.floats"], np.float64)
        floats = np.asarray(got["floats"], np.float64)
        # yaw is compared modulo 2 pi (column 7)
        dyaw = np.angle(np.exp(1j * (floats[:, 7] - want[:, 7])))
        np.testing.assert_allclose(dyaw, 0.0, atol=1e-6, err_msg=f"{name}: yaw")
        floats[:, 7] = want[:, 7]
        np.testing.assert_allclose(floats, want, rtol=1e-6, atol=1e-6, err_msg=f"{name}: geometry/score")


if __name__ == "__main__":
    _record()
    sys.stdout.write(f"wrote {GOLDEN}\n")
