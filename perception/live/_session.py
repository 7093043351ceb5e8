"""A whole live session: a publisher process plays a drive over a Unix socket into a LiveRuntime."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perception.config import RuntimeConfig
from perception.drives import DriveReader
from perception.errors import PerceptionError
from perception.live._publisher import Faults, receive
from perception.live._runtime import LiveRuntime
from perception.scheduler import RunObserver
from perception.types import EgoPose, FrameResult

__all__ = ["LiveOutcome", "StopOnSignal", "StopSignals", "live_session"]

log = logging.getLogger(__name__)

_CONNECT_TIMEOUT_S = 60.0
#: How long the publisher may take to exit once it has played the drive (then it is killed).
_PUBLISHER_END_S = 30.0
#: How long a publisher told to stop (SIGTERM) may take to exit: its threads stop at once; then it is killed.
_STOPPED_PUBLISHER_S = 5.0
#: How often the wait for the publisher's connection checks that it is still running.
_ACCEPT_POLL_S = 0.2


@dataclass
class LiveOutcome:
    summary: dict[str, Any]
    records: list[FrameResult] = field(default_factory=list)
    #: CPU time of the host thread that received the samples from the socket and pushed them, per frame produced.
    push_cpu_us_per_frame: float = 0.0


def _accept(server: socket.socket, publisher: subprocess.Popen[bytes]) -> socket.socket:
    """The publisher's connection; a :class:`PerceptionError` as soon as the publisher exited without
    connecting (its error on stderr above), or after :data:`_CONNECT_TIMEOUT_S`. (One accept of a minute
    waited that long for a publisher that had died at once, e.g. on a drive it could not play.)"""
    deadline = time.monotonic() + _CONNECT_TIMEOUT_S
    server.settimeout(_ACCEPT_POLL_S)
    while True:
        try:
            conn, _ = server.accept()
            return conn
        except TimeoutError:
            code = publisher.poll()
            if code is not None:
                with contextlib.suppress(BlockingIOError):  # it connected, played and ended since the timeout
                    server.setblocking(False)
                    conn, _ = server.accept()
                    conn.setblocking(True)
                    return conn
                raise PerceptionError(f"the publisher exited with code {code} before it connected") from None
            if time.monotonic() > deadline:
                raise PerceptionError(f"the publisher did not connect within {_CONNECT_TIMEOUT_S:g} s") from None


class StopOnSignal:
    """A SIGINT/SIGTERM handler that stops threads: the first signal sets ``stop``, a later one is only
    recorded (``received``: every signal, in order). The publisher's and the ROS processes' handler.

    A handler runs on the main thread between two bytecodes, also inside itself: a second signal landing
    while the first one's ``stop.set()`` held the event's lock ran ``stop.set()`` again, which waited for
    that lock forever (the host terminates the publisher after a Ctrl-C that reached it too): the
    publisher hung until the host killed it, 30 s on. Whether this call sets the event is decided before
    its signal is recorded, so a nested call (which sees it recorded) never sets it."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.received: list[int] = []

    def __call__(self, signum: int, frame: object) -> None:
        first = not self.received
        self.received.append(signum)
        if first:
            self.stop.set()


