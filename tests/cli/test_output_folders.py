"""Every command that replays a drive makes its output folders before the run, or refuses naming the option."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from perception.cli import main
from perception.server import free_port

ROOT = Path(__file__).resolve().parents[2]
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"
#: A folder no one can make, root included (Linux's /proc).
UNMAKEABLE = Path("/proc/perception-no-such-folder")

COMMANDS = {
    "replay": ["--no-progress"],
    "budget": ["--budget-ms", "100", "--no-progress"],
    "eval": ["--no-progress"],
    "live": [],
}


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc (no folder can be made in it)")
@pytest.mark.parametrize(
    ("command", "option"),
    [(c, o) for c in COMMANDS for o in ("--out", "--trace-out") if not (c == "eval" and o == "--trace-out")],
)
def test_an_output_folder_that_cannot_be_made_is_refused_before_anything_runs(
    command: str, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `perception budget --out /proc/x` said "error: /proc/x: No such file or directory" (exit 1, the option
    # not named); its --trace-out the same once the embedded server had started; replay's after connecting.
    # Only `perception live` made them first. Now every command: exit 2 naming the option, before the server.
    url = f"127.0.0.1:{free_port()}"  # nothing listens there: nothing may be tried before the refusal
    target = UNMAKEABLE if option == "--out" else UNMAKEABLE / "trace.json"
    assert main([command, str(DRIVE), "--url", url, *COMMANDS[command], option, str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perception {command}: error: {option}: cannot create directory {UNMAKEABLE}: "), err
    assert err.count("\n") == 1, err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc (no folder can be made in it)")
@pytest.mark.parametrize(
    # (--rerun-models: a replay as recorded that would connect to --url; without it --url is a usage error of its own)
    "argv",
    [["replay", str(DRIVE), "--as-recorded", "--rerun-models"], ["bench", str(DRIVE), "--quick"]],
)
def test_the_out_folder_of_a_replay_as_recorded_and_of_a_bench_is_made_before_anything_runs(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Both made --out only to write into it at the end: a replay as recorded after the whole replay, a bench after
    # every variant had run (exit 1, "/proc/x: No such file or directory", the results lost). Here the drive is no
    # recording and nothing listens at --url: either would be said first, exit 1, were --out not refused at once.
    url = f"127.0.0.1:{free_port()}"
    assert main([*argv, "--url", url, "--out", str(UNMAKEABLE)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perception {argv[0]}: error: --out: cannot create directory {UNMAKEABLE}: "), err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("command", ["replay", "budget", "live"])
def test_a_trace_out_that_is_the_drive_being_read_is_refused(
    command: str, urban_drive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The trace's file was opened, truncating the drive, as the run began: replay then read no frame of it
    # ("drive damaged: ... chunk record cut short", exit 3) and the drive was lost.
    drive = tmp_path / "drive.mcap"
    shutil.copyfile(urban_drive, drive)
    url = f"127.0.0.1:{free_port()}"
    argv = [command, str(drive), "--url", url, *COMMANDS[command], "--out", str(tmp_path / "out")]
    assert main([*argv, "--trace-out", str(drive)]) == 2
    err = capsys.readouterr().err
    said = f"--trace-out: {drive} is the drive being read: write the trace to another file"
    assert err == f"perception {command}: error: {said}\n"
    assert drive.read_bytes() == urban_drive.read_bytes()
