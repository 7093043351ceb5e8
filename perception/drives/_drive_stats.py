"""Summary statistics of a drive (what ``perception info`` prints)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perception.drives._damage import DriveDamage

__all__ = ["DriveStats", "TopicStats"]


@dataclass(frozen=True, slots=True)
class TopicStats:
    """One topic: its schema, how many messages, over which times, at what mean rate.

    ``message_count`` counts the readable messages; ``lost_count`` those in damaged chunks (``None``:
    some damaged chunk's count is unknown).
    """

    topic: str
    schema: str
    message_count: int
    first_t_ns: int | None
    last_t_ns: int | None
    lost_count: int | None = 0

    @property
    def rate_hz(self) -> float:
        """Mean rate ``(count - 1) / (last - first)``; 0 with fewer than two distinct times."""
        if self.message_count < 2 or self.first_t_ns is None or self.last_t_ns is None:
            return 0.0
        span = self.last_t_ns - self.first_t_ns
        return (self.message_count - 1) * 1e9 / span if span > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "schema": self.schema,
            "message_count": self.message_count,
            "first_t_ns": self.first_t_ns,
            "last_t_ns": self.last_t_ns,
            "rate_hz": self.rate_hz,
            "lost_count": self.lost_count,
        }


@dataclass(frozen=True, slots=True)
class DriveStats:
    """Whole-drive summary. ``truncated`` is the reason text when the drive is truncated; ``damage``
    everything found damaged so far (complete after :meth:`perception.drives.DriveReader.verify`)."""

    path: str
    start_ns: int
    end_ns: int
    topics: Mapping[str, TopicStats]
    sensors: Mapping[str, str]
    has_ground_truth: bool
    truncated: str | None = None
    damage: DriveDamage = field(default_factory=DriveDamage)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def duration_s(self) -> float:
        return self.duration_ns / 1e9

    @property
    def message_count(self) -> int:
        return sum(t.message_count for t in self.topics.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "duration_s": self.duration_s,
            "message_count": self.message_count,
            "sensors": dict(self.sensors),
            "has_ground_truth": self.has_ground_truth,
            "truncated": self.truncated,
            "damage": self.damage.to_dict(),
            "topics": {name: t.to_dict() for name, t in self.topics.items()},
        }
