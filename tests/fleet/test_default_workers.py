"""How many workers a fleet runs unless told: what the servers can serve (issue 27)."""

from __future__ import annotations

import logging

import pytest

from perception.fleet._driver import CPUS_PER_WORKER_EMBEDDED, default_workers, worker_count


def test_embedded_servers_get_workers_for_their_cpus_not_one_per_cpu() -> None:
    # this 2-core machine: one worker, its frames alone on the node's server (one per CPU degraded them all)
    assert default_workers([("a", 2.0)], embedded=True) == 1
    assert default_workers([("a", 16.0)], embedded=True) == 16 // CPUS_PER_WORKER_EMBEDDED
    # every node with CPUs gets at least one, each by its own CPUs
    assert default_workers([("a", 2.0), ("b", 8.0)], embedded=True) == 1 + 8 // CPUS_PER_WORKER_EMBEDDED


def test_external_servers_get_one_worker_per_cpu() -> None:
    assert default_workers([("a", 2.0), ("b", 8.0)], embedded=False) == 10


def test_workers_asked_for_are_at_most_the_cluster_s_cpus(caplog: pytest.LogCaptureFixture) -> None:
    # --workers 1024 on a local cluster of 2 cores started 1024 worker processes (each with its imports
    # and memory), to take turns on 2 CPUs.
    nodes = [("a", 2.0)]
    with caplog.at_level(logging.WARNING, logger="perception.fleet._driver"):
        assert worker_count(1024, nodes, embedded=True) == 2
    assert caplog.messages == [
        "--workers 1024: the Ray cluster has 2 CPU(s); running 2 worker(s) (more would only take turns on them)"
    ]
    caplog.clear()
    assert worker_count(2, nodes, embedded=True) == 2  # asked for within the CPUs: as asked, nothing said
    assert worker_count(3, [("a", 2.0), ("b", 8.0)], embedded=False) == 3
    assert worker_count(None, nodes, embedded=True) == default_workers(nodes, embedded=True)
    assert caplog.messages == []
