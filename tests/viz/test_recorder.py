"""fused.mcap: the drive copied through untouched plus the runtime's detections, stats and camera boxes."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from foxglove_schemas_protobuf.ImageAnnotations_pb2 import ImageAnnotations
from foxglove_schemas_protobuf.SceneUpdate_pb2 import SceneUpdate
from mcap.reader import make_reader
from viz_fixtures import ALL_KINDS, gt_results, record

from perception._lifetime import Lifetime
from perception.drives import DriveReader
from perception.errors import DriveError
from perception.kinds import CAMERA, register_kind, unregister_kind
from perception.types import FrameResult, FrameStatus
from perception.viz import load_frame_views, recorder_sink
from perception.viz._encode import (
    DETECTIONS_TOPIC,
    FRAME_STATS_TOPIC,
    camera_detections,
    decode_camera_detections,
    decode_detections,
)
from perception.viz._load import frame_ids
from perception.viz._outputs import McapOutput
from perception.viz._palette import COMBINATIONS
from perception.viz._record import REPLAY_METADATA, BackgroundRecorder, VizRecorder

FUSED_TOPICS = {DETECTIONS_TOPIC, FRAME_STATS_TOPIC, "/sensors/cam_front/detections", "/sensors/cam_back/detections"}


@pytest.fixture(scope="module")
def fused(recorded: tuple[Path, list[FrameResult]]) -> tuple[Path, list[FrameResult]]:
    out, results = recorded
    return out / "fused.mcap", results


def _messages(path: Path) -> dict[str, list[tuple[int, int, bytes]]]:
    by_topic: dict[str, list[tuple[int, int, bytes]]] = {}
    with path.open("rb") as f:
        for _, ch, msg in make_reader(f).iter_messages(log_time_order=True):
            by_topic.setdefault(ch.topic, []).append((msg.log_time, msg.sequence, msg.data))
    return by_topic


def test_mcap_library_lists_fused_and_copied_topics(fused: tuple[Path, list[FrameResult]], small_drive: Path) -> None:
    path, results = fused
    with path.open("rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        assert summary is not None
        schemas = {ch.topic: summary.schemas[ch.schema_id].name for ch in summary.channels.values()}
        metadata = {m.name: m.metadata for m in reader.iter_metadata()}
        compression = {c.compression for c in summary.chunk_indexes}
    with small_drive.open("rb") as f:
        drive_summary = make_reader(f).get_summary()
        assert drive_summary is not None
        drive_topics = {ch.topic for ch in drive_summary.channels.values()}
    assert set(schemas) == drive_topics | FUSED_TOPICS
    assert schemas[DETECTIONS_TOPIC] == "foxglove.SceneUpdate"
    assert schemas[FRAME_STATS_TOPIC] == "perception.FrameStats"
    assert schemas["/sensors/cam_front/detections"] == "foxglove.ImageAnnotations"
    assert schemas["/sensors/lidar_top/points"] == "foxglove.PointCloud"
    assert compression == {"zstd"}
    assert {"perception.rig", "perception.drive", REPLAY_METADATA} <= metadata.keys()
    sensors = json.loads(metadata[REPLAY_METADATA]["sensors"])
    assert sensors["cam_front"] == {
        "drive_sensor": "cam_front",
        "kind": "camera",
        "topic": "/sensors/cam_front/image/compressed",
    }

    # the drive's messages, up to the last frame's horizon, are in the recording byte for byte
    ours, theirs = _messages(path), _messages(small_drive)
    horizon = max(max(s.sample_t_ns or 0 for s in r.sensors.values()) for r in results)
    horizon = max(horizon, results[-1].t_ns)
    for topic in drive_topics:
        assert ours.get(topic, []) == [m for m in theirs.get(topic, []) if m[0] <= horizon], topic
    assert len(ours[DETECTIONS_TOPIC]) == len(ours[FRAME_STATS_TOPIC]) == len(results) == 5


def test_detections_scene_update(fused: tuple[Path, list[FrameResult]]) -> None:
    path, results = fused
    msgs = _messages(path)[DETECTIONS_TOPIC]
    for (t, seq, data), result in zip(msgs, results, strict=True):
        scene = SceneUpdate()
        scene.ParseFromString(data)
        assert t == result.t_ns and seq == result.frame_id
        assert [d.type for d in scene.deletions] == [1]  # ALL: only this frame's boxes are shown
        assert decode_detections(scene) == result.detections  # exact round trip
        entity = scene.entities[0]
        assert entity.id == str(result.detections[0].id) and entity.frame_id == "base_link"
        assert 0.05 <= entity.lifetime.ToNanoseconds() / 1e9 <= 0.2  # ~one frame (frames are 100 ms apart)
        color = entity.cubes[0].color
        assert (color.r, color.g, color.b) == pytest.approx(COMBINATIONS[ALL_KINDS])
        assert entity.texts[0].text.startswith(f"{result.detections[0].label} #{result.detections[0].id} ")
    moving = [e for e in scene.entities if e.arrows]
    assert moving and all(e.arrows[0].shaft_length > 0.1 for e in moving)


def test_frame_stats_plot_fields(fused: tuple[Path, list[FrameResult]]) -> None:
    path, results = fused
    stats = [json.loads(data) for _, _, data in _messages(path)[FRAME_STATS_TOPIC]]
    assert [s["frame_id"] for s in stats] == [r.frame_id for r in results]
    first, last = stats[0], stats[-1]
    assert last["latency_ms"]["total"] == pytest.approx(results[-1].latency.total_ns / 1e6, abs=1e-3)
    assert last["latency_ms"]["fusion"] == pytest.approx(results[-1].latency.stages["fusion"] / 1e6, abs=1e-3)
    assert last["sensors"]["cam_front"]["status_code"] == 0 and last["sensors"]["cam_front"]["latency_ms"] > 0
    assert first["sensors"]["cam_back"] == {"status": "missing", "status_code": 3, "latency_ms": 0.0}
    assert (first["status"], first["status_code"]) == ("degraded", 1)
    assert last["detections"] == len(results[-1].detections) and last["sources"] == {ALL_KINDS: last["detections"]}
    assert last["timestamp"] == {"sec": results[-1].t_ns // 10**9, "nsec": results[-1].t_ns % 10**9}


def test_camera_detections_image_annotations(fused: tuple[Path, list[FrameResult]]) -> None:
    path, results = fused
    msgs = _messages(path)["/sensors/cam_front/detections"]
    assert len(msgs) == len(results)
    for (t, _, data), result in zip(msgs, results, strict=True):
        res = result.sensors["cam_front"]
        assert t == res.sample_t_ns  # stamped like the image, so Foxglove's Image panel overlays it
        ann = ImageAnnotations()
        ann.ParseFromString(data)
        got = decode_camera_detections(ann)
        want = camera_detections(res.outputs, "cam_front")
        assert want is not None and len(want.labels) > 0
        np.testing.assert_allclose(got.boxes, want.boxes)
        assert got.labels == want.labels and [p.timestamp.ToNanoseconds() for p in ann.points] == [t] * len(got.labels)


def test_recording_is_itself_a_drive(fused: tuple[Path, list[FrameResult]], small_drive: Path) -> None:
    path, results = fused
    with DriveReader(path) as ours, DriveReader(small_drive) as drive:
        assert ours.rig == drive.rig and ours.metadata == drive.metadata
        assert ours.ground_truth() == drive.ground_truth()
        first = next(ours.samples(sensors="lidar_top"))
        np.testing.assert_array_equal(first.points, next(drive.samples(sensors="lidar_top")).points)  # type: ignore[union-attr]
    assert frame_ids(path.parent) == [r.frame_id for r in results]


def test_recording_is_deterministic(small_drive: Path, tmp_path: Path, fused: tuple[Path, list[FrameResult]]) -> None:
    path, results = fused
    record(small_drive, tmp_path, results)
    assert (tmp_path / "fused.mcap").read_bytes() == path.read_bytes()


def test_interrupted_recording_stays_readable(small_drive: Path, tmp_path: Path) -> None:
    with DriveReader(small_drive) as reader:
        results, rig = gt_results(reader), dict(reader.rig)
    path = tmp_path / "fused.mcap"
    with VizRecorder(small_drive, rig, [McapOutput(path, chunk_size=50_000)]) as rec:
        for r in results[:4]:
            rec.write(r)
        # a process killed now leaves what the complete chunks hold: no summary, still readable
        killed = tmp_path / "killed" / "fused.mcap"
        killed.parent.mkdir()
        shutil.copyfile(path, killed)
    prefix = frame_ids(killed.parent)
    assert prefix and prefix == [r.frame_id for r in results[: len(prefix)]]
    with DriveReader(killed, strict=False) as reader:
        assert reader.truncated is not None and reader.rig.keys() == rig.keys()
    (view,) = load_frame_views(killed.parent, [prefix[-1]])
    assert view.detections == results[prefix[-1]].detections
    assert frame_ids(tmp_path) == [0, 1, 2, 3]  # closed properly: every frame written

    # an error inside the recording still finishes the file
    failing = tmp_path / "failing"
    failing.mkdir()
    with pytest.raises(RuntimeError), VizRecorder(small_drive, rig, [McapOutput(failing / "fused.mcap")]) as rec:
        rec.write(results[0])
        raise RuntimeError("replay failed")
    with (failing / "fused.mcap").open("rb") as f:
        assert make_reader(f).get_summary() is not None
    assert frame_ids(failing) == [0]


def test_dropped_frames_have_stats_but_no_boxes(small_drive: Path, tmp_path: Path) -> None:
    with DriveReader(small_drive) as reader:
        results, rig = gt_results(reader), dict(reader.rig)
    dropped = FrameResult(results[1].frame_id, results[1].t_ns, FrameStatus.DROPPED, {}, reason="queue overflow")
    with VizRecorder(small_drive, rig, [McapOutput(tmp_path / "fused.mcap")], copy_drive=False) as rec:
        rec.write(results[0])
        rec.write(dropped)
    msgs = _messages(tmp_path / "fused.mcap")
    assert set(msgs) == {DETECTIONS_TOPIC, FRAME_STATS_TOPIC, "/sensors/cam_front/detections"}
    assert len(msgs[DETECTIONS_TOPIC]) == 1
    assert json.loads(msgs[FRAME_STATS_TOPIC][1][2])["reason"] == "queue overflow"


def test_unwritable_recording_is_a_drive_error(tmp_path: Path) -> None:
    with pytest.raises(DriveError, match="cannot create recording"):
        McapOutput(tmp_path / "missing-dir" / "fused.mcap")
    with pytest.raises(DriveError, match="unknown compression"):
        McapOutput(tmp_path / "x.mcap", compression="brotli")


def test_replay_sink_records_on_a_background_thread(small_drive: Path, tmp_path: Path) -> None:
    with DriveReader(small_drive) as reader:
        results, rig = gt_results(reader), dict(reader.rig)
        with recorder_sink(mcap_path=tmp_path / "fused.mcap")(reader, rig) as sink:
            for r in results:
                sink.add(r)
    assert frame_ids(tmp_path) == [r.frame_id for r in results]

    # a failing writer surfaces in the caller's thread (here: at close), the recording still finished
    out = McapOutput(tmp_path / "failing.mcap")
    background = BackgroundRecorder(VizRecorder(small_drive, rig, [out]))
    out.close()  # every further write fails
    background.write(results[0])
    with pytest.raises(DriveError, match="write after close"):
        background.close()


def test_a_registered_image_kind_gets_a_detections_topic(small_drive: Path, tmp_path: Path) -> None:
    """Camera-style topics follow the kind's fusion role (image boxes), not the name ``camera``."""
    with DriveReader(small_drive) as reader:
        results, rig = gt_results(reader), dict(reader.rig)
    register_kind(dataclasses.replace(CAMERA, name="night_camera"))
    try:
        rig["cam_front"] = dataclasses.replace(rig["cam_front"], kind="night_camera")
        with VizRecorder(small_drive, rig, [McapOutput(tmp_path / "fused.mcap")], copy_drive=False) as rec:
            rec.write(results[0])
    finally:
        unregister_kind("night_camera")
    assert set(_messages(tmp_path / "fused.mcap")) == {
        DETECTIONS_TOPIC,
        FRAME_STATS_TOPIC,
        "/sensors/cam_front/detections",
    }


