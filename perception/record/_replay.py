"""A recorded run replayed as recorded: the recorded model outputs re-fused under the recorded decisions.

Frames reach fusion in the recorded order (``seq``), each with the samples, ego pose and sensor statuses
the vehicle's runtime decided (a sensor late or shed there is late here, whatever this machine's timing),
and the outputs its models answered. With ``rerun_models`` the sensors that were ok are asked again, of
today's models, on the recorded samples (the point clouds as the frame held them, after accumulation;
the images as received), under the same decisions: a model change measured against exactly what the
vehicle faced. Each frame's digests are compared with the recorded ones (a recording of format 4: those
derived from the values it holds, :func:`._format.fusion_digests`) in that order, and the first frame that
differs is named with its cause:

* ``model``: a sensor's answer differs (its outputs, model or version; or it did not answer ok);
* ``decision``: the frame's decisions differ (its samples, statuses, ego pose: a recording read back
  wrong), or a frame fusion consumed is missing from the recording (a gap: the recorder dropped it, a segment
  is missing, or damage lost it);
* ``fusion``: the same inputs and decisions gave other detections or another tracker state (fusion's
  code or parameters changed; format 4 names the tracker state's array and element that differ first).

A bounded recording of a long run may have lost its segment 0 (rotated away). A recording of format 4 holds
the tracker state after every frame, so it is replayed from the first segment kept: its first frames are
taken as recorded (their detections delivered as published, not compared) until one whose samples all are in
the recording, or a shed frame's prediction (it reads the tracker alone), follows a recorded state; the tracker
is set to that state (``Fuser.restore_tracker_state``) and every frame from there on is compared
(:attr:`AsRecordedOutcome.start` says where). A segment that cannot be read at all (cut short before its first
chunk) is damage: the replay starts from the first segment read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt

from perception.config import RuntimeConfig
from perception.drives import DriveDamage, DriveReader, cut_short_at
from perception.errors import DriveDamagedError, DriveError
from perception.fusion import Fuser
from perception.record import _format as fmt
from perception.record._digest import (
    decisions_digest,
    detections_digest,
    outputs_digest,
    recorded_outputs_digest,
    tracker_difference,
    tracker_digest,
)
from perception.scheduler import FusionStage, Runtime, Session, SweepAccumulator, TrackingStage
from perception.types import (
    Detection3D,
    EgoPose,
    Frame,
    FrameResult,
    FrameStatus,
    ImageSample,
    LatencyTree,
    PointCloudSample,
    Sample,
    SensorResult,
    SensorStatus,
    SessionSource,
    interpolate_ego,
)

__all__ = ["AsRecordedOutcome", "Divergence", "fusion_records", "replay_as_recorded", "source_poses"]

log = logging.getLogger(__name__)

#: Causes, in the order they are looked for in a frame.
CAUSES = ("model", "decision", "fusion")
_REPORT_VERSION = 1
#: Each sensor's latest samples carried from the segments before the previous one: at least the recorder's
#: memory of sweeps a frame's cloud may begin with or have merged (``_recorder._RECENT_PER_SENSOR``, 16).
_CARRIED = 32


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where a replay first differs from the recording, and why."""

    frame_id: int
    seq: int | None  # the frame's place in the fusion order
    cause: str  # one of CAUSES
    detail: str
    run: int = 0  # the run of the recording (a ROS node's activation: its frame ids begin again at 0)

    def line(self) -> str:
        at = f"frame {self.frame_id}" + (f" of run {self.run}" if self.run else "")
        at += f" (fusion #{self.seq})" if self.seq is not None else ""
        return f"first divergence: {at}: {self.cause}: {self.detail}"


