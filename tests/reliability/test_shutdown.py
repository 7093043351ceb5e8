"""Shutdown: a stop never loses a frame, and ``perception replay`` stops cleanly on SIGTERM/SIGINT.

The CLI tests run ``perception replay`` as a subprocess on its own embedded server (sleeper models in
tmp_path) and signal it mid-replay; afterwards the records must be complete JSON lines with
consecutive frame ids from 0, and neither a ``tritonserver``/backend stub of that run nor a
``/dev/shm`` region with its prefix may be left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from reliability_helpers import (
    REPO_ROOT,
    assert_consecutive_records,
    processes_with_argument,
    profile_data,
    read_records,
    shm_entries,
    write_drive,
    write_profile,
)

from perception.config import PipelineConfig
from perception.scheduler import OrderedPipeline
from perception.types import Frame, FrameResult, FrameStatus

#: Bound on a graceful stop: drain (5 s at most), write the outputs, stop the server (SIGTERM, up to
#: 15 s before SIGKILL) -- on a loaded 2-core machine.
STOP_BOUND_S = 30.0


def _dropped(f: Frame, reason: str) -> FrameResult:
    return FrameResult(f.frame_id, f.t_ns, FrameStatus.DROPPED, {}, reason=reason)


@pytest.mark.anyio
async def test_stop_while_the_source_waits_for_room_records_the_waiting_frame() -> None:
    """Under ``block`` the source is held with a frame in hand while the pipeline is full; a stop at
    that moment must still give that frame its record (it was taken from the source)."""
    started = anyio.Event()
    taken = anyio.Event()

    async def process(f: Frame) -> FrameResult:
        started.set()
        await anyio.sleep(30)  # still in flight when the drain timeout cancels it
        return FrameResult(f.frame_id, f.t_ns, FrameStatus.OK, {})

    async def source() -> AsyncIterator[Frame]:
        for i in range(5):
            if i == 1:
                # The pipeline asked for frame 1: it has it in hand as soon as this yields (no await in
                # between), then waits for room (frame 0 holds the only slot).
                taken.set()
            yield Frame(frame_id=i, t_ns=i, samples={})

    config = PipelineConfig(max_in_flight=1, queue_size=0, overflow="block", drain_timeout_s=0.2)
    pipeline = OrderedPipeline(process, _dropped, config)
    send, recv = anyio.create_memory_object_stream[FrameResult](10)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pipeline.run, source(), send)
            await started.wait()
            await taken.wait()  # frame 1 was taken from the source and is waiting for room
            assert pipeline.in_flight == 1
            pipeline.stop()
            results = [r async for r in recv]
    assert [r.frame_id for r in results] == [0, 1]
    assert [r.reason for r in results] == ["shutdown: cancelled while in flight", "shutdown: never started"]
    assert all(r.status is FrameStatus.DROPPED for r in results)


# -- perception replay under signals ------------------------------------------------------------------


class Replay:
    """``perception replay`` in a subprocess, with its outputs and the traces of its server."""

    def __init__(self, tmp_path: Path, repo: Path, drive: Path, *, rate: str = "1.0") -> None:
        data = profile_data(
            "embedded",
            {"lidar_top": "sleepy_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"},
            server={"url": "embedded", "models": [str(repo)], "startup_timeout_s": 120},
            budget={"total_ms": 400, "fusion_reserve_ms": 30},
            fusion={"enabled": True},
        )
        data["sensors"][0]["transport"] = "shm"  # the client's shared-memory pool must be released too
        profile = write_profile(tmp_path / "profile.yaml", data)
        self.out = tmp_path / "out"
        self.stdout = (tmp_path / "stdout.txt").open("w+")
        self.stderr_path = tmp_path / "stderr.txt"
        self.stderr = self.stderr_path.open("w+")
        argv = [sys.executable, "-m", "perception", "replay", str(drive), "--config", str(profile)]
        argv += ["--out", str(self.out), "--rate", rate, "--no-progress"]
        self.proc = subprocess.Popen(argv, stdout=self.stdout, stderr=self.stderr, cwd=REPO_ROOT)
        self.prefix = f"perception_{self.proc.pid}_"

    def records_written(self) -> int:
        path = self.out / "detections.jsonl"
        return path.read_text().count("\n") if path.exists() else 0

    def wait_for_records(self, count: int, timeout_s: float = 150.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.records_written() < count:
            assert self.proc.poll() is None, f"replay ended early:\n{self.log()}"
            assert time.monotonic() < deadline, f"no {count} records after {timeout_s} s:\n{self.log()}"
            time.sleep(0.1)

    def wait_for_log(self, text: str, timeout_s: float = 30.0) -> None:
        """Until the run's output says ``text`` (a signal was handled, a phase reached)."""
        deadline = time.monotonic() + timeout_s
        # Read through a new file description: seeking the one the child writes through would move
        # the child's write offset too.
        while text not in self.stderr_path.read_text(errors="replace"):
            assert self.proc.poll() is None, f"replay ended before saying {text!r}:\n{self.log()}"
            assert time.monotonic() < deadline, f"no {text!r} after {timeout_s} s:\n{self.log()}"
            time.sleep(0.02)

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def wait(self, timeout_s: float) -> tuple[int, float]:
        t0 = time.monotonic()
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"replay still running {timeout_s} s after the signal:\n{self.log()}")
        return code, time.monotonic() - t0

    def log(self) -> str:
        self.stderr.seek(0)
        self.stdout.seek(0)
        return self.stdout.read() + self.stderr.read()[-4000:]

    def assert_nothing_left(self) -> None:
        # A tritonserver or backend stub of this run carries the run's shared-memory prefix in its
        # arguments (python backend region name); the client's regions carry it in their names.
        deadline = time.monotonic() + 10
        while processes_with_argument(self.prefix) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_with_argument(self.prefix) == [], f"orphans of the run: {self.log()}"
        assert shm_entries(self.prefix) == []

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stdout.close()
        self.stderr.close()


