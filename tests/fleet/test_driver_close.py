"""The driver's close waits for the processes of the actors it killed on this host: Ray's kill only asks
for their end, and a run that returned with a worker still alive would leave it to what the host starts
next. Real processes stand in for the actors (what is waited for is a pid, not an actor)."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading

import anyio
import pytest

from perception.fleet import _driver
from perception.server import pid_alive


def _process(seconds: float) -> subprocess.Popen[bytes]:
    """A process that ends after ``seconds``, reaped as soon as it does (as the raylet reaps its workers)."""
    proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


def _exited(places: list[dict[str, object]]) -> None:
    async def main() -> None:
        with anyio.fail_after(60):  # watchdog
            await _driver._exited(places)  # type: ignore[arg-type]

    anyio.run(main)


def test_the_close_returns_once_the_killed_actors_processes_on_this_host_have_ended() -> None:
    procs = [_process(0.3), _process(0.6)]
    _exited([{"pid": p.pid, "host": socket.gethostname()} for p in procs])
    assert not [p.pid for p in procs if pid_alive(p.pid)]


def test_a_process_that_outlives_the_wait_is_named_and_the_close_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_driver, "ACTOR_EXIT_S", 0.2)
    proc = _process(60)
    try:
        with caplog.at_level(logging.WARNING, logger="perception.fleet._driver"):
            _exited([{"pid": proc.pid, "host": socket.gethostname()}])
        assert pid_alive(proc.pid)
        assert f"actor processes [{proc.pid}] still running" in caplog.text
    finally:
        proc.kill()


def test_actors_on_other_hosts_are_not_waited_for(caplog: pytest.LogCaptureFixture) -> None:
    proc = _process(60)  # alive, but its place names another host: not this host's pid to watch
    try:
        with caplog.at_level(logging.WARNING, logger="perception.fleet._driver"):
            _exited([{"pid": proc.pid, "host": f"not-{socket.gethostname()}"}])
        assert pid_alive(proc.pid) and "still running" not in caplog.text
    finally:
        proc.kill()
