"""Live ingestion inside a vehicle process: samples pushed from the host's threads, frames assembled on
the host's monotonic clock (trigger, fixed rate, or a timer while the trigger is silent), fused results
back by callback, future or async iterator."""

from __future__ import annotations

from perception.live._publisher import parse_faults
from perception.live._runtime import LiveRuntime
from perception.live._session import live_session

__all__ = [
    "LiveRuntime",
    "live_session",
    "parse_faults",
]
