"""RunRecorder and replay_as_recorded without a server: rotation, a rotated-away start, digests."""

from __future__ import annotations

import dataclasses
import errno
import gc
import itertools
import json
import math
import os
import sys
import time
import weakref
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcap.reader import make_reader
from mcap.writer import CompressionType, Writer
from record_helpers import DRIVE, REPLAY_PROFILE, copy_into, lidar_result
from recording_helpers import as_recorded

from perception._lifetime import Lifetime
from perception.cli import main
from perception.config import load_config
from perception.drives import DriveReader
from perception.errors import ConfigError, DriveDamagedError, DriveError, PerceptionError, RuntimeClosedError
from perception.record import (
    AsRecordedOutcome,
    Divergence,
    RecordOptions,
    RunRecorder,
    _digest,
    _recorder,
    source_poses,
)
from perception.record import _format as fmt
from perception.record._digest import (
    RESOLUTION,
    detections_digest,
    outputs_digest,
    recorded_outputs_digest,
    tracker_digest,
)
from perception.record._replay import fusion_records
from perception.scheduler import Session, TrackingStage
from perception.types import (
    Detection3D,
    EgoPose,
    Frame,
    FrameResult,
    FrameStatus,
    ImageSample,
    PointCloudSample,
    Sample,
    SensorResult,
    SensorStatus,
    Transform,
    interpolate_ego,
)


def _record(
    path: Path,
    options: RecordOptions,
    frames: int = 30,
    profile: Path = REPLAY_PROFILE,
    results_of: Callable[[int, Frame], dict[str, SensorResult]] | None = None,
    shed: int | None = None,
    lossless: bool = True,
) -> Counter[str]:
    """Record ``frames`` frames of the bundled drive as a replay would (every sensor missing but the
    frame's samples, a real fusion stage, a dropped frame every tenth; ``shed``: every shed-th frame shed with
    the tracker's prediction instead, as ``Runtime.shed`` does): the recorder's stats. The samples
    are handed over as fast as the loop goes, faster than any run; whenever they wake the writer (256
    waiting), the loop waits for it to have taken them all (:func:`_drained`), as a run's pace lets it: the
    queue neither overflows nor is the writer woken again mid-drain, however late it is scheduled on a busy
    host (a queue of 512 overflowed, one of 4096 counted a wake more); ``lossless``: nothing was dropped (checked)."""
    config = load_config(profile)
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
                _drained(rec)
                for frame in assembler.push(sample):
                    if n >= frames:
                        break
                    if shed is not None and n % shed == shed - 1:
                        assert isinstance(fusion, TrackingStage)
                        dets = fusion.predict(frame)
                        rec.result(FrameResult(frame.frame_id, frame.t_ns, FrameStatus.DROPPED, {}, dets,
                                               reason="overload: shed", predicted=True))  # fmt: skip
                    elif shed is None and n % 10 == 9:
                        why = "overload: shed"
                        rec.result(FrameResult(frame.frame_id, frame.t_ns, FrameStatus.DROPPED, {}, reason=why))
                    else:
                        results = {
                            name: SensorResult(name, SensorStatus.MISSING if s is None else SensorStatus.LATE)
                            for name, s in frame.samples.items()
                        }
                        if results_of is not None:  # (the frame's n-th) some sensors' results instead
                            results.update(results_of(n, frame))
                        dets, _ = fusion(frame, results)
                        rec.result(FrameResult(frame.frame_id, frame.t_ns, FrameStatus.DEGRADED, results, dets))
                    n += 1
        assert not lossless or not any(k.startswith("dropped_") for k in rec.stats), rec.stats
        return rec.stats


def _fused_late(rec: RunRecorder, fusion: Any, frame: Frame) -> list[weakref.ref[Any]]:
    """``frame`` fused with every sensor late and its result delivered to ``rec``: weak references to its
    accumulated clouds' points (to check that the recorder does not keep them)."""
    accumulated = [s for s in frame.samples.values() if isinstance(s, PointCloudSample) and s.merged_from]
    results = {name: SensorResult(name, SensorStatus.LATE) for name in frame.samples}
    dets, _ = fusion(frame, results)
    rec.result(FrameResult(frame.frame_id, frame.t_ns, FrameStatus.DEGRADED, results, dets))
    return [weakref.ref(s.points) for s in accumulated]


def _drained(rec: RunRecorder, timeout_s: float = 120.0) -> None:
    """When the items waiting have woken the recorder's writer, wait until it has taken them all (a watchdog:
    ``timeout_s``)."""
    if len(rec._items) < rec._wake_at:
        return
    deadline = time.monotonic() + timeout_s
    while rec._items:
        assert time.monotonic() < deadline, "the recorder's writer took no item for 120 s"
        time.sleep(0.001)


def test_a_rotated_recording_replays_across_its_segments(tmp_path: Path) -> None:
    run = tmp_path / "run.mcap"
    segments = _record(run, RecordOptions(segment_bytes=2**20, max_segments=0))["segments"]
    assert segments >= 3 and sorted(p.name for p in tmp_path.iterdir())[:2] == ["run-0001.mcap", "run-0002.mcap"]
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    assert out.first is None, out.first
    assert out.segments == segments and out.compared == 27 and out.equal == 27
    shed = [r for r in out.results if r.status is FrameStatus.DROPPED]
    assert len(out.results) == 30 and len(shed) == 3 and all(r.reason == "overload: shed" for r in shed)


def test_a_replay_s_source_poses_are_one_message_a_segment_read_back_bit_for_bit(tmp_path: Path) -> None:
    # Every segment holds the source's poses (any kept one can start a replay). They were two protobuf
    # messages a pose (/ego/odometry, /tf), in every segment: an hour's drive (180,000 poses) cost each
    # segment's opening 2-3 s of the writer's CPU and 27 MB (now 17 MB, the poses encoded once, in 0.17 s).
    run = tmp_path / "run.mcap"
    with DriveReader(DRIVE) as reader:
        first = reader.ego_poses()[0]
        session = Session.assemble(load_config(REPLAY_PROFILE), reader.source)
        samples = list(itertools.islice(reader.samples(), 40))
    rng = np.random.default_rng(46)
    poses = [  # an hour's worth would do the same; floats with every bit set, and the drive's first pose
        first,
        *(
            EgoPose(first.t_ns + 20_000_000 * i, Transform(tuple(v[:3]), tuple(v[3:7])), tuple(v[7:10]), float(v[10]))
            for i, v in enumerate(rng.standard_normal((5_000, 11)).tolist(), start=1)
        ),
    ]
    with RunRecorder(run, RecordOptions(segment_bytes=2**20, max_segments=0), ego_poses=poses) as rec:
        rec.begin(session)
        for sample in samples:
            rec.sample(sample, sample.t_ns)
            _drained(rec)
    segs = fmt.segments(run)
    assert len(segs) >= 2, segs  # (the samples rotated it)
    for seg in segs:
        with DriveReader(seg) as reader:
            counts = Counter(topic for topic, *_ in reader.messages([fmt.SOURCE_POSES_TOPIC, "/ego/odometry", "/tf"]))
            assert counts == {fmt.SOURCE_POSES_TOPIC: 1}, (seg.name, counts)
            assert source_poses(reader) == poses  # bit for bit: the replay interpolates them as the run did


def test_a_segment_ends_at_most_a_chunk_and_a_message_past_its_size(tmp_path: Path) -> None:
    # a segment is rotated once what it wrote passes --record-segment-mb; the chunk being filled is not counted
    # until written, so the chunks are at most half the segment (4 MiB chunks made 1 MiB segments 4.3 MB)
    run = tmp_path / "run.mcap"
    segments = _record(run, RecordOptions(segment_bytes=2**20, max_segments=0))["segments"]
    sizes = [seg.stat().st_size for seg in fmt.segments(run)]
    with DriveReader(DRIVE) as reader:
        message = max(s.points.nbytes for s in reader.samples() if isinstance(s, PointCloudSample))
    assert len(sizes) == segments >= 3
    over = 2**20 // 2 + message + 2**16  # a chunk, the largest message, the segment's summary
    assert all(size <= 2**20 + over for size in sizes[:-1]), (sizes, over)


def test_the_writer_is_woken_once_per_16_mib_of_samples_32_frames_or_256_items(tmp_path: Path) -> None:
    # 30 frames (and the drive's samples: ~0.54 MB a frame) handed over as fast as a replay can: the writer is
    # woken by begin, by each 16 MiB of samples waiting, each 32 results, each 256 items waiting and by close --
    # not once a frame (30), nor a sample
    with DriveReader(DRIVE) as reader:
        sizes = [s.points.nbytes if isinstance(s, PointCloudSample) else len(s.data) for s in reader.samples()]
    stats = _record(tmp_path / "run.mcap", RecordOptions())
    items = stats["samples"] + stats["fused"] + stats["frames"]
    sample_bytes = sum(sizes[: stats["samples"]])
    assert stats["frames"] == 30 and items > 256 and sample_bytes > _recorder._WAKE_BYTES
    wakes = 1 + 30 // 32 + items // 256 + sample_bytes // _recorder._WAKE_BYTES + 1
    assert 1 <= stats["wakes"] <= wakes < 30, stats


def _new_payload(image: ImageSample, i: int) -> ImageSample:
    """``image`` as another received image: its own payload (a new bytes object: its own identity), ``i`` ns
    later."""
    return dataclasses.replace(image, data=bytes(memoryview(image.data)), t_ns=image.t_ns + i)


def _writer_idle(rec: RunRecorder, timeout_s: float = 60.0) -> None:
    """Wait (a watchdog: ``timeout_s``) until the writer has opened the segment and taken every item queued."""
    deadline = time.monotonic() + timeout_s
    while rec.stats["segments"] < 1 or rec._items:
        assert time.monotonic() < deadline, "the recorder's writer did not open its segment"
        time.sleep(0.001)


def test_a_camera_s_image_is_traced_whatever_the_other_cameras_sent(tmp_path: Path) -> None:
    # Which received image a frame's is (its stamp as received, for the replay to find it) was remembered for the
    # rig's latest 256 images: a rig of many cameras, or one sending fast, pushed out a slower camera's latest
    # image, and its frames were recorded without it ("raw_t_ns": null). Now each sensor's latest are kept.
    with DriveReader(DRIVE) as reader:
        session = Session.assemble(load_config(REPLAY_PROFILE), reader.source)
        images = [s for s in reader.samples() if isinstance(s, ImageSample)]
        front = next(s for s in images if s.sensor == "cam_front")
        back = next(s for s in images if s.sensor == "cam_back")
        with RunRecorder(tmp_path / "run.mcap", ego_poses=tuple(reader.ego_poses())) as rec:
            rec.begin(session)
            fusion = rec.fusion(session.fusion())
            assert fusion is not None
            rec.sample(front, front.t_ns)
            for i in range(300):  # the other camera's images, each its own payload
                rec.sample(_new_payload(back, i), back.t_ns + i)
                _drained(rec)
            _fused_late(rec, fusion, Frame(1, front.t_ns, samples={"cam_front": front}))
    (record,) = _fusion_records_of(tmp_path / "run.mcap")
    assert record["samples"]["cam_front"]["raw_t_ns"] == front.t_ns


