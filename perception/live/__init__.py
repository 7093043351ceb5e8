"""Live ingestion inside a vehicle process: samples pushed from the host's threads, frames assembled on
the host's monotonic clock (trigger, fixed rate, or a timer while the trigger is silent), fused results
back by callback, future or async iterator."""

from __future__ import annotations

from perception.live._assembler import HOST_CLOCK, check_trigger
from perception.live._publisher import Faults, drive_items, parse_faults, play_schedule
from perception.live._runtime import LiveRuntime
from perception.live._session import StopOnSignal, StopSignals, live_session

__all__ = [
    "HOST_CLOCK",
    "Faults",
    "LiveRuntime",
    "StopOnSignal",
    "StopSignals",
    "check_trigger",
    "drive_items",
    "live_session",
    "parse_faults",
    "play_schedule",
]
