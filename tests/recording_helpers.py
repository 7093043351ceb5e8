"""Test helpers about recordings shared by the test directories (tests/ is on sys.path: its conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcap.writer import Writer

from perception.config import RuntimeConfig
from perception.record import AsRecordedOutcome, replay_as_recorded


def earlier_recording(path: Path, segment: int = 0) -> bytes:
    """A file that is an earlier recording's segment by its metadata (what --record may replace): its bytes."""
    with path.open("wb") as f:
        writer = Writer(f)
        writer.start("", "perception")
        writer.add_metadata("perception.drive", {"record.format": "4", "record.segment": str(segment)})
        writer.finish()
    return path.read_bytes()


def as_recorded(path: Path, config: RuntimeConfig, **kwargs: Any) -> AsRecordedOutcome:
    """:func:`replay_as_recorded` of ``path`` run to its end, under a watchdog (a hang fails the test)."""

    async def replay() -> AsRecordedOutcome:
        with anyio.fail_after(600):  # watchdog: a replay of the bundled drive on a loaded host takes seconds
            return await replay_as_recorded(path, config, **kwargs)

    return anyio.run(replay)
