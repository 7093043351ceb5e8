"""``perception live``: a publisher process, the live API only, a report; faults as options."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from profile_helpers import sleepy_profile
from recording_helpers import as_recorded, earlier_recording

from perception.cli import main
from perception.server import EmbeddedTriton

ROOT = Path(__file__).resolve().parents[2]
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"


def test_live_cli_with_a_silent_lidar_and_a_clock_jump(
    triton: EmbeddedTriton, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # The latency-bound test models (they wait instead of computing): this tests the live path, not the
    # reference models' speed on a shared host. Margins a loaded host cannot break: samples may be 2 s in
    # transit, the lidar is taken for silent 1 s after a sweep is due (the 2 s silence still is), and a
    # frame's budget is seconds (exact slots and timers: tests/live/test_assembler.py, on its own clock).
    profile = sleepy_profile(tmp_path)
    argv = ["live", str(DRIVE), "--config", str(profile), "--url", triton.grpc_url, "--out", str(tmp_path / "out")]
    argv += ["--silence", "lidar_top:2:4", "--clock-jump", "radar_rear:6:3", "--jitter-ms", "2"]
    argv += ["--trace-out", str(tmp_path / "out" / "trace.json")]
    assert main(argv) == 0
    out, err = capfd.readouterr()  # by file descriptor: the publisher process's stderr too
    assert "Traceback" not in err
    assert "RuntimeWarning" not in err  # runpy's, when the publisher ran as a module its package had imported
    summary = json.loads((tmp_path / "out" / "live.json").read_text())
    assert summary["publisher_exit_code"] == 0
    assert summary["push_cpu_us_per_frame"] > 0  # the host thread's CPU, receiving and pushing
    assert summary["time_base"] == "estimate"  # chosen because a clock jump is injected
    assert summary["expected_frames"] == 100
    # 2 s of silence at 10 Hz: the timer covers the ~20 missed sweeps, so frames stay ~ expected.
    assert 95 <= summary["frames"] <= 106, summary
    assert summary["intake"]["frames_by_timer"] >= 17
    assert summary["intake"]["clock_jump"] == 1
    assert summary["dropped"] == 0
    frames = [json.loads(line) for line in (tmp_path / "out" / "frames.jsonl").read_text().splitlines()]
    assert len(frames) == summary["frames"]
    assert "latency trigger arrival -> result: p50" in out
    assert f"frames {summary['frames']} produced, 100 expected" in out
    # --trace-out: every processed frame on the timeline, its sensors' requests on their own tracks
    events = json.loads((tmp_path / "out" / "trace.json").read_text())
    timed = [e for e in events if e["ph"] == "X" and e["cat"].startswith("frame")]
    assert len(timed) == summary["frames"] - summary["dropped"]
    tracks = {e["args"]["name"].split(" #")[0] for e in events if e["name"] == "thread_name"}
    assert {"frame", "lidar_top", "cam_front"} <= tracks


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--silence", "lidar_top:2", "--silence: expected SENSOR:A:B with numbers A and B, got 'lidar_top:2'"),
        ("--clock-jump", "sonar:1:2", "no such sensor in drive"),
        ("--jitter-ms", "-1", "--jitter-ms: must be >= 0, got -1.0"),
        # NaN and infinity passed the checks, then crashed the publisher's threads (a traceback per sensor,
        # nothing sent, exit 0); an empty span silently injected nothing
        ("--jitter-ms", "nan", "--jitter-ms: must be a finite number, got nan"),
        ("--clock-jump", "radar_rear:1:inf", "--clock-jump: expected SENSOR:A:B with numbers A and B"),
        ("--silence", "lidar_top:nan:2", "--silence: expected SENSOR:A:B with numbers A and B"),
        ("--silence", "lidar_top:4:2", "--silence: FROM must be before TO, got 'lidar_top:4:2'"),
        ("--burst", "lidar_top:3:3", "--burst: FROM must be before TO, got 'lidar_top:3:3'"),
        # a clock jump too large for a 64-bit stamp crashed lidar_top's publisher (OverflowError, exit 1)
        ("--clock-jump", "lidar_top:1:1e300", "--clock-jump: OFFSET_S out of range (a stamp is 64-bit nanoseconds)"),
        # a time before the play's start was taken as its start (a silence from -1 s silenced from 0)
        ("--silence", "lidar_top:-1:2", "--silence: FROM must be >= 0 (seconds into the play), got 'lidar_top:-1:2'"),
        ("--burst", "lidar_top:-3:2", "--burst: FROM must be >= 0 (seconds into the play)"),
        ("--clock-jump", "lidar_top:-1:0.5", "--clock-jump: AT must be >= 0 (seconds into the play)"),
        # after the end of the (10 s) play: the run went ahead, the fault did nothing, exit 0
        ("--silence", "lidar_top:20:30", "--silence: lidar_top: starts at 20 s, after the end of the play of"),
        ("--burst", "cam_front:12:14", "--burst: cam_front: starts at 12 s, after the end of the play of"),
        ("--clock-jump", "radar_rear:11:3", "--clock-jump: radar_rear: starts at 11 s, after the end of the play"),
    ],
)
def test_bad_fault_options_are_one_line_errors(
    option: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["live", str(DRIVE), "--url", "127.0.0.1:1", option, value]) == 2
    _, err = capsys.readouterr()
    assert message in err and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize("option", ["--silence", "--burst", "--clock-jump"])
def test_a_fault_on_a_sensor_not_enabled_is_a_usage_error(option: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: the run went ahead, the fault did nothing, and showed only in the summary's count of samples
    # "not used" (unknown_sensor). Now refused before anything runs, naming the option and the sensor.
    argv = ["live", str(DRIVE), "--url", "127.0.0.1:1", "--sensors", "lidar_top,cam_front", option, "radar_rear:2:4"]
    assert main(argv) == 2
    _, err = capsys.readouterr()
    message = f"perception live: error: {option}: radar_rear is not enabled (enabled: lidar_top, cam_front)"
    assert err.startswith(message) and "Traceback" not in err and err.count("\n") == 1, err


def test_sensors_leaving_out_the_trigger_is_a_usage_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said "trigger.sensor: trigger sensor 'lidar_top' is not configured", of a sensor the drive and the
    # profile have: --sensors had left it out, which the message named neither, nor what to do. (A trigger
    # the profile names: one it leaves to the drive is chosen from the sensors enabled, the next test.)
    profile = tmp_path / "p.yaml"
    profile.write_text("trigger: {sensor: lidar_top}\n")
    argv = ["live", str(DRIVE), "--config", str(profile), "--url", "127.0.0.1:1", "--sensors", "radar_rear,cam_front"]
    assert main(argv) == 2
    _, err = capsys.readouterr()
    assert err.startswith(
        "perception live: error: trigger.sensor: trigger sensor 'lidar_top' is not enabled "
        "(enabled: cam_front, radar_rear): enable it (--sensors), or trigger by another sensor"
    ), err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("command", ["live", "replay"])
def test_a_trigger_left_to_the_drive_is_chosen_from_the_sensors_enabled(command: str) -> None:
    # The profile's trigger left to the drive was resolved before --sensors applied: the lidar, which
    # `perception live --sensors radar_rear,cam_front` then refused as "trigger sensor 'lidar_top' is not
    # enabled ... enable it", of a trigger the user never chose (replay let the lidar it does not run clock
    # the frames). Now both commands trigger on the first camera of the sensors run, as a drive without a
    # lidar does, by one rule (perception.config.auto_trigger).
    import argparse

    from perception.cli._common import open_session
    from perception.live import check_trigger

    args = argparse.Namespace(command=command, config=None, drive=str(DRIVE), url=None)
    for sensors, trigger in (("radar_rear,cam_front", "cam_front"), ("radar_rear,radar_front", "radar_front")):
        with open_session(argparse.Namespace(**vars(args), sensors=sensors)) as (_, session):
            assert session.config.trigger.sensor == trigger, sensors
            check_trigger([s.name for s in session.config.active_sensors], session.config.trigger)
    with open_session(argparse.Namespace(**vars(args), sensors=None)) as (_, session):
        assert session.config.trigger.sensor == "lidar_top"


def test_a_truncated_drive_is_refused_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The publisher met the truncation, died before connecting, and this side waited 60 s for it, then
    # said "the publisher did not connect" (exit 1). Now: the damage, named, before anything runs.
    drive = tmp_path / "cut.mcap"
    drive.write_bytes(DRIVE.read_bytes()[:5_000_000])
    assert main(["live", str(drive), "--url", "127.0.0.1:1"]) == 3
    _, err = capsys.readouterr()
    assert f"{drive}: drive damaged" in err and "Traceback" not in err and err.count("\n") == 1, err


def test_help_does_not_promise_a_server_split_in_the_trace(capsys: pytest.CaptureFixture[str]) -> None:
    # The live runtime does not read Triton's trace: its --trace-out has each request as the client saw it,
    # and its help said "with Triton's queue and compute nested" (replay's).
    with pytest.raises(SystemExit) as exit_:
        main(["live", "--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Triton's queue and compute nested" not in out
    assert "as the client saw it: no split of Triton's queue and compute" in out


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--out", "a_file", "argument --out: {tmp}/a_file exists and is not a directory"),
        ("--trace-out", "a_file/trace.json", "argument --trace-out: {tmp}/a_file/trace.json: {tmp}/a_file is not a"),
        ("--trace-out", ".", "argument --trace-out: {tmp}/. is a directory"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_the_run(
    option: str, value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # They were written after the run: --out naming a file was a FileExistsError traceback then (exit 1),
    # the run's results lost.
    (tmp_path / "a_file").write_text("not a folder\n")
    with pytest.raises(SystemExit) as exit_:  # refused while parsing (perception/cli/_args.py)
        main(["live", str(DRIVE), "--url", "127.0.0.1:1", option, f"{tmp_path}/{value}"])
    _, err = capsys.readouterr()
    assert exit_.value.code == 2 and message.format(tmp=tmp_path) in err and "Traceback" not in err, err


def test_a_drive_the_publisher_cannot_play_fails_at_once_naming_why(
    triton: EmbeddedTriton, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # A drive with its rig but no sample: the publisher died at once with a DriveError traceback, and this
    # side waited a minute for its connection, then said "the publisher did not connect within 60 s".
    from perception.drives import DriveReader, DriveWriter

    with DriveReader(DRIVE) as reader:
        rig = list(reader.rig.values())
    drive = tmp_path / "no_samples.mcap"
    with DriveWriter(drive, rig):
        pass
    assert main(["live", str(drive), "--url", triton.grpc_url]) == 1
    _, err = capfd.readouterr()  # by file descriptor: the publisher process's stderr too
    assert f"perception live publisher: error: {drive}: drive has no samples" in err, err
    assert "perception live: error: the publisher exited with code 1 before it connected" in err, err
    assert "Traceback" not in err and "did not connect" not in err, err


def test_a_bad_fault_option_leaves_an_earlier_recording_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The unknown sensor was found once the recorder had replaced the earlier recording (deleted it).
    earlier = tmp_path / "run.mcap"
    before = earlier_recording(earlier)
    argv = ["live", str(DRIVE), "--url", "127.0.0.1:1", "--silence", "sonar:1:2", "--record", str(earlier)]
    assert main(argv) == 2
    _, err = capsys.readouterr()
    assert "no such sensor in drive" in err and "Traceback" not in err and err.count("\n") == 1, err
    assert earlier.read_bytes() == before


def test_a_file_the_recording_would_replace_that_is_not_one_is_refused_before_out_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --out (and --trace-out's folder) was made before --record was checked: the refused run left them behind,
    # empty (replay checks --record first since f54124c)
    other = tmp_path / "run.mcap"
    other.write_text("notes\n")
    out, traces = tmp_path / "out", tmp_path / "traces"
    argv = ["live", str(DRIVE), "--url", "127.0.0.1:1", "--record", str(other), "--out", str(out)]
    assert main([*argv, "--trace-out", str(traces / "trace.json")]) == 2
    _, err = capsys.readouterr()
    assert f"{other}: --record: exists and is not a segment of a recording: move it" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists() and not traces.exists()
    assert other.read_text() == "notes\n"


def test_a_recording_that_cannot_be_created_is_refused_before_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    # The recorder creates its file once the run begins (a ROS node's: once activated): one that could not be
    # created was logged and the run went on unrecorded to its end (a node's: for hours), then exit 1.
    assert main(["live", str(DRIVE), "--url", "127.0.0.1:1", "--record", "/proc/run.mcap"]) == 2
    _, err = capsys.readouterr()
    assert err.startswith("perception live: error: --record: cannot create a file in /proc: "), err
    assert err.count("\n") == 1, err


def _stopped_while_playing(cmd: list[str], tmp_path: Path, sig: int, after_s: float) -> tuple[int, str, str]:
    """``perception live`` (``cmd``, its temporary folder in ``tmp_path``) sent ``sig`` ``after_s`` after its socket's
    folder appeared (the publisher most likely playing: any moment must end the same way): its exit code, stdout,
    stderr."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    host = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120  # safety net
        while not list(tmp_path.glob("perception-live-*")) and host.poll() is None:
            assert time.monotonic() < deadline, "perception live did not start"
            time.sleep(0.05)
        time.sleep(after_s)
        host.send_signal(sig)
        out, err = host.communicate(timeout=120)
    finally:
        host.kill()
        host.wait()
    return host.returncode, out, err


