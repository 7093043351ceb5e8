"""The publisher process ``perception live`` starts (perception.live._publisher_main), on its own."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"


@contextlib.contextmanager
def _playing(tmp_path: Path) -> Iterator[tuple[socket.socket, subprocess.Popen[str]]]:
    """The publisher started on the bundled drive, connected to this side's socket and playing (its first
    bytes received); killed on the way out, whatever happened."""
    path = tmp_path / "samples.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        server.settimeout(60)  # safety net: the publisher reads the drive first
        cmd = [sys.executable, "-m", "perception.live._publisher_main", str(DRIVE), str(path), json.dumps({})]
        publisher = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        try:
            conn, _ = server.accept()
            conn.settimeout(60)
            assert conn.recv(1 << 16)  # playing
            yield conn, publisher
        finally:
            publisher.kill()
            publisher.wait()


def test_ctrl_c_stops_the_publisher_quietly(tmp_path: Path) -> None:
    # Ctrl-C reaches the host's whole process group: the publisher printed a KeyboardInterrupt traceback
    # (out of its join of the sensor threads) beside the host's "interrupted". Now it stops playing and
    # exits with the shell's code for SIGINT, no end message sent.
    with _playing(tmp_path) as (conn, publisher):
        with conn:
            publisher.send_signal(signal.SIGINT)
            received = b""
            while chunk := conn.recv(1 << 20):  # until it closes its end
                received += chunk
        _, err = publisher.communicate(timeout=60)
    assert publisher.returncode == 128 + signal.SIGINT, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert b'"type": "end"' not in received  # a cut play does not claim to be whole


def test_a_subscriber_that_goes_away_is_one_error_line(tmp_path: Path) -> None:
    # The host closed its end (it failed, or was stopped): every sensor thread of the publisher died on a
    # BrokenPipeError traceback, and the end message another one; the process exited 1 all the same.
    with _playing(tmp_path) as (conn, publisher):
        conn.close()
        _, err = publisher.communicate(timeout=60)
    assert publisher.returncode == 1, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert f"perception live publisher: error: {DRIVE}: the subscriber closed the connection" in err
