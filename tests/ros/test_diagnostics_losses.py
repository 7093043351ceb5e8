"""/diagnostics says what the live runtime counted and dropped after the node took a message: the samples its
intake refused (their sensor's input errors), what raised in it and the results not published; and the
recording's every gap."""

from __future__ import annotations

from perception.config import RosConfig
from perception.ros._diagnostics import ERROR, OK, WARN, DiagnosticsTracker

CAMERA = "perception_fusion: sensor cam_front"
_DROPS = ("late", "clock_jump", "out_of_order", "duplicate", "intake_overflow", "buffer_evicted")
BUDGET = "perception_fusion: frame budget"


def test_samples_the_live_intake_refuses_are_their_sensor_s_input_errors() -> None:
    # An image not of the rig's calibration size passes the node's check (it has no calibration) and is
    # refused by the live intake: counted in status()["intake"]["invalid_by_sensor"], /diagnostics said only
    # "missing" of the camera (input_errors 0, no reason).
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top", "cam_front"], RosConfig())
    reason = "image is 64x48, its camera's calibration 1600x900 (its boxes would be placed with ...)"
    intake = {"invalid": 5, "invalid_by_sensor": {"cam_front": 5}, "invalid_reasons": {"cam_front": reason}}
    statuses = {s.name: s for s in diag.statuses({"frames": 10, "intake": intake})}
    camera = statuses[CAMERA]
    assert camera.level == ERROR and reason in camera.message, camera
    assert camera.values["input_errors"] == "5" and camera.values["last_error"] == f"cam_front: {reason}"
    assert statuses["perception_fusion: sensor lidar_top"].values["input_errors"] == "0"
    # none refused since: the count stays, the error level goes; the node's own errors add to it
    diag.input_error("cam_front", "cam_front: empty image data", now_ns=0)
    camera = {s.name: s for s in diag.statuses({"frames": 12, "intake": intake})}[CAMERA]
    assert camera.level == ERROR and camera.values["input_errors"] == "6", camera
    camera = {s.name: s for s in diag.statuses({"frames": 14, "intake": intake})}[CAMERA]
    assert camera.level == OK and camera.values["input_errors"] == "6", camera
    # the node activated again: a new live runtime counts from 0, its refusals are new ones
    renewed = {**intake, "invalid_by_sensor": {"cam_front": 2}}
    camera = {s.name: s for s in diag.statuses({"frames": 2, "intake": renewed})}[CAMERA]
    assert camera.level == ERROR and camera.values["input_errors"] == "8", camera


def test_the_frame_budget_says_what_failed_and_the_results_not_published() -> None:
    # status()'s failed (items that raised in assembly or processing: dropped) and callbacks_dropped (results
    # the callback queue dropped: never published) reached no /diagnostics value.
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top"], RosConfig())
    budget = {s.name: s for s in diag.statuses({"frames": 3, "intake": {}})}[BUDGET]
    assert budget.values["failed"] == "0" and budget.values["results_unpublished"] == "0", budget.values
    status = {"frames": 9, "intake": {}, "failed": {"lidar_top": 2, "assembly": 1}, "callbacks_dropped": 4}
    budget = {s.name: s for s in diag.statuses({**status, "callbacks_failed": 1})}[BUDGET]
    assert budget.values["failed"] == "assembly 1, lidar_top 2", budget.values
    assert budget.values["results_unpublished"] == "5", budget.values


def test_the_recording_status_counts_every_gap_the_end_of_run_line_does() -> None:
    # The status summed dropped_* only: a sample the drive format refused or a frame whose recording raised
    # left it "recording" (OK, dropped 0), where `perception ros node --record`'s end-of-run line said GAPS.
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top"], RosConfig())
    stats = {"frames": 10, "segments": 1, "refused": 2, "failed": 1}
    status = diag.recording("run.mcap", stats, None)
    assert status.level == WARN and status.values["dropped"] == "3", status
    assert "3 item(s) not recorded" in status.message, status
    status = diag.recording("run.mcap", {**stats, "dropped_sample": 4}, None)
    assert status.level == WARN and status.values["dropped"] == "7" and "4 item(s)" in status.message, status
    assert diag.recording("run.mcap", {**stats, "dropped_sample": 4}, None).level == OK