@dataclass
class AsRecordedOutcome:
    """Every recorded frame's result as replayed (in the recorded delivery order) and the comparison."""

    results: list[FrameResult] = field(default_factory=list)
    compared: int = 0  # frames that reached fusion, compared digest by digest (shed frames' predictions too)
    predicted: int = 0  # of those compared, the shed frames' predictions (the others were fused)
    equal: int = 0
    diverged: Counter[str] = field(default_factory=Counter)  # frames by cause (each by the first found)
    first: Divergence | None = None
    segments: int = 0
    rerun_models: bool = False
    #: The damaged segments (file name -> what the reading met: a truncation, chunks skipped), in order: their
    #: frames after the damage are missing from the comparison (a run cut short leaves its last segment
    #: unfinished, a truncation).
    damage: dict[str, DriveDamage] = field(default_factory=dict)
    #: The first damaged segment's one-line error (the file, the first problem, its byte offset), or None.
    drive_error: DriveDamagedError | None = None
    #: The delivered frames' results missing from the recording (gaps in ``/record/frames``' indexes), each as
    #: ``[first index missing, how many, why]`` (dropped by the recorder, a segment missing, damage): not
    #: replayed, not a divergence.
    results_missing: list[list[Any]] = field(default_factory=list)
    #: What the recorder lost while the segments read were written (format 7: each segment says it), by counter:
    #: ``dropped_<item>`` (its queue full), ``refused``, ``unknown_sensor``, ``before_begin_<item>``; empty: nothing
    #: lost, or a recording that does not say (format 6 and older, a segment cut short).
    recorder_lost: Counter[str] = field(default_factory=Counter)
    #: Where a replay of a recording whose segment 0 was rotated away started (None: from the run's start):
    #: ``segment``, the first kept with a frame fused (else the first kept); ``run``, ``fusion_seq`` and
    #: ``frame_id`` of the first frame compared (None: none could be; ``fusion_seq``: the first turn kept),
    #: ``taken_as_recorded`` (the frames before it, whose samples or tracker state before them are in the
    #: segments gone: their recorded detections delivered, not compared), ``results_not_replayed`` (frames
    #: delivered in the segments kept that were fused in one gone), ``fused_in_segments_gone`` (the fusion turns
    #: in the segments gone, over every run, but the shed frames' predictions: ``predicted_in_segments_gone``;
    #: both None: unknown, the kept segments hold no frame fused; the latter alone None: a recording that does
    #: not say, made before :data:`._format.META_PREDICTED_BEFORE`, whose turns are all counted as fused).
    start: dict[str, Any] | None = None
    #: The fusion turns counted in :attr:`diverged` (:meth:`note`).
    _noted: set[int] = field(default_factory=set, repr=False)

    def report(self) -> dict[str, Any]:
        """The ``as_recorded`` section of a report (JSON)."""
        first = self.first
        return {
            "schema_version": _REPORT_VERSION,
            "rerun_models": self.rerun_models,
            "segments": self.segments,
            "frames": len(self.results),
            "compared": self.compared,
            "compared_predicted": self.predicted,
            "equal": self.equal,
            "diverged": dict(self.diverged),
            "first_divergence": None
            if first is None
            else {
                "frame_id": first.frame_id,
                "run": first.run,
                "seq": first.seq,
                "cause": first.cause,
                "detail": first.detail,
            },
            "shed": sum(1 for r in self.results if r.predicted),
            "admission_limits": self.admission_limits(),
            "damage": {name: d.to_dict() for name, d in self.damage.items()},
            "drive_error": None if self.drive_error is None else str(self.drive_error),
            "results_missing": self.results_missing,
            "recorder_lost": dict(sorted(self.recorder_lost.items())),
            "start": self.start,
        }

    def admission_limits(self) -> list[list[int]]:
        """``[frame_id, limit]`` where the admission's in-flight limit changed (the first frame's too), in
        delivery order: the run's admission decisions as recorded (a recording of format 1 has none)."""
        changes: list[list[int]] = []
        for r in self.results:
            if r.admission_limit is not None and (not changes or changes[-1][1] != r.admission_limit):
                changes.append([r.frame_id, r.admission_limit])
        return changes

    def damaged(self, seg: Path, damage: DriveDamage) -> None:
        """The segment ``seg``'s reading met ``damage``: what follows it is missing from the replay."""
        self.damage[seg.name] = damage
        if self.drive_error is None:
            self.drive_error = damage.error(str(seg))
        log.info("%s: %s: what follows it is missing from the replay", seg, damage.first_problem())

    def note(self, div: Divergence, run: str = "0") -> None:
        """Count ``div``, of the recording's run ``run`` (its metadata's), and keep it if it is the first. A
        frame is counted once, by the first cause found: what follows from it (the frame it delivered, which is
        what fusion gave it here) is not counted again."""
        if div.seq is not None:
            if div.seq in self._noted:
                return
            self._noted.add(div.seq)
        if run != "0":
            div = dataclasses.replace(div, run=int(run))
        self.diverged[div.cause] += 1
        if self.first is None:
            self.first = div


@contextlib.contextmanager
def _decoding(reader: DriveReader, topic: str, what: str) -> Iterator[None]:
    """A record of ``topic`` (``what``: which, by its message's sequence) decoded: what it cannot be read as (a
    recording's chunks carry no CRC, so a changed byte reaches the decoders) is a :class:`DriveError` naming the
    file, the topic and the record, never a traceback."""
    try:
        yield
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        why = f"no {exc.args[0]!r}" if isinstance(exc, KeyError) and exc.args else str(exc) or type(exc).__name__
        raise DriveError(f"{what} cannot be read: {why}", file=str(reader.path), topic=topic) from exc


def _frame_records(reader: DriveReader) -> list[tuple[dict[str, Any], FrameResult]]:
    """A recording segment's ``/record/frames`` records in delivery order (``index``), each with its result as
    recorded (:func:`_delivered`: decoded once, under :func:`_decoding`: a record that cannot be is a
    :class:`DriveError`)."""
    out: list[tuple[dict[str, Any], FrameResult]] = []
    for _, _, index, d in reader.messages([fmt.FRAMES_TOPIC]):
        with _decoding(reader, fmt.FRAMES_TOPIC, f"result #{index}"):
            record = json.loads(d)
            int(record["index"])
            if record.get("fusion_seq") is not None:
                int(record["fusion_seq"])
            out.append((record, _delivered(record)))
    return sorted(out, key=lambda r: int(r[0]["index"]))


def fusion_records(reader: DriveReader) -> list[dict[str, Any]]:
    """A recording segment's fusion records in fusion order, each with its numbers (formats 3 and 4:
    ``/record/fusion_data``) read back as formats 1 and 2 hold them (:func:`._format.decode_fusion`), and
    decoded whole as the replay reads it (:func:`_decoding`: a record that cannot be is a :class:`DriveError`).
    In a damaged segment (``reader.damage``: data lost) a record whose numbers are not there is left out: lost
    with the damage (a cut between the two), as what follows it is; in an intact one it is an error."""
    return [f.rec for f in _fused_records(reader)]


@dataclass(frozen=True, slots=True)
class _Fused:
    """A fusion record read back (:func:`fusion_records`) and its values the replay reads, decoded once
    (:func:`_decoded`)."""

    rec: dict[str, Any]
    seq: int
    frame_id: int
    t_ns: int
    ego: EgoPose | None
    sensors: Mapping[str, SensorResult]
    detections: tuple[Detection3D, ...]


