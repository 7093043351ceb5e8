"""A live run flooded with due frames, recorded and replayed as recorded: the frames superseded before their
assembly (``perception.scheduler.Superseded``: shed unmade, the tracker's prediction in their fusion turn) are
in the recording as predicted turns, and ``replay_as_recorded`` reproduces every frame (digests equal).

In process on the session's server (the reference lidar model: real detections, so the tracker has tracks to
predict; the cameras and radars on the sleepy models), the flood made as in
tests/live/test_live_failures.py: the event loop stalled while trigger samples past their horizon are pushed.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import anyio
from record_helpers import DRIVE, ROOT, records

from perception.config import RuntimeConfig, load_config, resolve_sensors
from perception.drives import DriveReader
from perception.live import LiveRuntime
from perception.record import RunRecorder, replay_as_recorded
from perception.record._digest import detections_digest
from perception.server import EmbeddedTriton
from perception.types import EgoPose, FrameResult, FrameStatus

MS = 1_000_000
S = 1_000_000_000
SLEEPY = {"camera": "sleepy_camera", "radar": "sleepy_radar"}
SUPERSEDED = "overload (superseded before assembly"


def _config(url: str) -> tuple[RuntimeConfig, dict[str, Any], list[Any], list[EgoPose]]:
    """The drive's rig, its first 1.5 s and poses; the reference lidar model, the sleepy camera and radar models;
    a budget and circuit a loaded host does not break; transit 20 ms (the flood's stamps lie past their horizon)."""
    with DriveReader(DRIVE) as reader:
        rig = dict(reader.rig)
        samples = list(reader.samples(reader.start_ns, reader.start_ns + 3 * S // 2))
        poses = [p for p in reader.ego_poses() if p.t_ns <= samples[-1].t_ns]
    cfg = resolve_sensors(load_config(ROOT / "launch" / "replay.yaml"), rig)
    sensors = tuple(dataclasses.replace(s, model=SLEEPY[s.kind]) if s.kind in SLEEPY else s for s in cfg.sensors)
    pipe = cfg.pipeline
    cfg = dataclasses.replace(
        cfg,
        sensors=sensors,
        server=dataclasses.replace(cfg.server, url=url),
        budget=dataclasses.replace(cfg.budget, total_ms=5000.0, recorded_total_ms=5000.0),
        pipeline=dataclasses.replace(
            pipe, drain_timeout_s=30.0, circuit=dataclasses.replace(pipe.circuit, failure_threshold=1000)
        ),
        live=dataclasses.replace(cfg.live, transit_ms=20.0, trigger_tolerance_ms=2000.0),
    )
    return cfg, rig, samples, poses


def _moved(pose: EgoPose, t_ns: int) -> EgoPose:
    """``pose`` at ``t_ns``, moved on along x at its speed (a shed frame's prediction reads its frame's pose)."""
    x, y, z = pose.pose.translation
    dx = pose.linear_velocity[0] * (t_ns - pose.t_ns) / S
    return dataclasses.replace(pose, t_ns=t_ns, pose=dataclasses.replace(pose.pose, translation=(x + dx, y, z)))


def test_a_flooded_live_run_replays_as_recorded_with_its_superseded_frames_predicted(
    triton: EmbeddedTriton, tmp_path: Path
) -> None:
    cfg, rig, samples, poses = _config(triton.grpc_url)
    limit = cfg.pipeline.max_in_flight + cfg.pipeline.queue_size
    run = tmp_path / "run.mcap"
    got: list[FrameResult] = []
    flood = 60
    with RunRecorder(run) as rec:
        live = LiveRuntime(cfg, rig, on_result=got.append, observer=rec)
        with live:
            assert live._loop is not None
            # the drive's first 1.5 s at 1x, stamped on the host clock: frames fused, tracks made
            t0_drive, t0 = samples[0].t_ns, time.monotonic_ns() + 20 * MS
            items = sorted([*samples, *poses], key=lambda item: item.t_ns)
            last = t0
            for item in items:
                at = t0 + (item.t_ns - t0_drive)
                delay = (at - time.monotonic_ns()) / S
                if delay > 0:
                    time.sleep(delay)  # pacing the pushes like a sensor, not synchronising the test
                if isinstance(item, EgoPose):
                    live.push_ego(dataclasses.replace(item, t_ns=at))
                else:
                    live.push(dataclasses.replace(item, t_ns=at))
                last = at
            pose = dataclasses.replace(poses[-1], t_ns=t0 + (poses[-1].t_ns - t0_drive))
            lidar = [s for s in samples if s.sensor == "lidar_top"]
            deadline = time.monotonic() + 60  # a watchdog only
            while live.status()["frames"] < len(lidar):  # the paced frames delivered
                assert time.monotonic() < deadline, live.status()
                time.sleep(0.01)
            # then a flood: trigger samples past their horizon pushed while the loop takes nothing
            horizon = live._assembler._horizon_ns
            while time.monotonic_ns() - horizon - 10 * MS <= last + 2 * MS:
                time.sleep(0.005)  # the flood's stamps after the last pushed (in order), past their horizon
            made = live.status()["intake"]["frames"]
            stall = threading.Event()
            live._loop.call_soon_threadsafe(stall.wait, 60)
            try:
                f0 = time.monotonic_ns() - horizon - 10 * MS
                live.push_ego(_moved(pose, f0))
                for k in range(flood):
                    t = f0 + k * 100_000
                    if k % 10 == 5:
                        live.push_ego(_moved(pose, t))  # the stubs' poses differ
                    live.push(dataclasses.replace(lidar[k % len(lidar)], t_ns=t))
            finally:
                stall.set()
            while live.status()["intake"]["frames"] < made + flood:
                assert time.monotonic() < deadline, live.status()["intake"]
                time.sleep(0.005)
        status = live.status()
    superseded = status["intake"]["superseded_unassembled"]
    assert superseded >= flood - limit, status["intake"]
    frames = status["intake"]["frames"]
    assert [r.frame_id for r in got] == list(range(frames)) and status["frames"] == frames
    unmade = [r for r in got if (r.reason or "").startswith(SUPERSEDED)]
    assert len(unmade) == superseded and all(r.status is FrameStatus.DROPPED and r.predicted for r in unmade)
    assert sum(len(r.detections) for r in unmade) > 0  # the tracker had tracks to predict

    # the recording: every result, each superseded frame a predicted turn of the fusion order
    assert rec.stats["frames"] == frames and rec.stats["predicted"] == sum(r.predicted for r in got), rec.stats
    framed = records(run, "/record/frames")
    fusion = records(run, "/record/fusion")
    assert [f["frame_id"] for f in framed] == list(range(frames))
    assert [p["seq"] for p in fusion] == list(range(len(fusion)))
    predictions = {p["frame_id"]: p for p in fusion if p.get("predicted")}
    recorded_unmade = [f for f in framed if (f["reason"] or "").startswith(SUPERSEDED)]
    assert [f["frame_id"] for f in recorded_unmade] == [r.frame_id for r in unmade]
    for f, r in zip(recorded_unmade, unmade, strict=True):
        assert f["predicted"] and f["status"] == "dropped" and f["digest"], f
        p = predictions[f["frame_id"]]
        assert p["seq"] == f["fusion_seq"] and p["t_ns"] == r.t_ns and len(p["detections"]) == len(r.detections)

    # replayed as recorded: every frame's digest equal, the predictions reproduced in their turns
    async def replay() -> Any:
        with anyio.fail_after(300):  # a watchdog only
            return await replay_as_recorded(run, cfg)

    outcome = anyio.run(replay)
    report = outcome.report()
    assert report["first_divergence"] is None, report["first_divergence"]
    assert report["equal"] == report["compared"] == len(fusion)
    assert report["compared_predicted"] == len(predictions) and report["shed"] == sum(r.predicted for r in got)
    by_frame = {r.frame_id: r for r in outcome.results}
    assert sorted(by_frame) == list(range(frames))
    for r in unmade:  # the superseded frames' detections: the run's predictions, exactly
        again = by_frame[r.frame_id]
        assert again.predicted and again.reason == r.reason
        assert detections_digest(again.detections) == detections_digest(r.detections)