def test_what_a_closed_live_runtime_refused_since_the_last_status_is_counted() -> None:
    # A live runtime closed (the node deactivated, or reopened as the ROS clock went back): the next one counts
    # from 0, so what the closed one refused after the last /diagnostics was said by no status.
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top", "cam_front"], RosConfig())
    reason = "image is 64x48, its camera's calibration 1600x900"
    intake = {"invalid_by_sensor": {"cam_front": 2}, "invalid_reasons": {"cam_front": reason}}
    camera = {s.name: s for s in diag.statuses({"frames": 10, "intake": intake})}[CAMERA]
    assert camera.values["input_errors"] == "2", camera
    last = {"invalid_by_sensor": {"cam_front": 5}, "invalid_reasons": {"cam_front": reason}}
    diag.live_closed({"frames": 12, "intake": last})  # 3 more since that status
    camera = {s.name: s for s in diag.statuses({"frames": 0, "intake": {}})}[CAMERA]
    assert camera.level == ERROR and reason in camera.message, camera
    assert camera.values["input_errors"] == "5", camera.values
    camera = {s.name: s for s in diag.statuses({"frames": 1, "intake": {}})}[CAMERA]
    assert camera.level == OK and camera.values["input_errors"] == "5", camera


def test_the_frame_budget_says_the_slots_skipped_and_the_records_consumer_behind() -> None:
    # The live assembly's slots_skipped (a stall: trigger slots past its catch-up limit, no frame opened) and
    # the runtime's stream's intake_held and undelivered were in status() and reached no /diagnostics value.
    import numpy as np

    from perception.config import LiveConfig, SensorConfig, TriggerConfig
    from perception.live._assembler import LiveAssembler
    from perception.types import PointCloudSample

    ms = 1_000_000
    asm: LiveAssembler[None] = LiveAssembler(
        [SensorConfig("lidar_top", "lidar", "m")],
        TriggerConfig(sensor="lidar_top"),
        LiveConfig(),
        rates={"lidar_top": 10.0},
    )
    sweep = PointCloudSample("lidar_top", 1000 * ms, "lidar_top", np.zeros((1, 4), np.float32), ("x", "y", "z", "i"))
    asm.add(sweep, 1001 * ms)
    assert len(asm.due(1100 * ms)) == 1
    asm.due(1000 * ms + 3_600_000 * ms)  # the node's loop stalled for an hour: its timer's slots past the limit
    assert asm.stats.slots_skipped > 0
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top"], RosConfig())
    budget = {s.name: s for s in diag.statuses({"frames": 1, "intake": {}})}[BUDGET]
    assert (budget.values["slots_skipped"], budget.values["intake_held"], budget.values["undelivered"]) == (
        "0",
        "0",
        "0",
    ), budget.values
    status = {"frames": 1, "intake": vars(asm.stats), "intake_held": 1, "undelivered": 3}
    budget = {s.name: s for s in diag.statuses(status)}[BUDGET]
    assert budget.values["slots_skipped"] == str(asm.stats.slots_skipped), budget.values
    assert (budget.values["intake_held"], budget.values["undelivered"]) == ("1", "3"), budget.values


def test_messages_a_reopen_could_not_take_are_their_sensor_s_and_the_odometry_s() -> None:
    # The live runtime reopening as the ROS clock went back: what came meanwhile past the node's hold was
    # dropped by the subscriptions' queues, counted nowhere. Now counted per sensor (the odometry too), a WARN
    # in the status after it, not an ERROR (the input is not at fault).
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top", "cam_front"], RosConfig())
    for sensor in ("cam_front", "cam_front", None):
        diag.dropped_reopening(sensor)
    statuses = {s.name: s for s in diag.statuses({"frames": 0, "intake": {}})}
    camera, odometry = statuses[CAMERA], statuses["perception_fusion: odometry"]
    assert camera.level == WARN and camera.message.startswith("2 message(s) not taken while the live runtime reopened")
    assert camera.values["dropped_reopening"] == "2" and camera.values["input_errors"] == "0"
    assert odometry.level == WARN and odometry.values["dropped_reopening"] == "1", odometry
    assert statuses["perception_fusion: sensor lidar_top"].level == OK
    # said once: the count stays, the level goes
    statuses = {s.name: s for s in diag.statuses({"frames": 0, "intake": {}})}
    assert statuses[CAMERA].level == OK and statuses[CAMERA].values["dropped_reopening"] == "2"


