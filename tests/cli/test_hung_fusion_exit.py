"""A fusion call that hangs is abandoned in its worker thread at close (``Runtime._fuse``); that thread is not a
daemon, so the interpreter's exit waited for it forever after the command had finished. ``perception live`` and
``perception replay`` now end with their exit code and a line naming the hung fusion call.

Each runs in a subprocess whose fusion stage hangs from frame 3 on (the profile's ``Fuser``, patched before the
command runs), with a watchdog on the process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from profile_helpers import sleepy_profile

from perception.server import EmbeddedTriton

ROOT = Path(__file__).resolve().parents[2]

#: ``python -c`` program: the ``perception`` command (its arguments after it) with a fusion that hangs from frame
#: 3 on, never to return; the file named by HUNG_MARKER is written when it starts hanging.
HANGING = """
import os, sys, threading
from pathlib import Path
from perception.fusion import _fuser
fuse = _fuser.Fuser.__call__
def hanging(self, frame, results):
    if frame.frame_id >= 3:
        Path(os.environ["HUNG_MARKER"]).write_text(str(frame.frame_id))
        threading.Event().wait()
    return fuse(self, frame, results)
_fuser.Fuser.__call__ = hanging
from perception.cli import main
sys.exit(main())
"""

#: The hung frame is cancelled half a second into the close (its drain timeout), the frames before it queued.
PIPELINE = "{queue_size: 100, overload: queue, drain_timeout_s: 0.5}"

WATCHDOG_S = 120  # a watchdog only: before, the process never exited


def _hung(argv: list[str], tmp_path: Path, *, interrupt: bool) -> tuple[int, str, str]:
    """``perception ARGV`` with a fusion that hangs: its exit code, stdout and stderr; ``interrupt``: SIGINT once
    fusion hangs (a replay waits for the hung frame until stopped)."""
    marker = tmp_path / "hung"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HUNG_MARKER": str(marker), "TMPDIR": str(tmp_path)}
    cmd = [sys.executable, "-c", HANGING, *argv]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        if interrupt:
            deadline = time.monotonic() + WATCHDOG_S
            while not marker.exists() and proc.poll() is None:
                assert time.monotonic() < deadline, "fusion never reached frame 3"
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=WATCHDOG_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the process did not exit within {WATCHDOG_S} s after fusion hung:\n{err[-3000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert marker.exists(), err  # fusion did hang
    return proc.returncode, out, err


def _says_it(err: str, command: str) -> None:
    assert "Traceback" not in err, err
    line = f"perception {command}: error: 1 fusion call hung"
    assert line in err, err


def test_live_with_a_fusion_that_hangs_exits_with_its_code_and_says_why(
    triton: EmbeddedTriton, urban_drive: Path, tmp_path: Path
) -> None:
    profile = sleepy_profile(tmp_path, PIPELINE)
    argv = ["live", str(urban_drive), "--config", str(profile), "--url", triton.grpc_url]
    code, out, err = _hung(argv, tmp_path, interrupt=False)
    assert code == 1, err  # the run's frames from the hung one on were lost: a failure
    assert "frames " in out, out  # the summary was printed
    _says_it(err, "live")


def test_replay_interrupted_while_fusion_hangs_exits_130_and_says_why(
    triton: EmbeddedTriton, urban_drive: Path, tmp_path: Path
) -> None:
    profile = sleepy_profile(tmp_path, PIPELINE)
    argv = ["replay", str(urban_drive), "--config", str(profile), "--url", triton.grpc_url, "--no-progress"]
    code, out, err = _hung([*argv, "--out", str(tmp_path / "out")], tmp_path, interrupt=True)
    assert code == 130, err  # interrupted, as without the hang
    assert "interrupted: records are complete up to the last finished frame" in out, out
    _says_it(err, "replay")
