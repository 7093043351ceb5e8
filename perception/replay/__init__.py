"""Replay recorded drives through the runtime: frames from a drive, paced, with outputs written."""

from __future__ import annotations

from perception.replay._eval import MODES, evaluate_modes, score_modes
from perception.replay._session import (
    Rate,
    ReplayOptions,
    ReplayOutcome,
    parse_rate,
    replay_drive,
    safe_output_path,
)
from perception.replay._sinks import ReplaySink, each_frame
from perception.replay._source import DriveSource

__all__ = [
    "MODES",
    "DriveSource",
    "Rate",
    "ReplayOptions",
    "ReplayOutcome",
    "ReplaySink",
    "each_frame",
    "evaluate_modes",
    "parse_rate",
    "replay_drive",
    "safe_output_path",
    "score_modes",
]
