"""``perception server``: the model table, --once exit codes, bad repositories, clean stop on SIGINT."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from server_helpers import TEST_MODELS, shm_entries, stubs_with_prefix

from perception.cli import main
from perception.cli._server import format_model_table
from perception.kinds import TensorSpec
from perception.server import ModelStatus
from perception.server._procs import pid_alive


@pytest.mark.triton
def test_once_prints_endpoints_and_every_model_contract(
    broken_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The test models this test reads (not all 14: each starts two python stubs), in a repository of their own.
    repo = tmp_path / "models"
    for name in ("echo", "failer", "sleeper_20", "sleeper_30", "sleeper_40"):
        shutil.copytree(TEST_MODELS / name, repo / name)
    code = main(["-q", "server", "--models", str(repo), "--models", str(broken_repo), "--once"])
    out = capsys.readouterr().out
    assert code == 1  # `broken` is not READY
    assert "gRPC     127.0.0.1:" in out and "/metrics" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:1].isalpha()}
    for name in ("failer", "sleeper_20", "sleeper_30", "sleeper_40"):
        assert rows[name][1:] == ["1", "READY", "INPUT", "FP32[-1]", "OUTPUT", "FP32[1]"], rows[name]
    assert rows["echo"][1:] == ["1", "READY", "INPUT", "FP32[-1,-1]", "OUTPUT", "FP32[-1,-1]"]
    assert rows["broken"][2] == "UNAVAILABLE"
    assert "broken: UNAVAILABLE: Poll failed for model directory 'broken'" in out


def test_model_table_layout() -> None:
    spec = TensorSpec("POINTS", "FP32", (-1, 4))
    models = [
        ModelStatus("lidar", "1", "READY", "", max_batch_size=8, inputs=(spec,), outputs=(spec, spec)),
        ModelStatus("camera", "", "UNAVAILABLE", "load failed: no such file"),
    ]
    lines = format_model_table(models).splitlines()
    assert lines[0].split() == ["MODEL", "VERSION", "STATE", "INPUTS", "OUTPUTS"]
    assert lines[1].split() == [
        *("lidar", "1", "READY", "POINTS", "FP32[B,-1,4]"),  # B: the batch dim of a batching model
        *("POINTS", "FP32[B,-1,4],", "POINTS", "FP32[B,-1,4]"),
    ]
    assert lines[2].split() == ["camera", "-", "UNAVAILABLE", "-", "-"]
    assert lines[-2:] == ["not ready:", "  camera: UNAVAILABLE: load failed: no such file"]


def test_missing_repository_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nonexistent"
    assert main(["server", "--models", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"perception server: error: {missing}: model repository does not exist\n"


def test_a_model_given_for_its_repository_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    # models/lidar_detector for models/: Triton served its version folder '1' as a model that never loads
    # (exit 1 after the start, with --once; without it a server of nothing, until Ctrl-C).
    model = Path(__file__).resolve().parents[2] / "models" / "lidar_detector"
    assert main(["server", "--models", str(model), "--once"]) == 2
    assert capsys.readouterr().err == (
        f"perception server: error: {model}: is a model (it holds config.pbtxt), not a model repository: give the "
        f"folder holding it, {model.parent}\n"
    )


@pytest.mark.triton  # the log is opened where the server is spawned (it fails before)
def test_a_log_file_that_cannot_be_written_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Both were an exception-group traceback from inside the server's start.
    (tmp_path / "models").mkdir()
    argv = ["server", "--models", str(tmp_path / "models"), "--once", "--log"]
    with pytest.raises(SystemExit) as exc:
        main([*argv, str(tmp_path)])  # a directory: refused while parsing
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument --log: {tmp_path} is a directory" in err
    unmakeable = Path("/proc/perception-test/server.log")  # no directory can be made in /proc
    assert main([*argv, str(unmakeable)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"perception server: error: {unmakeable.parent}: ")
    assert err.count("\n") == 1 and "Traceback" not in err


def _serving(cli: subprocess.Popen[str]) -> str:
    """What ``perception server`` printed up to its "serving" line (it then serves)."""
    assert cli.stdout is not None
    lines = []
    for line in cli.stdout:
        lines.append(line)
        if line.startswith("serving"):
            break
    return "".join(lines)


def _server_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "perception", "server", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.triton
def test_sigint_stops_the_server_cleanly(echo_repo: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    cli = _server_cli("--models", str(echo_repo), "--log", str(log_path))
    try:
        out = _serving(cli)
        assert "echo" in out and "READY" in out, out + (cli.stderr.read() if cli.stderr else "")
        server_pid = int(out.split("(pid ")[1].split(")")[0])
        prefix = f"perception_{cli.pid}_"
        assert stubs_with_prefix(prefix)
        cli.send_signal(signal.SIGINT)
        assert cli.wait(30) == 0
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    deadline = time.monotonic() + 5
    while pid_alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(server_pid)
    assert stubs_with_prefix(prefix) == []
    assert shm_entries(prefix) == []
    assert "successfully unloaded 'echo'" in log_path.read_text()
    assert os.path.exists(log_path)  # a log the user asked for is kept


@pytest.mark.triton
def test_a_server_that_crashes_with_no_restart_left_ends_the_command_with_exit_1(
    echo_repo: Path, tmp_path: Path
) -> None:
    """``--restarts 0``: the first crash is the end. The endpoints printed are gone, so the command says
    why (the crash, with the kept log) and exits 1 instead of serving nothing."""
    log_path = tmp_path / "server.log"
    cli = _server_cli("--models", str(echo_repo), "--log", str(log_path), "--restarts", "0")
    try:
        out = _serving(cli)
        server_pid = int(out.split("(pid ")[1].split(")")[0])
        prefix = f"perception_{cli.pid}_"
        os.kill(server_pid, signal.SIGSEGV)  # as Triton's own crashes
        assert cli.wait(60) == 1
        stderr = cli.stderr.read() if cli.stderr else ""
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert "died with signal SIGSEGV while serving" in stderr and str(log_path) in stderr, stderr
    assert "not restarted: 0 restart(s) allowed within 600 s" in stderr, stderr
    assert "Traceback" not in stderr
    assert stubs_with_prefix(prefix) == [] and shm_entries(prefix) == []
    assert "Signal (11) received" in log_path.read_text()  # kept


def test_a_stop_during_start_up_is_said_as_every_command_says_an_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Stopped before the server was ready, `perception server` logged "WARNING perception.cli._server: interrupted
    # during start-up" (exit 130 of its own), where every other command says "perception <command>: interrupted".
    async def starting(*_: object) -> int:
        with anyio.fail_after(60):  # watchdog: the command's signal handler cancels this start
            await anyio.wait_all_tasks_blocked()  # the command's signal receiver is waiting
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
            os.kill(os.getpid(), signal.SIGINT)
            await anyio.sleep_forever()
        return 0

    monkeypatch.setattr("perception.cli._server.EmbeddedTriton", lambda *_, **__: None)
    monkeypatch.setattr("perception.cli._server._serve", starting)
    assert main(["server", "--models", str(tmp_path)]) == 130
    out, err = capsys.readouterr()
    assert err == "perception server: interrupted\n" and out == "", err


def test_an_interrupt_while_the_command_is_loaded_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A Ctrl-C while the command's module was imported (the embedded server's, the runtime's: seconds) said
    # "perception: interrupted", the command not named as once it runs
    def interrupted(argv: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("perception.cli._main.build_parser", interrupted)
    assert main(["-v", "server", "--once"]) == 130
    assert capsys.readouterr().err == "perception server: interrupted\n"