def _fused_records(reader: DriveReader) -> list[_Fused]:
    """:func:`fusion_records`, each record with its values decoded (:class:`_Fused`)."""
    data = {seq: d for _, _, seq, d in reader.messages([fmt.FUSION_DATA_TOPIC])}
    out: list[_Fused] = []
    for _, _, seq, d in reader.messages([fmt.FUSION_TOPIC]):
        with _decoding(reader, fmt.FUSION_TOPIC, f"fusion #{seq}"):
            record = json.loads(d)
            if seq not in data and isinstance(record.get("detections"), Mapping) and reader.damage.data_lost:
                log.info("%s: fusion #%s: its numbers lost with the damage: left out", reader.path, seq)
                continue
            out.append(_decoded(fmt.decode_fusion(record, data.get(seq))))
    return sorted(out, key=lambda f: f.seq)


def _decoded(rec: dict[str, Any]) -> _Fused:
    """Every value of a fusion record (read back: :func:`._format.decode_fusion`) the replay reads, decoded once
    by the replay's own decoders: what one cannot read raises here, under the reading's guard."""
    for s in rec["samples"].values():
        if s is not None:
            int(s["t_ns"])
            if s.get("raw_t_ns") is not None:
                int(s["raw_t_ns"])
            for m in s.get("merged") or ():
                int(m["raw_t_ns"]), _moved_by(m)
    return _Fused(
        rec,
        int(rec["seq"]),
        int(rec["frame_id"]),
        int(rec["t_ns"]),
        fmt.decode_ego(rec["ego"]),
        {name: fmt.decode_result(name, d) for name, d in rec["sensors"].items()},
        tuple(fmt.decode_detection(d) for d in rec["detections"]),
    )


def _source(reader: DriveReader) -> SessionSource:
    meta = dict(reader.metadata)
    if meta.get(fmt.META_FORMAT) not in fmt.READABLE_VERSIONS:
        raise DriveError(
            f"not a run recording (metadata {fmt.META_FORMAT}={meta.get(fmt.META_FORMAT)!r}, expected one of "
            f"{', '.join(fmt.READABLE_VERSIONS)}): record one with --record",
            file=str(reader.path),
        )
    source = reader.source
    ego_at: Callable[[int], EgoPose | None] | None = None
    if meta.get(fmt.META_EGO) == "source":
        poses = source_poses(reader)
        if poses:
            times = [p.t_ns for p in poses]
            ego_at = partial(_ego_at, poses, times)
        else:  # formats 1-4: the poses on /ego/odometry
            ego_at = source.ego_at
    return SessionSource(rig=source.rig, metadata=meta, name=source.name, file=source.file, ego_at=ego_at)


def _ego_at(poses: Sequence[EgoPose], times: Sequence[int], t_ns: int) -> EgoPose:
    """The source's pose at ``t_ns``, as the run's drive reader gave fusion (``DriveReader.ego_pose_at``)."""
    return interpolate_ego(poses, t_ns, times)


def source_poses(reader: DriveReader) -> list[EgoPose]:
    """The source's poses a replay's recording segment holds (format 5: ``/record/source_poses``), what its
    fusion read; none in a recording of a live run (its poses as pushed: ``/ego/odometry``)."""
    for _, _, _, data in reader.messages([fmt.SOURCE_POSES_TOPIC]):
        try:
            return fmt.decode_poses(data)
        except ValueError as exc:
            raise DriveError(f"the source's poses cannot be read: {exc}", file=str(reader.path),
                             topic=fmt.SOURCE_POSES_TOPIC) from exc  # fmt: skip
    return []


def _open_segment(seg: Path) -> DriveReader | DriveDamage:
    """The segment ``seg`` opened (its damage skipped, not warned of: the replay names it), or the damage that
    leaves nothing of it readable: cut short before its first chunk was complete (a crash, a copy cut short), it
    holds no channel (cut sooner, no metadata either). Any other error raises."""
    try:
        return DriveReader(seg, strict=False, quiet=True)
    except DriveError:
        damage = _unreadable(seg)
        if damage is None:
            raise
        return damage


def _unreadable(seg: Path) -> DriveDamage | None:
    """The damage that made the segment ``seg`` impossible to open, or None (damage is not why)."""
    try:
        with DriveReader(seg, sensors=(), strict=False, quiet=True) as probe:  # its metadata alone
            damage = probe.damage
    except DriveError:  # not even its metadata: cut within its header (or nothing of it written)?
        size = cut_short_at(seg)
        if size is None:
            return None  # not the start of an MCAP file, or a whole one (its footer written)
        return DriveDamage(truncated=f"truncated at byte {size} before any message", truncated_at=size)
    return damage if damage.data_lost else None


