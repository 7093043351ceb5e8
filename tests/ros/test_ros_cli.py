"""``perception ros``: mistakes are one line and a usage exit code, for both commands."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from recording_helpers import earlier_recording
from ros_helpers import DRIVE

from perception.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--silence", "lidar_top:2"], "--silence: expected SENSOR:A:B with numbers A and B, got 'lidar_top:2'"),
        (["--clock-jump", "sonar:1:2"], "no such sensor in drive"),
        # NaN passed the checks, then crashed the player: a traceback, or one per sensor thread and exit 0
        # (--rate's values: refused while parsing, tests/cli/test_args.py)
        (["--from", "nan"], "--from: must be a finite number, got nan"),
        (["--to", "nan"], "--to: must be a finite number, got nan"),
        (["--from", "-1"], "--from: must be >= 0, got -1.0"),
        (["--from", "5", "--to", "2"], "--to: must be after --from (5 s), got 2"),  # played nothing, exit 0
        (["--wait-subscribers", "-1"], "--wait-subscribers: must be >= 0, got -1.0"),  # silently no wait
        # faults count from the play's start: one after its end did nothing, exit 0
        (["--to", "3", "--silence", "lidar_top:4:5"], "--silence: lidar_top: starts at 4 s, after the end of the play"),
    ],
)
def test_bad_play_options_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ros", "play", str(DRIVE), *argv]) == 2
    _, err = capsys.readouterr()
    assert message in err and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize("bag", [False, True])
def test_a_played_drive_that_is_a_directory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bag: bool
) -> None:
    # It was "cannot open drive: Is a directory", exit 1, also of a ROS 2 bag's directory (which is to be imported
    # first): every other command that reads a drive says so, exit 2.
    d = tmp_path / "bag"
    d.mkdir()
    if bag:
        (d / "metadata.yaml").write_text("rosbag2_bagfile_information: {}\n")
    assert main(["ros", "play", str(d)]) == 2
    _, err = capsys.readouterr()
    said = "is a ROS 2 bag (rosbag2 directory), not a drive: import it first" if bag else "is a directory, expected"
    assert err.startswith(f"perception ros: error: {d}: {said}") and err.count("\n") == 1, err


def test_a_node_that_cannot_configure_says_why_and_exits_as_a_usage_error(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("ros: {topics: {sonar: /sonar/points}}\n")
    assert main(["ros", "node", "--rig", str(DRIVE), "--config", str(profile)]) == 2
    assert main(["ros", "node", "--rig", str(tmp_path / "none.mcap")]) == 2
    _, err = capfd.readouterr()
    assert f"configure failed: {profile}: ros.topics: no such sensor in the rig: sonar (it has: lidar_top," in err
    assert f"configure failed: {tmp_path / 'none.mcap'}: rig not found" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("bag", [False, True])
def test_a_rig_that_is_a_directory_says_what_a_rig_is(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], bag: bool
) -> None:
    # It said "is a directory, expected a YAML file", where --rig takes a drive (.mcap) too (a bag's: imported)
    d = tmp_path / "bag"
    d.mkdir()
    if bag:
        (d / "metadata.yaml").write_text("rosbag2_bagfile_information: {}\n")
    assert main(["ros", "node", "--rig", str(d)]) == 2
    _, err = capfd.readouterr()
    assert f"configure failed: {d}: is a directory, expected a drive (.mcap) or a rig file (.yaml)" in err, err
    assert ("a ROS 2 bag: import it, perception import ros2, and give the drive" in err) is bag, err


def test_the_node_reads_its_sensors_as_every_command_reads_them(capfd: pytest.CaptureFixture[str]) -> None:
    # "lidar_top, nosuch" said "unknown sensor(s):  cam_front,  nosuch" (the spaces kept in the names), and ","
    # enabled every sensor; --sensors of every other command: tests/cli/test_args.py
    from perception.server import free_port

    url = ["--url", f"127.0.0.1:{free_port()}"]  # nothing listens: a configure that got past the sensors fails
    assert main(["ros", "node", "--rig", str(DRIVE), *url, "--sensors", "lidar_top, cam_front, nosuch"]) == 2
    assert main(["ros", "node", "--rig", str(DRIVE), *url, "--sensors", ","]) == 2
    _, err = capfd.readouterr()
    assert "configure failed: --sensors: unknown sensor(s): nosuch (the sensors: lidar_top," in err, err
    assert "configure failed: sensors: names no sensor, got ','" in err, err
    assert "Traceback" not in err


def test_a_profile_topic_that_is_no_ros_2_topic_name_is_a_usage_error_of_the_play(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The player's create_publisher raised rclpy's InvalidTopicNameException: a traceback.
    profile = tmp_path / "p.yaml"
    profile.write_text("ros: {odometry_topic: '/localization/kinematic state'}\n")
    assert main(["ros", "play", str(DRIVE), "--to", "0.3", "--config", str(profile)]) == 2
    _, err = capsys.readouterr()
    assert f"{profile}: ros.odometry_topic: must be a ROS 2 topic name" in err
    assert "Traceback" not in err and err.count("\n") == 1, err


def test_a_span_past_the_drive_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    # It played nothing and printed " messages published" with exit 0.
    assert main(["ros", "play", str(DRIVE), "--from", "20"]) == 2
    _, err = capsys.readouterr()
    assert f"{DRIVE}: no sample from 20 s to its end: the drive's samples span 0 to 9.9" in err
    assert "Traceback" not in err and err.count("\n") == 1, err


def test_an_interrupted_play_exits_as_interrupted(capsys: pytest.CaptureFixture[str]) -> None:
    # Ctrl-C cut the play short, and it printed what it had published with exit 0, as if it were whole.
    def interrupt() -> None:
        deadline = time.monotonic() + 60  # safety net
        while signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # till the play handles it
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.5)  # into the play (a signal before it starts must end the same way)
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=interrupt)
    sender.start()
    try:
        assert main(["ros", "play", str(DRIVE), "--json"]) == 130
    finally:
        sender.join()
    out, _ = capsys.readouterr()
    published, note = out.splitlines()
    assert sum(json.loads(published).values()) < 1130  # cut short (a whole play: 630 samples, 500 poses)
    assert note == "interrupted: the play was cut short"


def test_waiting_for_subscribers_in_vain_is_an_error_as_the_help_says(capsys: pytest.CaptureFixture[str]) -> None:
    # The help said "wait up to S seconds for a subscriber ... first": as if the play then started anyway.
    with pytest.raises(SystemExit):
        main(["ros", "play", "--help"])
    assert "still none then: an error, nothing played (exit 1)" in " ".join(capsys.readouterr().out.split())
    assert main(["ros", "play", str(DRIVE), "--wait-subscribers", "0.2", "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "no subscriber on every sensor topic within 0.2 s" in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("ros_args", "message"),
    [
        (["--bogus"], "--ros-args: unknown ROS arguments ['--bogus'] (in: --bogus)"),
        (["-p"], "--ros-args: failed to initialize rcl: Couldn't parse trailing -p flag"),
    ],
)
def test_bad_ros_arguments_are_a_usage_error(
    ros_args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # They were passed to rcl without the "--ros-args" that makes it read them: ignored, the play ran (exit 0).
    assert main(["ros", "play", str(DRIVE), "--to", "0.3", "--ros-args", *ros_args]) == 2
    _, err = capsys.readouterr()
    assert message in err and "Traceback" not in err, err


@pytest.mark.parametrize("ros_args", [["-p"], ["-r", "foo"], ["--bogus"]])
def test_bad_ros_arguments_are_one_line_of_ours(ros_args: list[str], capfd: pytest.CaptureFixture[str]) -> None:
    # rcl logged its own "[ERROR] [...] [rcl]: Failed to parse global arguments" (on the process's stderr)
    # before ours, which names the option and says what is wrong.
    from rclpy.logging import get_logger_level

    level = get_logger_level("rcl")
    assert main(["ros", "play", str(DRIVE), "--to", "0.3", "--ros-args", *ros_args]) == 2
    _, err = capfd.readouterr()  # by file descriptor: what rcl writes
    assert err.startswith("perception ros: error: --ros-args: ") and err.count("\n") == 1, err
    assert get_logger_level("rcl") == level  # rcl's warnings of a run that starts are not silenced


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("time_base:=sometimes", "configure failed: time_base: must be auto, offset or estimate, got 'sometimes'"),
        ("profile:=/nonexistent/p.yaml", "configure failed: /nonexistent/p.yaml"),
        # A value of another type: rclpy's exception, a traceback (exit 1) from the node's constructor, and
        # from configure an ERROR transition that logged nothing (exit 1, no word why).
        ("time_base:=5", "time_base: must be a string (Trying to set parameter 'time_base' to '5'"),
        ("odometry_topic:=3", "configure failed: odometry_topic: must be a string"),
    ],
)
def test_a_node_parameter_set_with_ros_args_is_used(
    param: str, message: str, capfd: pytest.CaptureFixture[str]
) -> None:
    # The options' defaults (--time-base auto, --config launch/replay.yaml, --url, --sensors) were passed as
    # overrides, which beat "-p": the parameter was silently ignored and the node ran on the defaults.
    done = threading.Event()

    def safety_net() -> None:  # the old code ran on: end it so the test fails instead of hanging
        if not done.wait(120):
            os.kill(os.getpid(), signal.SIGINT)

    watchdog = threading.Thread(target=safety_net)
    watchdog.start()
    try:
        code = main(["ros", "node", "--rig", str(DRIVE), "--ros-args", "-p", param])
    finally:
        done.set()
        watchdog.join()
    _, err = capfd.readouterr()
    assert code == 2 and message in err and "Traceback" not in err, err


def test_a_sensor_publisher_dying_mid_play_is_an_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # Before: the radar_rear thread died with a thread traceback, the other sensors played on, and the
    # command printed its counts and exited 0 as if the play were whole.
    import perception.ros._play as play

    to_cloud, sent = play.sample_to_cloud, []

    def dying(cloud_cls: object, field_cls: object, sample: object, header: object) -> object:
        if getattr(sample, "sensor", None) == "radar_rear":
            sent.append(1)
            if len(sent) > 3:
                raise ValueError("the radar driver's buffer is corrupt")
        return to_cloud(cloud_cls, field_cls, sample, header)

    monkeypatch.setattr(play, "sample_to_cloud", dying)
    assert main(["ros", "play", str(DRIVE), "--to", "1"]) == 1
    out, err = capfd.readouterr()
    assert out == "" and "Traceback" not in err, err
    assert err.startswith(
        "perception ros: error: the publisher of radar_rear died mid-play: ValueError: the radar driver's buffer "
        "is corrupt (published: cam_back "
    ), err
    assert err.endswith(", radar_rear 3)\n") and err.count("\n") == 1, err


def test_a_node_that_fails_to_start_leaves_an_earlier_recording_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Entering the recorder replaced the earlier recording at FILE: a node restarted with a typo in its
    # profile's path failed to configure (exit 2) and yesterday's recording was gone.
    earlier = tmp_path / "run.mcap"
    first = earlier_recording(earlier)
    second = earlier_recording(tmp_path / "run-0001.mcap", 1)
    argv = ["ros", "node", "--rig", str(DRIVE), "--config", str(tmp_path / "nope.yaml"), "--record", str(earlier)]
    assert main(argv) == 2
    out, _ = capsys.readouterr()
    assert earlier.read_bytes() == first
    assert (tmp_path / "run-0001.mcap").read_bytes() == second
    assert f"nothing recorded at {earlier} (the earlier recording there is left as it was)" in out, out
