"""Where an object that owns tasks, a thread or a file is in its life: one :class:`Lifetime` field.

Its state is one :class:`Lifetime` (as httpx's client state): ``UNOPENED`` until it is opened,
``OPENED`` while it takes work, ``CLOSING`` while it drains and releases (no new work), ``CLOSED``. An
object is opened once; opening it again is a :class:`~perception.errors.RuntimeClosedError`; closing it
twice is a no-op (:attr:`Lifetime.done`). The hosting helpers built on it (an event-loop thread, a task
of its own) are in :mod:`perception.scheduler` (``ThreadHost``, ``hosted_in_task``).
"""

from __future__ import annotations

import enum

from perception.errors import RuntimeClosedError

__all__ = ["Lifetime"]


class Lifetime(enum.Enum):
    """Where an object that owns tasks or a thread is in its life (module docs)."""

    UNOPENED = "unopened"
    OPENED = "opened"
    CLOSING = "closing"
    CLOSED = "closed"

    @property
    def done(self) -> bool:
        """Closing or closed: a close has begun, so a second close returns at once."""
        return self in (Lifetime.CLOSING, Lifetime.CLOSED)

    def check_unopened(self, what: str) -> None:
        """Raise unless the object (``what``) was never opened: it is opened once."""
        if self is not Lifetime.UNOPENED:
            raise RuntimeClosedError(f"the {what} is {self.value}: it is opened once")