def test_sigterm_stops_the_command_as_ctrl_c_does(triton: EmbeddedTriton, tmp_path: Path) -> None:
    # SIGTERM (a service manager's stop) killed the process where it stood: its socket's temporary folder
    # was left behind and the publisher wrote on into the closed socket, a traceback per sensor.
    cmd = [sys.executable, "-m", "perception", "live", str(DRIVE), "--url", triton.grpc_url]
    code, _, err = _stopped_while_playing(cmd, tmp_path, signal.SIGTERM, after_s=2)
    assert code == 130, err
    assert "perception live: interrupted" in err and "Traceback" not in err, err
    assert not list(tmp_path.glob("perception-live-*"))


def test_ctrl_c_mid_recording_says_what_the_recording_holds_and_it_replays_as_recorded(
    triton: EmbeddedTriton, tmp_path: Path
) -> None:
    # Ctrl-C (or SIGTERM) of `perception live --record`: the recording was finished, but the command said only
    # 'interrupted', nothing of it: whether it was written, what it holds, that it was cut.

    from perception.config import load_config

    profile = tmp_path / "live.yaml"
    profile.write_text(
        "sensor_defaults:\n"
        "  lidar: {model: lidar_detector, sync_window_ms: 60, max_staleness_ms: 150}\n"
        "  camera: {model: sleepy_camera, sync_window_ms: 50, max_staleness_ms: 150}\n"
        "  radar: {model: radar_detector, transport: grpc, sync_window_ms: 50, max_staleness_ms: 150}\n"
        "live: {transit_ms: 2000, trigger_tolerance_ms: 1000}\n"
        "budget: {total_ms: 3000}\n"
    )
    run = tmp_path / "runs" / "run.mcap"
    cmd = [sys.executable, "-m", "perception", "live", str(DRIVE), "--url", triton.grpc_url, "--config", str(profile)]
    cmd += ["--record", str(run), "--silence", "lidar_top:1:2", "--jitter-ms", "20"]
    code, out, err = _stopped_while_playing(cmd, tmp_path, signal.SIGINT, after_s=3)
    assert code == 130, err
    assert "perception live: interrupted" in err and "Traceback" not in err, err
    line = next((x for x in out.splitlines() if x.startswith(f"recorded {run}: ")), None)
    assert line is not None and "INTERRUPTED: the recording holds the run up to the stop" in line, out
    fused = int(line.split(": ")[1].split(" frames fused")[0])
    outcome = as_recorded(run, load_config(profile))
    # every frame fused and every shed frame's prediction (a slow start of the host sheds some), equal
    report = outcome.report()
    assert outcome.first is None and outcome.drive_error is None, report
    assert outcome.compared == outcome.equal == fused + report["shed"], report


