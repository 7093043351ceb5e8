"""A fleet worker stops its own replay when the fleet stops (``DriveWorker.interrupt``), against the real
session Triton: Ray's cancel alone was seen to miss a replay sent as the stop came, which then ran to its
end after Ctrl-C. The worker is the plain class here (what Ray runs in the actor), on asyncio as there.
Also: a drive whose model its node's server lacks fails at once."""

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


def test_a_model_its_node_server_lacks_fails_the_drive_at_once(tmp_path: Path) -> None:
    # Each drive waited the profile's start-up timeout (90 s by default) for a model the node's embedded
    # server does not hold, one drive after another, to fail it with 'not ready'.
    from perception.server import free_port

    repo = tmp_path / "models"
    for model in ("sleepy_radar", "sleepy_camera"):
        (repo / model).mkdir(parents=True)
    models = {**SLEEPY, "lidar_top": "no_such_lidar"}
    url = f"127.0.0.1:{free_port()}"  # never reached: the drive fails before its client opens
    server = {"url": url, "startup_timeout_s": 60}
    profile = write_profile(tmp_path / "p.yaml", profile_data(url, models, server=server))
    write_drive(tmp_path / "d.mcap", 3)
    out = tmp_path / "out"
    out.mkdir()
    settings = WorkerSettings(profile=str(profile), fused_mcap=False, report_md=False)
    worker = DriveWorker([url], settings, str(profile), repositories=[str(repo)])

    async def main() -> None:
        async with asyncio.timeout(30):  # watchdog: far below the profile's 60 s start-up timeout
            summary = await worker.replay(DriveJob("d", str(tmp_path / "d.mcap"), str(out), 1))
        assert summary.status == "failed"
        assert summary.error is not None
        assert "model 'no_such_lidar' of sensor 'lidar_top' is not in this model repository" in summary.error
        await worker.close()

    asyncio.run(main())
