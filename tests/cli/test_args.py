"""Bad option values are argparse's usage error naming the option (exit code 2), for every command.

The value types are defined once, in ``perception/cli/_args.py``; nothing here starts a server: the
arguments are rejected while parsing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perception.cli import main

CLI = Path(__file__).resolve().parents[2] / "perception" / "cli"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sim", "--seed", "-1", "-o", "x.mcap"], "argument --seed: must be >= 0, got -1"),
        (["sim", "--duration", "abc", "-o", "x.mcap"], "argument --duration: not a number: 'abc'"),
        (["sim", "--duration", "5000", "-o", "x.mcap"], "argument --duration: must be within (0, 3600], got 5000"),
        (["sim", "--duration", "0", "-o", "x.mcap"], "argument --duration: must be within (0, 3600], got 0"),
        (["sim", "--workers", "0", "-o", "x.mcap"], "argument --workers: must be >= 1, got 0"),
        (["budget", "d.mcap", "--budget-ms", "0"], "argument --budget-ms: must be > 0, got 0"),
        (["budget", "d.mcap", "--budget-ms", "5", "--percentile", "101"], "argument --percentile: must be within"),
        (["budget", "d.mcap", "--budget-ms", "5", "--in-flight", "0"], "argument --in-flight: must be within 1..64"),
        (["budget", "d.mcap", "--budget-ms", "5", "--rate", "0"], "argument --rate: must be within [0.01, 1000]"),
        (["replay", "d.mcap", "--rate", "1e-9"], "argument --rate: must be within [0.01, 1000], got 1e-9"),
        (["fleet", "d", "--out", "o", "--rate", "0.001"], "argument --rate: must be within [0.01, 1000]"),
        (["ros", "play", "d.mcap", "--rate", "1e-9"], "argument --rate: must be within [0.01, 1000], got 1e-9"),
        (["ros", "play", "d.mcap", "--rate", "0"], "argument --rate: must be within [0.01, 1000], got 0"),
        (["ros", "play", "d.mcap", "--rate", "nan"], "argument --rate: must be within [0.01, 1000], got nan"),
        (["ros", "play", "d.mcap", "--rate", "max"], "argument --rate: must be a number, got 'max'"),
        (["replay", "d.mcap", "--rate", "fast"], "argument --rate: must be a number, 'max' or 'lockstep'"),
        (["replay", "d.mcap", "--metrics-port", "-1"], "argument --metrics-port: must be within 0..65535"),
        (["fleet", "d", "--out", "o", "--workers", "0"], "argument --workers: must be >= 1, got 0"),
        (["fleet", "d", "--out", "o", "--retries", "-1"], "argument --retries: must be >= 0, got -1"),
        (["fleet", "d", "--out", "o", "--budget-ms", "-2"], "argument --budget-ms: must be > 0"),
        (["fleet", "d", "--out", "o", "--percentile", "0"], "argument --percentile: must be within (0, 100]"),
        (["fleet", "d", "--out", "o", "--tolerance-map", "nan"], "argument --tolerance-map: must be >= 0"),
        (["fleet", "d", "--out", "o", "--rate", "slow"], "argument --rate: must be a number"),
        (["server", "--grpc-port", "70000"], "argument --grpc-port: must be within 1..65535, got 70000"),
        (["server", "--startup-timeout", "0"], "argument --startup-timeout: must be > 0"),
        (["render", "d", "--frame", "1", "--range", "-3"], "argument --range: must be within (0, 500]"),
        (["model-quality", "--seed", "1", "--concurrency", "0"], "argument --concurrency: must be >= 1"),
        (["model-quality", "--seed", "1", "--timeout", "0"], "argument --timeout: must be > 0"),
        # it was "duration: duration must be in (0, 3600] s" once the repositories were checked, as sim's was
        (["model-quality", "--seed", "1", "--duration", "5000"], "argument --duration: must be within (0, 3600]"),
        (["bench", "--frames", "x"], "argument --frames: not an integer: 'x'"),
        (["import", "ros2", "b", "--map", "m", "-o", "x.mcap", "--jpeg-quality", "0"], "must be within 1..100"),
    ],
)
def test_bad_values_are_usage_errors_naming_the_option(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert message in err and "usage:" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "d.mcap"],
        ["live", "d.mcap"],
        ["eval", "d.mcap"],
        ["fleet", "d"],
        ["budget", "d.mcap", "--budget-ms", "5"],
        ["render", "d", "--frame", "1"],
        ["bench"],
    ],
)
def test_an_output_directory_that_is_a_file_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--out", __file__])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument --out: {__file__} exists and is not a directory" in err


@pytest.mark.parametrize("argv", [["replay", "d.mcap", "--out"], ["replay", "d.mcap", "--trace-out"]])
def test_an_output_path_the_file_system_refuses_is_a_usage_error(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A name too long to look at was an OSError traceback from inside argparse.
    long = str(tmp_path / ("x" * 300) / "out")
    with pytest.raises(SystemExit) as exc:
        main([*argv, long])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument {argv[-1]}: {long}: File name too long" in err, err


def test_a_sim_output_that_is_a_directory_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It was found only when the drive was created: exit 1, "cannot create drive: Is a directory".
    for target in (tmp_path, tmp_path / Path(__file__).name / "x.mcap"):
        if target != tmp_path:
            (tmp_path / Path(__file__).name).write_text("a file\n")
        with pytest.raises(SystemExit) as exc:
            main(["sim", "--duration", "1", "-o", str(target)])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and f"argument -o/--output: {target}" in err, err


def test_a_file_system_error_is_one_line_naming_the_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from perception.cli import _replay

    def refused(args: object) -> int:
        raise PermissionError(13, "Permission denied", "/data/runs/out")

    monkeypatch.setattr(_replay, "run", refused)
    assert main(["replay", "d.mcap"]) == 1
    err = capsys.readouterr().err
    assert err == "perception replay: error: /data/runs/out: Permission denied\n"


def test_rate_values_are_parsed_while_parsing() -> None:
    from perception.cli._main import build_parser

    for text, rate in (("max", "max"), ("lockstep", "lockstep"), ("2.5", 2.5)):
        argv = ["replay", "d.mcap", "--rate", text]
        assert build_parser(argv).parse_args(argv).rate == rate
    argv = ["replay", "d.mcap"]
    assert build_parser(argv).parse_args(argv).rate == 1.0  # the default goes through the same type


def test_value_types_are_defined_once() -> None:
    # ``_import``'s ``--frames`` wraps the importers' own frame-list parser; every other type is in _args.
    defining = {p.name for p in CLI.glob("_*.py") if "ArgumentTypeError(" in p.read_text()}
    assert defining == {"_args.py", "_import.py"}


@pytest.mark.parametrize(
    "argv",
    [
        ["info", "{d}"],
        ["replay", "{d}", "--url", "127.0.0.1:1"],
        ["eval", "{d}", "--url", "127.0.0.1:1"],
        ["budget", "{d}", "--budget-ms", "100", "--url", "127.0.0.1:1"],
        ["render", "{tmp}", "--frame", "0", "--drive", "{d}"],
    ],
)
def test_a_drive_that_is_a_directory_is_a_usage_error(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It was 'cannot open drive: Is a directory', exit 1 (render: 'drive not found'), where a drive that is
    # not there is a usage error (exit 2) in every command.
    d = tmp_path / "drives"
    d.mkdir()
    assert main([a.format(d=d, tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err == f"perception {argv[0]}: error: {d}: is a directory, expected a drive file (.mcap)\n"


def test_every_option_has_help_and_says_its_default() -> None:
    """``--help`` of every command (and sub-command): each option is explained, and one whose default is a
    value (not unset, off or an empty list) names it. ``replay --rate`` (1.0) and ``budget --rate`` (max)
    did not, so a user could not tell that replay runs at recorded speed unless told otherwise."""
    import argparse

    from perception.cli._main import COMMANDS, build_parser

    def problems(parser: argparse.ArgumentParser, path: str) -> list[str]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found += problems(sub, f"{path} {name}")
            elif action.option_strings and not isinstance(action, argparse._HelpAction):
                text = action.help or ""
                if not text:
                    found.append(f"{path} {action.option_strings[0]}: no help")
                elif action.default not in (None, False, [], argparse.SUPPRESS) and "default" not in text:
                    found.append(f"{path} {action.option_strings[0]}: default {action.default!r} not said")
        return found

    assert [p for command in COMMANDS for p in problems(build_parser([command]), "perception")] == []


def test_a_rosbag2_directory_given_as_the_drive_says_to_import_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 'is a directory, expected a drive file (.mcap)' was true, but a bag not imported yet deserves its command.
    d = tmp_path / "bag"
    d.mkdir()
    (d / "metadata.yaml").write_text("rosbag2_bagfile_information: {}\n")
    assert main(["info", str(d)]) == 2
    assert capsys.readouterr().err == (
        f"perception info: error: {d}: is a ROS 2 bag (rosbag2 directory), not a drive: import it first: "
        f"perception import ros2 {d} --map topics.yaml -o drive.mcap\n"
    )


def test_sensors_named_with_spaces_after_the_commas_are_the_sensors() -> None:
    # --sensors "lidar_top, cam_front" said "unknown sensor(s):  cam_front" (the space kept in the name).
    import argparse

    from perception.cli._common import sensors_option

    assert sensors_option(argparse.Namespace(sensors="lidar_top, cam_front ,")) == ["lidar_top", "cam_front"]
    assert sensors_option(argparse.Namespace(sensors=None)) is None
