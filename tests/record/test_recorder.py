"""RunRecorder and replay_as_recorded without a server: rotation, a rotated-away start, digests."""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import numpy as np
import pytest

from perception.config import load_config
from perception.drives import DriveReader
from perception.errors import DriveError
from perception.record import RecordOptions, RunRecorder, replay_as_recorded
from perception.record._digest import RESOLUTION, detections_digest, tracker_digest
from perception.scheduler import Session
from perception.types import Detection3D, FrameResult, FrameStatus, SensorResult, SensorStatus

ROOT = Path(__file__).resolve().parents[2]
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"
PROFILE = ROOT / "launch" / "replay.yaml"


def _record(path: Path, options: RecordOptions, frames: int = 30) -> int:
    """Record ``frames`` frames of the bundled drive as a replay would (every sensor missing but the
    frame's samples, a real fusion stage, a dropped frame every tenth): the number of segments."""
    config = load_config(PROFILE)
    with DriveReader(DRIVE) as reader:
        session = Session.assemble(config, reader.source)
        rec = RunRecorder(path, options, ego_poses=tuple(reader.ego_poses()))
        with rec:
            rec.begin(session)
            fusion = rec.fusion(session.fusion())
            assert fusion is not None
            assembler = session.assembler()
            n = 0
            for sample in reader.samples():
                rec.sample(sample, 1_000 + sample.t_ns)
                for frame in assembler.push(sample):
                    if n >= frames:
                        break
                    if n % 10 == 9:
                        shed = FrameResult(frame.frame_id, frame.t_ns, FrameStatus.DROPPED, {}, reason="overload: shed")
                        rec.result(shed)
                    else:
                        results = {
                            name: SensorResult(name, SensorStatus.MISSING if s is None else SensorStatus.LATE)
                            for name, s in frame.samples.items()
                        }
                        dets, _ = fusion(frame, results)
                        rec.result(FrameResult(frame.frame_id, frame.t_ns, FrameStatus.DEGRADED, results, dets))
                    n += 1
        assert not any(k.startswith("dropped_") for k in rec.stats), rec.stats
        return rec.stats["segments"]


def test_a_rotated_recording_replays_across_its_segments(tmp_path: Path) -> None:
    run = tmp_path / "run.mcap"
    segments = _record(run, RecordOptions(segment_bytes=2**20, max_segments=0))
    assert segments >= 3 and sorted(p.name for p in tmp_path.iterdir())[:2] == ["run-0001.mcap", "run-0002.mcap"]
    out = anyio.run(lambda: replay_as_recorded(run, load_config(PROFILE)))
    assert out.first is None, out.first
    assert out.segments == segments and out.compared == 27 and out.equal == 27
    shed = [r for r in out.results if r.status is FrameStatus.DROPPED]
    assert len(out.results) == 30 and len(shed) == 3 and all(r.reason == "overload: shed" for r in shed)


def test_a_recording_whose_start_was_rotated_away_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run.mcap"
    _record(run, RecordOptions(segment_bytes=2**20, max_segments=2))
    assert not run.exists() and len(list(tmp_path.iterdir())) == 2  # bounded: the oldest deleted
    with pytest.raises(DriveError, match="segment 0 of the recording is gone"):
        anyio.run(lambda: replay_as_recorded(run, load_config(PROFILE)))


def _det(x: float) -> Detection3D:
    return Detection3D(1, "car", 0.5, (x, 2.0, 0.5), (4.0, 2.0, 1.5), 0.1, (1.0, 0.0), (0.2, 0.2), ("lidar_top",))


def test_digests_quantise_floats_to_the_stated_resolution() -> None:
    base = detections_digest([_det(10.0)])
    assert detections_digest([_det(10.0 + RESOLUTION / 100)]) == base  # the last bits of another CPU
    assert detections_digest([_det(10.0 + 3 * RESOLUTION)]) != base
    state = {"table": np.array([[1.0, math.nan, math.inf]]), "next_id": np.array([3], np.int64)}
    assert tracker_digest(state) == tracker_digest({k: v.copy() for k, v in state.items()})
    assert tracker_digest(state) != tracker_digest({**state, "next_id": np.array([4], np.int64)})
    assert tracker_digest(state) != tracker_digest({**state, "table": np.array([[1.0, -math.inf, math.inf]])})
