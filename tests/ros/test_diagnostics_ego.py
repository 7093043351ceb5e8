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


def test_the_samples_dropped_for_a_clock_jump_leave_out_the_re_anchored_ones() -> None:
    # Under live.time_base estimate a sample whose stamp jumped is re-anchored and used; it was shown as
    # one of the "samples the intake dropped" (samples_clock_jump) all the same.
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top"], RosConfig())
    intake = {"clock_jump": 2, "clock_jump_dropped": 0, "late": 1}
    budget = {s.name: s for s in diag.statuses({"frames": 12, "intake": intake})}["perception_fusion: frame budget"]
    assert budget.values["samples_clock_jump"] == "0" and budget.values["samples_late"] == "1", budget.values
    intake = {"clock_jump": 3, "clock_jump_dropped": 3}  # a fixed time base: each one dropped
    budget = {s.name: s for s in diag.statuses({"frames": 12, "intake": intake})}["perception_fusion: frame budget"]
    assert budget.values["samples_clock_jump"] == "3", budget.values


def test_the_recording_status_counts_the_segments_kept() -> None:
    # under --record-max-segments the recorder deletes the oldest: the status said every segment ever written
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top"], RosConfig())
    stats = {"frames": 500, "segments": 50, "segments_deleted": 47}
    assert diag.recording("run.mcap", stats, None).values["segments"] == "3"
