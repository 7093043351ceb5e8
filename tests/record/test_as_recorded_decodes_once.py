"""``replay --as-recorded`` decodes each record's values once: a fusion record's results, ego pose and detections
(checked as read, digested, rebuilt into the frame fusion is given), a delivered frame's results (checked as read,
replayed); and what it replays is as before (every frame compared equal)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from record_helpers import DRIVE, REPLAY_PROFILE, lidar_result
from recording_helpers import as_recorded

from perception.config import load_config
from perception.drives import DriveReader
from perception.record import RecordOptions, RunRecorder
from perception.record import _format as fmt
from perception.record._replay import fusion_records
from perception.scheduler import Session
from perception.types import FrameResult, FrameStatus

FRAMES = 8


def _record(path: Path) -> None:
    """``FRAMES`` frames of the bundled drive fused with the lidar's answer (two objects), the others missing."""
    config = load_config(REPLAY_PROFILE)
    with DriveReader(DRIVE) as reader:
        session = Session.assemble(config, reader.source)
        with RunRecorder(path, RecordOptions(), ego_poses=tuple(reader.ego_poses())) as rec:
            rec.begin(session)
            fusion = rec.fusion(session.fusion())
            assert fusion is not None
            assembler = session.assembler()
            made = 0
            for sample in reader.samples():
                rec.sample(sample, 1_000 + sample.t_ns)
                for frame in assembler.push(sample):
                    if made < FRAMES:
                        results = {n: lidar_result(n, s, frame.t_ns) for n, s in frame.samples.items()}
                        dets, _ = fusion(frame, results)
                        rec.result(FrameResult(frame.frame_id, frame.t_ns, FrameStatus.DEGRADED, results, dets))
                    made += 1
                if made >= FRAMES:
                    break


def test_each_records_values_are_decoded_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: a fusion record's results, ego pose and detections were decoded when it was read (to check it),
    # again for its digests and again for the frame fusion is given; a delivered frame's results when read and
    # again when replayed.
    run = tmp_path / "run.mcap"
    _record(run)
    with DriveReader(run) as reader:
        fused = fusion_records(reader)
        delivered = [json.loads(d) for _, _, _, d in reader.messages([fmt.FRAMES_TOPIC])]
    assert len(fused) == len(delivered) == FRAMES
    calls: Counter[str] = Counter()
    for name in ("decode_result", "decode_ego", "decode_detection"):
        real = getattr(fmt, name)

        def counted(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls[_name] += 1
            return _real(*args)

        monkeypatch.setattr(fmt, name, counted)
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    assert out.first is None and out.compared == out.equal == FRAMES
    assert sum(len(r.detections) for r in out.results) > 0
    assert calls == {
        "decode_result": sum(len(r["sensors"]) for r in (*fused, *delivered)),
        "decode_ego": FRAMES,
        "decode_detection": sum(len(r["detections"]) for r in fused),
    }
