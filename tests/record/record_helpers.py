"""Helpers of the recording tests: the bundled drive and its replay profile, a command in a fresh interpreter, a
channel's records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from perception.drives import DriveReader
from perception.record import _format as fmt
from perception.record._replay import fusion_records
from perception.types import Sample, SensorResult, SensorStatus

ROOT = Path(__file__).resolve().parents[2]
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"
REPLAY_PROFILE = ROOT / "launch" / "replay.yaml"  # the profile `perception replay` uses by default


def fresh(argv: list[str], timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    """``perception ARGV`` in a new interpreter (nothing of this process's state carries over)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "perception", *argv],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def records(path: Path, topic: str) -> list[dict[str, Any]]:
    """The JSON messages of a recording's ``topic``; ``/record/fusion``'s with their numbers (its binary
    ``/record/fusion_data``: detections as dicts, outputs as arrays), as the replay reads them; the
    arrivals' batches one by one; ``/record/frames``' with their digests as the replay reads them (format 4:
    derived from the segment's fusion records)."""
    with DriveReader(path, strict=True) as reader:
        if topic == "/record/fusion":
            return fusion_records(reader)
        out = [json.loads(data) for _, _, _, data in reader.messages([topic])]
        if topic == "/record/frames":
            version = reader.metadata[fmt.META_FORMAT]
            fused = {int(r["seq"]): str(fmt.fusion_digests(r, version)["detections"]) for r in fusion_records(reader)}
            for f in out:
                f["digest"] = fmt.frame_digest(f, version, fused)
        return [a for batch in out for a in batch["arrivals"]] if topic == "/record/arrivals" else out


def lidar_result(name: str, sample: Sample | None, t_ns: int) -> SensorResult:
    """The lidar's answer: two objects (one moving), so the tracker has tracks; the other sensors missing or
    late."""
    if sample is None:
        return SensorResult(name, SensorStatus.MISSING)
    if name != "lidar_top":
        return SensorResult(name, SensorStatus.LATE, sample_t_ns=sample.t_ns)
    x = 10.0 + 5.0 * t_ns / 1e9
    boxes = np.array([[x, 3.0, 0.5, 4.2, 1.8, 1.5, 0.1], [20.0, -4.0, 0.4, 0.6, 0.6, 1.7, 1 / 3]], np.float32)
    outputs = {"BOXES": boxes, "LABELS": np.array([0, 1], np.int32), "SCORES": np.array([0.9, 0.8], np.float32)}
    return SensorResult(
        name, SensorStatus.OK, outputs=outputs, model="lidar_detector", model_version="1", sample_t_ns=sample.t_ns
    )


def copy_into(
    reader: Any, writer: Any, metadata: Callable[[Mapping[str, str]], Mapping[str, str]] = dict
) -> Callable[[Any, Any, Any, bytes], None]:
    """Start ``writer`` (an ``mcap.writer.Writer``) as ``reader``'s file (its header, its metadata records through
    ``metadata``): the call that adds one of ``reader.iter_messages()``'s messages to it, with ``payload``, its
    schema and channel registered the first time."""
    header = reader.get_header()
    writer.start(header.profile, header.library)
    for m in reader.iter_metadata():
        writer.add_metadata(m.name, dict(metadata(m.metadata)))
    schemas: dict[int, int] = {}
    channels: dict[int, int] = {}

    def add(schema: Any, channel: Any, message: Any, payload: bytes) -> None:
        if schema is not None and schema.id not in schemas:
            schemas[schema.id] = writer.register_schema(schema.name, schema.encoding, schema.data)
        if channel.id not in channels:
            sid = schemas.get(channel.schema_id, 0)
            topic, encoding = channel.topic, channel.message_encoding
            channels[channel.id] = writer.register_channel(topic, encoding, sid, channel.metadata)
        writer.add_message(channels[channel.id], message.log_time, payload, message.publish_time, message.sequence)

    return add
