"""The publisher process ``perception live`` starts (perception.live._publisher_main), on its own."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"


def test_ctrl_c_stops_the_publisher_quietly(tmp_path: Path) -> None:
    # Ctrl-C reaches the host's whole process group: the publisher printed a KeyboardInterrupt traceback
    # (out of its join of the sensor threads) beside the host's "interrupted". Now it stops playing and
    # exits with the shell's code for SIGINT, no end message sent.
    path = tmp_path / "samples.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        server.settimeout(60)  # safety net: the publisher reads the drive first
        cmd = [sys.executable, "-m", "perception.live._publisher_main", str(DRIVE), str(path), json.dumps({})]
        publisher = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        try:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(60)
                assert conn.recv(1 << 16)  # playing
                publisher.send_signal(signal.SIGINT)
                received = b""
                while chunk := conn.recv(1 << 20):  # until it closes its end
                    received += chunk
            _, err = publisher.communicate(timeout=60)
        finally:
            publisher.kill()
            publisher.wait()
    assert publisher.returncode == 128 + signal.SIGINT, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert b'"type": "end"' not in received  # a cut play does not claim to be whole


def test_a_subscriber_that_goes_away_is_one_error_line(tmp_path: Path) -> None:
    # The host closed its end (it failed, or was stopped): every sensor thread of the publisher died on a
    # BrokenPipeError traceback, and the end message another one; the process exited 1 all the same.
    path = tmp_path / "samples.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        server.settimeout(60)  # safety net: the publisher reads the drive first
        cmd = [sys.executable, "-m", "perception.live._publisher_main", str(DRIVE), str(path), json.dumps({})]
        publisher = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        try:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(60)
                assert conn.recv(1 << 16)  # playing
            _, err = publisher.communicate(timeout=60)
        finally:
            publisher.kill()
            publisher.wait()
    assert publisher.returncode == 1, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert f"perception live publisher: error: {DRIVE}: the subscriber closed the connection" in err
