"""ROS 2 tests: real rclpy (the ``ros`` extra), DDS on this machine only, a domain of their own.

Each test session takes a ROS domain id from its process id, so that parallel runs on one machine
(other checkouts, CI) do not hear each other; discovery stays on localhost.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from ros_helpers import OwnRos, Subscriber


@pytest.fixture(scope="session", autouse=True)
def ros_domain() -> Iterator[int]:
    """A domain id (1..100) for this session, localhost-only discovery; exported to subprocesses."""
    saved = {k: os.environ.get(k) for k in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE")}
    domain = 1 + os.getpid() % 100
    os.environ["ROS_DOMAIN_ID"] = str(domain)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    yield domain
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def subscriber() -> Iterator[Subscriber]:
    sub = Subscriber()
    try:
        yield sub
    finally:
        sub.close()


@pytest.fixture
def ros(monkeypatch: pytest.MonkeyPatch) -> Iterator[OwnRos]:
    """The test's node under test and what spins it (:class:`OwnRos`), taken down after the test. It asks for
    ``monkeypatch`` to be set up first, so that it is taken down before the test's patches are undone (as the
    tests' own ``finally`` was)."""
    own = OwnRos()
    try:
        yield own
    finally:
        own.close()