def test_the_report_counts_every_sample_not_used() -> None:
    # Samples of sensors not enabled (--sensors) and invalid ones were counted in the summary but left out
    # of the printed line: "samples 100 used; not used: none" for a drive of 630 played with one sensor.
    from perception.cli._live import _render

    intake = {"samples": 100, "frames_by_trigger": 100, "frames_by_timer": 0, "trigger_silences": 0}
    intake |= {"frames_by_rate": 0, "late": 0, "out_of_order": 0, "duplicate": 0, "clock_jump": 0}
    intake |= {"intake_overflow": 0, "unknown_sensor": 530, "invalid": 2}
    summary = {"frames": 100, "expected_frames": 100, "ok": 100, "degraded": 0, "dropped": 0, "drop_reasons": {}}
    summary |= {"intake": intake, "latency_ms": {"p50": 1.0, "p99": 2.0}, "deadline_misses": 0}
    summary |= {"time_base": "monotonic", "offsets_ms": {}}
    assert "samples 100 used; not used: {'unknown_sensor': 530, 'invalid': 2}" in _render(summary)


def test_the_report_counts_the_samples_a_full_buffer_evicted_as_not_used() -> None:
    # A sensor flooding past its buffer cap: the evicted samples were in `samples` and in no 'not used'
    # reason, so the line said "samples 300 used; not used: none" of 300 samples, 44 of them dropped.
    import numpy as np

    from perception.cli._live import _render
    from perception.config import LiveConfig, SensorConfig, TriggerConfig
    from perception.live._assembler import MAX_BUFFERED, LiveAssembler
    from perception.types import PointCloudSample

    sensors = [SensorConfig("lidar", "lidar", "m"), SensorConfig("radar", "radar", "m")]
    asm: LiveAssembler[None] = LiveAssembler(sensors, TriggerConfig(sensor="lidar"), LiveConfig())
    fields = ("x", "y", "z", "radial_velocity", "rcs")
    for k in range(MAX_BUFFERED + 44):
        t = 1_000_000_000 + k * 10_000
        assert asm.add(PointCloudSample("radar", t, "radar", np.zeros((1, 5), np.float32), fields), t + 1) is None
    assert (asm.stats.samples, asm.stats.buffer_evicted) == (MAX_BUFFERED + 44, 44)
    summary = {"frames": 0, "expected_frames": 0, "ok": 0, "degraded": 0, "dropped": 0, "drop_reasons": {}}
    summary |= {"intake": vars(asm.stats), "latency_ms": {"p50": 1.0, "p99": 2.0}, "deadline_misses": 0}
    summary |= {"time_base": "monotonic", "offsets_ms": {}}
    assert f"samples {MAX_BUFFERED} used; not used: {{'buffer_evicted': 44}}" in _render(summary), _render(summary)