@pytest.fixture
def long_drive(tmp_path: Path) -> Path:
    """60 s of recorded time: still playing when the test signals it."""
    return write_drive(tmp_path / "long.mcap", 600, lidar_points=2000)


@pytest.mark.triton
@pytest.mark.slow  # a perception replay subprocess with its own server (still in the default run)
def test_sigterm_stops_gracefully_with_every_record_and_nothing_left(
    tmp_path: Path, sleepy_repo: Path, long_drive: Path
) -> None:
    replay = Replay(tmp_path, sleepy_repo, long_drive)
    try:
        replay.wait_for_records(5)
        assert processes_with_argument(replay.prefix), "the run's server should be up"
        replay.signal(signal.SIGTERM)
        code, took = replay.wait(STOP_BOUND_S)
        assert code == 130, replay.log()
        assert took < STOP_BOUND_S
        records = read_records(replay.out / "detections.jsonl")  # complete JSON lines only
        assert len(records) >= 5
        assert_consecutive_records(records)
        for r in records:  # frames cut short by the stop say so; the others were really processed
            if r["status"] == "dropped":
                assert r["reason"].startswith("shutdown"), r
        report = json.loads((replay.out / "report.json").read_text())
        assert report["frames"] == len(records)
        assert report["interrupted"] is True
        assert "interrupted" in replay.log()
        replay.assert_nothing_left()
    finally:
        replay.close()


@pytest.mark.triton
@pytest.mark.slow  # a perception replay subprocess with its own server (still in the default run)
def test_second_sigint_forces_the_exit_and_still_cleans_up(tmp_path: Path, sleepy_repo: Path, long_drive: Path) -> None:
    replay = Replay(tmp_path, sleepy_repo, long_drive, rate="max")
    try:
        replay.wait_for_records(3)
        replay.signal(signal.SIGINT)
        replay.wait_for_log("stopping after in-flight frames")  # the first one was handled: a graceful stop
        replay.signal(signal.SIGINT)
        code, _ = replay.wait(STOP_BOUND_S)
        assert code == 130, replay.log()
        assert "forcing exit" in replay.log()
        assert "Traceback" not in replay.log()
        records = read_records(replay.out / "detections.jsonl")
        assert_consecutive_records(records)
        replay.assert_nothing_left()
    finally:
        replay.close()


@pytest.mark.triton
@pytest.mark.slow  # a perception replay subprocess with its own server (still in the default run)
def test_sigterm_during_start_up_stops_the_starting_server(tmp_path: Path, sleepy_repo: Path, long_drive: Path) -> None:
    replay = Replay(tmp_path, sleepy_repo, long_drive)
    try:
        deadline = time.monotonic() + 60
        while not processes_with_argument(replay.prefix):  # the server is starting
            assert replay.proc.poll() is None and time.monotonic() < deadline, replay.log()
            time.sleep(0.05)
        replay.signal(signal.SIGTERM)
        code, _ = replay.wait(STOP_BOUND_S)
        assert code == 130, replay.log()
        assert "Traceback" not in replay.log()
        assert replay.records_written() == 0  # nothing was processed
        replay.assert_nothing_left()
    finally:
        replay.close()