def test_the_images_remembered_are_not_held_once_written(tmp_path: Path) -> None:
    # The images remembered (to trace a frame's to the received one) were held by the recorder: 256 of them kept
    # every image of the bundled drive alive all run long (~7 MB between the run's transient buffers: the heap
    # grew, ~40 fresh pages faulted in a frame). Their received stamps are remembered, not their payloads.
    with DriveReader(DRIVE) as reader:
        session = Session.assemble(load_config(REPLAY_PROFILE), reader.source)
        front = next(s for s in reader.samples() if isinstance(s, ImageSample) and s.sensor == "cam_front")
        first = _new_payload(front, 0)
        payload = first.data
        held = sys.getrefcount(payload)  # this frame's references: the local, the sample's, the call's
        with RunRecorder(tmp_path / "run.mcap", ego_poses=tuple(reader.ego_poses())) as rec:
            rec.begin(session)
            rec.sample(first, first.t_ns)
            for i in range(1, 20):
                rec.sample(_new_payload(front, i), front.t_ns + i)
        # written and closed: nothing of the recorder's holds the image any more (its stamp is remembered)
        assert sys.getrefcount(payload) == held
    assert rec.stats["samples"] == 20


def test_the_writer_is_woken_by_16_mib_of_samples_waiting(tmp_path: Path) -> None:
    # The writer was woken by 32 results or 256 items waiting: samples waited for it whatever their size (32
    # frames of a 12-sensor rig: ~200 MB). 16 MiB of samples wakes it now, no frame's result needed.
    wake = _recorder._WAKE_BYTES
    with DriveReader(DRIVE) as reader:
        session = Session.assemble(load_config(REPLAY_PROFILE), reader.source)
        sweeps = [s for s in reader.samples() if isinstance(s, PointCloudSample) and s.sensor == "lidar_top"]
        waking = next(i for i in range(len(sweeps)) if sum(s.points.nbytes for s in sweeps[: i + 1]) >= wake)
        assert wake == 16 * 2**20 and waking < 255  # fewer items than wake the writer by their number
        with RunRecorder(tmp_path / "run.mcap", ego_poses=tuple(reader.ego_poses())) as rec:
            rec.begin(session)
            _writer_idle(rec)
            for s in sweeps[: waking + 1]:
                rec.sample(s, s.t_ns)
            deadline = time.monotonic() + 60.0
            while rec.stats["samples"] < waking + 1:  # a watchdog: the old writer waited for close
                assert time.monotonic() < deadline, f"{rec.stats['samples']} sweeps written: the writer slept"
                time.sleep(0.001)
            assert rec.stats["wakes"] == 2, rec.stats  # begin's, then the sweeps'


def test_a_frame_s_accumulated_cloud_is_traced_in_its_turn_not_held_for_the_writer(tmp_path: Path) -> None:
    # An accumulated cloud (the received sweep, earlier sweeps moved into it) is traced to the received
    # sweeps in fusion's turn: the queue holds those sweeps (written anyway), not the cloud (their rows again,
    # ~0.9 MB a frame on the bundled drive) until the writer is woken; the record is the same

    def kept(rec: RunRecorder, clouds: list[weakref.ref[Any]]) -> None:
        gc.collect()
        assert rec.stats["wakes"] <= 1  # begin's: every frame's items wait in the queue
        assert all(c() is None for c in clouds), "a frame's accumulated cloud is kept for the writer"

    merged = _record_accumulated(tmp_path / "run.mcap", before_close=kept)
    assert len(merged) >= 5 and all(e["raw_t_ns"] == e["t_ns"] and e["points"] is False for e in merged)