def test_the_report_says_what_failed_and_the_results_not_recorded() -> None:
    # status()'s failed (items that raised in assembly or processing: dropped) and callbacks_dropped (results
    # the callback queue dropped: not in frames.jsonl) were in --json/live.json only, never in the printed lines.
    from perception.cli._live import _render

    intake = {"samples": 10, "frames_by_trigger": 10, "frames_by_timer": 0, "trigger_silences": 0}
    intake |= {"frames_by_rate": 0, "late": 0, "out_of_order": 0, "duplicate": 0, "clock_jump": 0}
    intake |= {"intake_overflow": 0, "unknown_sensor": 0, "invalid": 0}
    summary = {"frames": 10, "expected_frames": 10, "ok": 10, "degraded": 0, "dropped": 0, "drop_reasons": {}}
    summary |= {"intake": intake, "latency_ms": {"p50": 1.0, "p99": 2.0}, "deadline_misses": 0}
    summary |= {"time_base": "monotonic", "offsets_ms": {}, "results_overflow": 10, "callbacks_failed": 0}
    assert "failed" not in _render({**summary, "failed": {}, "callbacks_dropped": 0})
    text = _render({**summary, "failed": {"lidar_top": 2}, "callbacks_dropped": 3})
    assert "failed: {'lidar_top': 2}; results not recorded: {'callbacks_dropped': 3}" in text, text


