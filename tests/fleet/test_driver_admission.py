"""The driver frees what a dead worker held of its node's shared admission: every stream of it, named as
the worker was named when it attached (no cluster: the node's server is a stand-in calling the real
:class:`~perception.scheduler.SharedAdmission`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from perception.fleet import _driver
from perception.fleet._worker import NodeServer
from perception.scheduler import SharedAdmission

DEADLINE = 200_000_000


class _Remote:
    """A Ray actor method as the driver calls it (``.remote(...)``, then awaited)."""

    def __init__(self, method: Any) -> None:
        self._method = method

    def remote(self, *args: Any) -> Any:
        return self._method(*args)


class _Node:
    """A node's server actor: its NodeServer's admission calls."""

    def __init__(self) -> None:
        self.server = NodeServer()
        self.admission_drop = _Remote(self.server.admission_drop)
        self.admission: SharedAdmission = self.server._admission


def test_a_dead_worker_s_streams_are_all_detached_from_its_node_s_admission(tmp_path: Path) -> None:
    async def main() -> None:
        fleet = _driver._Fleet([], _driver.FleetOptions(out=tmp_path / "out", profile=tmp_path / "p.yaml"))
        node = _Node()
        fleet.workers = [object(), object()]
        fleet.server_of = {0: node, 1: node}
        shared = node.admission
        # worker 1's replay and its second stream, worker 0's one: tokens as the workers attach them
        w1 = [shared.attach(3, DEADLINE, adaptive=False, owner=_driver._owner(1)) for _ in range(2)]
        w0 = shared.attach(3, DEADLINE, adaptive=False, owner=_driver._owner(0))
        for token in (*w1, w1[1]):
            assert await shared.acquire(token)
        assert shared.in_flight == 3  # every slot: worker 0 would wait
        with anyio.fail_after(30):  # watchdog
            await fleet._forget(fleet.workers[1])
        assert shared.in_flight == 0 and shared.report()["shared_by"] == 1
        assert [await shared.acquire(t) for t in w1] == [False, False]  # both of worker 1's streams detached
        assert await shared.acquire(w0)  # worker 0's goes on

    anyio.run(main)
