"""Helpers of the reliability tests (imported by name: tests/reliability is on sys.path).

Everything here builds REAL inputs: model repositories of kind-contract sleeper models for servers the
tests start themselves, small drives written with the real :class:`DriveWriter`, launch profiles as
YAML files, and the checks every fault test shares (one record per frame, bounded latency, nothing
left behind by a process).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

import perception
from perception._imageio import encode_jpeg
from perception.config import RuntimeConfig, from_data
from perception.drives import DriveWriter, topic_for
from perception.server._procs import iter_processes
from perception.types import (
    CameraCalibration,
    EgoPose,
    Frame,
    FrameResult,
    FrameStatus,
    ImageSample,
    PointCloudSample,
    Sample,
    SensorKind,
    SensorSpec,
    Transform,
)

MS = 1_000_000
T0 = 1_700_000_000_000_000_000
LIDAR_FIELDS = ("x", "y", "z", "intensity")
RADAR_FIELDS = ("x", "y", "z", "radial_velocity", "rcs")
REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_MODELS = REPO_ROOT / "tests" / "triton_models"
KINDS = {"lidar_top": "lidar", "radar_front": "radar", "cam_front": "camera"}
#: Generous slack on every "by the deadline" check: the CI machine has 2 shared cores, so the point
#: is that waiting is bounded, not that it is fast.
SLACK_NS = 1_500 * MS

# -- model repositories -----------------------------------------------------------------------------

# Loads the sleeper class from its file, not through ``perception.modelkit`` whose package import
# (scipy, the reference detectors) costs each backend stub ~1.5 s of CPU: these repositories belong
# to servers the tests start and restart, on a 2-core machine.
_MODEL_PY = """\
import importlib.util