def test_the_report_says_the_trigger_slots_skipped_past_the_catch_up_limit() -> None:
    # LiveStats.slots_skipped (a stall: slots beyond MAX_CATCH_UP in one call, no frame opened for them) was in
    # --json/live.json only: the printed lines said frames by trigger, timer and rate, and nothing of them.
    import numpy as np

    from perception.cli._live import _render
    from perception.config import LiveConfig, SensorConfig, TriggerConfig
    from perception.live._assembler import LiveAssembler
    from perception.types import PointCloudSample

    ms = 1_000_000
    sensors = [SensorConfig("lidar", "lidar", "m")]
    asm: LiveAssembler[None] = LiveAssembler(
        sensors, TriggerConfig(sensor="lidar"), LiveConfig(), rates={"lidar": 10.0}
    )
    sweep = PointCloudSample("lidar", 1000 * ms, "lidar", np.zeros((1, 4), np.float32), ("x", "y", "z", "intensity"))
    asm.add(sweep, 1001 * ms)
    assert len(asm.due(1100 * ms)) == 1
    asm.due(1000 * ms + 3_600_000 * ms)  # the host did not tick for an hour: its timer's slots past the limit
    skipped = asm.stats.slots_skipped
    assert skipped > 0
    summary = {"frames": 1, "expected_frames": 1, "ok": 1, "degraded": 0, "dropped": 0, "drop_reasons": {}}
    summary |= {"intake": vars(asm.stats), "latency_ms": {"p50": 1.0, "p99": 2.0}, "deadline_misses": 0}
    summary |= {"time_base": "monotonic", "offsets_ms": {}}
    text = _render(summary)
    assert f"; trigger slots skipped (no frame opened): {skipped}\n" in text, text
    assert "slots skipped" not in _render({**summary, "intake": {**vars(asm.stats), "slots_skipped": 0}})