async def replay_as_recorded(
    path: str | Path,
    config: RuntimeConfig,
    *,
    rerun_models: bool = False,
    url: str | None = None,
    sensors: Sequence[str] | None = None,
    strict: bool = False,
) -> AsRecordedOutcome:
    """Replay the recording ``path`` (and its segments ``<stem>-0001.mcap``...) as recorded; see module docs.
    ``config``: the profile to fuse with (the recording's rig and source resolve it, as the run did), with
    ``url`` and ``sensors`` applied as the CLI's overrides are (:meth:`Session.with_overrides`).

    A damaged segment (a truncation: the run stopped before closing it; a chunk that cannot be read) is
    replayed for what is readable and named in :attr:`AsRecordedOutcome.damage` and ``drive_error``;
    ``strict``: every chunk of every segment is read first, and any damage raises
    :class:`~perception.errors.DriveDamagedError` before a frame is fused."""
    path = Path(path)
    segs = fmt.segments(path)
    if not segs:
        raise DriveError("recording not found", file=str(path))
    if strict:
        for seg in segs:
            opened = _open_segment(seg)
            if isinstance(opened, DriveDamage):
                raise opened.error(str(seg))
            with opened as reader:
                damage = reader.verify()
            if damage:
                raise damage.error(str(seg))
    unreadable: dict[Path, DriveDamage] = {}  # the segments before the first readable one
    for first in segs:  # the first segment that can be read: the recording's source and format, where it starts
        opened = _open_segment(first)
        if isinstance(opened, DriveDamage):
            unreadable[first] = opened
            continue
        with opened as reader:
            source = _source(reader)
            number = reader.metadata.get(fmt.META_SEGMENT, "0")
            version = reader.metadata.get(fmt.META_FORMAT, "")
        break
    else:
        seg, damage = next(iter(unreadable.items()))
        err = damage.error(str(seg))
        raise DriveDamagedError(f"{err.message}; no segment of the recording can be read", **err.context)
    if number != "0" and first == path:
        raise DriveError(
            f"segment {number} of a recording, not its start: replay the recording by its name (the file of its "
            "segment 0, without -NNNN; where that segment was rotated away, the replay starts from the first kept)",
            file=str(path),
        )
    if number != "0" and version in ("1", "2", "3"):
        if path in unreadable:
            err = unreadable[path].error(str(path))
            raise DriveDamagedError(
                f"{err.message}; this recording (format {version}) holds no tracker state to start from a later "
                "segment: it cannot be replayed as recorded",
                **err.context,
            )
        raise DriveError(
            f"segment 0 of the recording is gone (rotated away; the first kept is {segs[0].name}) and this "
            f"recording (format {version}) holds no tracker state to start from: it cannot be replayed as recorded",
            file=str(path),
        )
    session = Session.assemble(config, source).with_overrides(url=url, sensors=sensors)
    fusion = session.fusion()
    if fusion is None:
        raise DriveError("the profile turns fusion off: nothing to replay as recorded", file=str(path))
    out = AsRecordedOutcome(segments=len(segs), rerun_models=rerun_models)
    # segment 0 rotated away (or unreadable): from the tracker state recorded in the first segment read
    resume = number != "0"
    if resume and not isinstance(fusion, Fuser):
        raise DriveError("segment 0 of the recording is gone and this fusion stage cannot start from a recorded "
                         "tracker state", file=str(path))  # fmt: skip
    if rerun_models:
        async with Runtime(session, fusion=None, join_timeout_ns=3_600_000_000_000) as rt:
            await _replay_segments(segs, session, fusion, out, rt, resume=resume, recording=path)
    else:
        await _replay_segments(segs, session, fusion, out, None, resume=resume, recording=path)
    return out


class _Resume:
    """Where a replay of a recording whose segment 0 is gone (rotated away) starts, and which of its frames are
    taken as recorded rather than compared: the state of that decision over the segments kept, and its record
    (:attr:`AsRecordedOutcome.start`, ``out.start``).

    The caller, in the recorded order: :meth:`segment` as each segment is opened (``received``: the samples it
    holds, as ``_replay_segments`` keeps them); :meth:`turn` for each fusion record before anything of it is
    fused; :meth:`not_replayed` for each delivered frame before it is replayed. ``answered`` is the caller's
    (rerun_models: each sensor's latest answer today), updated here for the frames taken.

    Until the start, a frame is taken as recorded (its recorded detections and results delivered, not compared;
    its recorded tracker state restored after it; with ``rt``, today's models asked on its samples, for a frame
    after it that reuses their answer) until one whose samples all are in the recording follows a recorded state
    (and, with ``rt``, reuses no result today's models have not answered here), or a shed frame's prediction
    follows one (it reads the tracker alone, as the fused frame before it left it): the replay starts there. Until
    a fused frame is compared, the fused frames are taken as recorded unless they pass that check (a prediction
    then compared when it follows a recorded state or a frame compared); after it, every frame is compared but
    one fused late, a sample of it received before the first segment kept, taken unless all its samples are in
    the recording."""

    def __init__(self, out: AsRecordedOutcome, rt: Runtime | None, answered: dict[str, SensorResult]) -> None:
        self.out = out
        self.rt = rt
        self.answered = answered
        self.restored = False  # the tracker set to a recorded state
        self.fusing = False  # a fused frame compared: every one after it is, but those fused late
        self.first_kept: int | None = None  # the first fusion turn of the first segment kept
        self.kept_from: int | None = None  # the first segment's first sample's stamp
        self.predicted_before: int | None = None  # the segment's META_PREDICTED_BEFORE

    @property
    def start(self) -> dict[str, Any]:
        assert self.out.start is not None, "segment() first"
        return self.out.start

    def segment(
        self, seg: Path, run: str, received: Mapping[tuple[str, int], Sample], predicted_before: str | None = None
    ) -> None:
        """The segment ``seg`` of run ``run`` opened, holding the samples ``received``; ``predicted_before``: its
        metadata's :data:`._format.META_PREDICTED_BEFORE` (None: not recorded)."""
        self.predicted_before = None if predicted_before is None else int(predicted_before)
        if self.out.start is None:  # where it starts: its first fusion turn kept (none: nothing compared)
            self.out.start = dict(segment=seg.name, run=run, fusion_seq=None, frame_id=None, taken_as_recorded=0,
                                  results_not_replayed=0, fused_in_segments_gone=None,
                                  predicted_in_segments_gone=None)  # fmt: skip
        if self.kept_from is None:  # what was received before this is in the segments gone
            self.kept_from = min((t for _, t in received), default=None)

    async def turn(
        self, fused: _Fused, seg: Path, run: str, fusion: FusionStage,
        rebuild: Callable[[], tuple[Frame, dict[str, SensorResult], list[str]]],
    ) -> tuple[tuple[tuple[Detection3D, ...], dict[str, SensorResult]] | None,
               tuple[Frame, dict[str, SensorResult], list[str]] | None]:  # fmt: skip
        """The fusion record ``fused`` (of ``seg``, run ``run``, fused by ``fusion``): ``(taken, got)``. ``taken``:
        the record taken as recorded (what was fused: its recorded detections and results; the tracker set to the
        state recorded after it), None when it is to be fused and compared. ``got``: the frame as ``rebuild``
        (:func:`_frame`) rebuilt it, when this decision needed it (None: not rebuilt), for the caller to fuse."""
        rec, seq = fused.rec, fused.seq
        start = self.start
        if self.first_kept is None:  # the first fusion turn kept (the turns are numbered over every run)
            before = self.predicted_before  # the shed frames' predictions among those turns
            start.update(segment=seg.name, run=run, fusion_seq=seq, fused_in_segments_gone=seq - (before or 0),
                         predicted_in_segments_gone=before)  # fmt: skip
            self.first_kept = seq
        predicted = bool(rec.get("predicted"))
        # a frame fused late, a sample of it received before the first segment kept (in one gone)
        late = not predicted and self.kept_from is not None and _oldest_sample(rec) < self.kept_from
        if self.fusing and not late:
            return None, None
        got = None if predicted else rebuild()
        rt = self.rt
        if got is None:  # a shed frame's prediction reads nothing but the tracker as the fused frame before it
            compared = self.restored  # left it (Runtime.shed: in its fusion turn, read only), its state recorded
        else:  # its samples all there, after a recorded state (and today's answers to the results it reuses)
            answered = rt is None or not _unanswered(got[1], self.answered)
            compared = not got[2] and (self.fusing or (self.restored and answered))
        if compared:
            self.fusing = self.fusing or got is not None
            if start["frame_id"] is None:  # where it starts (a later run's, maybe)
                start.update(frame_id=fused.frame_id, fusion_seq=seq, run=run)
            return None, got
        if got is not None and rt is not None:  # today's answers to its samples: a frame after
            await _rerun(rt, got[0], got[1], self.answered)  # it may reuse them (not compared)
        then = rec.get("tracker")
        if isinstance(then, Mapping):  # its state after it: the next may start
            assert isinstance(fusion, Fuser)
            if then and fusion.tracker_state():  # (without tracking, on either side, a
                fusion.restore_tracker_state(then)  # frame depends on none before it)
            self.restored = True
        elif not predicted:
            self.restored = False  # a frame without its state (format 4 always has it)
        start["taken_as_recorded"] += 1
        return (fused.detections, dict(fused.sensors)), got

    def not_replayed(self, frec: Mapping[str, Any]) -> bool:
        """The delivered frame ``frec`` was fused in a segment gone: not replayed (counted)."""
        turn = frec.get("fusion_seq")
        if turn is None or (self.first_kept is not None and int(turn) >= self.first_kept):
            return False
        self.start["results_not_replayed"] += 1
        return True


