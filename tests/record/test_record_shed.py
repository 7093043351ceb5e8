"""Issue 47's acceptance for a run shed under overload: ``perception replay --rate 1 --record`` on the bundled
drive with a radar model far slower than the frame period (so frames are shed on any machine: the servers
finish at most two frames per 400 ms while ten arrive a second), then ``replay --as-recorded`` in a fresh
process reproduces every frame exactly: the fused ones and the shed ones' predictions (digests equal).

The recording also holds the adaptive admission's limit per frame (in force when the frame was started or
shed), shown in the as-recorded replay's report and frames.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from record_helpers import DRIVE, ROOT, fresh, records
from reliability_helpers import sleepy_repository

from perception.cli import main
from perception.server import EmbeddedTriton

SLOW_RADAR_MS = 400  # four frame periods of the 10 Hz drive
PROFILE = (
    "sensor_defaults:\n"
    "  lidar: {model: lidar_detector, sync_window_ms: 60, max_staleness_ms: 150}\n"
    "  camera: {model: camera_detector, sync_window_ms: 50, max_staleness_ms: 150}\n"
    "  radar: {model: slow_radar, transport: grpc, sync_window_ms: 50, max_staleness_ms: 150}\n"
    "budget: {total_ms: 1500, fusion_reserve_ms: 15}\n"
)


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTriton]:
    """The reference lidar and camera models (real detections, so the tracker has tracks to predict) and a
    radar sleeper of :data:`SLOW_RADAR_MS` (two instances: two frames at a time, at most)."""
    repo = sleepy_repository(tmp_path_factory.mktemp("models"), {"slow_radar": ("radar", SLOW_RADAR_MS)}, instances=2)
    for model in ("lidar_detector", "camera_detector"):
        shutil.copytree(ROOT / "models" / model, repo / model)
    server = EmbeddedTriton([repo], log_path=repo.parent / "tritonserver.log", startup_timeout_s=240.0)
    # spawned from the portal's thread, which lives until the module's tests are done (the server's
    # PDEATHSIG is tied to it), as the session's server is
    with start_blocking_portal(backend="asyncio") as portal, portal.wrap_async_context_manager(server):
        yield server


@pytest.fixture(scope="module")
def recorded(slow_server: EmbeddedTriton, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("shed")
    profile = tmp / "shed.yaml"
    profile.write_text(PROFILE)
    run = tmp / "run.mcap"
    argv = ["replay", str(DRIVE), "--config", str(profile), "--url", slow_server.grpc_url, "--rate", "1"]
    assert main([*argv, "--out", str(tmp / "out"), "--no-progress", "--record", str(run)]) == 0
    return run, profile


@pytest.fixture(scope="module")
def replayed(
    recorded: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``replay --as-recorded`` of the recording, in a fresh process: its report and its frames."""
    run, profile = recorded
    out = tmp_path_factory.mktemp("as_recorded")
    done = fresh(["replay", str(run), "--as-recorded", "--config", str(profile), "--out", str(out)])
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "as_recorded.json").read_text())["as_recorded"]
    return report, [json.loads(line) for line in (out / "as_recorded.jsonl").read_text().splitlines()]


def test_a_shed_run_replays_as_recorded_frame_for_frame(
    recorded: tuple[Path, Path], replayed: tuple[dict[str, Any], list[dict[str, Any]]]
) -> None:
    run, _ = recorded
    frames = records(run, "/record/frames")
    fusion = records(run, "/record/fusion")
    shed = [f for f in frames if f["status"] == "dropped" and (f["reason"] or "").startswith("overload")]
    assert shed, "no frame was shed: the radar sleeper no longer overloads the drive"
    assert all(f["predicted"] and f["fusion_seq"] is not None and f["digest"] for f in shed)
    predictions = {p["frame_id"]: p for p in fusion if p.get("predicted")}
    assert {f["frame_id"] for f in shed} == set(predictions)  # each took its turn in the fusion order
    assert [p["seq"] for p in fusion] == list(range(len(fusion)))
    assert sum(len(p["detections"]) for p in predictions.values()) > 0  # the tracker had tracks to predict

    report, results = replayed
    assert report["first_divergence"] is None
    assert report["equal"] == report["compared"] == len(fusion)
    assert report["shed"] == len(shed)
    by_frame = {r["frame_id"]: r for r in results}
    fields = ("id", "label", "score", "center", "size", "yaw", "velocity", "uncertainty", "sources")
    for f in shed:  # the shed frames' detections: the run's predictions, exactly
        r = by_frame[f["frame_id"]]
        assert r["predicted"] and r["reason"] == f["reason"]
        assert [{k: d[k] for k in fields} for d in r["detections"]] == predictions[f["frame_id"]]["detections"]


def test_the_admission_limit_of_every_frame_is_recorded_and_replayed(
    recorded: tuple[Path, Path], replayed: tuple[dict[str, Any], list[dict[str, Any]]]
) -> None:
    run, _ = recorded
    frames = records(run, "/record/frames")
    started = [f for f in frames if f["fusion_seq"] is not None]  # fused or shed: each met the admission
    assert started and all(isinstance(f["admission_limit"], int) and f["admission_limit"] >= 1 for f in started)
    report, results = replayed
    changes: list[list[int]] = []
    for f in frames:  # delivery order
        limit = f["admission_limit"]
        if limit is not None and (not changes or changes[-1][1] != limit):
            changes.append([f["frame_id"], limit])
    assert report["admission_limits"] == changes and changes[0][1] == 1  # adaptive admission starts at 1
    assert [r["admission_limit"] for r in results] == [f["admission_limit"] for f in frames]
