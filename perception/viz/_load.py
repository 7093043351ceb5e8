"""What one frame of a replay looked like, read back from the replay's output directory.

``DIR/fused.mcap`` (written by :class:`~perception.viz._record.VizRecorder`) holds everything: the drive's
messages and rig, the fused detections, the frame stats and the cameras' own 2D detections. Without
it, ``DIR/detections.jsonl`` gives the detections (and the cameras' 2D boxes when the replay kept raw
outputs) and the drive gives the sensor data; runtime sensor names are then taken to be the drive's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foxglove_schemas_protobuf.ImageAnnotations_pb2 import ImageAnnotations
from foxglove_schemas_protobuf.SceneUpdate_pb2 import SceneUpdate

from perception._paths import DETECTIONS_FILE, FUSED_MCAP_FILE, REPORT_FILE
from perception.drives import GT_TOLERANCE_NS, DriveReader
from perception.drives import _codec as codec
from perception.errors import ConfigError, DriveDamagedError, DriveError
from perception.metrics import FrameRecord, RunReport, read_frame_records
from perception.types import Detection3D, GroundTruth, Sample, SensorSpec
from perception.viz._copy import DriveCopy
from perception.viz._encode import (
    DETECTIONS_TOPIC,
    FRAME_STATS_TOPIC,
    LabelledBoxes,
    camera_detections,
    camera_detections_topic,
    decode_camera_detections,
    decode_detections,
)
from perception.viz._record import REPLAY_METADATA

__all__ = ["FrameView", "frame_ids", "load_frame_views"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FrameView:
    """One replayed frame with the data the runtime used for it.

    Sensor mappings are keyed by the runtime's sensor names; ``specs`` are the drive's sensors
    (extrinsics, calibrations) and ``samples`` the samples the frame used (absent when the sensor had
    none). ``camera_detections`` are the cameras' own 2D boxes, when recorded.
    """

    frame_id: int
    t_ns: int
    status: str
    detections: tuple[Detection3D, ...]
    specs: Mapping[str, SensorSpec]
    samples: Mapping[str, Sample]
    camera_detections: Mapping[str, LabelledBoxes]
    ground_truth: GroundTruth | None
    source: str  # the file the detections came from

    @property
    def kinds(self) -> dict[str, str]:
        return {name: spec.kind for name, spec in self.specs.items()}


@dataclass(frozen=True, slots=True)
class _Record:
    """What the outputs say about a frame before the drive is consulted."""

    frame_id: int
    t_ns: int
    status: str
    sample_t_ns: Mapping[str, int]
    detections: tuple[Detection3D, ...]
    camera_detections: Mapping[str, LabelledBoxes]


def _check_dir(out_dir: Path) -> None:
    """A replay output that is not a directory: not there, or a file (one of a replay's outputs, a drive: it
    said "not found" of a file that is there)."""
    if out_dir.is_dir():
        return
    if not out_dir.exists():
        raise ConfigError("replay output directory not found", file=str(out_dir))
    ours = out_dir.name in (FUSED_MCAP_FILE, DETECTIONS_FILE, REPORT_FILE)
    hint = f": pass the directory holding it, {out_dir.parent}" if ours else " (perception replay --out DIR)"
    raise ConfigError(f"is a file, expected a replay output directory{hint}", file=str(out_dir))


def frame_ids(out_dir: str | Path) -> list[int]:
    """Ids of the frames a replay output holds, in order (from ``fused.mcap``, else ``detections.jsonl``)."""
    out = Path(out_dir)
    _check_dir(out)
    fused = out / FUSED_MCAP_FILE
    if fused.is_file():
        with DriveCopy(fused, topics=[FRAME_STATS_TOPIC]) as copy:
            return [json.loads(msg.data)["frame_id"] for _, msg in copy.until(2**64)]
    return [rec.frame_id for rec in _jsonl(out / DETECTIONS_FILE)]


def _jsonl(path: Path) -> list[FrameRecord]:
    if not path.is_file():
        raise ConfigError(
            f"no {FUSED_MCAP_FILE} or {DETECTIONS_FILE} here (not a replay output?)", file=str(path.parent)
        )
    return read_frame_records(path)  # an interrupted write leaves at most a partial last line: skipped


def _missing(wanted: Iterable[int], found: Mapping[int, Any], where: Path, known: list[int]) -> None:
    missing = [f for f in wanted if f not in found]
    if missing:
        span = f"frames {known[0]}..{known[-1]}" if known else "no frames"
        raise ConfigError(f"no frame {', '.join(map(str, missing))} in {where} ({span})", key="--frame")


def _records_from_mcap(path: Path, wanted: list[int]) -> tuple[dict[int, _Record], dict[str, str]]:
    """Records of the wanted frames and the runtime -> drive sensor names (one pass over the file)."""
    with DriveCopy(path, topics=[FRAME_STATS_TOPIC, DETECTIONS_TOPIC]) as copy:
        stats: dict[int, dict[str, Any]] = {}
        scenes: dict[int, bytes] = {}
        known: list[int] = []
        for ch, msg in copy.until(2**64):
            if ch.topic == DETECTIONS_TOPIC:
                scenes[msg.log_time] = msg.data  # kept raw; only the wanted frames are decoded
            else:
                rec = json.loads(msg.data)
                known.append(rec["frame_id"])
                if rec["frame_id"] in wanted:
                    stats[rec["frame_id"]] = rec
        scenes = {rec["t_ns"]: scenes[rec["t_ns"]] for rec in stats.values() if rec["t_ns"] in scenes}
        names: dict[str, str] = {}  # metadata after the messages: a streamed (truncated) file meets it on the way
        for name, data in copy.metadata:
            if name == REPLAY_METADATA:
                names = {k: v["drive_sensor"] for k, v in json.loads(data.get("sensors", "{}")).items()}
    if any(f not in stats for f in wanted):
        _refuse_damaged(path, [f for f in wanted if f not in stats], known)
    _missing(wanted, stats, path, known)
    # a camera's 2D detections are stamped with the time of the image the frame used
    cam_topics: dict[str, str] = {}  # topic -> runtime sensor name
    wanted_images: set[tuple[str, int]] = set()
    for rec in stats.values():
        for sensor, entry in rec["sensors"].items():
            if entry.get("sample_t_ns") is not None:
                cam_topics[camera_detections_topic(names.get(sensor, sensor))] = sensor
                wanted_images.add((sensor, entry["sample_t_ns"]))
    cams: dict[tuple[str, int], LabelledBoxes] = {}
    if wanted_images:
        lo, hi = min(t for _, t in wanted_images), max(t for _, t in wanted_images)
        with DriveCopy(path, topics=list(cam_topics), start_ns=lo) as copy:
            for ch, msg in copy.until(hi):
                key = (cam_topics[ch.topic], msg.log_time)
                if key in wanted_images:
                    cams[key] = _decode(ImageAnnotations, msg.data, decode_camera_detections, path, ch.topic)
    out = {}
    for fid, rec in stats.items():
        sample_t = {s: e["sample_t_ns"] for s, e in rec["sensors"].items() if e.get("sample_t_ns") is not None}
        raw = scenes.get(rec["t_ns"])
        dets = () if raw is None else _decode(SceneUpdate, raw, decode_detections, path, DETECTIONS_TOPIC)
        cam = {s: cams[(s, t)] for s, t in sample_t.items() if (s, t) in cams}
        out[fid] = _Record(fid, rec["t_ns"], rec["status"], sample_t, dets, cam)
    return out, names


def _refuse_damaged(path: Path, missing: list[int], known: list[int]) -> None:
    """Frames not found in ``fused.mcap``: when the file is damaged, that is why -- said as replay and info
    say it of a drive (:class:`DriveDamagedError` naming the file and offset, exit 3), not 'no frame N'.
    A file that is no MCAP (or no drive) at all is the :class:`DriveError` they give it (exit 1)."""
    with DriveReader(path, strict=False, quiet=True) as reader:
        damage = reader.verify()
    if damage:
        err = damage.error(str(path))
        span = f"frames {known[0]}..{known[-1]}" if known else "no frame"
        raise DriveDamagedError(
            f"{err.message}; frame {', '.join(map(str, missing))} not in its readable part ({span})", **err.context
        )


def _decode(cls: Any, data: bytes, fn: Any, path: Path, topic: str) -> Any:
    try:
        return fn(codec.decode(cls, data))
    except codec.DecodeError as exc:
        raise DriveError(f"cannot decode {cls.DESCRIPTOR.full_name}: {exc}", file=str(path), topic=topic) from exc


def _records_from_jsonl(path: Path, wanted: list[int]) -> dict[int, _Record]:
    out: dict[int, _Record] = {}
    known: list[int] = []
    for rec in _jsonl(path):
        known.append(rec.frame_id)
        if rec.frame_id not in wanted:
            continue
        sample_t = {s: e.sample_t_ns for s, e in rec.sensors.items() if e.sample_t_ns is not None}
        cams = {}
        for s, e in rec.sensors.items():
            if e.status == "ok" and e.outputs is not None:
                cd = camera_detections(e.outputs, s)
                if cd is not None and {"BOXES", "COUNT"} <= e.outputs.keys():
                    cams[s] = cd
        out[rec.frame_id] = _Record(rec.frame_id, rec.t_ns, rec.status, sample_t, rec.detections, cams)
    _missing(wanted, out, path, known)
    return out


def _drive_of(out_dir: Path) -> Path:
    report = out_dir / REPORT_FILE
    # A report.json that is damaged or from a newer version is a ReportError naming it and the key.
    drive = RunReport.drive_of(report) if report.is_file() else None
    if not drive:
        raise ConfigError(f"no {FUSED_MCAP_FILE} and no drive named in report.json: pass --drive", file=str(out_dir))
    return Path(drive)


def _check_same_drive(
    rec: _Record, specs: Mapping[str, SensorSpec], samples: Mapping[str, Sample], reader: DriveReader, source: Path
) -> None:
    """None of the samples a frame took is in the drive read (and none was lost to damage): it is not the
    drive replayed, a :class:`ConfigError` saying so. ``--drive`` naming another drive with the same rig
    rendered that drive's points under the replay's boxes, the cameras left out, exit 0."""
    taken = {n: t for n, t in rec.sample_t_ns.items() if n in specs}
    if not taken or any(n in samples for n in taken) or reader.damage.data_lost:
        return
    name, t = min(taken.items())
    raise ConfigError(
        f"has no {name} sample at t={t} ns, which frame {rec.frame_id} of {source} took (nor any other of its "
        "samples): not the drive that was replayed? Pass that one (--drive)",
        file=str(reader.path),
    )


def load_frame_views(out_dir: str | Path, frames: Iterable[int], *, drive: str | Path | None = None) -> list[FrameView]:
    """The frames ``frames`` (frame ids) of the replay output ``out_dir``, in the order asked.

    Reads ``fused.mcap`` when present (then ``drive`` is not needed), else ``detections.jsonl`` and
    ``drive`` (default: the drive named in ``report.json``). A missing directory or frame is a
    :class:`ConfigError`; unreadable files are :class:`DriveError`; a frame missing from a damaged
    ``fused.mcap`` (truncated, a damaged chunk) is a :class:`DriveDamagedError` naming it.
    """
    out = Path(out_dir)
    _check_dir(out)
    wanted = list(dict.fromkeys(frames))
    fused = out / FUSED_MCAP_FILE
    names: dict[str, str] = {}
    if fused.is_file():
        records, names = _records_from_mcap(fused, wanted)
        data_path, source = fused, fused
    else:
        records = _records_from_jsonl(out / DETECTIONS_FILE, wanted)
        data_path, source = Path(drive) if drive is not None else _drive_of(out), out / DETECTIONS_FILE
    if not data_path.is_file():
        named = "" if drive is not None or fused.is_file() else f" (named in {out / REPORT_FILE}): pass --drive"
        raise ConfigError(f"drive not found{named}", file=str(data_path))
    views = []
    # A handle of its own: the frames are read from a run's outputs (after it, in report.md's rendering
    # thread, or by `perception render DIR` any time later), not from the run's reader.
    with DriveReader(data_path, strict=False) as reader:
        runtime_names = names or {n: n for rec in records.values() for n in rec.sample_t_ns}
        specs = {n: reader.rig[d] for n, d in runtime_names.items() if d in reader.rig}
        for name in sorted(set(runtime_names) - set(specs)):
            log.warning("sensor %s is not in %s; not shown", name, data_path)
        for fid in wanted:
            rec = records[fid]
            samples: dict[str, Sample] = {}
            for name, t in rec.sample_t_ns.items():
                spec = specs.get(name)
                if spec is None:
                    continue
                found = next(reader.samples(start_ns=t, end_ns=t + 1, sensors=[spec.name]), None)
                if found is not None:
                    samples[name] = found
            _check_same_drive(rec, specs, samples, reader, source)
            gt = reader.ground_truth_at(rec.t_ns, GT_TOLERANCE_NS) if reader.has_ground_truth else None
            views.append(
                FrameView(
                    rec.frame_id,
                    rec.t_ns,
                    rec.status,
                    rec.detections,
                    specs,
                    samples,
                    dict(rec.camera_detections),
                    gt,
                    str(source),
                )
            )
    return views