def test_the_report_says_the_records_consumer_fell_behind() -> None:
    # status()'s intake_held and undelivered (the runtime's stream: the intake waited for the results' consumer,
    # records it did not take) are said when not 0, as what failed is.
    from perception.cli._live import _render

    intake = {"samples": 10, "frames_by_trigger": 10, "frames_by_timer": 0, "trigger_silences": 0}
    intake |= {"frames_by_rate": 0, "late": 0, "out_of_order": 0, "duplicate": 0, "clock_jump": 0}
    intake |= {"intake_overflow": 0, "unknown_sensor": 0, "invalid": 0}
    summary = {"frames": 10, "expected_frames": 10, "ok": 10, "degraded": 0, "dropped": 0, "drop_reasons": {}}
    summary |= {"intake": intake, "latency_ms": {"p50": 1.0, "p99": 2.0}, "deadline_misses": 0}
    summary |= {"time_base": "monotonic", "offsets_ms": {}, "intake_held": 0, "undelivered": 0}
    assert "behind" not in _render(summary)
    text = _render({**summary, "intake_held": 1, "undelivered": 3})
    assert "results' consumer behind: {'intake_held': 1, 'undelivered': 3}" in text, text


def test_a_shed_frame_s_line_in_frames_jsonl_says_why_and_that_it_is_predicted() -> None:
    # DIR/frames.jsonl said only "dropped" of a frame shed under overload: not why (replay's records and
    # live.json's drop_reasons say "overload (...)"), nor that its detections were the tracker's prediction.
    from perception.cli._live import frame_line
    from perception.types import FrameResult, FrameStatus

    reason = "overload (superseded: the 1 fresher frame(s) waiting could not all finish within their budgets after it)"
    shed = FrameResult(7, 700, FrameStatus.DROPPED, {}, reason=reason, predicted=True)
    line = frame_line(shed)
    assert line["status"] == "dropped" and line["reason"] == reason and line["predicted"] is True, line
    assert json.loads(json.dumps(line)) == line
    processed = frame_line(FrameResult(8, 800, FrameStatus.OK, {}, deadline_missed=True))
    assert "reason" not in processed and "predicted" not in processed and processed["deadline_missed"] is True


