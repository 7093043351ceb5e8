"""Recording format 4: the run computes no digest; the reader derives each from the values the recording holds
bit for bit, equal to what the run's own objects digest to; the tracker state is recorded, so a tracker
divergence is located; recordings of format 3 (their digests recorded by the run) still replay."""

from __future__ import annotations

import dataclasses
import json
import math
import struct
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcap.reader import make_reader
from mcap.writer import CompressionType, Writer
from record_helpers import DRIVE, REPLAY_PROFILE, copy_into, lidar_result
from recording_helpers import as_recorded

from perception.config import load_config
from perception.drives import DriveReader
from perception.record import RecordOptions, RunRecorder, _recorder, _replay
from perception.record import _format as fmt
from perception.record._digest import (
    decisions_digest,
    detections_digest,
    recorded_outputs_digest,
    tracker_difference,
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
    PointCloudSample,
    SensorResult,
    SensorStatus,
    Transform,
)

SHED = 7  # the frame shed (the tracker's prediction in its turn)
OTHER = 5  # the frame delivering other detections than fusion gave it

#: What the run fused, per fusion turn: kind ("fused", "predicted"), frame, results, detections, tracker state.
Seen = list[tuple[str, Frame, dict[str, SensorResult], tuple[Detection3D, ...], dict[str, Any] | None]]


def _record_tracked(path: Path, frames: int = 20, other: int | None = OTHER) -> Seen:
    """``frames`` frames of the bundled drive fused by a real tracking fusion stage and recorded; frame
    :data:`SHED` shed (its prediction), frame ``other`` delivering only its first detection. The samples are
    handed over as fast as the loop goes, faster than any run: the queue is long enough for all of them (the
    default, 512, overflowed once when the writer was not scheduled in time on a busy host)."""
    seen: Seen = []
    with DriveReader(DRIVE) as reader:
        session = Session.assemble(load_config(REPLAY_PROFILE), reader.source)
        with RunRecorder(path, RecordOptions(queue_items=4096), ego_poses=tuple(reader.ego_poses())) as rec:
            rec.begin(session)
            fusion = rec.fusion(session.fusion())
            assert isinstance(fusion, TrackingStage)
            assembler = session.assembler()
            n = 0
            for sample in reader.samples():
                rec.sample(sample, 1_000 + sample.t_ns)
                for frame in assembler.push(sample):
                    if n >= frames:
                        break
                    if n == SHED:
                        dets = fusion.predict(frame)
                        seen.append(("predicted", frame, {}, dets, None))
                        shed = FrameResult(frame.frame_id, frame.t_ns, FrameStatus.DROPPED, {}, dets,
                                           reason="overload: shed", predicted=True)  # fmt: skip
                        rec.result(shed)
                    else:
                        results = {name: lidar_result(name, s, frame.t_ns) for name, s in frame.samples.items()}
                        dets, _ = fusion(frame, results)
                        seen.append(("fused", frame, results, dets, dict(fusion.tracker_state())))
                        delivered = dets[:1] if n == other else dets
                        rec.result(FrameResult(frame.frame_id, frame.t_ns, FrameStatus.OK, results, delivered))
                    n += 1
    assert not any(k.startswith("dropped_") for k in rec.stats), rec.stats
    return seen


