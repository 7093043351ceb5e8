"""How many workers a fleet runs unless told: what the servers can serve (issue 27)."""

from __future__ import annotations

from perception.fleet._driver import CPUS_PER_WORKER_EMBEDDED, default_workers


def test_embedded_servers_get_workers_for_their_cpus_not_one_per_cpu() -> None:
    # this 2-core machine: one worker, its frames alone on the node's server (one per CPU degraded them all)
    assert default_workers([("a", 2.0)], embedded=True) == 1
    assert default_workers([("a", 16.0)], embedded=True) == 16 // CPUS_PER_WORKER_EMBEDDED
    # every node with CPUs gets at least one, each by its own CPUs
    assert default_workers([("a", 2.0), ("b", 8.0)], embedded=True) == 1 + 8 // CPUS_PER_WORKER_EMBEDDED


def test_external_servers_get_one_worker_per_cpu() -> None:
    assert default_workers([("a", 2.0), ("b", 8.0)], embedded=False) == 10
