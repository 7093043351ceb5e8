"""A replay reads the samples of the sensors it uses alone (the enabled ones and the trigger): a recording of a
run with a subset of the sensors held every other sensor's samples too, which no frame and no replay as recorded
reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reliability_helpers import runtime_config
from test_source_invalid import MODELS, _drive

from perception.drives import DriveReader
from perception.replay import DriveSource
from perception.scheduler import RunObserver, Session


class _Seen(RunObserver):
    def __init__(self) -> None:
        self.sensors: list[str] = []

    def sample(self, sample: Any, arrival_ns: int) -> None:
        self.sensors.append(sample.sensor)


def test_a_replay_of_some_sensors_reads_theirs_and_the_triggers_alone(tmp_path: Path) -> None:
    drive = _drive(tmp_path / "d.mcap", 5, empty_images=set(), zero_poses=set())
    cfg = runtime_config("localhost:1", MODELS)
    with DriveReader(drive) as reader:
        every = DriveSource(reader, cfg)
        frames = list(every.iter_frames())
        session = Session.assemble(cfg, reader.source).with_overrides(sensors=["radar_front"])
        assert session.config.trigger.sensor == "lidar_top"  # the profile's trigger, not enabled: it clocks frames
        seen = _Seen()
        some = DriveSource(reader, session, observer=seen)
        subset = list(some.iter_frames())
    assert sorted(set(seen.sensors)) == ["lidar_top", "radar_front"]  # no camera image read
    assert [f.t_ns for f in subset] == [f.t_ns for f in frames]  # the same frames
    for f, g in zip(frames, subset, strict=True):  # the radar's samples in them are the same
        mine, theirs = g.samples.get("radar_front"), f.samples.get("radar_front")
        assert (mine and (mine.t_ns, mine.seq)) == (theirs and (theirs.t_ns, theirs.seq)), f.frame_id