def test_every_count_the_frame_budget_and_the_odometry_say_is_over_the_node_s_live_runtimes() -> None:
    # Each live runtime's status() counts from 0: after a deactivate and activate (or a reopen as the ROS clock
    # went back) the budget's counts said the new runtime's only, the closed one's gone from /diagnostics.
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top"], RosConfig())
    drops = ("late", "clock_jump_dropped", "out_of_order", "duplicate", "intake_overflow", "buffer_evicted")

    def status(n: int) -> dict[str, object]:
        """A runtime's status with every count /diagnostics says at ``n`` (a latency of ``n`` ms)."""
        intake = {**dict.fromkeys(drops, n), "clock_jump": 2 * n, "slots_skipped": n, "ego_stale": n}
        counts = ("frames", "deadline_misses", "dropped", "shed", "callbacks_dropped", "callbacks_failed")
        return {
            **dict.fromkeys((*counts, "intake_held", "undelivered"), n),
            "latency_ms": {"p50": float(n), "p99": float(n)},
            "failed": {"lidar_top": n},
            "intake": intake,
        }

    def said(n: int) -> tuple[dict[str, str], dict[str, str]]:
        statuses = {s.name: s.values for s in diag.statuses(status(n))}
        return statuses[BUDGET], statuses["perception_fusion: odometry"]

    budget, odometry = said(3)
    assert budget["samples_late"] == "3" and odometry["ego_stale"] == "3", (budget, odometry)
    diag.live_closed(status(5))  # its last status: 2 more of each since
    budget, odometry = said(0)  # the next runtime, as it opens
    counts = ("frames", "deadline_misses", "dropped", "shed_overload", "slots_skipped", "intake_held", "undelivered")
    expected = {**dict.fromkeys(counts, "5"), **{f"samples_{k}": "5" for k in _DROPS}, "results_unpublished": "10"}
    assert {k: budget[k] for k in expected} == expected, budget
    assert budget["failed"] == "lidar_top 5" and odometry["ego_stale"] == "5", (budget, odometry)
    budget, odometry = said(4)  # the closed one's and the current one's
    expected = {**dict.fromkeys(counts, "9"), **{f"samples_{k}": "9" for k in _DROPS}, "results_unpublished": "18"}
    assert {k: budget[k] for k in expected} == expected, budget
    assert budget["failed"] == "lidar_top 9" and odometry["ego_stale"] == "9", (budget, odometry)
    assert budget["latency_p50_ms"] == "4.0"  # a distribution: the current runtime's
    diag.live_closed(status(6))
    assert said(1)[0]["samples_late"] == "12"  # each closed one's kept


def test_a_status_while_no_live_runtime_is_open_counts_no_refusal_twice() -> None:
    # While a reopen closed the old runtime (its status not yet kept: live_closed), /diagnostics -- now made
    # with no runtime open -- took the closed runtimes' refusals (none) for a new runtime's, and live_closed then
    # counted the old one's 5 a second time: 10 input errors for 5 refused samples, the camera an ERROR.
    diag = DiagnosticsTracker("perception_fusion", ["lidar_top", "cam_front"], RosConfig())
    status = {"frames": 3, "intake": {"invalid_by_sensor": {"cam_front": 5}, "invalid_reasons": {}}}
    camera = {s.name: s for s in diag.statuses(status)}[CAMERA]
    assert camera.values["input_errors"] == "5", camera.values
    camera = {s.name: s for s in diag.statuses(None)}[CAMERA]  # reopening: none open
    assert camera.values["input_errors"] == "5", camera.values
    diag.live_closed(status)  # the old runtime's last status, kept
    camera = {s.name: s for s in diag.statuses(None)}[CAMERA]
    assert camera.values["input_errors"] == "5", camera.values
