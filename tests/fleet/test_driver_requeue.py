"""A drive whose worker died goes back in the queue for any worker: an idle worker waits while drives are
out and takes it (it had returned as soon as the queue was empty, so the drive waited for its own worker's
restart, or with its node lost ended ``not run: no worker left`` while the other worker sat idle). No
cluster: the workers are stand-ins answering as Ray's actors do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from ray.exceptions import RayActorError

from perception.fleet import _driver
from perception.fleet._plan import FleetDrive
from perception.fleet._summary import DriveSummary
from perception.fleet._worker import DriveJob


class _Remote:
    """A Ray actor method as the driver calls it (``.remote(...)``, then awaited)."""

    def __init__(self, method: Any) -> None:
        self._method = method

    def remote(self, *args: Any) -> Any:
        return self._method(*args)


class _Healthy:
    def __init__(self) -> None:
        self.replay = _Remote(self._replay)
        self.where = _Remote(self._where)
        self.ran: list[tuple[str, int]] = []
        self._ran: dict[str, anyio.Event] = {}

    def ran_drive(self, name: str) -> anyio.Event:
        """Set once this worker has run ``name`` (the driver takes its summary before anything else runs)."""
        return self._ran.setdefault(name, anyio.Event())

    async def _replay(self, job: DriveJob) -> DriveSummary:
        await anyio.lowlevel.checkpoint()
        self.ran.append((job.name, job.attempt))
        self.ran_drive(job.name).set()
        return DriveSummary(job.name, job.path, attempt=job.attempt, status="ok")

    async def _where(self) -> dict[str, Any]:
        return {}


class _Dying:
    """Dies in its drive once ``other`` is set (the other worker ran the other drive: it has nothing left in
    the queue); ``back``: Ray restarts it, but not before that is set (None: its node is lost, it never
    answers)."""

    def __init__(self, other: anyio.Event, back: anyio.Event | None) -> None:
        self.replay = _Remote(self._replay)
        self.where = _Remote(self._where)
        self._other = other
        self._back = back

    async def _replay(self, job: DriveJob) -> DriveSummary:
        await self._other.wait()
        raise RayActorError()

    async def _where(self) -> dict[str, Any]:
        if self._back is None:
            raise RayActorError()
        await self._back.wait()
        return {}


def _fleet(tmp_path: Path) -> _driver._Fleet:
    drives = [FleetDrive("a", tmp_path / "a.mcap"), FleetDrive("b", tmp_path / "b.mcap")]
    return _driver._Fleet(drives, _driver.FleetOptions(out=tmp_path / "out", profile=tmp_path / "p.yaml"))


def test_a_drive_whose_node_is_lost_is_run_by_the_worker_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_driver, "WORKER_RESTART_S", 0.0)  # the lost worker is given up at once

    async def main() -> None:
        fleet = _fleet(tmp_path)
        healthy = _Healthy()
        fleet.workers = [healthy, _Dying(healthy.ran_drive("a"), None)]
        with anyio.fail_after(30):  # watchdog
            async with anyio.create_task_group() as tg:
                for w in fleet.workers:
                    tg.start_soon(fleet.work, w)
        assert {name: s.status for name, s in fleet.results.items()} == {"a": "ok", "b": "ok"}
        assert fleet.results["b"].attempts == 2 and fleet.results["b"].retries == (
            "attempt 1: worker died (RayActorError)",
        )
        assert sorted(healthy.ran) == [("a", 1), ("b", 2)] and not fleet.queue and not fleet.running

    anyio.run(main)


def test_a_requeued_drive_does_not_wait_for_its_worker_s_restart(tmp_path: Path) -> None:
    # WORKER_RESTART_S (120 s) is how long the dead worker may take to come back: its drive is run by the
    # idle worker meanwhile, not after.
    async def main() -> None:
        fleet = _fleet(tmp_path)
        healthy, back = _Healthy(), anyio.Event()
        fleet.workers = [healthy, _Dying(healthy.ran_drive("a"), back)]
        async with anyio.create_task_group() as tg:
            for w in fleet.workers:
                tg.start_soon(fleet.work, w)
            with anyio.fail_after(30):  # watchdog: the old code ran it after the restart, here never
                await healthy.ran_drive("b").wait()
            assert not back.is_set()  # the dead worker is still not back
            assert fleet.results["b"].status == "ok" and ("b", 2) in healthy.ran
            back.set()  # it comes back, finds nothing to do, and the run ends
        assert not fleet.queue and not fleet.running  # nothing out (the drives out are those running)

    anyio.run(main)
