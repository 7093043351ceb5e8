"""/diagnostics says how many frames had odometry too old to use (``live.ego_max_age_ms``)."""

from __future__ import annotations

from perception.config import RosConfig
from perception.ros._diagnostics import OK, WARN, DiagnosticsTracker


def test_the_odometry_status_counts_frames_with_stale_odometry() -> None:
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top"], RosConfig())
    name = "perception_fusion: odometry"
    odometry = {s.name: s for s in diag.statuses({"frames": 12, "intake": {"ego_stale": 7}})}[name]
    assert odometry.values["ego_stale"] == "7"
    assert odometry.level == WARN and "7 frame" in odometry.message
    # no new stale frame since: the count stays, the warning goes
    again = {s.name: s for s in diag.statuses({"frames": 14, "intake": {"ego_stale": 7}})}[name]
    assert again.values["ego_stale"] == "7" and again.level == OK