async def _replay_segments(
    segs: Sequence[Path], session: Session, fusion: FusionStage, out: AsRecordedOutcome, rt: Runtime | None, *,
    recording: Path, resume: bool = False,
) -> None:  # fmt: skip
    """``recording``: the recording's path (its segment 0's), to check and name its segments by their numbers.
    A segment that cannot be read at all (:func:`_open_segment`) is named in ``out.damage``; its fusion turns are
    missing, as a missing segment's are. ``resume``: the recording's segment 0 was rotated away (or cannot be
    read). The replay starts in the first segment read: its frames are taken as recorded (not compared) until
    one whose samples all are in the recording follows a recorded tracker state, which the tracker is set to
    (:attr:`AsRecordedOutcome.start`; :class:`_Resume`). With ``rt`` (rerun models) today's models answer the
    frames taken too, and the start also waits for a frame whose results the run reused (decimated under
    overload) were answered here: reused in a later frame, a result of a frame taken is today's answer, not
    'missing' (a divergence no model made). A frame after the start that fusion was given late, a sample of it
    received before the first segment kept, is taken as recorded as well (its state restored)."""
    run = "0"
    fused: dict[int, tuple[tuple[Detection3D, ...], Mapping[str, SensorResult]]] = {}  # seq -> what was fused
    fused_digests: dict[int, str] = {}  # seq -> the recorded detections' digest (the frames' of format 4)
    next_seq = 0
    received: dict[tuple[str, int], Sample] = {}
    older: dict[str, list[Sample]] = {}  # per sensor, its latest samples of the segments read before
    answered: dict[str, SensorResult] = {}  # each sensor's latest answer today (rerun_models), for reuse
    start = _Resume(out, rt, answered) if resume else None
    expected = 0  # the next segment's number
    gap = "dropped by the recorder"  # why fusion turns are missing, where they are
    next_index: int | None = None  # the next delivered frame's index (None: none read yet)
    unreadable: list[str] = []  # the segments that could not be read (damaged), by name
    for seg in segs:
        opened = _open_segment(seg)
        if isinstance(opened, DriveDamage):  # nothing of it readable: its turns are missing, its damage named
            unreadable.append(seg.name)
            out.damaged(seg, opened)
            continue
        with opened as reader:
            number = int(reader.metadata.get(fmt.META_SEGMENT, expected))
            named = fmt.segment_number(recording, seg)
            if number != named:  # its records are another segment's: read as this one's, they made no sense
                raise DriveError(
                    f"holds segment {number} of its recording (its metadata), not {named} as its name says: a "
                    "segment copied over it or renamed; put the right file back or remove it",
                    file=str(seg),
                )
            if number > expected:  # segments between are not there (deleted, or not copied with the rest) or
                names = [fmt.segment_path(recording, i).name for i in range(expected, number)]  # not readable
                missing = ", ".join(n for n in names if n not in unreadable)
                damaged = ", ".join(n for n in names if n in unreadable)
                gap = "; ".join(
                    [f"in segment(s) {missing}, missing from the recording's folder"] * bool(missing)
                    + [f"in segment(s) {damaged}, damaged: none of it readable"] * bool(damaged)
                )
            expected = number + 1
            if reader.metadata.get(fmt.META_RUN, "0") != run:  # the run began again: so does fusion
                run = reader.metadata.get(fmt.META_RUN, "0")
                fusion = session.fusion() or fusion
            state = fusion.tracker_state if isinstance(fusion, TrackingStage) else None
            records = _fused_records(reader)
            # turns missing in a segment whose reading lost data (or at the next one's start: lost at its end) are
            # the damage's doing
            dropped = f"lost to the damage of {seg.name}" if reader.damage.data_lost else "dropped by the recorder"
            gap = dropped if gap == "dropped by the recorder" else gap
            results_gap = gap  # why results are missing at the segment's start (then: within it)
            version = reader.metadata.get(fmt.META_FORMAT, "")
            exact = version not in ("1", "2")  # the outputs digest: of their bytes
            derived = version not in ("1", "2", "3")  # format 4: the digests derived from the values recorded
            world = version not in ("1", "2", "3", "4", "5")  # format 6: the tracker state's pose compared
            points: dict[tuple[str, int], PointCloudSample] = {}
            for name, spec in reader.rig.items():
                if not _is_image(spec.kind):
                    for p in reader.points(fmt.points_topic(name), name, extra_fields=True):
                        points[(name, p.seq)] = p
            # the samples as received that frames began with: the sweeps (and with rerun_models the images) of
            # this segment, the previous one and each sensor's latest before it (a frame may be fused after the
            # recording rotated; a cloud accumulates sweeps received segments before, when segments are small)
            for s in received.values():
                older.setdefault(s.sensor, []).append(s)
            for kept in older.values():
                del kept[:-_CARRIED]
            previous = received
            wanted = [n for n, spec in reader.rig.items() if rt is not None or not _is_image(spec.kind)]
            # the clouds with every column the run's carried (fmt.META_POINTS: a radar's model was sent them all)
            read = reader.samples(sensors=wanted, extra_fields=True) if wanted else ()
            received = {(s.sensor, s.t_ns): s for s in read}
            both = {**{(s.sensor, s.t_ns): s for kept in older.values() for s in kept}, **previous, **received}
            if start is not None:
                start.segment(seg, run, received, reader.metadata.get(fmt.META_PREDICTED_BEFORE))
            for f in records:
                rec, seq = f.rec, f.seq
                got = None  # (resume) the frame as _frame rebuilt it, when the start's decision needed it
                if start is not None:
                    if start.first_kept is None:  # the turns before the first kept are in the segments gone
                        next_seq = seq
                    taken, got = await start.turn(
                        f, seg, run, fusion, partial(_frame, f, points, both, images=rt is not None)
                    )
                    if taken is not None:
                        fused[seq] = taken
                        next_seq = seq + 1
                        gap = dropped  # (a gap after it is this segment's: the one before it is behind)
                        continue
                if seq != next_seq:  # the frame after the gap, fused on a tracker state the turns missing left
                    out.note(Divergence(f.frame_id, seq, "decision",
                                        f"fusion #{next_seq}..#{seq - 1} missing from the recording ({gap}): "
                                        "the tracker state after them is unknown"), run)  # fmt: skip
                next_seq = seq + 1
                gap = dropped
                with _decoding(reader, fmt.FUSION_TOPIC, f"fusion #{seq}"):
                    digest = fmt.fusion_digests(rec, version, decoded=(f.sensors, f.ego, f.detections))
                fused_digests[seq] = str(digest["detections"])
                if rec.get("predicted"):  # a shed frame's prediction, in its turn (read-only)
                    frame = Frame(f.frame_id, f.t_ns, {}, ego=f.ego)
                    dets = fusion.predict(frame) if isinstance(fusion, TrackingStage) else ()
                    fused[seq] = (dets, {})
                    out.compared += 1
                    out.predicted += 1
                    div = _compare_prediction(rec, digest, frame, dets)
                    if div is None:
                        out.equal += 1
                    else:
                        out.note(div, run)
                    continue
                frame, recorded, lost = got if got is not None else _frame(f, points, both, images=rt is not None)
                results = recorded
                if rt is not None:
                    results = await _rerun(rt, frame, recorded, answered)
                dets, _ = await anyio.to_thread.run_sync(fusion, frame, results)
                tracker = state() if state is not None else None
                if tracker is not None and not world:
                    tracker = {k: v for k, v in tracker.items() if k != fmt.TRACKER_WORLD}
                fused[seq] = (dets, results)
                out.compared += 1
                div = _compare(rec, digest, frame, recorded, results, dets, tracker, exact=exact, derived=derived)
                if div is not None and lost and div.cause != "model":  # a sample missing: not fusion's doing
                    div = Divergence(frame.frame_id, seq, "decision", "; ".join(lost))
                if div is None:
                    out.equal += 1
                else:
                    out.note(div, run)
            for frec, delivered in _frame_records(reader):
                index = int(frec["index"])
                if next_index is not None and index > next_index:  # (the recorder numbers every result it is given)
                    out.results_missing.append([next_index, index - next_index, results_gap])
                next_index, results_gap = max(index + 1, next_index or 0), dropped
                if start is not None and start.not_replayed(frec):  # fused in a segment rotated away
                    continue
                result = _replayed(frec, delivered, fused)
                out.results.append(result)
                then = fmt.frame_digest(frec, version, fused_digests)
                if (
                    then is not None
                    and frec.get("fusion_seq") is not None
                    and int(frec["fusion_seq"]) in fused
                    and detections_digest(result.detections) != then
                ):
                    out.note(Divergence(result.frame_id, int(frec["fusion_seq"]), "fusion",
                                        "the frame delivered other detections than fusion gave it"), run)  # fmt: skip
            for _, _, n, d in reader.messages([fmt.LOSSES_TOPIC]):  # format 7: what the recorder lost meanwhile
                with _decoding(reader, fmt.LOSSES_TOPIC, f"the losses #{n}"):
                    out.recorder_lost.update({str(k): int(v) for k, v in json.loads(d)["lost"].items()})
            damage = reader.damage  # what the reading of this segment met
            if damage:
                out.damaged(seg, damage)


