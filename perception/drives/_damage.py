"""What a damaged drive lost: damaged chunks (byte offsets, reasons, per-topic messages and time
ranges), a truncation, a damaged summary.

The reader fills these in as it meets the damage (and all at once with
:meth:`perception.drives.DriveReader.verify`); ``perception info`` and the replay report print them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perception.errors import DriveDamagedError

__all__ = ["DamagedChunk", "DriveDamage", "LostMessages", "TopicLoss"]


@dataclass(frozen=True, slots=True)
class LostMessages:
    """The messages of one topic inside one damaged chunk.

    ``count`` is exact when the chunk's message index could be read, else ``None`` (unknown) and the
    time range is the chunk's own (every message of the chunk lies inside it).
    """

    topic: str
    count: int | None
    first_t_ns: int
    last_t_ns: int

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "count": self.count, "first_t_ns": self.first_t_ns, "last_t_ns": self.last_t_ns}


@dataclass(frozen=True, slots=True)
class DamagedChunk:
    """One chunk record that could not be read: where it is, why, and what it held."""

    offset: int  # byte offset of the chunk record in the file
    length: int  # bytes the damaged record spans (the whole damaged region when it had to be resynchronised)
    reason: str  # e.g. "CRC mismatch", "decompression error: Data corruption detected"
    start_ns: int  # log times the chunk covers (from its index or header; the surrounding messages otherwise)
    end_ns: int
    lost: tuple[LostMessages, ...] = ()

    @property
    def message_count(self) -> int | None:
        """Messages lost in this chunk (``None`` when a topic's count is unknown)."""
        counts = [m.count for m in self.lost]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    def describe(self) -> str:
        n = self.message_count
        what = "an unknown number of messages" if n is None else f"{n} messages"
        return (
            f"chunk at byte {self.offset} ({self.length} bytes) unreadable: {self.reason}; "
            f"{what} lost, t = {self.start_ns} .. {self.end_ns} ns"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "length": self.length,
            "reason": self.reason,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "message_count": self.message_count,
            "lost": [m.to_dict() for m in self.lost],
        }


@dataclass(frozen=True, slots=True)
class TopicLoss:
    """All that one topic lost: messages (``None`` if some count is unknown) and the time ranges."""

    topic: str
    count: int | None
    ranges: tuple[tuple[int, int], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "ranges_ns": [list(r) for r in self.ranges]}


@dataclass(frozen=True, slots=True)
class DriveDamage:
    """Everything wrong with a drive, in file order. Empty (falsy) for an intact drive.

    ``truncated``: the file ends before its data section does (what follows the cut is unknown).
    ``summary``: the summary section (chunk indexes, statistics) was unreadable or failed its CRC, or
    the file is cut short after its data (in the summary or the footer); the data was then found by
    scanning the file, so this alone loses no message.
    """

    chunks: tuple[DamagedChunk, ...] = ()
    truncated: str | None = None
    truncated_at: int | None = None
    summary: str | None = None

    def __bool__(self) -> bool:
        return bool(self.chunks) or self.truncated is not None or self.summary is not None

    @property
    def data_lost(self) -> bool:
        """Some message could not be read (a damaged chunk or a truncation)."""
        return bool(self.chunks) or self.truncated is not None

    @property
    def messages_lost(self) -> int | None:
        """Messages lost in damaged chunks (``None`` if unknown; a truncation's loss is never known)."""
        counts = [c.message_count for c in self.chunks]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    def by_topic(self) -> Mapping[str, TopicLoss]:
        """Per topic: the messages lost and the time ranges they covered (in time order)."""
        counts: dict[str, int | None] = {}
        ranges: dict[str, list[tuple[int, int]]] = {}
        for chunk in self.chunks:
            for m in chunk.lost:
                prev = counts.get(m.topic, 0)
                counts[m.topic] = None if prev is None or m.count is None else prev + m.count
                ranges.setdefault(m.topic, []).append((m.first_t_ns, m.last_t_ns))
        return {t: TopicLoss(t, counts[t], tuple(sorted(ranges[t]))) for t in sorted(counts)}

    def lines(self) -> list[str]:
        """One human-readable line per problem, in file order."""
        out = [] if self.summary is None else [f"summary unreadable ({self.summary}); the file was scanned instead"]
        out += [c.describe() for c in self.chunks]
        if self.truncated is not None:
            out.append(self.truncated)
        return out

    def first_problem(self) -> str:
        """The first problem, for a one-line error (empty for an intact drive)."""
        lines = self.lines()
        return lines[0] if lines else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "damaged": bool(self),
            "data_lost": self.data_lost,
            "messages_lost": self.messages_lost,
            "summary": self.summary,
            "truncated": self.truncated,
            "truncated_at": self.truncated_at,
            "chunks": [c.to_dict() for c in self.chunks],
            "topics": {t: loss.to_dict() for t, loss in self.by_topic().items()},
        }

    def error(self, path: str) -> DriveDamagedError:
        """The one-line error for this damage: the file, the first problem (and how many more), its offset."""
        offset = self.chunks[0].offset if self.chunks else self.truncated_at
        more = len(self.lines()) - 1
        tail = f" (+{more} more)" if more > 0 else ""
        return DriveDamagedError(f"drive damaged: {self.first_problem()}{tail}", file=path, offset=offset)
