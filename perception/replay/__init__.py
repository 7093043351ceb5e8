"""Replay recorded drives through the runtime: frames from a drive, paced, with outputs written."""

from __future__ import annotations

from perception.replay._session import Rate, ReplayOptions, ReplayOutcome, replay_drive, safe_output_path
from perception.replay._source import DriveSource, match_rig

__all__ = ["DriveSource", "Rate", "ReplayOptions", "ReplayOutcome", "match_rig", "replay_drive", "safe_output_path"]