def _is_image(kind: str) -> bool:
    from perception.kinds import kind_def

    return kind_def(kind).is_image


def _frame(
    fused: _Fused,
    points: Mapping[tuple[str, int], PointCloudSample],
    received: Mapping[tuple[str, int], Sample],
    images: bool,
) -> tuple[Frame, dict[str, SensorResult], list[str]]:
    """The frame of fusion record ``fused`` as fusion was given it (images only when they were read: to rerun the
    models), the recorded results of its sensors, and what of its samples the recording lacks."""
    rec, seq = fused.rec, fused.seq
    samples: dict[str, Sample | None] = {}
    lost: list[str] = []
    for name, s in rec["samples"].items():
        raw = None if s is None or s.get("raw_t_ns") is None else received.get((name, int(s["raw_t_ns"])))
        extra = points.get((name, seq)) if s is not None and s.get("points") else None
        if isinstance(raw, ImageSample):
            # at the frame's stamp for it: the received one mapped to the host clock (a ROS node's, a live run's
            # offset or estimated time base), as the run's models were asked (their results carry it)
            samples[name] = raw if raw.t_ns == int(s["t_ns"]) else dataclasses.replace(raw, t_ns=int(s["t_ns"]))
        elif raw is not None or extra is not None:
            # the received sweep, then the accumulated earlier sweeps: rebuilt as accumulation moved them, or
            # the rows written with the frame
            if extra is None and s.get("points"):  # (rebuilt without them: the cloud fusion read is not this)
                lost.append(f"{name}'s rows written with the frame ({fmt.points_topic(name)}) are not in the recording")
            parts = [p.points for p in (raw, extra) if isinstance(p, PointCloudSample)]
            merged: list[tuple[int, int, tuple[float, ...]]] = []  # as the accumulator said it (merged_from)
            for m in s.get("merged") or ():
                earlier = received.get((name, int(m["raw_t_ns"])))
                if not isinstance(earlier, PointCloudSample):
                    lost.append(f"{name}'s sweep at {m['raw_t_ns']} (merged into the frame's) is not in the recording")
                    break
                parts.append(SweepAccumulator.moved(earlier.points, moved := _moved_by(m)))
                merged.append((int(m["t_ns"]), earlier.points.shape[0], tuple(float(v) for v in moved.ravel())))
            like = raw if isinstance(raw, PointCloudSample) else extra
            assert like is not None
            cloud = np.concatenate(parts) if len(parts) > 1 else parts[0]
            samples[name] = PointCloudSample(
                name, int(s["t_ns"]), like.frame_id, cloud, like.fields, merged_from=tuple(merged)
            )
        else:
            if s is not None and ("points" in s or images):  # a cloud fusion reads, or an image to rerun on
                lost.append(f"{name}'s sample at {s.get('raw_t_ns')} is not in the recording")
            samples[name] = None
    return Frame(fused.frame_id, fused.t_ns, samples, ego=fused.ego), dict(fused.sensors), lost


