"""Helpers for drive tests: a three-sensor rig and small drives written with the real writer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from google.protobuf.message import Message as PbMessage
from mcap.writer import CompressionType
from mcap.writer import Writer as McapWriter
from mcap_protobuf.schema import register_schema

from perception._imageio import encode_jpeg
from perception.drives import DriveWriter, topic_for
from perception.drives import _codec as codec
from perception.types import (
    CameraCalibration,
    EgoPose,
    GroundTruth,
    GroundTruthObject,
    ImageSample,
    PointCloudSample,
    SensorKind,
    SensorSpec,
    Transform,
)

T0 = 1_700_000_000_000_000_000  # a realistic epoch time: exercises the full uint64 range of timestamps
PERIOD = 100_000_000  # 10 Hz
LIDAR_FIELDS = ("x", "y", "z", "intensity")
RADAR_FIELDS = ("x", "y", "z", "radial_velocity", "rcs")


def make_rig() -> list[SensorSpec]:
    return [
        SensorSpec(
            "front",
            SensorKind.CAMERA,
            "cam_front",
            Transform.from_xyz_rpy((1.6, 0.0, 1.5), (-np.pi / 2, 0.0, -np.pi / 2)),
            topic_for(SensorKind.CAMERA, "front"),
            CameraCalibration(32, 24, (30.0, 0.0, 16.0, 0.0, 30.0, 12.0, 0.0, 0.0, 1.0), (0.01, -0.002, 0.0, 0.0, 0.0)),
            10.0,
        ),
        SensorSpec(
            "top",
            SensorKind.LIDAR,
            "lidar_top",
            Transform.from_xyz_rpy((0.0, 0.0, 1.9), (0.0, 0.0, 0.01)),
            topic_for("lidar", "top"),
            None,
            10.0,
        ),
        SensorSpec(
            "radar",
            SensorKind.RADAR,
            "radar_front",
            Transform.from_xyz_rpy((3.7, 0.0, 0.5), (0.0, 0.0, 0.0)),
            topic_for("radar", "radar"),
            None,
            13.0,
        ),
    ]


@dataclass
class Written:
    """What a test drive holds, in write order."""

    path: Path
    rig: list[SensorSpec]
    samples: list[PointCloudSample | ImageSample] = field(default_factory=list)
    ego: list[EgoPose] = field(default_factory=list)
    gt: list[GroundTruth] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)

    def sorted_samples(self) -> list[PointCloudSample | ImageSample]:
        return sorted(self.samples, key=lambda s: s.t_ns)  # stable: ties keep write (= file) order


def write_drive(
    path: Path,
    frames: int = 12,
    *,
    chunk_size: int = 4 * 1024 * 1024,
    compression: str = "zstd",
    ground_truth: bool = True,
    seed: int = 0,
    crcs: bool = True,
    streaming: bool = False,
) -> Written:
    rng = np.random.default_rng(seed)
    rig = make_rig()
    out = Written(path, rig, metadata={"seed": str(seed), "generator": "tests"})
    with DriveWriter(
        path, rig, metadata=out.metadata, chunk_size=chunk_size, compression=compression, crcs=crcs, streaming=streaming
    ) as w:
        for i in range(frames):
            t = T0 + i * PERIOD
            lidar = rng.normal(size=(0 if i == 2 else int(rng.integers(1, 60)), 4)).astype(np.float32)
            radar = rng.normal(size=(int(rng.integers(0, 8)), 5)).astype(np.float32)
            image = encode_jpeg(rng.integers(0, 255, size=(24, 32, 3), dtype=np.uint8))
            samples: list[PointCloudSample | ImageSample] = [
                PointCloudSample("top", t, "lidar_top", lidar, LIDAR_FIELDS, seq=i),
                PointCloudSample("radar", t + 3_000_000, "radar_front", radar, RADAR_FIELDS, seq=i),
                ImageSample("front", t + 7_000_000, "cam_front", image, seq=i),
            ]
            for s in samples:
                w.write(s)
            out.samples += samples
            ego = EgoPose(
                t,
                Transform.from_xyz_rpy((10.0 * i * 0.1, 0.5 * i, 0.0), (0.0, 0.0, 0.05 * i)),
                (10.0 + 0.1 * i, 0.2, 0.0),
                0.05 + 0.01 * i,
            )
            w.write_ego_pose(ego)
            out.ego.append(ego)
            if ground_truth:
                objects = tuple(
                    GroundTruthObject(
                        track_id=k,
                        label=("car", "truck", "pedestrian", "cyclist")[k % 4],
                        center=(float(rng.normal(20, 5)), float(rng.normal(0, 3)), 0.8),
                        size=(4.5, 1.9, 1.6),
                        yaw=float(rng.uniform(-np.pi, np.pi)),
                        velocity=(float(rng.normal()), 0.0 if k == 0 else float(rng.normal())),
                    )
                    for k in range(i % 4)  # includes empty snapshots
                )
                gt = GroundTruth(t, objects)
                w.write_ground_truth(gt)
                out.gt.append(gt)
    return out


def static_messages(rig: Sequence[SensorSpec], t_ns: int) -> list[tuple[str, int, PbMessage | bytes]]:
    """The /tf_static and calibration messages the writer would write at ``t_ns``."""
    out: list[tuple[str, int, PbMessage | bytes]] = [(codec.TF_STATIC_TOPIC, t_ns, codec.encode_tf_static(t_ns, rig))]
    for spec in rig:
        if spec.calibration is not None:
            out.append(
                (
                    codec.calibration_topic(spec.name),
                    t_ns,
                    codec.encode_calibration(t_ns, spec.frame_id, spec.calibration),
                )
            )
    return out


def write_raw(
    path: Path,
    rig: Sequence[SensorSpec] | None,
    messages: Sequence[tuple[str, int, PbMessage | bytes]],
    *,
    schemas: Mapping[str, tuple[str, str, str]] | None = None,
) -> None:
    """Write an MCAP by hand (for broken drives): the rig record (unless None), one channel per topic.

    A channel's schema is its first message's protobuf type, unless ``schemas`` maps the topic to
    ``(schema name, schema encoding, message encoding)``.
    """
    schemas = schemas or {}
    with path.open("wb") as f:
        w = McapWriter(f, compression=CompressionType.NONE)
        w.start()
        if rig is not None:
            w.add_metadata(codec.RIG_METADATA, codec.encode_rig(rig))
        channels: dict[str, int] = {}
        for topic, t, msg in messages:
            if topic not in channels:
                if topic in schemas:
                    name, schema_encoding, message_encoding = schemas[topic]
                    sid = w.register_schema(name, schema_encoding, b"{}")
                else:
                    assert isinstance(msg, PbMessage)
                    sid, message_encoding = register_schema(w, type(msg)), "protobuf"
                channels[topic] = w.register_channel(topic, message_encoding, sid)
            data = msg if isinstance(msg, bytes) else msg.SerializeToString()
            w.add_message(channels[topic], t, data, t)
        w.finish()