def test_the_digests_derived_on_read_are_those_of_the_run_s_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digested: Counter[int] = Counter()
    real = _recorder.detections_digest

    def counted(detections: Any, values: Any = None) -> str:
        digested[len(detections)] += 1
        return real(detections, values)

    monkeypatch.setattr(_recorder, "detections_digest", counted)
    run = tmp_path / "run.mcap"
    seen = _record_tracked(run)
    # the run digested nothing but the one frame that delivered other detections than fusion gave it
    assert digested == Counter({1: 1})
    with DriveReader(run, strict=True) as reader:
        assert reader.metadata[fmt.META_FORMAT] == "7"
        raw = [json.loads(d) for _, _, _, d in reader.messages([fmt.FUSION_TOPIC])]
        records = fusion_records(reader)
        frames = sorted((json.loads(d) for _, _, _, d in reader.messages([fmt.FRAMES_TOPIC])), key=lambda f: f["index"])
    assert raw and not any("digest" in r for r in raw)
    # the shed frame's record holds no tracker state (its prediction left the tracker as it was): null, where
    # every fused frame's holds the layout of the state after it
    by_seq = sorted(raw, key=lambda r: r["seq"])
    assert [r["tracker"] is None for r in by_seq] == [kind == "predicted" for kind, *_ in seen]
    assert all(isinstance(r["tracker"], dict) and r["tracker"] for r in by_seq if not r.get("predicted"))
    assert any(s is not None and len(s["table"]) >= 2 for *_, s in seen)  # tracks to digest
    assert any(f.ego is not None for _, f, *_ in seen)  # ego poses in the decisions
    fused: dict[int, str] = {}
    for seq, (rec, (kind, frame, results, dets, state)) in enumerate(zip(records, seen, strict=True)):
        assert rec["seq"] == seq and bool(rec.get("predicted")) == (kind == "predicted")
        statuses = {n: r.status.value for n, r in results.items()}
        stamps = {n: r.sample_t_ns for n, r in results.items()}
        derived = fmt.fusion_digests(rec, "4")
        assert derived == {
            "outputs": recorded_outputs_digest(results),
            "decisions": decisions_digest(seq, frame.frame_id, frame.t_ns, statuses, stamps, frame.ego),
            "detections": detections_digest(dets),
            "tracker": None if state is None else tracker_digest(state),
        }, seq
        if state is not None:  # the tracker state recorded bit for bit
            back = rec["tracker"]
            assert sorted(back) == sorted(state)
            assert all((back[k].dtype, back[k].shape, back[k].tobytes()) == (v.dtype, v.shape, v.tobytes())
                       for k, v in state.items())  # fmt: skip
        fused[seq] = str(derived["detections"])
    # each delivered frame's digest: derived from its fusion record, or (frame OTHER) recorded by the run
    delivered = [detections_digest(dets[:1] if i == OTHER else dets) for i, (_, _, _, dets, _) in enumerate(seen)]
    assert [fmt.frame_digest(f, "4", fused) for f in frames] == delivered
    assert [f["digest"] is not None for f in frames] == [i == OTHER for i in range(len(frames))]


finite = st.floats(allow_nan=False, allow_infinity=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(finite, st.sampled_from([0.0, -0.0, 5e-324, -1e-310, math.nan])), min_size=11,
                max_size=11), st.integers(-(2**63), 2**63 - 1))  # fmt: skip
def test_an_ego_pose_reads_back_from_the_record_bit_for_bit(values: list[float], t_ns: int) -> None:
    # the decisions digest derived on read covers the frame's ego pose: its floats as the record's JSON holds
    # them (Python's repr, which reads back to the same float64) -- the same bits, so the same digest
    ego = EgoPose(t_ns, Transform((values[0], values[1], values[2]), (values[3], values[4], values[5], values[6])),
                  (values[7], values[8], values[9]), values[10])  # fmt: skip
    back = fmt.decode_ego(json.loads(_recorder._ENCODER.encode({"ego": fmt.encode_ego(ego)}))["ego"])
    assert back is not None

    def bits(e: EgoPose) -> bytes:
        return struct.pack("<q11d", e.t_ns, *e.pose.translation, *e.pose.rotation, *e.linear_velocity, e.yaw_rate)

    if not any(math.isnan(v) for v in values):  # NaN reads back as NaN (its payload aside: one mark)
        assert bits(back) == bits(ego)
    digest = decisions_digest(3, 4, 5, {"a": "ok"}, {"a": 6}, ego)
    assert decisions_digest(3, 4, 5, {"a": "ok"}, {"a": 6}, back) == digest


