"""Recorded drives: one MCAP file per drive, Foxglove protobuf schemas, openable in Foxglove as is.

:class:`DriveWriter` records sensor samples, ego poses and ground truth; :class:`DriveReader`
validates a drive up front and serves time-ordered samples, interpolated ego poses and ground truth.
The format (topics, frames, schemas, units) is described in ``replay_data/README.md``.
"""

from __future__ import annotations

from perception.drives._chunks import UNKNOWN_TOPICS, read_chunk
from perception.drives._codec import BASE_FRAME, GROUND_TRUTH_TOPIC, MAP_FRAME, kind_fields, topic_for
from perception.drives._damage import DriveDamage
from perception.drives._drive_stats import DriveStats
from perception.drives._reader import GT_TOLERANCE_NS, DriveReader
from perception.drives._scan import cut_short_at, head_metadata
from perception.drives._writer import LIBRARY, DriveWriter

__all__ = [
    "BASE_FRAME",  # the vehicle's frame and the world's, as drives name them (live: a sample in neither)
    "GROUND_TRUTH_TOPIC",
    "GT_TOLERANCE_NS",
    "LIBRARY",
    "MAP_FRAME",
    "UNKNOWN_TOPICS",
    "DriveDamage",
    "DriveReader",
    "DriveStats",
    "DriveWriter",
    "cut_short_at",  # an MCAP file's size when it was cut short (record: a segment's damage; importers: a bag's)
    "head_metadata",  # a drive's metadata from its start alone (record: is a file an earlier recording's segment?)
    "kind_fields",
    "read_chunk",  # the fused recording's copy of a drive's last, partly copied chunks (viz)
    "topic_for",
]