def _moved_by(merged: Mapping[str, Any]) -> npt.NDArray[np.float64]:
    """The transform an accumulated sweep was moved by (a ``merged`` entry of a frame's cloud)."""
    return np.asarray(merged["m"], np.float64).reshape(4, 4)


#: Why a sensor ok in the run has no answer today (--rerun-models): the profile or --sensors leaves it out.
_NOT_ENABLED = "not asked: not among the sensors enabled (the profile, --sensors)"


async def _rerun(
    rt: Runtime,
    frame: Frame,
    recorded: Mapping[str, SensorResult],
    answered: dict[str, SensorResult],
) -> dict[str, SensorResult]:
    """Today's models on the sensors that answered ok in the run (one not enabled today: missing, said so); the
    others keep their recorded status.
    A result the run reused from an earlier frame (decimated under overload: ``reused_age_ns``) is not asked
    again of this frame's sample: it is today's answer to the sample it was made of, as the run reused it
    (``answered``: each sensor's latest answer today, kept across frames: the run reused its latest too)."""
    ok = [n for n, r in recorded.items() if r.status is SensorStatus.OK and r.reused_age_ns is None]
    out = dict(recorded)
    if ok:
        samples = {n: frame.samples.get(n) for n in ok}
        result = await rt.process(Frame(frame.frame_id, frame.t_ns, samples, ego=frame.ego))
        for n in ok:
            today = result.sensors.get(n)
            if frame.samples.get(n) is None:
                out[n] = SensorResult(n, SensorStatus.MISSING, error="the sample is not in the recording")
            elif today is None:  # (the runtime asks the sensors enabled alone)
                out[n] = SensorResult(n, SensorStatus.MISSING, error=_NOT_ENABLED)
            else:
                out[n] = answered[n] = today
    for n, r in recorded.items():
        if r.status is SensorStatus.OK and r.reused_age_ns is not None:
            earlier = answered.get(n)
            out[n] = (
                SensorResult(n, SensorStatus.MISSING, error="the reused result's frame is not in the recording")
                if earlier is None or earlier.sample_t_ns != r.sample_t_ns
                else dataclasses.replace(earlier, latency_ns=0, stages={}, reused_age_ns=r.reused_age_ns)
            )
    return out