def test_a_run_that_gave_no_usable_frame_is_a_failure() -> None:
    # 'perception live DRIVE --silence lidar_top:0:11': the trigger silent from the start, no frame opened
    # ("frames 0 produced, 100 expected"), exit 0; a replay of nothing usable exits 1 (no usable frame).
    from perception.cli._live import no_usable_frame
    from perception.types import FrameResult, FrameStatus, SensorResult, SensorStatus

    summary = {"expected_frames": 100, "intake": {"frames_by_trigger": 0}}
    assert no_usable_frame([], summary, "lidar_top") == (
        "no usable frame: no frame produced of 100 expected: the trigger lidar_top sent no sample"
    )
    late = SensorResult("lidar_top", SensorStatus.LATE)
    failed = [FrameResult(k, k, FrameStatus.DEGRADED, {"lidar_top": late}) for k in range(3)]
    assert (
        no_usable_frame(failed, summary, "lidar_top") == "no usable frame: no sensor answered ok in any of the 3 frames"
    )
    ok = FrameResult(
        3, 3, FrameStatus.DEGRADED, {"lidar_top": late, "cam_front": SensorResult("cam_front", SensorStatus.OK)}
    )
    assert no_usable_frame([*failed, ok], summary, "lidar_top") is None


#: Run by the publisher process at start-up (sitecustomize): its radar_rear thread raises on its 21st sample.
_DYING_RADAR = """
import perception.live._publisher as publisher

_encode, _sent = publisher._encode, []


def _dying(sample, kind):
    if getattr(sample, "sensor", None) == "radar_rear":
        _sent.append(1)
        if len(_sent) > 20:
            raise ValueError("the radar driver's buffer is corrupt")
    return _encode(sample, kind)


publisher._encode = _dying
"""


