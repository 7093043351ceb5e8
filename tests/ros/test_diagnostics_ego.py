"""/diagnostics says how many frames had odometry too old to use (``live.ego_max_age_ms``)."""

from __future__ import annotations

from perception.config import RosConfig
from perception.ros._diagnostics import DiagnosticsTracker


def test_the_frame_budget_status_counts_frames_with_stale_odometry() -> None:
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top"], RosConfig())
    _, budget = diag.statuses({"frames": 12, "intake": {"ego_stale": 7}})
    assert budget.values["ego_stale"] == "7"