def _oldest_sample(rec: Mapping[str, Any]) -> int:
    """The stamp (as received) of the oldest sample a fusion record's frame holds or merged."""
    stamps = [
        int(t)
        for s in rec.get("samples", {}).values()
        if s is not None
        for t in (s.get("raw_t_ns"), *(m.get("raw_t_ns") for m in s.get("merged") or ()))
        if t is not None
    ]
    return min(stamps, default=2**63)


def _unanswered(recorded: Mapping[str, SensorResult], answered: Mapping[str, SensorResult]) -> bool:
    """A result the run reused (``reused_age_ns``) whose sample today's models have not answered in this replay
    (its frame before the replay's start): :func:`_rerun` would call it missing, a divergence no model made."""
    return any(
        r.status is SensorStatus.OK
        and r.reused_age_ns is not None
        and (n not in answered or answered[n].sample_t_ns != r.sample_t_ns)
        for n, r in recorded.items()
    )


def _compare(
    rec: Mapping[str, Any], digest: Mapping[str, str | None], frame: Frame, recorded: Mapping[str, SensorResult],
    results: Mapping[str, SensorResult], dets: Sequence[Detection3D], tracker: Mapping[str, Any] | None, *,
    exact: bool, derived: bool = False,
) -> Divergence | None:  # fmt: skip
    """``digest``: the frame's (:func:`._format.fusion_digests`); ``tracker``: the state after the frame
    fused here (None without a tracker); ``exact``: the recorded outputs digest is of their bytes (formats 3
    and 4: :func:`recorded_outputs_digest`), else quantised (:func:`outputs_digest`); ``derived``: the digests
    were derived from the record's own values (format 4), so the recorded outputs are not checked against
    theirs (the same bytes on both sides: a check that could not fail, at a digest of every output a frame)."""
    fid, seq = frame.frame_id, int(rec["seq"])
    for name in sorted(results):
        then, now = recorded[name], results[name]
        if then.status is not SensorStatus.OK:
            continue
        if now.status is not SensorStatus.OK:
            return Divergence(fid, seq, "model", f"{name} answered {now.status.value} ({now.error}), ok in the run")
        if outputs_digest({name: now}) != outputs_digest({name: then}):
            what = (
                f"model {then.model} version {then.model_version!r} then, {now.model} version {now.model_version!r} now"
                if (then.model, then.model_version) != (now.model, now.model_version)
                else f"outputs of {then.model} version {then.model_version!r} differ"
            )
            return Divergence(fid, seq, "model", f"{name}: {what}")
    if not derived and (recorded_outputs_digest(recorded) if exact else outputs_digest(recorded)) != digest["outputs"]:
        return Divergence(fid, seq, "model", "the recorded outputs do not match their digest")
    statuses = {n: r.status.value for n, r in results.items()}
    stamps = {n: r.sample_t_ns for n, r in results.items()}
    if decisions_digest(seq, fid, frame.t_ns, statuses, stamps, frame.ego) != digest["decisions"]:
        return Divergence(fid, seq, "decision", "the frame's samples, statuses or ego pose differ from the run's")
    if detections_digest(dets) != digest["detections"]:
        n_then = len(rec["detections"])
        return Divergence(fid, seq, "fusion", f"other detections from the same inputs ({len(dets)} now, {n_then} then)")
    if (tracker_digest(tracker) if tracker is not None else "") != digest["tracker"]:
        state = rec.get("tracker")  # format 4: the recorded state, to say where it differs
        where = tracker_difference(state, tracker or {}) if isinstance(state, Mapping) else None
        return Divergence(fid, seq, "fusion", "the same detections but another tracker state" +
                          (f": {where} (the first difference)" if where else ""))  # fmt: skip
    return None


def _compare_prediction(
    rec: Mapping[str, Any], digest: Mapping[str, str | None], frame: Frame, dets: Sequence[Detection3D]
) -> Divergence | None:
    fid, seq = frame.frame_id, int(rec["seq"])
    if decisions_digest(seq, fid, frame.t_ns, {}, {}, frame.ego) != digest["decisions"]:
        return Divergence(fid, seq, "decision", "the shed frame's time or ego pose differ from the run's")
    if detections_digest(dets) != digest["detections"]:
        n_then = len(rec["detections"])
        return Divergence(fid, seq, "fusion", f"another prediction of the shed frame ({len(dets)} now, {n_then} then)")
    return None


def _replayed(
    frec: Mapping[str, Any],
    delivered: FrameResult,
    fused: Mapping[int, tuple[tuple[Detection3D, ...], Mapping[str, SensorResult]]],
) -> FrameResult:
    """A delivered frame's result (``frec``, decoded: ``delivered``), replayed: the recorded decisions, the
    detections fused here."""
    seq = frec.get("fusion_seq")
    if seq is None or int(seq) not in fused:
        return delivered
    dets, results = fused[int(seq)]
    sensors = delivered.sensors
    return dataclasses.replace(
        delivered, sensors={**sensors, **{n: r for n, r in results.items() if n in sensors}}, detections=dets
    )


def _delivered(frec: Mapping[str, Any]) -> FrameResult:
    """A delivered frame's result as recorded (``/record/frames``): its decisions, no detections."""
    return FrameResult(
        frame_id=int(frec["frame_id"]),
        t_ns=int(frec["t_ns"]),
        status=FrameStatus(frec["status"]),
        sensors={name: fmt.decode_result(name, d) for name, d in frec["sensors"].items()},
        latency=LatencyTree(total_ns=int(frec.get("latency_ns") or 0)),
        reason=frec.get("reason"),
        deadline_missed=bool(frec.get("deadline_missed")),
        predicted=bool(frec.get("predicted")),
        admission_limit=frec.get("admission_limit"),
    )