_spec = importlib.util.spec_from_file_location("perception_test_sleepers", {path!r})
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
TritonPythonModel = _module.KindSleeperModel
"""


def sleepy_repository(dest: Path, models: Mapping[str, tuple[str, float]], *, instances: int = 1) -> Path:
    """A model repository of kind-contract sleepers: ``{name: (kind, delay_ms)}``.

    The tensor contracts are those of ``tests/triton_models/sleepy_<kind>`` (copied, so they stay
    in one place); only the delay and the instance count change.
    """
    testing = Path(perception.__file__).resolve().parent / "modelkit" / "_testing.py"
    dest.mkdir(parents=True, exist_ok=True)
    for name, (kind, delay_ms) in models.items():
        source = (TEST_MODELS / f"sleepy_{kind}" / "config.pbtxt").read_text().splitlines()
        config = "\n".join(line for line in source if not line.startswith("#")) + "\n"
        config = re.sub(r"count: \d+", f"count: {instances}", config)
        config = re.sub(r'(key: "delay_ms", value: \{ string_value: )"[^"]*"', rf'\g<1>"{delay_ms:g}"', config)
        (dest / name / "1").mkdir(parents=True, exist_ok=True)
        (dest / name / "config.pbtxt").write_text(config)
        (dest / name / "1" / "model.py").write_text(_MODEL_PY.format(path=str(testing)))
    return dest


# -- drives -----------------------------------------------------------------------------------------

CALIBRATION = CameraCalibration(64, 48, (50.0, 0.0, 32.0, 0.0, 50.0, 24.0, 0.0, 0.0, 1.0))


def rig(calibration: CameraCalibration = CALIBRATION) -> list[SensorSpec]:
    return [
        SensorSpec(
            "lidar_top",
            SensorKind.LIDAR,
            "lidar_top",
            Transform.from_xyz_rpy((0.0, 0.0, 1.9), (0.0, 0.0, 0.0)),
            topic_for("lidar", "lidar_top"),
            None,
            10.0,
        ),
        SensorSpec(
            "radar_front",
            SensorKind.RADAR,
            "radar_front",
            Transform.from_xyz_rpy((3.7, 0.0, 0.5), (0.0, 0.0, 0.0)),
            topic_for("radar", "radar_front"),
            None,
            10.0,
        ),
        SensorSpec(
            "cam_front",
            SensorKind.CAMERA,
            "cam_front",
            Transform.from_xyz_rpy((1.6, 0.0, 1.5), (-np.pi / 2, 0.0, -np.pi / 2)),
            topic_for("camera", "cam_front"),
            calibration,
            10.0,
        ),
    ]


def write_drive(
    path: Path,
    frames: int,
    *,
    period_ns: int = 100 * MS,
    lidar_points: int = 500,
    image_hw: tuple[int, int] = (48, 64),
    calibration: CameraCalibration = CALIBRATION,
    duplicate_lidar_at: Iterable[int] = (),
    chunk_size: int = 64 * 1024,
    ego: bool = True,
    seed: int = 0,
) -> Path:
    """A three-sensor drive (lidar_top, radar_front, cam_front) of ``frames`` lidar sweeps.

    Radar and camera samples follow each sweep by 3 and 7 ms. ``duplicate_lidar_at`` repeats those
    sweeps with the same timestamp (a recorder glitch). Small chunks, so a cut file keeps a prefix.
    ``ego=False``: no ego poses (their topic spans every chunk; readers load it up front).
    """
    rng = np.random.default_rng(seed)
    images = [encode_jpeg(rng.integers(0, 255, (*image_hw, 3), dtype=np.uint8)) for _ in range(4)]
    dup = set(duplicate_lidar_at)
    with DriveWriter(path, rig(calibration), chunk_size=chunk_size, compression="none") as w:
        for i in range(frames):
            t = T0 + i * period_ns
            lidar = rng.normal(0.0, 10.0, (lidar_points, 4)).astype(np.float32)
            w.write(PointCloudSample("lidar_top", t, "lidar_top", lidar, LIDAR_FIELDS, seq=i))
            if i in dup:
                w.write(PointCloudSample("lidar_top", t, "lidar_top", lidar, LIDAR_FIELDS, seq=i))
            radar = rng.normal(0.0, 10.0, (20, 5)).astype(np.float32)
            w.write(PointCloudSample("radar_front", t + 3 * MS, "radar_front", radar, RADAR_FIELDS, seq=i))
            w.write(ImageSample("cam_front", t + 7 * MS, "cam_front", images[i % len(images)], seq=i))
            if ego:
                w.write_ego_pose(
                    EgoPose(t, Transform.from_xyz_rpy((i * 1.0, 0.0, 0.0), (0.0, 0.0, 0.0)), (10.0, 0.0, 0.0))
                )
    return path


# -- launch profiles and configs --------------------------------------------------------------------


def profile_data(url: str, models: Mapping[str, str], **sections: Any) -> dict[str, Any]:
    """Launch-profile data mapping drive sensors (``lidar_top``, ``radar_front``, ``cam_front``) to models.

    ``sections`` replace whole top-level sections (``server``, ``budget``, ``pipeline``...).
    """
    data: dict[str, Any] = {
        "server": {"url": url, "channels": 2, "startup_timeout_s": 60},
        "sensors": [{"name": n, "kind": KINDS[n], "model": m, "transport": "grpc"} for n, m in models.items()],
        "trigger": {"sensor": "lidar_top"} if "lidar_top" in models else {"rate_hz": 10},
        "budget": {"total_ms": 3000, "fusion_reserve_ms": 20},
        "fusion": {"enabled": False},
    }
    data.update(sections)
    return data


def write_profile(path: Path, data: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))
    return path


def runtime_config(url: str, models: Mapping[str, str], **sections: Any) -> RuntimeConfig:
    return from_data(RuntimeConfig, profile_data(url, models, **sections))


def make_frame(i: int, sensors: Sequence[str], *, points: int = 1000, image: bytes | None = None) -> Frame:
    """A frame of synthetic samples for ``sensors`` (names from :data:`KINDS`)."""
    t = T0 + i * 100 * MS
    rng = np.random.default_rng(i)
    samples: dict[str, Sample | None] = {}
    for name in sensors:
        kind = KINDS[name]
        if kind == "lidar":
            samples[name] = PointCloudSample(
                name, t, name, rng.normal(0, 10, (points, 4)).astype(np.float32), LIDAR_FIELDS
            )
        elif kind == "radar":
            samples[name] = PointCloudSample(name, t, name, rng.normal(0, 10, (20, 5)).astype(np.float32), RADAR_FIELDS)
        else:
            data = image if image is not None else encode_jpeg(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))
            samples[name] = ImageSample(name, t, name, data)
    return Frame(frame_id=i, t_ns=t, samples=samples)


# -- checks -----------------------------------------------------------------------------------------


def assert_one_record_per_frame(results: Sequence[FrameResult], frames: int | None = None) -> None:
    """Exactly one result per frame, in frame order, with no gap."""
    ids = [r.frame_id for r in results]
    assert ids == list(range(len(ids))), f"frame ids not 0..n-1 in order: {ids[:20]}..."
    if frames is not None:
        assert len(ids) == frames, f"{len(ids)} records for {frames} frames"


def assert_bounded(results: Sequence[FrameResult], config: RuntimeConfig) -> None:
    """Every processed frame was emitted within its budget (plus the machine's scheduling slack)."""
    for r in results:
        if r.status is FrameStatus.DROPPED:
            continue
        assert r.latency.total_ns <= config.budget.total_ns + SLACK_NS, (
            f"frame {r.frame_id} took {r.latency.total_ns / 1e6:.0f} ms for a {config.budget.total_ms:g} ms budget"
        )


def read_records(path: Path) -> list[dict[str, Any]]:
    """``detections.jsonl``: every line must be complete JSON."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_consecutive_records(records: Sequence[Mapping[str, Any]]) -> None:
    ids = [r["frame_id"] for r in records]
    assert ids == list(range(len(ids))), f"frame ids not consecutive from 0: {ids}"


def processes_with_argument(fragment: str) -> list[int]:
    """Live (non-zombie) processes with an argument containing ``fragment`` (servers, backend stubs)."""
    return [
        p.pid
        for p in iter_processes(argv=True)
        if p.pid != os.getpid() and p.alive and any(fragment in a for a in p.argv)
    ]


def shm_entries(prefix: str) -> list[str]:
    return sorted(p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(prefix))