class StopSignals:
    """SIGINT/SIGTERM for a host that runs a live session on its main thread: install an instance as their
    handler. A signal raises :class:`KeyboardInterrupt` where the main thread is, as Python's own SIGINT
    handler does -- except inside :meth:`held`, around what a :class:`KeyboardInterrupt` landing anywhere
    would break: the runtime's construction (a numba callback swallowed it: the run went on to its end,
    exit 0) and its open (anyio's portal and the host's bookkeeping: a traceback and exit 1, a hang, or the
    runtime never released). There the signal is recorded and ``on_signal`` called (e.g.
    :meth:`LiveRuntime.cancel_open`: the open gives up at once), and the interrupt is raised as the block
    ends (also when the block failed: the failure a cancelled open is)."""

    def __init__(self) -> None:
        self.requested = False
        self._held = 0
        self._on_signal: Callable[[], None] | None = None

    def __call__(self, signum: int, frame: object) -> None:
        self.requested = True
        if not self._held:
            raise KeyboardInterrupt
        if self._on_signal is not None:
            self._on_signal()  # signal-safe: takes no lock, waits for nothing

    @contextlib.contextmanager
    def held(self, on_signal: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold signals back while the block runs (class docs); the interrupt is raised at its end."""
        self._held += 1
        self._on_signal = on_signal
        try:
            yield
        except BaseException:
            if self.requested:
                raise KeyboardInterrupt from None
            raise
        finally:
            self._held -= 1
            self._on_signal = None
        if self.requested:
            raise KeyboardInterrupt


def _stop_publisher(publisher: subprocess.Popen[bytes], stopped: list[bool]) -> None:
    """Terminate the publisher, once: each termination is a signal its handler takes, and a second one
    landing while the first was handled hung it (its handler is re-entrant now, and one signal is enough)."""
    if not stopped:
        stopped.append(True)
        publisher.terminate()


def live_session(
    drive: Path | DriveReader,
    config: RuntimeConfig,
    faults: Faults | None = None,
    *,
    observer: RunObserver | None = None,
    signals: StopSignals | None = None,
) -> LiveOutcome:
    """Play ``drive`` from a separate publisher process at its recorded timing and push every
    sample that arrives into a :class:`LiveRuntime` (the only API this side uses). ``drive``: a path,
    or the caller's open reader (its rig and source are read from it: the drive is not opened again
    on this side); ``observer``: the runtime's (a recorder); ``signals``: the host's SIGINT/SIGTERM
    handler, held back while the runtime is made and opened (:class:`StopSignals`)."""
    signals = signals or StopSignals()
    faults = faults or Faults()
    with contextlib.ExitStack() as stack:
        reader = drive if isinstance(drive, DriveReader) else stack.enter_context(DriveReader(drive))
        drive = reader.path
        rig = dict(reader.rig)
        source = reader.source  # resolved as a replay of this drive is (models, budget, fusion settings)
        duration_s = (reader.end_ns - reader.start_ns) / 1e9
    faults.check_sensors(list(rig), drive)
    records: list[FrameResult] = []
    died: dict[str, str] = {}  # sensors whose publishing thread died mid-run, and why
    with tempfile.TemporaryDirectory(prefix="perception-live-") as tmp:
        path = Path(tmp) / "samples.sock"
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen(1)
        with contextlib.ExitStack() as running:
            running.enter_context(server)
            with signals.held():
                live = LiveRuntime(config, source, on_result=records.append, observer=observer)
            with signals.held(on_signal=live.cancel_open):
                running.enter_context(live)
            # The publisher is the vehicle's sensors: another process, which reads the drive with a handle
            # of its own (the only second opening of the drive in a live session).
            cmd = [sys.executable, "-m", "perception.live._publisher_main", str(drive), str(path)]
            publisher = subprocess.Popen([*cmd, json.dumps(dataclasses.asdict(faults))], env=dict(os.environ))
            stopped: list[bool] = []  # whether this side terminated the publisher (once: see _stop_publisher)
            try:
                conn = _accept(server, publisher)
                t0 = time.monotonic()
                with conn:
                    try:
                        c0 = time.thread_time_ns()  # the thread's CPU, receiving and pushing: two reads in all
                        for item in receive(conn, died.__setitem__):
                            if isinstance(item, EgoPose):
                                live.push_ego(item)
                            else:
                                live.push(item)
                        push_cpu = time.thread_time_ns() - c0
                    except BaseException:
                        # This side failed or was stopped: the publisher stops too, before its socket closes
                        # (it played on into the closed socket, a BrokenPipeError traceback per sensor).
                        _stop_publisher(publisher, stopped)
                        raise
                wall_s = time.monotonic() - t0
            except BaseException:
                _stop_publisher(publisher, stopped)
                raise
            finally:
                try:
                    # a publisher told to stop stops at once; one playing on to its end is given its time
                    code = publisher.wait(timeout=_STOPPED_PUBLISHER_S if stopped else _PUBLISHER_END_S)
                except subprocess.TimeoutExpired:
                    log.warning("the publisher did not exit in time: killed")
                    publisher.kill()
                    code = publisher.wait()
        summary = live.status()
    trigger = config.trigger.sensor
    rate = rig[trigger].rate_hz if trigger and trigger in rig else (config.trigger.rate_hz or 0.0)
    summary.update(
        expected_frames=round(duration_s * rate) if rate else None,
        wall_s=round(wall_s, 2),
        publisher_exit_code=code,
        # sensors whose publisher died mid-run (their samples stop there; the publisher exits 1)
        publisher_died=died,
        time_base=config.live.time_base,
        faults=dataclasses.asdict(faults),
    )
    frames = max(1, summary["frames"])
    return LiveOutcome(summary, records, round(push_cpu / 1e3 / frames, 1))