def _record_accumulated(
    path: Path,
    change: Callable[[PointCloudSample], PointCloudSample] | None = None,
    clouds: int = 5,
    before_close: Callable[[RunRecorder, list[weakref.ref[Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Record the bundled drive's first ``clouds`` frames with an accumulated lidar cloud (each changed by
    ``change`` before fusion, when given; ``before_close``: called with the recorder and weak references to the
    clouds before it is closed): their lidar entries in the fusion records."""
    config = load_config(REPLAY_PROFILE)
    refs: list[weakref.ref[Any]] = []
    with DriveReader(DRIVE) as reader:
        session = Session.assemble(config, reader.source)
        with RunRecorder(path, ego_poses=tuple(reader.ego_poses())) as rec:
            rec.begin(session)
            fusion = rec.fusion(session.fusion())
            assert fusion is not None
            assembler = session.assembler()
            for sample in reader.samples():
                rec.sample(sample, sample.t_ns)
                _drained(rec)
                for made in assembler.push(sample):
                    cloud = made.samples.get("lidar_top")
                    if change is not None and isinstance(cloud, PointCloudSample) and cloud.merged_from:
                        changed = {**made.samples, "lidar_top": change(cloud)}
                        refs += _fused_late(rec, fusion, dataclasses.replace(made, samples=changed))
                    else:
                        refs += _fused_late(rec, fusion, made)
                    del made, cloud
                if len(refs) >= clouds:
                    break
            if before_close is not None:
                before_close(rec, refs)
    lidar = [r["samples"]["lidar_top"] for r in _fusion_records_of(path)]
    return [e for e in lidar if e.get("merged")]


def test_an_accumulated_cloud_is_traced_by_its_provenance_no_row_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An accumulated cloud was traced to the received sweeps by comparing every 256th of their rows in fusion's
    # thread (~15 us a sweep, in memory the caches no longer hold). The accumulator states which arrays it wrote
    # and read (merged_points): the cloud is traced by identity, no row read, the record the same.
    reads: list[int] = []
    spot_equal = _recorder._spot_equal
    monkeypatch.setattr(_recorder, "_spot_equal", lambda a, b: reads.append(1) or spot_equal(a, b))
    merged = _record_accumulated(tmp_path / "run.mcap")
    assert len(merged) >= 5 and all(e["raw_t_ns"] == e["t_ns"] and e["points"] is False for e in merged)
    assert not reads, f"{len(reads)} rows compared"


def test_a_cloud_replaced_after_accumulation_is_traced_by_its_rows_or_written(tmp_path: Path) -> None:
    # The provenance is the accumulator's arrays': a cloud whose points were replaced since (a later stage) is
    # traced by its rows (equal rows: the same record), and one whose rows changed is written as it is
    copied = _record_accumulated(tmp_path / "copied.mcap", lambda c: dataclasses.replace(c, points=c.points.copy()))
    assert len(copied) >= 5 and all(e["points"] is False and e["raw_t_ns"] == e["t_ns"] for e in copied)

    def moved(c: PointCloudSample) -> PointCloudSample:
        points = c.points.copy()
        points[:, 2] += 0.5
        return dataclasses.replace(c, points=points)

    _record_accumulated(tmp_path / "changed.mcap", moved)
    lidar = [r["samples"]["lidar_top"] for r in _fusion_records_of(tmp_path / "changed.mcap")]
    assert sum(e["points"] is True for e in lidar) >= 5, lidar


@pytest.mark.parametrize("drift_ns", [0, 1_000])
def test_a_cloud_whose_stamps_the_time_base_mapped_is_traced_to_the_received_sweeps(
    tmp_path: Path, drift_ns: int
) -> None:
    # A ROS node's run (time base "offset": the ROS clock's stamps mapped to the host's monotonic clock): the
    # frames' samples carry mapped stamps, the recording the received ones. Their accumulated clouds were
    # traced by stamp (none matched), then by the 4 OLDEST sweeps remembered (a sort meant to put the latest
    # first): from the 5th frame on, each cloud's rows were written again (~0.9 MB a frame on the bundled
    # drive, the recording 2.5x as large: 27 of 31 frames of a 3 s node run), and held in the queue for it.
    # ``drift_ns``: an estimated offset, moving from sample to sample (the writer's thorough search traces it).
    shift = 1_796_000_000_000_000_000  # a received stamp mapped to the host clock: stamp + shift
    config = load_config(REPLAY_PROFILE)
    clouds: list[weakref.ref[Any]] = []
    with DriveReader(DRIVE) as reader:
        # the poses on the host clock too, as the frames' stamps (and recorded so: the replay reads them)
        poses = [dataclasses.replace(p, t_ns=p.t_ns + shift) for p in reader.ego_poses()]
        source = dataclasses.replace(reader.source, ego_at=lambda t: interpolate_ego(poses, t))
        session = Session.assemble(config, source)
        with RunRecorder(tmp_path / "run.mcap", ego_poses=poses) as rec:
            rec.begin(session)
            fusion = rec.fusion(session.fusion())
            assert fusion is not None
            assembler = session.assembler()
            frames = 0
            for i, received in enumerate(reader.samples()):
                rec.sample(received, received.t_ns)  # as received (the live runtime's push)...
                _drained(rec)
                # ...then mapped to the host clock by its intake
                mapped = dataclasses.replace(received, t_ns=received.t_ns + shift + i * drift_ns)
                for frame in assembler.push(mapped):
                    clouds += _fused_late(rec, fusion, frame)
                    del frame
                    frames += 1
                if frames >= 20:
                    break
            gc.collect()
            held = sum(c() is not None for c in clouds)
    assert len(clouds) >= 15
    if not drift_ns:
        assert held == 0, f"{held} of {len(clouds)} accumulated clouds held for the writer"
    lidar = [r["samples"]["lidar_top"] for r in _fusion_records_of(tmp_path / "run.mcap")]
    merged = [e for e in lidar if e.get("merged")]
    assert len(merged) >= 15
    assert all(e["points"] is False and 0 <= e["t_ns"] - shift - e["raw_t_ns"] < 10**6 for e in merged), merged
    assert all(0 <= m["t_ns"] - shift - m["raw_t_ns"] < 10**6 for e in merged for m in e["merged"])
    with DriveReader(tmp_path / "run.mcap") as reader:
        assert not list(reader.points(fmt.points_topic("lidar_top"), "lidar_top"))  # no cloud's rows again
    # the frames' records logged on the samples' clock (a viewer shows them beside their samples): they were
    # logged at the frames' own times, on the host clock (a ROS node's recording: 56 years from its samples)
    with (tmp_path / "run.mcap").open("rb") as f:
        logged: dict[str, list[int]] = {}
        for _, channel, message in make_reader(f).iter_messages():
            logged.setdefault(channel.topic, []).append(message.log_time)
    lidar_times = logged["/sensors/lidar_top/points"]
    for topic in ("/record/fusion", "/record/frames"):
        assert min(lidar_times) - 10**9 < min(logged[topic]) and max(logged[topic]) < max(lidar_times) + 10**9, topic
    out = as_recorded(tmp_path / "run.mcap", config)
    assert out.first is None and out.compared == frames, (out.first, out.compared)


def _fusion_records_of(path: Path) -> list[dict[str, Any]]:
    with DriveReader(path, strict=True) as reader:
        return fusion_records(reader)


def test_the_recording_s_json_is_the_encoder_s_byte_for_byte(tmp_path: Path) -> None:
    """The recorder assembles its records' JSON from remembered pieces around few encoder calls: each message
    is what ``json.dumps(..., separators=(",", ":"))`` writes of it (its keys in the order read back)."""
    run = tmp_path / "run.mcap"
    _record(run, RecordOptions())
    seen: Counter[str] = Counter()
    with run.open("rb") as f:
        for _, channel, message in make_reader(f).iter_messages(log_time_order=False):
            if channel.message_encoding == "json":
                text = message.data.decode()
                assert text == json.dumps(json.loads(text), separators=(",", ":")), text
                seen[channel.topic] += 1
    assert seen[fmt.FUSION_TOPIC] == 27 and seen[fmt.FRAMES_TOPIC] == 30 and seen[fmt.ARRIVALS_TOPIC] > 0, seen
    # the pieces' rarer values: escaped and non-ASCII names, None, booleans, an int enum, floats
    odd = [None, True, False, 0, -5, 2**70, 1.5, math.nan, -math.inf, "x", 'p\u00e9"d\\\n', FrameStatus.OK]
    assert [_recorder._scalar(v) for v in odd] == [json.dumps(v, separators=(",", ":")) for v in odd]
    dets = tuple(
        Detection3D(i, label, 0.5, (1.0, 2.0, 3.0), (1.0, 1.0, 1.0), 0.0, (0.0, 0.0), (0.1, 0.1), sources)
        for i, (label, sources) in enumerate([("car", ()), ('p\u00e9"d', ("lidar", "r\u00e9")), ("\u2603", ('a"b',))])
    )
    assert _recorder._detections_json(dets) == json.dumps(
        {"ids": [0, 1, 2], "labels": [d.label for d in dets], "sources": [list(d.sources) for d in dets]},
        separators=(",", ":"),
    )


def test_a_recording_whose_start_was_rotated_away_replays_from_the_first_kept_segment(tmp_path: Path) -> None:
    # (a real run's tracks restored: tests/record/test_record_live.py)
    run = tmp_path / "run.mcap"
    _record(run, RecordOptions(segment_bytes=2**20, max_segments=6), frames=1000)  # every frame of the drive
    kept = sorted(tmp_path.iterdir())
    assert not run.exists() and len(kept) == 6  # bounded: the oldest deleted
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    assert out.start is not None and out.start["segment"] == kept[0].name and out.start["frame_id"] is not None
    assert out.first is None and out.compared > 0 and out.equal == out.compared
    assert out.report()["start"] == out.start
    # the frames fused in the segments gone are counted (the fusion turns are numbered from 0 over the recording)
    kept_turns = [int(r["seq"]) for seg in kept for r in _fusion_records(seg)]
    assert out.start["fused_in_segments_gone"] == min(kept_turns) > 0


def test_a_rotated_recording_of_a_run_without_tracking_replays_from_its_first_kept_segment(tmp_path: Path) -> None:
    # fusion.tracking off: the run recorded an empty tracker state after each frame, nothing to restore (it was
    # restored anyway: an InputError, 'tracks nothing here', ended the replay)
    profile = tmp_path / "untracked.yaml"
    profile.write_text(REPLAY_PROFILE.read_text().replace("\nfusion:\n", "\nfusion:\n  tracking: false\n", 1))
    assert not load_config(profile).fusion.tracking
    run = tmp_path / "rec" / "run.mcap"
    run.parent.mkdir()
    _record(run, RecordOptions(segment_bytes=2**20, max_segments=6), frames=1000, profile=profile)
    assert not run.exists()
    out = as_recorded(run, load_config(profile))
    assert out.start is not None and out.start["frame_id"] is not None, out.start
    assert out.first is None and out.compared > 0 and out.equal == out.compared


@pytest.mark.parametrize("fresh_on", [0, 1])
def test_rerun_models_from_a_rotated_recording_answers_results_reused_from_frames_taken_as_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_on: int
) -> None:
    """A run decimating a camera under overload reused its result of the frame before (every other frame:
    ``fresh_on`` says which, so that the replay's start lands once on a frame reusing the one taken as recorded
    before it). --rerun-models from the first kept segment gives that reused result today's answer to its own
    sample, as for any other frame; it was called missing: a 'model' divergence no model made."""
    from perception.fusion import Fuser
    from perception.record._replay import _replay_segments
    from perception.types import ImageSample

    def answer(name: str, t: int, age: int | None = None) -> SensorResult:
        return SensorResult(name, SensorStatus.OK, outputs={"x": np.array([t])}, sample_t_ns=t, reused_age_ns=age)

    last: dict[str, SensorResult] = {}

    def results_of(n: int, frame: Frame) -> dict[str, SensorResult]:
        cam = frame.samples.get("cam_front")
        if cam is None:
            return {}
        if n % 2 == fresh_on or "cam_front" not in last:
            last["cam_front"] = answer("cam_front", cam.t_ns)
            return {"cam_front": last["cam_front"]}
        then = last["cam_front"]
        return {"cam_front": answer("cam_front", int(then.sample_t_ns or 0), frame.t_ns - int(then.sample_t_ns or 0))}

    class Today:  # today's models: the answers the run's gave, to the samples asked
        async def process(self, frame: Frame) -> FrameResult:
            sensors = {n: answer(n, s.t_ns) for n, s in frame.samples.items() if isinstance(s, ImageSample)}
            return FrameResult(frame.frame_id, frame.t_ns, FrameStatus.OK, sensors)

    # fusion sees no detection (the cameras' answers are not a model's): the answers alone are compared
    monkeypatch.setattr(Fuser, "__call__", lambda self, frame, results: ((), {}))
    run = tmp_path / "run.mcap"
    _record(run, RecordOptions(segment_bytes=2**20, max_segments=6), frames=1000, results_of=results_of)
    config = load_config(REPLAY_PROFILE)
    segs = fmt.segments(run)
    assert not run.exists() and len(segs) == 6
    with DriveReader(segs[0]) as reader:
        session = Session.assemble(config, reader.source)
    fusion = session.fusion()
    assert isinstance(fusion, Fuser)
    out = AsRecordedOutcome(rerun_models=True)
    rt: Any = Today()

    async def replay() -> None:
        with anyio.fail_after(600):  # watchdog
            await _replay_segments(segs, session, fusion, out, rt, recording=run, resume=True)

    anyio.run(replay)
    reused = [r for r in out.results if r.sensors.get("cam_front") and r.sensors["cam_front"].reused_age_ns]
    assert reused and out.start is not None and out.start["frame_id"] is not None, out.start
    assert out.first is None and out.compared > 0 and out.equal == out.compared


def _lidar_answer(n: int, frame: Frame) -> dict[str, SensorResult]:
    """(``_record``'s ``results_of``) the lidar's answer: two objects, so the tracker has tracks."""
    sample = frame.samples.get("lidar_top")
    return {} if sample is None else {"lidar_top": lidar_result("lidar_top", sample, frame.t_ns)}


def test_a_shed_frame_right_after_a_frame_taken_as_recorded_is_where_a_rotated_replay_starts(tmp_path: Path) -> None:
    # A prediction reads the tracker as the fused frame before it left it (Runtime.shed: in its fusion turn, read
    # only), and that state is recorded: a shed frame following a frame taken as recorded (its state restored) is
    # compared, and the replay starts there. It was taken as recorded too: the start waited for a fused frame.
    run = tmp_path / "run.mcap"
    _record(run, RecordOptions(segment_bytes=2**20, max_segments=0), frames=1000, results_of=_lidar_answer, shed=3)
    segs = fmt.segments(run)
    assert len(segs) > 8
    starts: Counter[bool] = Counter()  # replays by whether they started at a prediction
    for i in range(1, 8):
        kept = tmp_path / f"from{i}"
        kept.mkdir()
        for seg in segs[i : i + 4]:
            (kept / seg.name).write_bytes(seg.read_bytes())
        out = as_recorded(kept / run.name, load_config(REPLAY_PROFILE))
        assert out.first is None and out.compared > 0 and out.equal == out.compared, (segs[i].name, out.first)
        assert out.start is not None and out.start["fusion_seq"] is not None
        first = next(r for seg in segs[i:] for r in _fusion_records(seg) if r["frame_id"] == out.start["frame_id"])
        starts[bool(first.get("predicted"))] += 1
        if first.get("predicted"):
            assert first["detections"], "a prediction of no track: nothing compared"
            taken = [r for r in _fusion_records(segs[i]) if int(r["seq"]) < int(first["seq"])]
            assert taken and not taken[-1].get("predicted") and out.start["taken_as_recorded"] == len(taken)
    assert starts[True] > 0, starts


def test_frames_fused_and_shed_frames_predicted_are_counted_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 'as recorded: N frames fused, M shed' counted the predictions compared among the N fused, and the frames
    # 'fused in the segments gone' of a rotated recording were its fusion turns, the predictions among them
    run = tmp_path / "run.mcap"
    stats = _record(run, RecordOptions(segment_bytes=2**20, max_segments=0), results_of=_lidar_answer, shed=3)
    assert stats["fused"] > 0 and stats["predicted"] > 0
    argv = ["replay", str(run), "--as-recorded", "--config", str(REPLAY_PROFILE), "--out", str(tmp_path / "as")]
    assert main(argv) == 0
    said = f"as recorded: {stats['fused']} frames fused, {stats['predicted']} shed (predicted), every digest equal"
    assert said in capsys.readouterr().out
    report = json.loads((tmp_path / "as" / "as_recorded.json").read_text())["as_recorded"]
    total = stats["fused"] + stats["predicted"]
    assert (report["compared"], report["compared_predicted"]) == (total, stats["predicted"])
    segs = fmt.segments(run)
    assert len(segs) >= 3
    kept = tmp_path / "kept"
    kept.mkdir()
    for seg in segs[2:]:
        (kept / seg.name).write_bytes(seg.read_bytes())
    gone = [r for seg in segs[:2] for r in _fusion_records(seg)]
    predicted = sum(1 for r in gone if r.get("predicted"))
    assert 0 < predicted < len(gone)
    argv = ["replay", str(kept / run.name), "--as-recorded", "--config", str(REPLAY_PROFILE)]
    assert main([*argv, "--out", str(tmp_path / "as_kept")]) == 0
    start = json.loads((tmp_path / "as_kept" / "as_recorded.json").read_text())["as_recorded"]["start"]
    assert (start["fused_in_segments_gone"], start["predicted_in_segments_gone"]) == (len(gone) - predicted, predicted)
    said = f"{len(gone) - predicted} frame(s) fused and {predicted} shed frame(s) predicted in the segments gone"
    assert said in capsys.readouterr().out


def test_the_recorded_line_counts_shed_frames_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perception.cli._record import report_recording

    rec = RunRecorder(tmp_path / "run.mcap")
    rec.stats.update(segments=1, fused=7, predicted=2, frames=10, samples=40)
    report_recording(rec)
    assert f"recorded {rec.path}: 7 frames fused, 2 shed (predicted), 10 results, 40 samples" in capsys.readouterr().out


def _fuse_late(rec: RunRecorder, fusion: Any, frame: Frame) -> None:
    results = {n: SensorResult(n, SensorStatus.LATE) for n in frame.samples}
    dets, _ = fusion(frame, results)
    rec.result(FrameResult(frame.frame_id, frame.t_ns, FrameStatus.DEGRADED, results, dets))


def test_a_replay_starting_in_a_later_run_of_a_rotated_recording_names_that_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A ROS node activated twice: run 0 (its last frame alone fused) and run 1, run 0's segments but its last
    # rotated away. Its one frame is taken as recorded; the first compared is run 1's frame 0, on a fresh
    # tracker. 'start' named run 0 (the run of the first turn kept) and the line 'frame 0': run 0's.
    path = tmp_path / "run.mcap"
    config = load_config(REPLAY_PROFILE)
    with DriveReader(DRIVE) as reader:
        samples = list(reader.samples())
        rec = RunRecorder(path, RecordOptions(segment_bytes=2**20, max_segments=0), ego_poses=tuple(reader.ego_poses()))
        with rec:
            for run, part in enumerate((samples[: len(samples) // 2], samples[len(samples) // 2 :])):
                session = Session.assemble(config, reader.source)
                rec.begin(session)
                fusion = rec.fusion(session.fusion())
                assert fusion is not None
                assembler = session.assembler()
                last: list[Frame] = []
                for sample in part:
                    rec.sample(sample, 1_000 + sample.t_ns)
                    _drained(rec)
                    frames = assembler.push(sample)
                    last = frames[-1:] or last
                    for frame in frames if run == 1 else ():  # (run 0: only its last frame fused, at its end)
                        _fuse_late(rec, fusion, frame)
                for frame in last if run == 0 else ():
                    _fuse_late(rec, fusion, frame)
    runs = []
    for seg in fmt.segments(path):
        with DriveReader(seg) as reader:
            runs.append(reader.metadata[fmt.META_RUN])
    last_of_run_0 = runs.index("1") - 1
    assert last_of_run_0 > 0 and _fusion_records(fmt.segment_path(path, last_of_run_0))
    for i in range(last_of_run_0):
        fmt.segment_path(path, i).unlink()
    out = as_recorded(path, config)
    assert out.first is None and out.compared > 0 and out.equal == out.compared
    assert out.start is not None and out.start["taken_as_recorded"] == 1, out.start
    assert out.start["frame_id"] == 0 and out.start["run"] == "1", out.start
    argv = ["replay", str(path), "--as-recorded", "--config", str(REPLAY_PROFILE), "--out", str(tmp_path / "a")]
    assert main(argv) == 0
    assert "compared from frame 0 of run 1 (fusion #" in capsys.readouterr().out


def test_a_frame_fused_late_after_the_start_its_samples_in_a_segment_gone_is_taken_as_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Frames reach fusion out of their order (a slow one fused after the next two, as in a live run): in the first
    # kept segment a frame fused after the replay's start may have its samples in the segment gone before it. It
    # is taken as recorded (its tracker state restored) like the frames before the start; it was fused without
    # them: a 'decision' divergence, and the tracker's state diverged from there on.
    from perception.fusion import Fuser

    def sees(self: Fuser, frame: Frame, results: Any) -> tuple[tuple[Detection3D, ...], dict[str, int]]:
        cloud = frame.samples.get("lidar_top")  # a detection telling whether the frame's lidar sweep was there
        return (_det(-1.0 if not isinstance(cloud, PointCloudSample) else float(len(cloud.points))),), {}

    monkeypatch.setattr(Fuser, "__call__", sees)
    path = tmp_path / "run.mcap"
    config = load_config(REPLAY_PROFILE)
    with DriveReader(DRIVE) as reader:
        session = Session.assemble(config, reader.source)
        rec = RunRecorder(path, RecordOptions(segment_bytes=2**20, max_segments=0), ego_poses=tuple(reader.ego_poses()))
        with rec:
            rec.begin(session)
            fusion = rec.fusion(session.fusion())
            assembler = session.assembler()
            held: list[tuple[int, Frame]] = []
            n = 0
            for sample in reader.samples():
                rec.sample(sample, 1_000 + sample.t_ns)
                _drained(rec)
                for frame in assembler.push(sample):
                    n += 1
                    if n % 4 == 1:  # fused after the next two
                        held.append((n + 2, frame))
                        continue
                    _fuse_late(rec, fusion, frame)
                    for due, late in [h for h in held if h[0] <= n]:
                        held.remove((due, late))
                        _fuse_late(rec, fusion, late)
    segs = fmt.segments(path)
    whole = as_recorded(path, config)
    assert whole.first is None and whole.compared > 0 and whole.equal == whole.compared, whole.first
    later = 0  # replays in which a frame after the start was taken as recorded
    for i in range(1, min(len(segs), 16)):
        kept = tmp_path / f"from{i}"
        kept.mkdir()
        for seg in segs[i:]:
            (kept / seg.name).write_bytes(seg.read_bytes())
        out = as_recorded(kept / "run.mcap", config)
        assert out.first is None and out.compared > 0 and out.equal == out.compared, (segs[i].name, out.first)
        assert out.start is not None and out.start["frame_id"] is not None
        before = [r for r in _fusion_records(segs[i]) if int(r["seq"]) < out.start["fusion_seq"]]
        later += out.start["taken_as_recorded"] > len(before)
    assert later > 0


def _fusion_records(seg: Path) -> list[dict[str, Any]]:
    with DriveReader(seg) as reader:
        return fusion_records(reader)


def test_a_rotated_recording_whose_kept_segments_hold_no_frame_fused_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a run whose frames all were fused in segment 0, its samples recorded on (rotated twice): the segments kept
    # hold samples only. The replay says it started from a rotated recording and compared nothing, rather than
    # reporting a replay from the run's start (``start`` None) with every digest equal.
    run = tmp_path / "run.mcap"
    _record(run, RecordOptions(segment_bytes=2**20, max_segments=2), frames=5)
    kept = sorted(tmp_path.iterdir())
    assert not run.exists() and len(kept) == 2
    assert not [r for seg in kept for r in _fusion_records(seg)]
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    assert out.compared == 0 and out.results == [] and out.first is None
    assert out.start is not None and out.start["segment"] == kept[0].name, out.start
    assert out.start["fusion_seq"] is None and out.start["frame_id"] is None
    assert out.start["fused_in_segments_gone"] is None
    argv = ["replay", str(run), "--as-recorded", "--config", str(REPLAY_PROFILE), "--out", str(tmp_path / "as")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"segment 0 rotated away, replayed from {kept[0].name}: " in printed, printed
    assert "hold no frame fused: nothing compared" in printed, printed


def test_a_rotated_recording_of_a_format_without_tracker_state_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run.mcap"
    _record(run, RecordOptions(segment_bytes=2**20, max_segments=2))
    for seg in sorted(tmp_path.iterdir()):  # as format 3 wrote it: no tracker state to start from
        with DriveReader(seg) as reader:
            assert reader.metadata[fmt.META_FORMAT] == "7"
        data = seg.read_bytes()
        seg.write_bytes(data.replace(b"record.format\x01\x00\x00\x007", b"record.format\x01\x00\x00\x003"))
    with pytest.raises(DriveError, match="holds no tracker state to start from"):
        as_recorded(run, load_config(REPLAY_PROFILE))


def test_a_recording_is_replayed_from_its_first_segment_and_a_missing_one_is_named(tmp_path: Path) -> None:
    run = tmp_path / "run.mcap"
    segments = _record(run, RecordOptions(segment_bytes=2**20, max_segments=0))["segments"]
    assert segments >= 4
    # a later segment given as the recording: refused, not replayed from an unknown tracker state
    later = fmt.segment_path(run, 2)
    with pytest.raises(DriveError, match="segment 2 of a recording, not its start"):
        as_recorded(later, load_config(REPLAY_PROFILE))
    # a segment in the middle not there (deleted, not copied): the fusion turns it held are named as its
    fmt.segment_path(run, 1).unlink()
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    assert out.first is not None and out.first.cause == "decision"
    assert "in segment(s) run-0001.mcap, missing from the recording's folder" in out.first.detail


def test_a_recording_cut_short_replays_what_it_holds_and_names_the_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a run stopped before its recorder closed the segment (a crash, power lost): the file ends mid-chunk
    whole, run = tmp_path / "whole.mcap", tmp_path / "run.mcap"
    _record(whole, RecordOptions())
    complete = as_recorded(whole, load_config(REPLAY_PROFILE))
    assert not complete.damage and complete.drive_error is None and complete.report()["damage"] == {}
    cut = int(whole.stat().st_size * 0.15)  # (the 30 frames' records are in its first ~30 %: the drive's 10 s)
    run.write_bytes(whole.read_bytes()[:cut])
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    # what is readable replays as recorded; what follows the cut is named, not passed over in silence
    assert out.first is None and 0 < out.compared < complete.compared
    assert list(out.damage) == ["run.mcap"] and out.damage["run.mcap"].truncated_at is not None
    assert isinstance(out.drive_error, DriveDamagedError) and "run.mcap" in str(out.drive_error)
    report = out.report()
    assert report["damage"]["run.mcap"]["truncated_at"] <= cut and report["drive_error"] == str(out.drive_error)
    # --strict: refused before a frame is fused
    with pytest.raises(DriveDamagedError, match="truncated"):
        as_recorded(run, load_config(REPLAY_PROFILE), strict=True)
    # the command: everything readable written and compared, the damage on stdout and one error line, exit 3
    argv = ["replay", str(run), "--as-recorded", "--config", str(REPLAY_PROFILE)]
    assert main([*argv, "--out", str(tmp_path / "as")]) == 3
    printed = capsys.readouterr()
    assert "every digest equal" in printed.out and "recording damaged: run.mcap: truncated at byte" in printed.out
    assert "run.mcap: drive damaged: truncated" in printed.err and "Traceback" not in printed.err
    written = json.loads((tmp_path / "as" / "as_recorded.json").read_text())["as_recorded"]
    assert written["compared"] == out.compared and written["damage"]["run.mcap"]["truncated"]
    assert main([*argv, "--strict", "--out", str(tmp_path / "strict")]) == 3
    assert not (tmp_path / "strict").exists()


@pytest.mark.parametrize("cut", [5_000, 500, 0])  # in its first chunk; in its metadata; nothing written
def test_a_rotated_recording_whose_first_kept_segment_was_cut_short_starts_from_the_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: int
) -> None:
    # the first kept segment cut short before its first chunk completed (a crash, a copy cut short): it holds no
    # channel. The whole recording was refused ('no channel for lidar sensor', exit 1) though the segments after
    # it are intact. It is named as damaged and the replay starts from the next segment, as from a first kept one.
    run = tmp_path / "rec" / "run.mcap"
    run.parent.mkdir()
    _record(run, RecordOptions(segment_bytes=2**20, max_segments=6), frames=1000)
    kept = fmt.segments(run)
    assert not run.exists() and len(kept) == 6
    kept[0].write_bytes(kept[0].read_bytes()[:cut])
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    assert list(out.damage) == [kept[0].name] and out.damage[kept[0].name].truncated is not None
    assert isinstance(out.drive_error, DriveDamagedError) and kept[0].name in str(out.drive_error)
    assert out.start is not None and out.start["segment"] == kept[1].name and out.start["frame_id"] is not None
    assert out.first is None and out.compared > 0 and out.equal == out.compared
    # every turn before the first one kept is counted as fused in the segments gone, the cut one's included
    assert out.start["fused_in_segments_gone"] == min(int(r["seq"]) for r in _fusion_records(kept[1]))
    argv = ["replay", str(run), "--as-recorded", "--config", str(REPLAY_PROFILE)]
    assert main([*argv, "--out", str(tmp_path / "as")]) == 3
    printed = capsys.readouterr()
    assert f"recording damaged: {kept[0].name}: truncated at byte" in printed.out, printed.out
    assert f"replayed from {kept[1].name}: compared from frame" in printed.out, printed.out
    assert printed.err.count("\n") == 1 and f"{kept[0].name}: drive damaged: truncated" in printed.err, printed.err
    written = json.loads((tmp_path / "as" / "as_recorded.json").read_text())["as_recorded"]
    assert written["start"] == out.start and written["damage"][kept[0].name]["truncated"]
    assert main([*argv, "--strict", "--out", str(tmp_path / "strict")]) == 3
    assert not (tmp_path / "strict").exists()
    assert f"{kept[0].name}: drive damaged: truncated" in capsys.readouterr().err


def test_a_recording_whose_segment_0_or_last_segment_was_cut_short_before_its_first_chunk_is_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # segment 0 cut short before its first chunk completed: the replay starts from segment 1 on the tracker state
    # recorded there; the last segment cut short (the run stopped just after it began): replayed up to it. Both
    # were refused whole ('no channel for lidar sensor', exit 1).
    run = tmp_path / "run.mcap"
    _record(run, RecordOptions(segment_bytes=2**20, max_segments=0), frames=1000)
    segs = fmt.segments(run)
    whole = as_recorded(run, load_config(REPLAY_PROFILE))
    assert whole.first is None and whole.start is None and not whole.damage
    for cut in (segs[0], segs[-1]):
        data = cut.read_bytes()
        cut.write_bytes(data[:5_000])
        out = as_recorded(run, load_config(REPLAY_PROFILE))
        assert list(out.damage) == [cut.name] and out.damage[cut.name].truncated_at is not None
        assert out.first is None and 0 < out.compared <= whole.compared and out.equal == out.compared
        if cut == segs[0]:
            assert out.compared < whole.compared and out.start is not None, out.start
            assert out.start["segment"] == segs[1].name, out.start
            assert out.start["fused_in_segments_gone"] == min(int(r["seq"]) for r in _fusion_records(segs[1]))
            argv = ["replay", str(run), "--as-recorded", "--config", str(REPLAY_PROFILE), "--out", str(tmp_path / "a")]
            assert main(argv) == 3
            assert f"as recorded: segment 0 ({run.name}) unreadable, replayed from {segs[1].name}: " in (
                capsys.readouterr().out
            )
        else:
            assert out.start is None
        cut.write_bytes(data)


def test_a_segment_missing_or_unreadable_after_a_rotated_start_is_named_by_its_own_name(tmp_path: Path) -> None:
    # segment 0 rotated away, a later kept segment deleted, or cut short (none of it readable): the fusion turns it
    # held are a gap named by the segment's name. Named after the first kept segment's ('run-0045-0047.mcap'), and a
    # cut one refused the whole recording.
    run = tmp_path / "rec" / "run.mcap"
    run.parent.mkdir()
    _record(run, RecordOptions(segment_bytes=2**20, max_segments=6), frames=1000)
    kept = fmt.segments(run)
    assert not run.exists() and len(kept) == 6 and _fusion_records(kept[2])
    for damage in ("deleted", "cut"):
        copy = tmp_path / damage
        copy.mkdir()
        for seg in kept:
            (copy / seg.name).write_bytes(seg.read_bytes()[: 5_000 if seg == kept[2] else None])
        if damage == "deleted":
            (copy / kept[2].name).unlink()
        out = as_recorded(copy / run.name, load_config(REPLAY_PROFILE))
        assert out.first is not None and out.first.cause == "decision", out.first
        why = "missing from the recording's folder" if damage == "deleted" else "damaged: none of it readable"
        assert f"(in segment(s) {kept[2].name}, {why})" in out.first.detail, out.first.detail
        assert list(out.damage) == ([kept[2].name] if damage == "cut" else [])


def test_a_segment_file_holding_another_segment_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a segment copied over another (or renamed): its records are the other segment's. The replay said 'fusion
    # #9..#4 missing from the recording (dropped by the recorder)'; it names the file and what it holds.
    run = tmp_path / "run.mcap"
    assert _record(run, RecordOptions(segment_bytes=2**20, max_segments=0))["segments"] >= 3
    fmt.segment_path(run, 2).write_bytes(fmt.segment_path(run, 1).read_bytes())
    with pytest.raises(DriveError, match=r"run-0002\.mcap: holds segment 1 of its recording \(its metadata\), not 2"):
        as_recorded(run, load_config(REPLAY_PROFILE))
    argv = ["replay", str(run), "--as-recorded", "--config", str(REPLAY_PROFILE), "--out", str(tmp_path / "as")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run-0002.mcap: holds segment 1" in err and "Traceback" not in err


def _cut_after_a_fusion_record(src: Path, dst: Path, seq: int) -> int:
    """``src`` written again one message a chunk, and cut right after fusion #``seq``'s record, before its numbers
    (``/record/fusion_data``, the next message) as a chunk boundary between the two leaves it: the bytes kept."""
    with src.open("rb") as f, dst.open("wb") as out:
        reader = make_reader(f)
        add = copy_into(reader, Writer(out, compression=CompressionType.NONE, chunk_size=1))
        for schema, channel, message in reader.iter_messages(log_time_order=False):
            add(schema, channel, message, message.data)
            if channel.topic == fmt.FUSION_TOPIC and message.sequence == seq:
                return out.tell()  # (the writer never finished: the file ends there)
    raise AssertionError(f"no fusion #{seq} in {src}")


def test_a_fusion_record_whose_numbers_were_cut_off_is_missing_with_what_follows_the_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a segment cut short between a fusion record and its numbers (the next message, in the next chunk): the whole
    # recording was refused ('a fusion record cannot be read: fusion #33: its /record/fusion_data message is
    # missing', exit 1). That record is missing as what follows the cut is: the replay goes on, the damage named,
    # the turns lost said to be the damage's (not 'dropped by the recorder').
    run = tmp_path / "run.mcap"
    assert _record(run, RecordOptions(segment_bytes=2**20, max_segments=0))["segments"] >= 3
    last = max(int(r["seq"]) for r in _fusion_records(run))  # segment 0's last turn
    copy = tmp_path / "copy.mcap"
    kept = _cut_after_a_fusion_record(run, copy, last)
    copy.replace(run)
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    assert list(out.damage) == [run.name] and out.damage[run.name].truncated_at is not None
    assert out.first is not None and out.first.cause == "decision" and out.first.seq > last, out.first
    assert f"fusion #{last}..#{out.first.seq - 1} missing from the recording (lost to the damage of {run.name})" \
        in out.first.detail, out.first  # fmt: skip
    assert out.compared > 0
    argv = ["replay", str(run), "--as-recorded", "--config", str(REPLAY_PROFILE), "--out", str(tmp_path / "as")]
    assert main(argv) == 3
    assert f"recording damaged: {run.name}: truncated at byte" in capsys.readouterr().out
    assert kept > 0


def _det(x: float) -> Detection3D:
    return Detection3D(1, "car", 0.5, (x, 2.0, 0.5), (4.0, 2.0, 1.5), 0.1, (1.0, 0.0), (0.2, 0.2), ("lidar_top",))


_SPECIAL = st.sampled_from(
    [0.0, -0.0, 5e-5, -5e-5, 1.5e-4, -2.5e-4, 9e14, -9e14, 9.1e14, 1e300, math.nan, math.inf, -math.inf]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), _SPECIAL,
                          st.integers(-10**6, 10**6).map(lambda k: (k + 0.5) * RESOLUTION)), max_size=12))  # fmt: skip
def test_a_few_floats_are_quantised_in_python_as_numpy_does(values: list[float]) -> None:
    # the ego pose's floats in the decisions digest: plain Python's round of the quotient when finite and
    # within the limit (halves to even, as np.rint), numpy's path otherwise -- the same bytes either way
    assert _digest._floats(values) == _digest._quantise(np.asarray(values, np.float64)).hex()


def test_digests_quantise_floats_to_the_stated_resolution() -> None:
    base = detections_digest([_det(10.0)])
    assert detections_digest([_det(10.0 + RESOLUTION / 100)]) == base  # the last bits of another CPU
    assert detections_digest([_det(10.0 + 3 * RESOLUTION)]) != base
    state = {"table": np.array([[1.0, math.nan, math.inf]]), "next_id": np.array([3], np.int64)}
    assert tracker_digest(state) == tracker_digest({k: v.copy() for k, v in state.items()})
    assert tracker_digest(state) != tracker_digest({**state, "next_id": np.array([4], np.int64)})
    assert tracker_digest(state) != tracker_digest({**state, "table": np.array([[1.0, -math.inf, math.inf]])})


def test_rerun_models_answers_a_reused_result_with_today_s_answer_to_its_own_sample() -> None:
    """A result the run reused under overload (decimated sensor: ``reused_age_ns``) is not asked again of
    the later frame's sample: --rerun-models gives it today's answer to the sample it was made of (a rerun
    of the later sample would differ from what the vehicle fused, and read as a model change)."""
    from perception.record._replay import _rerun
    from perception.types import Frame, ImageSample

    asked: list[tuple[int, dict[str, int]]] = []

    class Today:
        async def process(self, frame: Frame) -> FrameResult:
            stamps = {n: s.t_ns for n, s in frame.samples.items() if s is not None}
            asked.append((frame.frame_id, stamps))
            sensors = {
                n: SensorResult(n, SensorStatus.OK, outputs={"x": np.array([t])}, sample_t_ns=t)
                for n, t in stamps.items()
            }
            return FrameResult(frame.frame_id, frame.t_ns, FrameStatus.OK, sensors)

    def image(t: int) -> ImageSample:
        return ImageSample("cam", t, "cam", b"jpeg", "jpeg")

    def ok(t: int, age: int | None = None) -> SensorResult:
        return SensorResult("cam", SensorStatus.OK, outputs={"x": np.array([t])}, sample_t_ns=t, reused_age_ns=age)

    answered: dict[str, SensorResult] = {}
    rt: Any = Today()
    first = anyio.run(lambda: _rerun(rt, Frame(0, 100, {"cam": image(100)}), {"cam": ok(100)}, answered))
    # frame 1: the run reused frame 0's answer (sample at 100) for its own sample at 200
    second = anyio.run(lambda: _rerun(rt, Frame(1, 200, {"cam": image(200)}), {"cam": ok(100, 100)}, answered))
    assert asked == [(0, {"cam": 100})]  # the reused sensor was not asked again
    assert second["cam"].sample_t_ns == 100 and second["cam"].reused_age_ns == 100
    assert second["cam"].outputs["x"].tolist() == first["cam"].outputs["x"].tolist() == [100]
    # a reused result whose own frame is not in the replay: missing, said, not a rerun of the wrong sample
    lost = anyio.run(lambda: _rerun(rt, Frame(2, 300, {"cam": image(300)}), {"cam": ok(250, 50)}, answered))
    assert lost["cam"].status is SensorStatus.MISSING and "reused" in (lost["cam"].error or "")


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"segment_bytes": 2**20 - 1}, "segment_bytes"),
        ({"max_segments": -1}, "max_segments"),
        ({"queue_items": 0}, "queue_items"),
        ({"compression": "gzip"}, "compression"),
    ],
)
def test_bad_record_options_are_a_config_error_naming_the_key(options: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=f"^{key}: "):
        RecordOptions(**options)


def test_the_recorder_reports_its_lifetime_and_closes_idempotently(tmp_path: Path) -> None:
    rec = RunRecorder(tmp_path / "run")
    rec.close()  # never entered: nothing to close
    assert rec.state is Lifetime.UNOPENED
    with rec:
        assert rec.state is Lifetime.OPENED
    assert rec.state is Lifetime.CLOSED
    rec.close()  # idempotent
    assert rec.state is Lifetime.CLOSED
    with pytest.raises(RuntimeClosedError, match="opened once"), rec:
        pass


def test_an_earlier_recording_at_the_path_is_replaced_whole(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # a longer recording's later segments must not be read as the next one's (it was replayed as 170 frames)
    run = tmp_path / "run.mcap"
    longer = _record(run, RecordOptions(segment_bytes=2**20, max_segments=0))["segments"]
    assert len(RunRecorder(run).files()) == longer >= 3
    with caplog.at_level("WARNING", logger="perception.record"):
        shorter = _record(run, RecordOptions(segment_bytes=8 * 2**20, max_segments=0))["segments"]
    assert shorter < longer and RunRecorder(run).files() == [fmt.segment_path(run, i) for i in range(shorter)]
    assert f"replaces an earlier recording ({longer} file(s) deleted)" in caplog.text
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    assert out.first is None and out.segments == shorter and out.compared == out.equal == 27


@pytest.mark.parametrize("where", ["run-0001.mcap", "run-0003.mcap", "run.mcap"])
@pytest.mark.parametrize("what", ["drive", "other mcap", "text"])
def test_a_file_of_a_segments_name_that_is_not_a_recording_is_never_replaced(
    tmp_path: Path, where: str, what: str
) -> None:
    # a user's drive (or another tool's MCAP, any file) named as a segment of the recording was deleted whole by
    # the recording's start, as an earlier recording's segment (FILE itself, a plain drive, too)
    run = tmp_path / "run.mcap"
    other = tmp_path / where
    if what == "drive":
        other.write_bytes(DRIVE.read_bytes())
    elif what == "other mcap":
        with other.open("wb") as f:
            writer = Writer(f)
            writer.start("", "another tool")
            writer.add_metadata("perception.drive", {"format": "4"})
            writer.finish()
    else:
        other.write_text("notes\n")
    before = other.read_bytes()
    rec = RunRecorder(run, RecordOptions())
    with pytest.raises(DriveError, match=rf"{where}: exists and is not a segment of a recording: move it or"):
        rec.__enter__()
    with pytest.raises(DriveError, match="is not a segment of a recording"):
        _record(run, RecordOptions(), frames=3)
    assert other.read_bytes() == before and rec.state is Lifetime.UNOPENED
    # what the recorder refuses on entering, its first run's beginning refuses too (a file appearing meanwhile)
    other.unlink()
    late = RunRecorder(run, RecordOptions())
    refused = pytest.raises(PerceptionError, match=rf"{where}: exists and is not a segment of a recording")
    with refused, DriveReader(DRIVE) as reader, late:
        other.write_bytes(before)
        late.begin(Session.assemble(load_config(REPLAY_PROFILE), reader.source))
    assert other.read_bytes() == before


def test_a_file_appearing_under_a_later_segments_name_is_not_overwritten_by_the_rotation(tmp_path: Path) -> None:
    # the check at the start saw no run-0001.mcap; one made during the run was overwritten by the rotation
    run = tmp_path / "run.mcap"
    other = tmp_path / "run-0001.mcap"

    def results_of(n: int, frame: Frame) -> dict[str, SensorResult]:
        if n == 0:
            other.write_bytes(DRIVE.read_bytes()[:100_000])
        return _lidar_answer(n, frame)

    with pytest.raises(PerceptionError, match=r"run-0001\.mcap: exists and is not a segment of a recording"):
        _record(run, RecordOptions(segment_bytes=2**20, max_segments=0), results_of=results_of)
    assert other.read_bytes() == DRIVE.read_bytes()[:100_000]
    assert fmt.is_replaceable_segment(run) and fmt.segments(run) == [run, other]


def test_a_file_appearing_just_before_a_segment_is_opened_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the rotation checked the name, then opened it: a file made between the two was overwritten. Here it is made
    # at the last moment, just before the segment's writer opens the file.
    from perception.record import _recorder

    run = tmp_path / "run.mcap"
    other = tmp_path / "run-0001.mcap"
    real = _recorder.DriveWriter

    def opening(path: Path, *args: Any, **kwargs: Any) -> Any:
        if Path(path) == other:
            other.write_text("a user's notes\n")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(_recorder, "DriveWriter", opening)
    with pytest.raises(PerceptionError, match=r"run-0001\.mcap: exists and is not a segment of a recording"):
        _record(run, RecordOptions(segment_bytes=2**20, max_segments=0))
    assert other.read_text() == "a user's notes\n"
    assert fmt.is_replaceable_segment(run)


def test_a_segment_cut_short_before_its_metadata_is_replaced(tmp_path: Path) -> None:
    # a run that crashed leaves a segment empty or with the MCAP magic and nothing readable: recording again works
    run = tmp_path / "run.mcap"
    _record(run, RecordOptions(), frames=3)
    whole = run.read_bytes()
    assert fmt.is_replaceable_segment(run)
    cuts = {"run.mcap": whole[:8], "run-0001.mcap": b"", "run-0002.mcap": whole[:20], "run-0003.mcap": whole[:3]}
    for name, data in cuts.items():
        (tmp_path / name).write_bytes(data)
        assert fmt.is_replaceable_segment(tmp_path / name), name
    _record(run, RecordOptions(), frames=3)
    assert RunRecorder(run).files() == [run]


def test_a_recording_that_cannot_be_written_fails_loudly_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from perception.drives import _direct

    crashed: list[Any] = []
    monkeypatch.setattr("threading.excepthook", crashed.append)
    # the file cannot be created: every item the run hands over is dropped and counted, closing raises
    with pytest.raises(PerceptionError, match="cannot create drive"):
        _record(tmp_path / "gone" / "run.mcap", RecordOptions(), frames=3)
    # the disk fills up mid-run: the same, once the failing write is met; no traceback for it, the file closed
    real, writes = os.pwrite, [0]

    def full(fd: int, data: Any, offset: int) -> int:
        writes[0] += 1
        if writes[0] > 4:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data, offset)

    monkeypatch.setattr(_direct.os, "pwrite", full)
    run = tmp_path / "run.mcap"
    with caplog.at_level("ERROR", logger="perception.record"), pytest.raises(PerceptionError, match="No space"):
        _record(run, RecordOptions(), frames=30)
    assert "recording" in caplog.text and "No space left" in caplog.text
    assert not any(r.exc_info for r in caplog.records) and not crashed
    assert run.exists() and writes[0] > 4


def test_digests_are_stable_across_versions() -> None:
    # Pinned: a recording made by an earlier version replays against these very values. The digests were
    # computed value by value before they were vectorised (all of a frame's floats quantised at once).
    dets = [
        Detection3D(i, "car", 0.5 + i / 10, (i * 1.5, -2.25, 0.1), (4.0, 1.8, 1.5), 0.3 * i, (1.0, -0.5), (0.2, 0.3),
                    ("lidar_top", "cam_front"))
        for i in range(3)
    ]  # fmt: skip
    dets.append(
        Detection3D(
            9, "pedestrian", math.nan, (math.inf, -math.inf, 1e20), (0.5, 0.5, 1.7), -1.0, (0.0, 0.0), (0.1, 0.1), ()
        )
    )
    lidar = {
        "BOXES": np.arange(14, dtype=np.float32).reshape(2, 7) / 3,
        "LABELS": np.array([1, 2], np.int32),
        "SCORES": np.array([0.5, math.nan], np.float32),
    }
    results = {
        "lidar": SensorResult("lidar", SensorStatus.OK, outputs=lidar, model="m", model_version="1"),
        "cam": SensorResult("cam", SensorStatus.OK, model="c", model_version="2",
                            outputs={"COUNT": np.array([0], np.int32), "BOXES": np.zeros((0, 4), np.float32)}),
        "radar": SensorResult("radar", SensorStatus.LATE),
    }  # fmt: skip
    state = {
        "table": np.array([[1.0, math.nan, math.inf], [-math.inf, 2.5, -1e-5]]),
        "next_id": np.array([3], np.int64),
        "empty": np.zeros((0, 3)),
    }
    assert detections_digest(dets) == "185ca9803d0ab39b7ed65a9720d43f490b945facd3b2a6f1fede7e825d511f14"
    assert outputs_digest(results) == "c8fba95b0dec2af1214f8eed009a705883a1aac5c9ae1d6a4583b9eefbb677cf"
    assert tracker_digest(state) == "eeb58486b07f39353d0e95b6e730365d96c0f1bf3883536ab2207c65374db6ff"
    # the exact outputs digest (formats 3 and 4): format 3's run computed these values
    assert recorded_outputs_digest(results) == "35717cab0f44200eb3c96f7f5ef7c009c2441c97dfbe8e75c69fb1ad195099b8"
    assert recorded_outputs_digest({}) == "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
    # all finite (the common case: quantised without clipping or marking), pinned too
    finite = [d for d in dets if math.isfinite(d.score)]
    assert detections_digest(finite) == "70d04fd5f1d16f6067423f252a13b9e29cd6c2ffd7466313fbec8a11cda6d88d"
    table = {"table": np.arange(12.0).reshape(3, 4) / 7, "next_id": np.array([3], np.int64)}
    assert tracker_digest(table) == "edbfd824db87dae7a0db84667ab295ba09414952a5efe76514a21faf3df4c0a2"


def _record_fused(path: Path, results: dict[str, SensorResult], dets: list[Detection3D]) -> None:
    """One frame fused (the given outputs and detections) and delivered, recorded into ``path``."""
    with DriveReader(DRIVE) as reader:
        session = Session.assemble(load_config(REPLAY_PROFILE), reader.source)
    with RunRecorder(path) as rec:
        rec.begin(session)
        frame = Frame(7, 1_000_000, {})
        rec.fused(0, frame, results, tuple(dets), None)
        rec.result(FrameResult(7, 1_000_000, FrameStatus.OK, results, tuple(dets)))


def test_a_frame_s_numbers_are_recorded_binary_and_read_back_bit_for_bit(tmp_path: Path) -> None:
    # format 3: the detections' values and the raw outputs on /record/fusion_data (their bytes), the JSON
    # record holding their layout, ids, labels and sources -- no float of theirs as a JSON number
    dets = [Detection3D(i, "car", 0.1 * i + 1 / 3, (i / 7, -2.5, 1e-9), (4.0, 1.8, 1.5), -0.3, (1.0, 2 / 3),
                        (0.2, 0.3), ("lidar_top", "cam_front")) for i in range(5)]  # fmt: skip
    outputs = {
        "BOXES": np.arange(21, dtype=np.float32).reshape(3, 7) / 3,  # 84 bytes: padded to 88
        "LABELS": np.array([1, 2, 3], ">i4"),  # big-endian: recorded little-endian
        "EMPTY": np.zeros((0, 4), np.float32),
    }
    results = {
        "lidar_top": SensorResult("lidar_top", SensorStatus.OK, outputs=outputs, model="m", model_version="2"),
        "cam_front": SensorResult("cam_front", SensorStatus.LATE, error="late"),
    }
    run = tmp_path / "run.mcap"
    _record_fused(run, results, dets)
    with DriveReader(run, strict=True) as reader:
        raw = [json.loads(d) for _, _, _, d in reader.messages(["/record/fusion"])]
        data = [d for _, _, _, d in reader.messages(["/record/fusion_data"])]
        (record,) = fusion_records(reader)
    sources = [["lidar_top", "cam_front"]] * 5
    assert raw[0]["detections"] == {"ids": list(range(5)), "labels": ["car"] * 5, "sources": sources}
    assert raw[0]["sensors"]["lidar_top"]["outputs"]["LABELS"] == ["<i4", [3]]
    assert len(data) == 1 and len(data[0]) == 5 * 96 + 88 + 16 + 0
    assert record["detections"] == [fmt.encode_detection(d) for d in dets]  # every float exactly
    back = fmt.decode_result("lidar_top", record["sensors"]["lidar_top"]).outputs
    assert {k: (v.dtype.str, v.shape, v.tolist()) for k, v in back.items()} == {
        k: (v.dtype.newbyteorder("<").str, v.shape, v.tolist()) for k, v in outputs.items()
    }
    assert "digest" not in raw[0]  # format 4: derived when read, of those very values
    digest = fmt.fusion_digests(record, fmt.FORMAT_VERSION)
    assert digest["outputs"] == recorded_outputs_digest(results)
    assert digest["detections"] == detections_digest(dets)


def test_a_format_4_replay_checks_no_recorded_outputs_against_a_digest_of_themselves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # format 4 derives the outputs digest from the very outputs the replay reads: a check that could not fail,
    # at a digest of every output a frame, is not made; formats 1-3 recorded theirs, and it is
    from perception.record import _replay

    results = {"lidar_top": SensorResult("lidar_top", SensorStatus.OK, outputs={"X": np.ones(3, np.float32)})}
    dets = [_det(1.0), _det(2.0)]
    run = tmp_path / "run.mcap"
    _record_fused(run, results, dets)
    with DriveReader(run, strict=True) as reader:
        (record,) = fusion_records(reader)
    recorded = {n: fmt.decode_result(n, d) for n, d in record["sensors"].items()}
    frame = Frame(int(record["frame_id"]), int(record["t_ns"]), {}, ego=fmt.decode_ego(record["ego"]))
    digest = fmt.fusion_digests(record, "4")
    digested = Counter[str]()
    real = _replay.recorded_outputs_digest
    monkeypatch.setattr(_replay, "recorded_outputs_digest", lambda r: digested.update(["outputs"]) or real(r))
    compare = _replay._compare
    assert compare(record, digest, frame, recorded, recorded, dets, None, exact=True, derived=True) is None
    assert not digested
    wrong = {**digest, "outputs": "0" * 64}  # a format-3 recording whose outputs do not match its digest
    div = compare(record, wrong, frame, recorded, recorded, dets, None, exact=True, derived=False)
    assert div is not None and div.cause == "model" and "do not match their digest" in div.detail
    assert digested == Counter({"outputs": 1})


def test_a_fusion_record_without_its_numbers_is_named(tmp_path: Path) -> None:
    # a recording whose /record/fusion_data message is cut short: the replay says which file and frame
    results = {"lidar_top": SensorResult("lidar_top", SensorStatus.OK, outputs={"X": np.ones(3, np.float32)})}
    run = tmp_path / "run.mcap"
    _record_fused(run, results, [_det(1.0)])
    with DriveReader(run, strict=True) as reader:
        (record,) = (json.loads(d) for _, _, _, d in reader.messages(["/record/fusion"]))
        (data,) = (d for _, _, _, d in reader.messages(["/record/fusion_data"]))
    with pytest.raises(ValueError, match=r"fusion #0: 104 bytes of data, its layout says 112"):
        fmt.decode_fusion(json.loads(json.dumps(record)), data[:-8])
    with pytest.raises(ValueError, match=r"fusion #0: its /record/fusion_data message is missing"):
        fmt.decode_fusion(record, None)


def test_a_format_2_fusion_record_reads_as_it_was() -> None:
    # JSON numbers and base64 outputs (formats 1 and 2): read back unchanged, the outputs decoded
    old = {"seq": 0, "detections": [fmt.encode_detection(_det(1.0))], "sensors": {"lidar_top": {
        "status": "ok", "outputs": {"X": fmt.encode_array(np.array([1.5, 2.5], np.float32))}}}}  # fmt: skip
    assert fmt.decode_fusion(old, None) is old
    assert fmt.decode_result("lidar_top", old["sensors"]["lidar_top"]).outputs["X"].tolist() == [1.5, 2.5]


def test_a_divergence_in_a_later_run_names_the_run() -> None:
    # a ROS node's activations are runs of one recording, their frame ids each beginning at 0
    out = AsRecordedOutcome()
    out.note(Divergence(3, 40, "fusion", "other detections"), "1")
    assert out.first is not None
    assert out.first.line() == "first divergence: frame 3 of run 1 (fusion #40): fusion: other detections"
    assert out.report()["first_divergence"] == {
        "frame_id": 3, "run": 1, "seq": 40, "cause": "fusion", "detail": "other detections"
    }  # fmt: skip
    first_run = AsRecordedOutcome()
    first_run.note(Divergence(3, 3, "model", "x"))
    assert first_run.first is not None and first_run.first.line() == "first divergence: frame 3 (fusion #3): model: x"


@pytest.mark.parametrize("stem", ["run[1]", "run*", "run?"])
def test_the_segments_of_a_recording_named_with_glob_characters_are_its_own(tmp_path: Path, stem: str) -> None:
    # the segments were looked for by a glob of the name: 'run[1]-*' matched none of run[1]'s (its later segments
    # neither replayed nor replaced by a new recording), 'run*-*' another recording's
    names = [f"{stem}.mcap", f"{stem}-0001.mcap", f"{stem}-0002.mcap"]
    for name in [*names, "run1-0001.mcap", "runX-0001.mcap", "run-0001.mcap", "runs-0003.mcap"]:
        (tmp_path / name).touch()
    assert [p.name for p in fmt.segments(tmp_path / f"{stem}.mcap")] == names


def test_a_recording_of_which_no_segment_can_be_read_is_a_damaged_drive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # its only segment cut short before its first chunk completed: exit 3 naming the damage (it was exit 1, 'no
    # channel for lidar sensor ...'), nothing written
    run = tmp_path / "run.mcap"
    _record(run, RecordOptions())
    run.write_bytes(run.read_bytes()[:5_000])
    with pytest.raises(DriveDamagedError, match=r"truncated at byte \d+ before any message; no segment of the"):
        as_recorded(run, load_config(REPLAY_PROFILE))
    argv = ["replay", str(run), "--as-recorded", "--config", str(REPLAY_PROFILE), "--out", str(tmp_path / "as")]
    assert main(argv) == 3
    assert "run.mcap: drive damaged: truncated at byte" in capsys.readouterr().err
    assert not (tmp_path / "as").exists()


def _recorded_late(
    run: Path, frames: int, received: Callable[[Sample], Sample] = lambda s: s
) -> tuple[RunRecorder, Session, int]:
    """About ``frames`` frames of the bundled drive recorded at ``run``, each fused with every sensor late
    (:func:`_fused_late`), each sample handed over as ``received`` gives it: the recorder (closed), the session
    and the frames fused."""
    with DriveReader(DRIVE) as reader:
        session = Session.assemble(load_config(REPLAY_PROFILE), reader.source)
        with RunRecorder(run, ego_poses=tuple(reader.ego_poses())) as rec:
            rec.begin(session)
            fusion = rec.fusion(session.fusion())
            assert fusion is not None
            assembler = session.assembler()
            n = 0
            for sample in reader.samples():
                rec.sample(received(sample), 1_000 + sample.t_ns)
                _drained(rec)
                for frame in assembler.push(sample):
                    _fused_late(rec, fusion, frame)
                    n += 1
                if n >= frames:
                    break
    return rec, session, n


def test_samples_stamped_with_numpy_integers_and_a_pose_of_numpy_floats_are_recorded(tmp_path: Path) -> None:
    # The live intake takes numpy stamps (the frames' are plain ints) and hands the recorder the sample as pushed:
    # a received stamp (np.int64) in a fusion record's JSON ended the whole recording at the first fused frame;
    # a frame's ego pose of numpy floats likewise. They are recorded as plain numbers, the replay reproduces it.
    run = tmp_path / "run.mcap"
    config = load_config(REPLAY_PROFILE)
    rec, session, n = _recorded_late(run, 20, lambda s: dataclasses.replace(s, t_ns=np.int64(s.t_ns)))
    assert rec.error is None and not any(k.startswith("dropped_") for k in rec.stats), rec.stats
    fused = _fusion_records_of(run)
    raw = [e["raw_t_ns"] for r in fused for e in r["samples"].values() if e is not None]
    assert len(fused) == n and raw and all(type(t) is int for t in raw)
    out = as_recorded(run, config)
    assert out.first is None and out.compared == out.equal == n
    # a pose of numpy scalars: its values exactly
    ego = EgoPose(np.int64(5), Transform(tuple(np.float32([1.5, 2, 3])), tuple(np.float32([0, 0, 0.6, 0.8]))),
                  tuple(np.float32([1, 0, 0])), np.float32(0.1))  # fmt: skip
    with RunRecorder(tmp_path / "ego.mcap") as rec:
        rec.begin(session)
        rec.fused(0, Frame(7, 1_000_000, {}, ego=ego), {}, (), None)
        rec.result(FrameResult(7, 1_000_000, FrameStatus.OK, {}, ()))
    (record,) = _fusion_records_of(tmp_path / "ego.mcap")
    assert fmt.decode_ego(record["ego"]) == EgoPose(
        5, Transform((1.5, 2.0, 3.0), (0.0, 0.0, float(np.float32(0.6)), float(np.float32(0.8)))), (1.0, 0.0, 0.0),
        float(np.float32(0.1)),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (b'{"index":3,', b'{"index":3;', r"/record/frames: result #3 cannot be read: Expecting ',' delimiter"),
        (b'"status":"degraded"', b'"status":"degradeX"', r"/record/frames: result #0 cannot be read: 'degradeX' is"),
        (b'{"status":"late"', b'{"status":"lat3"', r"/record/fusion: fusion #0 cannot be read: 'lat3' is not a valid"),
        (b'}},"sensors":{"', b'}},"sensorz":{"', r"/record/fusion: fusion #0 cannot be read: no 'sensors'$"),
        (b'"m":[', b'"n":[', r"/record/fusion: fusion #\d+ cannot be read: no 'm'$"),  # a merged sweep's
    ],
)
def test_a_record_changed_is_a_drive_error_naming_the_file_topic_and_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: bytes, new: bytes, said: str
) -> None:
    # A recording's chunks carry no CRC: a changed byte reaches the decoders, which raised a raw JSONDecodeError,
    # ValueError or KeyError (a traceback from the CLI; a key missing was said as just 'sensors')
    run = tmp_path / "run.mcap"
    if old.startswith(b'"m"'):
        _record_accumulated(run)
    else:
        _record(run, RecordOptions())
    whole = run.read_bytes()
    assert old in whole
    run.write_bytes(whole.replace(old, new, 1))
    with pytest.raises(DriveError, match=rf"^{run}: {said}") as caught:
        as_recorded(run, load_config(REPLAY_PROFILE))
    assert caught.value.__cause__ is not None
    argv = ["replay", str(run), "--as-recorded", "--config", str(REPLAY_PROFILE), "--out", str(tmp_path / "as")]
    assert main(argv) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"perception replay: error: {run}: /record/")


def test_a_segment_whose_opening_fails_is_closed_and_removed_and_the_report_says_what_became_of_the_earlier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A write failing while a segment was opened (after its file was created: the source poses' message, ~17 MB an
    # hour's drive) left the writer unclosed (its file open, without a summary), and the end-of-run line said the
    # earlier recording was 'left as it was': it had been deleted
    from perception.cli._record import report_recording
    from perception.drives import _writer

    run = tmp_path / "run.mcap"
    _record(run, RecordOptions(), frames=3)  # an earlier recording there
    real, opened = _writer.DriveWriter.write_bytes, [0, 0]  # segments opened, the one whose opening fails

    def full(self: Any, topic: str, t_ns: int, data: Any, seq: int | None = None) -> None:
        if topic == fmt.SOURCE_POSES_TOPIC:
            opened[0] += 1
            if opened[0] == opened[1]:
                cause = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                raise DriveError(f"cannot write: {cause.strerror}", file=str(self.path)) from cause
        real(self, topic, t_ns, data, seq)

    monkeypatch.setattr(_writer.DriveWriter, "write_bytes", full)
    fds = set(os.listdir("/proc/self/fd"))
    config = load_config(REPLAY_PROFILE)
    for fail_at in (1, 3):  # segment 0's opening; a rotation's (segment 2)
        opened[:] = [0, fail_at]
        with pytest.raises(PerceptionError, match="No space left"), DriveReader(DRIVE) as reader:
            rec = RunRecorder(run, RecordOptions(segment_bytes=2**20, max_segments=0), ego_poses=reader.ego_poses())
            with rec:
                rec.begin(Session.assemble(config, reader.source))
                for sample in reader.samples():
                    rec.sample(sample, sample.t_ns)
                    _drained(rec)
        assert set(os.listdir("/proc/self/fd")) <= fds  # the failed segment's file closed
        report_recording(rec, cut="the recording FAILED")
        said = capsys.readouterr().out
        if fail_at == 1:
            assert fmt.segments(run) == []  # nothing half-written left
            assert said == f"nothing recorded at {run} (the earlier recording there was deleted: 1 file(s)): the " \
                "recording FAILED\n"  # fmt: skip
        else:
            assert [p.name for p in fmt.segments(run)] == ["run.mcap", "run-0001.mcap"] and rec.stats["segments"] == 2
            for seg in fmt.segments(run):  # each finished, readable
                with DriveReader(seg, strict=True) as reader:
                    assert sum(1 for _ in reader.samples()) > 0
            assert said.startswith(f"recorded {run}: ") and "2 segment(s)" in said


def test_results_the_recorder_dropped_are_named_by_the_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A result dropped under a full queue was counted in the recorder's memory alone: the recording, and its replay
    # as recorded, said nothing of it. Its index is missing from /record/frames: the replay names the gap.
    real = RunRecorder._put

    def full_at_4_and_5(rec: RunRecorder, kind: str, item: Any, size: int = 0) -> bool:
        if kind == "result" and item[0] in (4, 5):  # the queue full when they were delivered
            rec.stats[f"dropped_{kind}"] += 1
            return False
        return real(rec, kind, item, size)

    monkeypatch.setattr(RunRecorder, "_put", full_at_4_and_5)
    run = tmp_path / "run.mcap"
    config = load_config(REPLAY_PROFILE)
    rec, _, n = _recorded_late(run, 12)
    assert rec.stats["dropped_result"] == 2
    out = as_recorded(run, config)
    assert out.first is None and out.compared == out.equal == n and len(out.results) == n - 2
    assert out.results_missing == [[4, 2, "dropped by the recorder"]]
    assert out.report()["results_missing"] == [[4, 2, "dropped by the recorder"]]
    argv = ["replay", str(run), "--as-recorded", "--config", str(REPLAY_PROFILE), "--out", str(tmp_path / "as")]
    assert main(argv) == 0
    said = "as recorded: 2 delivered result(s) missing from the recording: #4..#5 (dropped by the recorder)\n"
    assert said in capsys.readouterr().out


def test_a_gap_in_the_fusion_order_is_named_at_the_frame_after_it_with_its_own_cause(tmp_path: Path) -> None:
    # A gap's divergence paired the frame after the gap with the first turn missing (frame 40, 'fusion #37'); and on
    # a replay from a kept segment, the frames taken as recorded left the gap's cause as the segments gone's: a turn
    # the recorder dropped after them was said to be 'in segment(s) run.mcap, missing from the recording's folder'.
    run = tmp_path / "run.mcap"
    _record(run, RecordOptions(segment_bytes=2**20, max_segments=0), frames=150, results_of=_lidar_answer)
    run.unlink()  # segment 0 rotated away: replayed from the first kept segment, its first frames taken
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    assert out.first is None and out.start is not None and out.start["taken_as_recorded"] > 0, out.start
    start = int(out.start["fusion_seq"])  # the first frame compared: the recorder dropped it
    seg = next(s for s in fmt.segments(run) if any(int(r["seq"]) == start for r in _fusion_records(s)))
    after = next(r for r in _fusion_records(seg) if int(r["seq"]) == start + 1)
    copy = tmp_path / "copy"
    with seg.open("rb") as f, copy.open("wb") as dst:
        reader = make_reader(f)
        writer = Writer(dst, compression=CompressionType.NONE)
        add = copy_into(reader, writer)
        for schema, channel, message in reader.iter_messages(log_time_order=False):
            dropped = channel.topic in (fmt.FUSION_TOPIC, fmt.FUSION_DATA_TOPIC) and message.sequence == start
            if not dropped:
                add(schema, channel, message, message.data)
        writer.finish()
    copy.replace(seg)
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    assert out.first == Divergence(
        int(after["frame_id"]), start + 1, "decision",
        f"fusion #{start}..#{start} missing from the recording (dropped by the recorder): the tracker state after "
        "them is unknown",
    )  # fmt: skip


def test_a_cloud_whose_rows_written_with_the_frame_are_missing_is_a_sample_lost() -> None:
    # A record saying its cloud's later rows were written with it ("points": true) whose /record/fusion_points
    # message is missing was rebuilt from the received sweep alone, silently: a divergence it makes was put on
    # fusion (or the model), not on the sample the recording lacks
    from perception.record import _replay

    fields = ("x", "y", "z", "intensity")
    sweep = PointCloudSample("lidar_top", 10, "lidar_top", np.ones((3, 4), np.float32), fields)
    rows = PointCloudSample("lidar_top", 3, "lidar_top", np.zeros((2, 4), np.float32), fields, seq=3)
    entry = {"t_ns": 10, "raw_t_ns": 10, "points": True}
    rec = {"seq": 3, "frame_id": 1, "t_ns": 10, "ego": None, "samples": {"lidar_top": entry}, "sensors": {}}
    fused = _replay._decoded({**rec, "detections": []})  # (as the replay reads it)
    received = {("lidar_top", 10): sweep}
    frame, _, lost = _replay._frame(fused, {("lidar_top", 3): rows}, received, images=False)
    cloud = frame.samples["lidar_top"]
    assert not lost and isinstance(cloud, PointCloudSample) and cloud.points.shape == (5, 4)
    _, _, lost = _replay._frame(fused, {}, received, images=False)
    topic = fmt.points_topic("lidar_top")
    assert lost == [f"lidar_top's rows written with the frame ({topic}) are not in the recording"]


def test_the_recorded_line_says_what_is_kept_of_a_bounded_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # With max_segments the line counted every segment ever written and their bytes ('50 segment(s), 52.8 MiB'
    # while the disk held 3): it says what is kept, and what was written and deleted
    from perception.cli._record import report_recording

    run = tmp_path / "run.mcap"
    rec = RunRecorder(run, RecordOptions(segment_bytes=2**20, max_segments=3))
    with DriveReader(DRIVE) as reader, rec:
        rec.begin(Session.assemble(load_config(REPLAY_PROFILE), reader.source))
        for sample in itertools.islice(reader.samples(), 300):
            rec.sample(sample, sample.t_ns)
            _drained(rec)
    kept = fmt.segments(run)
    written = rec.stats["segments"]
    assert len(kept) == 3 and written > 5 and rec.stats["segments_deleted"] == written - 3
    report_recording(rec)
    mib = sum(p.stat().st_size for p in kept) / 2**20
    assert f"samples, 3 segment(s), {mib:.1f} MiB kept ({written} written, {rec.bytes / 2**20:.1f} MiB: the oldest " \
        f"{written - 3} deleted)\n" in capsys.readouterr().out  # fmt: skip
    assert rec.bytes - rec.deleted_bytes == sum(p.stat().st_size for p in kept)


def test_what_the_recorder_lost_is_in_the_recording_segment_by_segment_and_its_replay_says_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Items dropped under a full queue were counted in the recorder's memory alone: a sample's or an ego pose's
    # loss left no trace in the recording. Each segment now says what was lost while it was written (format 7).
    real = RunRecorder._put
    handed: Counter[str] = Counter()

    def full_now_and_then(rec: RunRecorder, kind: str, item: Any, size: int = 0) -> bool:
        handed[kind] += 1
        if (kind == "result" and item[0] in (4, 5, 25)) or (kind == "sample" and handed[kind] % 50 == 0):
            rec.stats[f"dropped_{kind}"] += 1  # the queue full when it was handed over
            return False
        return real(rec, kind, item, size)

    monkeypatch.setattr(RunRecorder, "_put", full_now_and_then)
    run = tmp_path / "run.mcap"
    stats = _record(run, RecordOptions(segment_bytes=2**20, max_segments=0), lossless=False)
    lost = Counter({k: v for k, v in stats.items() if k.startswith("dropped_")})
    assert lost["dropped_result"] == 3 and lost["dropped_sample"] >= 2 and stats["segments"] >= 3
    per_segment = []
    for seg in sorted(tmp_path.glob("run*.mcap")):
        with DriveReader(seg, strict=True) as reader:
            ((_, _, _, data),) = list(reader.messages([fmt.LOSSES_TOPIC]))
            per_segment.append(Counter(json.loads(data)["lost"]))
    assert sum(per_segment, Counter()) == lost and sum(1 for c in per_segment if c) >= 2  # spread over segments
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    assert out.recorder_lost == lost and out.report()["recorder_lost"] == dict(sorted(lost.items()))
    argv = ["replay", str(run), "--as-recorded", "--config", str(REPLAY_PROFILE), "--out", str(tmp_path / "as")]
    main(argv)
    said = ", ".join(f"{k} {v}" for k, v in sorted(lost.items()))
    assert f"as recorded: the recorder lost items while it recorded (the recording has gaps): {said}\n" in (
        capsys.readouterr().out
    )
