"""A fleet worker stops its own replay when the fleet stops (``DriveWorker.interrupt``), against the real
session Triton: Ray's cancel alone was seen to miss a replay sent as the stop came, which then ran to its
end after Ctrl-C. The worker is the plain class here (what Ray runs in the actor), on asyncio as there."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from reliability_helpers import profile_data, write_drive, write_profile

from perception.fleet._worker import DriveJob, DriveWorker, WorkerSettings
from perception.server import EmbeddedTriton

SLEEPY = {"lidar_top": "sleepy_lidar", "radar_front": "sleepy_radar", "cam_front": "sleepy_camera"}
FRAMES = 100  # 10 s at --rate 1: a replay an interrupt has to cut short


def _worker(triton: EmbeddedTriton, tmp_path: Path) -> tuple[DriveWorker, DriveJob]:
    profile = write_profile(tmp_path / "sleepy.yaml", profile_data(triton.grpc_url, SLEEPY))
    write_drive(tmp_path / "long.mcap", FRAMES)
    out = tmp_path / "out"
    out.mkdir()
    settings = WorkerSettings(profile=str(profile), rate=1.0, fused_mcap=False, report_md=False)
    worker = DriveWorker([triton.grpc_url], settings, str(profile))
    return worker, DriveJob("long", str(tmp_path / "long.mcap"), str(out), 1)


def test_an_interrupt_cancels_the_running_replay_and_publishes_nothing(triton: EmbeddedTriton, tmp_path: Path) -> None:
    worker, job = _worker(triton, tmp_path)

    async def main() -> None:
        replay = asyncio.ensure_future(worker.replay(job))
        async with asyncio.timeout(60):  # watchdog
            while worker.progress()[1] < 3:  # mid-drive: frames have come (a bounded wait, not a guess)
                assert not replay.done(), replay
                await asyncio.sleep(0.02)
            await worker.interrupt()
            with pytest.raises(asyncio.CancelledError):
                await replay
        assert worker.progress()[0] is None  # no drive running
        assert worker.progress()[1] < FRAMES  # cut short, not run to its end
        await worker.close()

    asyncio.run(main())
    assert not (Path(job.out) / job.name).exists()  # nothing published: the driver reports it cancelled


def test_a_replay_sent_after_the_interrupt_does_not_start(triton: EmbeddedTriton, tmp_path: Path) -> None:
    worker, job = _worker(triton, tmp_path)

    async def main() -> None:
        await worker.interrupt()
        async with asyncio.timeout(60):  # watchdog
            with pytest.raises(asyncio.CancelledError, match="the fleet is stopping"):
                await worker.replay(job)
        assert worker.progress() == (None, 0)

    asyncio.run(main())
    assert not list(Path(job.out).iterdir())  # not even staged