def test_a_sensor_publisher_dying_mid_run_is_named_by_the_host(
    triton: EmbeddedTriton, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # Before: the publisher's radar_rear thread died with a thread traceback on its stderr, the other sensors
    # played on, and the host printed its summary with nothing saying a sensor's publisher had died (exit 0
    # or 1 without a line of its own). Now the publisher tells the host at once (an error message on the
    # socket), the host names the sensor and why after its summary, the summary counts it, exit 1.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_DYING_RADAR)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    argv = ["live", str(DRIVE), "--config", str(sleepy_profile(tmp_path)), "--url", triton.grpc_url]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 1
    out, err = capfd.readouterr()  # by file descriptor: the publisher process's stderr too
    why = "ValueError: the radar driver's buffer is corrupt"
    assert f"perception live: error: the publisher of radar_rear died mid-run: {why}" in err, err
    assert f"perception live publisher: error: the publisher of radar_rear died: {why}" in err, err
    assert "Traceback" not in err, err
    assert "publisher died mid-run for 1 sensor(s): radar_rear" in out, out
    summary = json.loads((tmp_path / "out" / "live.json").read_text())
    assert summary["publisher_died"] == {"radar_rear": why}
    assert summary["publisher_exit_code"] == 1
    assert 90 <= summary["frames"] <= 106, summary  # the other sensors played on


def test_a_publisher_killed_mid_run_is_named_by_the_host(capsys: pytest.CaptureFixture[str]) -> None:
    from perception.cli._live import _publisher_verdict

    assert _publisher_verdict({"publisher_exit_code": 0, "publisher_died": {}}) == 0
    assert _publisher_verdict({"publisher_exit_code": -signal.SIGKILL, "publisher_died": {}}) == 1
    _, err = capsys.readouterr()
    assert err == "perception live: error: the publisher was killed by SIGKILL; the summary covers what it sent\n"


def test_a_stopped_session_terminates_its_publisher_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The host terminated the publisher twice on a stop (once before its socket closed, once on the way out):
    # a second signal landing while the publisher handled the first hung it (its handler was not re-entrant,
    # tests/live/test_publisher_main.py), and this side waited 30 s for it before killing it.
    import socket
    from types import TracebackType

    import perception.live._session as session
    from perception.config import load_config

    class Publisher:
        def __init__(self) -> None:
            self.terminated = 0
            self.waits: list[float | None] = []

        def terminate(self) -> None:
            self.terminated += 1

        def wait(self, timeout: float | None = None) -> int:
            self.waits.append(timeout)
            return -signal.SIGTERM

    class Live:
        def __init__(self, *args: object, **kwargs: object) -> None: ...

        def __enter__(self) -> Live:
            return self

        def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None: ...

        def cancel_open(self) -> None: ...

    def interrupted(conn: object, on_error: object) -> Any:
        raise KeyboardInterrupt  # Ctrl-C (SIGTERM: the CLI raises the same) while samples are received
        yield

    publisher = Publisher()
    ends = socket.socketpair()
    monkeypatch.setattr(session, "LiveRuntime", Live)
    monkeypatch.setattr(session.subprocess, "Popen", lambda *args, **kwargs: publisher)
    monkeypatch.setattr(session, "_accept", lambda server, publisher: ends[0])
    monkeypatch.setattr(session, "receive", interrupted)
    with pytest.raises(KeyboardInterrupt), ends[1]:
        session.live_session(DRIVE, load_config(ROOT / "launch" / "replay.yaml"))
    assert publisher.terminated == 1
    assert publisher.waits == [session._STOPPED_PUBLISHER_S]


def test_a_stop_landing_inside_the_runtimes_open_exits_as_interrupted(
    triton: EmbeddedTriton, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A signal raises KeyboardInterrupt wherever the main thread is. Raised by a trace hook at each line of
    # the start-up in turn: inside ThreadHost.open, just after the runtime's open was registered (pop_all),
    # it was thrown into the runtime's task group, and the command failed with an exception-group traceback
    # (exit 1); a line later the runtime was never released; inside anyio's portal start it hung for good;
    # inside the fusion's numba compile it was swallowed and the run went on (exit 0). Now held back while
    # the runtime is made and opened, and raised once the open is given up or done: exit 130.
    import contextlib

    pop_all = contextlib.ExitStack.pop_all
    raised: list[bool] = []

    def pop_all_after_a_signal(self: contextlib.ExitStack) -> contextlib.ExitStack:
        caller = sys._getframe(1).f_code
        if not raised and caller.co_name == "open" and caller.co_filename.endswith("_lifetime.py"):
            raised.append(True)
            signal.raise_signal(signal.SIGTERM)  # its handler runs here, on this (the main) thread
        return pop_all(self)

    monkeypatch.setattr(contextlib.ExitStack, "pop_all", pop_all_after_a_signal)
    before = {p for p in os.listdir("/dev/shm") if p.startswith(f"perception_{os.getpid()}_")}
    assert main(["live", str(DRIVE), "--url", triton.grpc_url, "--config", str(sleepy_profile(tmp_path))]) == 130
    _, err = capsys.readouterr()
    assert raised and "perception live: interrupted" in err and "Traceback" not in err, err
    assert {p for p in os.listdir("/dev/shm") if p.startswith(f"perception_{os.getpid()}_")} <= before