def test_a_corrupted_tracker_state_is_a_located_tracker_divergence(tmp_path: Path) -> None:
    run = tmp_path / "run.mcap"
    _record_tracked(run, other=None)
    with DriveReader(run, strict=True) as reader:
        records = fusion_records(reader)
        data = {seq: d for _, _, seq, d in reader.messages([fmt.FUSION_DATA_TOPIC])}
    rec = next(r for r in records if r.get("tracker") and len(r["tracker"]["table"]) >= 2)
    seq, table = rec["seq"], rec["tracker"]["table"]
    # the state's arrays end the message, by name, each padded to 8 bytes: the table's bytes end before the rest's
    after = sum(-(-a.nbytes // 8) * 8 for key, a in rec["tracker"].items() if key > "table")
    blob = bytearray(run.read_bytes())
    at = blob.find(data[seq])
    assert at >= 0 and blob.find(data[seq], at + 1) < 0
    row, column = 1, 2
    end = at + len(data[seq]) - after
    assert blob[end - table.nbytes : end] == table.tobytes()
    blob[end - table.nbytes + 8 * (row * table.shape[1] + column) + 7] ^= 0x40  # an exponent bit
    run.write_bytes(bytes(blob))
    out = as_recorded(run, load_config(REPLAY_PROFILE))
    assert out.first is not None and out.first.seq == seq and out.first.cause == "fusion", out.first
    assert f"another tracker state: 'table' row {row}, column {column}: " in out.first.detail
    assert out.diverged == Counter({"fusion": 1}) and out.equal == out.compared - 1  # that frame only


def test_a_changed_fusion_parameter_counts_each_frame_once(tmp_path: Path) -> None:
    # Every frame fused anew gives other detections: one divergence each, fusion's. The frame delivered (what
    # fusion gave it here) differs from the one recorded too, but that is the same divergence: counted twice,
    # 'diverged' said {'fusion': 2n} of n frames (nuScenes: 82 of 41).
    run = tmp_path / "run.mcap"
    _record_tracked(run, other=None)
    cfg = load_config(REPLAY_PROFILE)
    changed = dataclasses.replace(cfg, fusion=dataclasses.replace(cfg.fusion, score_threshold=0.85))
    out = as_recorded(run, changed)
    assert out.first is not None and out.first.cause == "fusion", out.first
    assert out.equal < out.compared
    assert out.diverged == Counter({"fusion": out.compared - out.equal})


class _Today:
    """Today's models (no server), as :class:`perception.scheduler.Runtime` answers: the sensors enabled in its
    session (``--sensors``) each with :func:`lidar_result`, the ok ones' scores times :attr:`scale`."""

    scale = 1.0

    def __init__(self, session: Session, **kwargs: Any) -> None:
        self.enabled = {s.name for s in session.config.active_sensors}

    async def __aenter__(self) -> _Today:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def process(self, frame: Frame) -> FrameResult:
        results = {}
        for name, sample in frame.samples.items():
            if name in self.enabled:
                r = lidar_result(name, sample, frame.t_ns)
                if r.status is SensorStatus.OK:
                    r = dataclasses.replace(r, outputs={**r.outputs, "SCORES": r.outputs["SCORES"] * self.scale})
                results[name] = r
        return FrameResult(frame.frame_id, frame.t_ns, FrameStatus.OK, results, ())


def test_a_changed_model_answer_is_not_counted_as_fusion_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --rerun-models with today's lidar answering lower scores: each frame it answered differs by its model's
    # answer, and by nothing else (its detections differ as the answer does: not fusion's doing).
    monkeypatch.setattr(_Today, "scale", 0.5)
    monkeypatch.setattr(_replay, "Runtime", _Today)
    run = tmp_path / "run.mcap"
    _record_tracked(run, frames=SHED, other=None)  # (fused frames only: a shed one's prediction has no model)
    out = as_recorded(run, load_config(REPLAY_PROFILE), rerun_models=True)
    assert out.first is not None and out.first.cause == "model", out.first
    assert out.equal < out.compared
    assert out.diverged == Counter({"model": out.compared - out.equal})


def test_a_sensor_not_enabled_today_is_not_said_to_be_missing_from_the_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --rerun-models --sensors without the lidar: it was not asked, and the divergence said "lidar_top answered
    # missing (the sample is not in the recording)" of a recording that holds every sample (KITTI, cam_front).
    monkeypatch.setattr(_replay, "Runtime", _Today)
    run = tmp_path / "run.mcap"
    _record_tracked(run, frames=SHED, other=None)
    out = as_recorded(run, load_config(REPLAY_PROFILE), rerun_models=True, sensors=["cam_front"])
    assert out.first is not None and out.first.cause == "model", out.first
    assert out.first.detail.startswith("lidar_top answered missing (not asked: not among the sensors enabled")
    assert "not in the recording" not in out.first.detail
    assert as_recorded(run, load_config(REPLAY_PROFILE), rerun_models=True).first is None  # every sensor: equal


def test_tracker_difference_names_the_array_and_element_that_differ_first() -> None:
    state = {
        "next_id": np.array([4], np.int64),
        "table": np.arange(12.0).reshape(3, 4),
        "sources": np.zeros((3, 2), bool),
    }
    assert tracker_difference(state, {k: v.copy() for k, v in state.items()}) is None
    near = {**state, "table": state["table"] + 1e-9}  # within the resolution: the same digest, no difference
    assert tracker_digest(near) == tracker_digest(state) and tracker_difference(state, near) is None
    table = state["table"].copy()
    table[2, 1] = math.nan
    table[2, 3] = 0.5
    assert tracker_difference(state, {**state, "table": table}) == "'table' row 2, column 1: 9.0 recorded, nan today"
    assert tracker_difference(state, {**state, "next_id": np.array([5])}) == "'next_id'[0]: 4 recorded, 5 today"
    shorter = {**state, "table": table[:2]}
    assert tracker_difference(state, shorter) == "'table': f[3, 4] recorded, f[2, 4] today"
    assert tracker_difference(state, {"table": state["table"]}) == "'next_id' recorded, not in today's state"


def _rewrite(src: Path, dst: Path, version: str, rewritten: Callable[[str, int, bytes], bytes]) -> None:
    """``src`` copied to ``dst`` as a recording of format ``version``: each message's payload as
    ``rewritten(topic, sequence, payload)`` gives it."""
    with src.open("rb") as f, dst.open("wb") as out:
        reader = make_reader(f)
        writer = Writer(out, compression=CompressionType.NONE)
        add = copy_into(
            reader, writer, lambda meta: {**meta, fmt.META_FORMAT: version} if fmt.META_FORMAT in meta else meta
        )
        for schema, channel, message in reader.iter_messages(log_time_order=False):
            add(schema, channel, message, rewritten(channel.topic, message.sequence, message.data))
        writer.finish()


def _as_format_3(src: Path, dst: Path, wrong_tracker: int | None = None) -> None:
    """The format-4 recording ``src`` written as a run of format 3 wrote it: each fusion record with the digests
    that run computed (those format 4 derives: equal, see the test above) and no tracker state, each
    delivered frame's digest. ``wrong_tracker``: a seq whose recorded tracker digest is wrong."""
    with DriveReader(src, strict=True) as reader:
        records = {int(r["seq"]): r for r in fusion_records(reader)}
    state_bytes = {
        seq: sum(-(-a.nbytes // 8) * 8 for a in (r.get("tracker") or {}).values()) for seq, r in records.items()
    }
    # (a run of format 3 had no 'world' in its tracker state: format 6's)
    for r in records.values():
        if r.get("tracker"):
            r["tracker"] = {k: v for k, v in r["tracker"].items() if k != fmt.TRACKER_WORLD}
    digests = {seq: fmt.fusion_digests(r, "4") for seq, r in records.items()}
    if wrong_tracker is not None:
        digests[wrong_tracker]["tracker"] = "0" * 64

    def rewritten(topic: str, seq: int, payload: bytes) -> bytes:
        if topic == fmt.FUSION_TOPIC:
            rec = json.loads(payload)
            del rec["tracker"]
            rec["digest"] = digests[rec["seq"]]
            return json.dumps(rec).encode()
        if topic == fmt.FUSION_DATA_TOPIC:
            return payload[: len(payload) - state_bytes[seq]]
        if topic == fmt.FRAMES_TOPIC:
            rec = json.loads(payload)
            if rec["digest"] is None and rec["fusion_seq"] is not None:
                rec["digest"] = digests[rec["fusion_seq"]]["detections"]
            return json.dumps(rec).encode()
        return payload

    _rewrite(src, dst, "3", rewritten)


def test_a_recording_of_format_3_replays_and_compares_its_recorded_digests(tmp_path: Path) -> None:
    run = tmp_path / "run.mcap"
    seen = _record_tracked(run, other=None)
    old = tmp_path / "old.mcap"
    _as_format_3(run, old)
    with DriveReader(old, strict=True) as reader:
        assert reader.metadata[fmt.META_FORMAT] == "3"
        (first, *_) = fusion_records(reader)
        assert "tracker" not in first and set(first["digest"]) == {"outputs", "decisions", "detections", "tracker"}
    config = load_config(REPLAY_PROFILE)
    out = as_recorded(old, config)
    assert out.first is None, out.first
    assert out.compared == out.equal == len(seen)
    # its digests as recorded are what is compared (not derived: it holds no tracker state to derive one of)
    wrong = tmp_path / "wrong.mcap"
    _as_format_3(run, wrong, wrong_tracker=3)
    out = as_recorded(wrong, config)
    assert out.first is not None and (out.first.seq, out.first.cause) == (3, "fusion")
    assert out.first.detail == "the same detections but another tracker state"


def _as_format_5(src: Path, dst: Path) -> None:
    """The format-6 recording ``src`` written as a run of format 5 wrote it: its tracker states without the pose
    the tracks are held against (``world``: the state's last array, by name)."""
    with DriveReader(src, strict=True) as reader:
        records = {int(r["seq"]): r for r in fusion_records(reader)}

    def rewritten(topic: str, seq: int, payload: bytes) -> bytes:
        if topic == fmt.FUSION_TOPIC:
            rec = json.loads(payload)
            if rec["tracker"] is not None:
                assert sorted(rec["tracker"])[-1] == fmt.TRACKER_WORLD
                del rec["tracker"][fmt.TRACKER_WORLD]
            return json.dumps(rec).encode()
        if topic == fmt.FUSION_DATA_TOPIC:
            world = (records[seq].get("tracker") or {}).get(fmt.TRACKER_WORLD)
            return payload[: len(payload) - (0 if world is None else world.nbytes)]
        return payload

    _rewrite(src, dst, "5", rewritten)


def test_a_recording_of_format_5_replays_without_the_tracker_s_pose(tmp_path: Path) -> None:
    # format 6 records the pose the tracker's tracks are held against; a recording made before is compared
    # without it, its states restored as the tracker took them then
    run = tmp_path / "run.mcap"
    seen = _record_tracked(run, other=None)
    with DriveReader(run, strict=True) as reader:
        assert all(len(r["tracker"][fmt.TRACKER_WORLD]) == 1 for r in fusion_records(reader) if r.get("tracker"))
    old = tmp_path / "old.mcap"
    _as_format_5(run, old)
    with DriveReader(old, strict=True) as reader:
        assert reader.metadata[fmt.META_FORMAT] == "5"
        assert not any(fmt.TRACKER_WORLD in (r.get("tracker") or {}) for r in fusion_records(reader))
    out = as_recorded(old, load_config(REPLAY_PROFILE))
    assert out.first is None, out.first
    assert out.compared == out.equal == len(seen)


def test_the_record_package_reads_drives_through_their_public_api() -> None:
    # _format read a segment's first MCAP records by hand (a second record reader beside the drive package's), with
    # the drive metadata's name from perception.drives._codec; it asks perception.drives.head_metadata now
    import ast

    private = [
        f"{path.name}:{node.lineno}"
        for path in sorted(Path(fmt.__file__).parent.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("perception.drives._")
    ]
    assert not private, private


def test_a_rebuilt_accumulated_cloud_says_how_it_was_made_as_the_run_s_did(monkeypatch: pytest.MonkeyPatch) -> None:
    # The runtime holds an accumulated cloud (merged_from) to the byte limit per sweep (RigCheck): the cloud a
    # replay rebuilds for --rerun-models is checked by today's runtime too, and without merged_from one the run
    # took was refused: the sensor's error, a divergence no model made. (The limit made small here.)
    from perception.kinds import _intake, kind_def, sample_problem

    fields = ("x", "y", "z", "intensity")
    sweep = PointCloudSample("lidar", 100, "lidar", np.arange(64, dtype=np.float32).reshape(16, 4), fields)
    earlier = PointCloudSample("lidar", 50, "lidar", np.ones((16, 4), np.float32), fields)
    m = np.eye(4)
    m[0, 3] = 2.0
    rec = {
        "seq": 0,
        "frame_id": 3,
        "t_ns": 100,
        "ego": None,
        "samples": {
            "lidar": {"t_ns": 100, "raw_t_ns": 100, "merged": [{"raw_t_ns": 50, "t_ns": 50, "m": list(m.ravel())}]}
        },
        "sensors": {},
        "detections": [],
    }
    fused = _replay._decoded(rec)  # (as the replay reads it)
    received = {("lidar", 100): sweep, ("lidar", 50): earlier}
    frame, _, lost = _replay._frame(fused, {}, received, images=False)
    cloud = frame.samples["lidar"]
    assert not lost and isinstance(cloud, PointCloudSample) and cloud.points.shape == (32, 4)
    assert cloud.merged_from == ((50, 16, tuple(m.ravel())),)
    monkeypatch.setattr(_intake, "MAX_SAMPLE_BYTES", sweep.points.nbytes)
    assert sample_problem(cloud, kind_def("lidar")) is None