class _Messages:
    """An output that is no MCAP file (as a live view): the recorder then copies the drive message by message."""

    def add_channel(self, channel: object) -> None: ...
    def write(self, *_args: object, **_kw: object) -> None: ...
    def add_metadata(self, name: str, data: object) -> None: ...
    def set_time(self, t_ns: int) -> None: ...
    def close(self) -> None: ...


def test_the_drives_chunks_are_copied_as_they_are(tmp_path: Path) -> None:
    """An indexed drive's chunks reach the recording byte for byte (no decompression, no compression) once
    the frames have passed them; the recording holds the same messages as a copy message by message."""
    drive = Path(__file__).resolve().parents[2] / "replay_data" / "urban_seed7_10s.mcap"
    with DriveReader(drive) as drive_reader:
        results, rig = gt_results(drive_reader)[:40], dict(drive_reader.rig)
    chunked, per_message = tmp_path / "chunked.mcap", tmp_path / "messages.mcap"
    with VizRecorder(drive, rig, [McapOutput(chunked)]) as rec:
        for r in results:
            rec.write(r)
    with VizRecorder(drive, rig, [McapOutput(per_message), _Messages()]) as rec:
        for r in results:
            rec.write(r)
    assert _messages(chunked) == _messages(per_message)
    with drive.open("rb") as f:
        drive_chunks = make_reader(f).get_summary().chunk_indexes  # type: ignore[union-attr]
    with chunked.open("rb") as f:
        reader = make_reader(f, validate_crcs=True)
        summary = reader.get_summary()
        assert summary is not None and summary.statistics is not None
        assert sum(1 for _ in reader.iter_messages()) == summary.statistics.message_count
    with drive.open("rb") as f, chunked.open("rb") as g:
        copied = 0
        for ci in summary.chunk_indexes:
            same = [
                d
                for d in drive_chunks
                if (d.message_start_time, d.compressed_size) == (ci.message_start_time, ci.compressed_size)
            ]
            if same:
                f.seek(same[0].chunk_start_offset)
                g.seek(ci.chunk_start_offset)
                assert f.read(ci.chunk_length) == g.read(ci.chunk_length)
                copied += 1
    assert copied >= 2  # 40 frames (4 s) pass several of the drive's chunks whole
    with DriveReader(chunked) as rec_reader:  # still a drive
        assert rec_reader.rig.keys() == rig.keys()


def test_recorders_and_outputs_report_closed_and_close_idempotently(small_drive: Path, tmp_path: Path) -> None:
    with DriveReader(small_drive) as reader:
        results, rig = gt_results(reader), dict(reader.rig)
    out = McapOutput(tmp_path / "fused.mcap")
    rec = VizRecorder(small_drive, rig, [out], copy_drive=False)
    background = BackgroundRecorder(rec)
    assert background.state is rec.state is out.state is Lifetime.OPENED
    background.write(results[0])
    background.close()
    assert background.state is rec.state is out.state is Lifetime.CLOSED
    background.close()  # each is idempotent
    rec.close()
    out.close()
    assert background.state is rec.state is out.state is Lifetime.CLOSED
    with pytest.raises(DriveError, match="write after close"):
        out.write(FRAME_STATS_TOPIC, results[0].t_ns, b"{}")
    assert frame_ids(tmp_path) == [results[0].frame_id]
