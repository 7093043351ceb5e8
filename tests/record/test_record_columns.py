"""A live run whose host pushes clouds as vehicles' drivers give them -- a lidar naming its fields in another order
with a ``ring`` column, a radar named by position with an ``snr`` column -- recorded, then replayed as recorded
in a fresh process, with and without today's models: every sample is in the recording as the run took it (the
kind's fields first, in its order and under its names, the other columns after them) and every digest is equal.

Before, the recording's drive writer refused every such cloud (a kind's fields alone, in their order): each one
counted ``refused``, the frames' clouds missing from the recording, and ``--rerun-models`` found each ok lidar
and radar 'missing (the sample is not in the recording)'.

``perception live`` plays a drive, whose clouds hold their kind's fields: a host pushing other clouds records
through the same hook, ``LiveRuntime(observer=RunRecorder(path))``, as here.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from record_helpers import DRIVE, fresh, records

from perception.config import RuntimeConfig, from_data, load_config, resolve_sensors
from perception.drives import DriveReader
from perception.live import LiveRuntime, _runtime
from perception.record import RunRecorder, _replay
from perception.record import _format as fmt
from perception.scheduler import Runtime
from perception.server import EmbeddedTriton
from perception.triton import InferRequest
from perception.types import EgoPose, FrameResult, PointCloudSample, SensorSpec, Transform

S = 1_000_000_000
MS = 1_000_000
# The reference lidar and radar models (real detections, from every column they are sent), the sleepy camera;
# a budget a loaded 2-core host keeps most frames within (as tests/record/test_record_live.py).
PROFILE = (
    "sensor_defaults:\n"
    "  lidar: {model: lidar_detector, sync_window_ms: 60, max_staleness_ms: 150}\n"
    "  camera: {model: sleepy_camera, sync_window_ms: 50, max_staleness_ms: 150}\n"
    "  radar: {model: radar_detector, transport: grpc, sync_window_ms: 50, max_staleness_ms: 150}\n"
    "live: {transit_ms: 2000, trigger_tolerance_ms: 1000}\n"
    "budget: {total_ms: 3000, fusion_reserve_ms: 15}\n"
)
LIDAR = ("intensity", "z", "x", "y", "ring")  # by name, in another order, a column more
RADAR = ("x", "y", "z", "v", "power", "snr")  # by position (x, y, z, radial_velocity, rcs), a column more


def _as_pushed(sample: PointCloudSample) -> PointCloudSample:
    """The drive's cloud as the host's driver gives it (:data:`LIDAR`, :data:`RADAR`), an extra column made up
    of its rows (distinct values: a column lost or moved shows)."""
    pts = sample.points
    extra = np.arange(pts.shape[0], dtype=np.float32)[:, None] % 32
    if sample.fields[-1] == "intensity":
        cols = np.hstack([pts[:, 3:4], pts[:, 2:3], pts[:, 0:1], pts[:, 1:2], extra])
        return dataclasses.replace(sample, points=cols, fields=LIDAR)
    return dataclasses.replace(sample, points=np.hstack([pts, extra]), fields=RADAR)


def test_clouds_pushed_with_other_fields_are_recorded_as_taken_and_replay_as_recorded(
    triton: EmbeddedTriton, tmp_path: Path
) -> None:
    profile = tmp_path / "live.yaml"
    profile.write_text(PROFILE)
    with DriveReader(DRIVE) as reader:
        rig = dict(reader.rig)
        samples = list(reader.samples(reader.start_ns, reader.start_ns + 3 * S // 2))
        poses = [p for p in reader.ego_poses() if p.t_ns <= samples[-1].t_ns]
    cfg = resolve_sensors(load_config(profile), rig)
    cfg = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, url=triton.grpc_url))
    run = tmp_path / "run.mcap"
    got: list[FrameResult] = []
    pushed: dict[tuple[str, int], PointCloudSample] = {}
    with RunRecorder(run) as rec:
        with LiveRuntime(cfg, rig, on_result=got.append, observer=rec) as live:
            t0_drive, t0 = samples[0].t_ns, time.monotonic_ns() + 20 * MS
            for item in sorted([*samples, *poses], key=lambda item: item.t_ns):
                at = t0 + (item.t_ns - t0_drive)
                delay = (at - time.monotonic_ns()) / S
                if delay > 0:
                    time.sleep(delay)  # pacing the pushes like a sensor, not synchronising the test
                if isinstance(item, EgoPose):
                    live.push_ego(dataclasses.replace(item, t_ns=at))
                elif isinstance(item, PointCloudSample):
                    cloud = _as_pushed(dataclasses.replace(item, t_ns=at))
                    pushed[(cloud.sensor, at)] = cloud
                    live.push(cloud)
                else:
                    live.push(dataclasses.replace(item, t_ns=at))
            status = live.status()
        assert status["intake"]["invalid"] == 0, status["intake"]
    assert RunRecorder.gaps(rec.stats) == {}, rec.stats
    assert rec.stats["samples"] == len(samples)
    lidar_ok = [r for r in got if r.sensors["lidar_top"].status.value == "ok"]
    radar_ok = [r for r in got if r.sensors["radar_front"].status.value == "ok"]
    assert lidar_ok and radar_ok  # the frames the models answered on such clouds

    # every cloud in the recording as the run took it: the kind's fields first (in order, by name), then the rest
    segments = [run, *sorted(run.parent.glob("run-*.mcap"))]
    with DriveReader(run, strict=True) as reader:
        assert reader.metadata[fmt.META_POINTS] == fmt.POINTS_TAKEN
        recorded = [s for s in reader.samples(extra_fields=True) if isinstance(s, PointCloudSample)]
    assert len(recorded) == len(pushed)
    for s in recorded:
        cloud = pushed[(s.sensor, s.t_ns)]
        if cloud.fields == LIDAR:
            assert s.fields == ("x", "y", "z", "intensity", "ring")
            np.testing.assert_array_equal(s.points, cloud.points[:, [2, 3, 1, 0, 4]])
        else:
            assert s.fields == ("x", "y", "z", "radial_velocity", "rcs", "snr")
            np.testing.assert_array_equal(s.points, cloud.points)
    fused = [f for seg in segments for f in records(seg, "/record/fusion")]
    assert any(s and s.get("merged") for f in fused for s in f["samples"].values())  # accumulated sweeps among them

    for rerun in ([], ["--rerun-models", "--url", triton.grpc_url]):
        out = tmp_path / ("rerun" if rerun else "as_recorded")
        done = fresh(["replay", str(run), "--as-recorded", *rerun, "--config", str(profile), "--out", str(out)])
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads((out / "as_recorded.json").read_text())["as_recorded"]
        assert report["first_divergence"] is None and not report["recorder_lost"], report
        assert report["compared"] > 0 and report["equal"] == report["compared"]
        assert report["rerun_models"] == bool(rerun)


class _Radar:
    """A radar model reading every column it is sent (a model may: the radar's POINTS are ``[-1, >=5]``): one
    object whose RCS is the sum of the cloud's last column."""

    async def infer_request(self, req: InferRequest) -> Any:
        pts = np.asarray(req.inputs["POINTS"], np.float32)
        outputs = {
            "POSITIONS": pts[:1, :3].copy(),
            "RADIAL_VELOCITY": pts[:1, 3].copy(),
            "VELOCITY": np.zeros((1, 2), np.float32),
            "RCS": np.array([pts[:, -1].sum()], np.float32),
            "SCORES": np.array([0.9], np.float32),
            "RETURNS": np.array([len(pts)], np.int32),
        }
        return type("Result", (), {"outputs": outputs})()


def test_rerun_models_sends_a_radar_model_every_column_the_run_sent_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the replay read a recording's clouds as a drive's, its kind's fields alone: today's radar model was
    # sent five columns where the run's had been sent six, and answered otherwise ('model' at the first frame).
    client = _Radar()
    runtime = functools.partial(Runtime, client=client, check_models=False)
    monkeypatch.setattr(_runtime, "Runtime", runtime)
    monkeypatch.setattr(_replay, "Runtime", runtime)
    rig = {"radar": SensorSpec("radar", "radar", "radar", Transform(), "/radar", rate_hz=10.0)}
    cfg = from_data(
        RuntimeConfig,
        {
            "server": {"url": "localhost:1"},
            "sensors": [{"name": "radar", "kind": "radar", "model": "rad", "transport": "grpc"}],
            "trigger": {"sensor": "radar"},
            "live": {"trigger_tolerance_ms": 600_000, "max_stamp_skew_ms": 600_000},
            "budget": {"total_ms": 60_000, "fusion_reserve_ms": 10},
        },
    )
    run = tmp_path / "run.mcap"
    rng = np.random.default_rng(7)
    t0 = time.monotonic_ns() - 10 * S
    with RunRecorder(run) as rec, LiveRuntime(cfg, rig, observer=rec) as live:
        futures = []
        for k in range(5):
            pts = rng.uniform(1.0, 30.0, (20, len(RADAR))).astype(np.float32)
            futures.append(live.push(PointCloudSample("radar", t0 + k * 100 * MS, "radar", pts, RADAR)))
        results = [f.result(timeout=60) for f in futures if f is not None]
    assert RunRecorder.gaps(rec.stats) == {}, rec.stats
    assert [r.sensors["radar"].status.value for r in results] == ["ok"] * 5
    out = anyio.run(functools.partial(_replay.replay_as_recorded, run, cfg, rerun_models=True))
    assert out.first is None and out.compared > 0 and out.equal == out.compared, out.first


def test_a_disabled_sensor_s_samples_are_not_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the live runtime handed the recorder every sample pushed, a disabled sensor's too: in no frame (the
    # intake drops it, unknown sensor), never read by a replay as recorded, it took the recorder's queue and bytes
    # from the run's own samples -- and, not put in its kind's order as an enabled one's is, a cloud naming its
    # fields in another order was refused, a gap the recording did not have. A replay records the sensors it
    # uses alone, and a ROS node subscribes to those alone.
    runtime = functools.partial(Runtime, client=_Radar(), check_models=False)
    monkeypatch.setattr(_runtime, "Runtime", runtime)
    rig = {
        "radar": SensorSpec("radar", "radar", "radar", Transform(), "/radar", rate_hz=10.0),
        "lidar": SensorSpec("lidar", "lidar", "lidar", Transform(), "/lidar", rate_hz=10.0),
    }
    cfg = from_data(
        RuntimeConfig,
        {
            "server": {"url": "localhost:1"},
            "sensors": [
                {"name": "radar", "kind": "radar", "model": "rad", "transport": "grpc"},
                {"name": "lidar", "kind": "lidar", "model": "lid", "transport": "grpc", "enabled": False},
            ],
            "trigger": {"sensor": "radar"},
            "live": {"trigger_tolerance_ms": 600_000, "max_stamp_skew_ms": 600_000},
            "budget": {"total_ms": 60_000, "fusion_reserve_ms": 10},
        },
    )
    run = tmp_path / "run.mcap"
    t0 = time.monotonic_ns() - 10 * S
    with RunRecorder(run) as rec, LiveRuntime(cfg, rig, observer=rec) as live:
        futures = []
        for k in range(3):
            t = t0 + k * 100 * MS
            lidar = np.ones((4, 4), np.float32)
            live.push(PointCloudSample("lidar", t - MS, "lidar", lidar, ("intensity", "x", "y", "z")))
            futures.append(live.push(PointCloudSample("radar", t, "radar", np.ones((3, 6), np.float32), RADAR)))
        assert all(f is not None and f.result(timeout=60) for f in futures)
        status = live.status()
    assert status["intake"]["unknown_sensor"] == 3  # the runtime did not take them
    assert RunRecorder.gaps(rec.stats) == {} and rec.stats["samples"] == 3, rec.stats
    with DriveReader(run, strict=True) as reader:
        assert {s.sensor for s in reader.samples()} == {"radar"}
    assert {a["sensor"] for a in records(run, "/record/arrivals")} == {"radar"}
