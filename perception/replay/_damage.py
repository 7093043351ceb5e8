"""The damage section of a replay's report: what the drive lost and which frames it touched.

A damaged chunk's messages are skipped by the reader (:class:`perception.drives.DriveDamage` says
which, per topic, with time ranges); the replay goes on with the chunks after it. Here that is tied
to the replay: per configured sensor the samples lost, the frames whose time lies in (or within a
sync window of) a damaged time range with their statuses and the sensors missing in them, and --
with a sensor as trigger -- how many frames could not exist because their trigger sample was lost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perception.config import RuntimeConfig
from perception.drives import UNKNOWN_TOPICS, DriveDamage
from perception.types import FrameResult, SensorSpec, SensorStatus

__all__ = ["FrameSeen", "damage_section"]


@dataclass(frozen=True, slots=True)
class FrameSeen:
    """What the damage section needs of one frame result."""

    frame_id: int
    t_ns: int
    status: str
    missing: tuple[str, ...]

    @classmethod
    def of(cls, result: FrameResult) -> FrameSeen:
        missing = tuple(n for n, r in result.sensors.items() if r.status is SensorStatus.MISSING)
        return cls(result.frame_id, result.t_ns, result.status.value, missing)


def damage_section(
    damage: DriveDamage, config: RuntimeConfig, rig: Mapping[str, SensorSpec], frames: Sequence[FrameSeen]
) -> dict[str, Any]:
    """``report["drive_damage"]``: the drive's damage plus what it did to this replay (module docs)."""
    doc = damage.to_dict()
    by_topic = damage.by_topic()
    unknown = by_topic.get(UNKNOWN_TOPICS)
    sensors: dict[str, Any] = {}
    for name, spec in rig.items():
        loss = by_topic.get(spec.topic)
        if loss is None and unknown is None:
            continue
        ranges = [*(loss.ranges if loss else ()), *(unknown.ranges if unknown else ())]
        count = None if unknown is not None or loss is None else loss.count
        sensors[name] = {"topic": spec.topic, "samples_lost": count, "ranges_ns": [list(r) for r in sorted(ranges)]}
    doc["sensors"] = sensors

    margin = max((s.sync_window_ns for s in config.active_sensors), default=0)
    spans = [(c.start_ns - margin, c.end_ns + margin) for c in damage.chunks]
    touched = [f for f in frames if any(a <= f.t_ns <= b for a, b in spans)]
    statuses = Counter(f.status for f in touched)
    missing = Counter(n for f in touched for n in f.missing)
    doc["frames"] = {
        "in_damaged_time": len(touched),
        "frame_ids": [f.frame_id for f in touched],
        "statuses": dict(sorted(statuses.items())),
        "sensors_missing": dict(sorted(missing.items())),
    }
    trigger = config.trigger.sensor
    if trigger is not None and trigger in sensors:
        # a frame is clocked by its trigger sample: each lost trigger sample is a frame that never was
        doc["frames"]["not_produced"] = sensors[trigger]["samples_lost"]
        doc["frames"]["trigger"] = trigger
    return doc
