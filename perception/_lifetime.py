"""Where an object that owns tasks, a thread or a file is in its life: one :class:`Lifetime` field.

Its state is one :class:`Lifetime` (as httpx's client state): ``UNOPENED`` until it is opened,
``OPENED`` while it takes work, ``CLOSING`` while it drains and releases (no new work), ``CLOSED``. An
object is opened once; opening it again is a :class:`~perception.errors.RuntimeClosedError`; closing it
twice is a no-op (:attr:`Lifetime.done`). A synchronous resource (a file, a server, a thread) closed by one
call is a :class:`Closable`: its ``close``, ``state`` and ``with`` block, the one way. The hosting helpers
built on it (an event-loop thread, a task of its own) are in :mod:`perception.scheduler` (``ThreadHost``,
``hosted_in_task``).
"""

from __future__ import annotations

import enum
from types import TracebackType
from typing import Self

from perception.errors import RuntimeClosedError

__all__ = ["Closable", "Lifetime"]


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


class Closable:
    """A synchronous resource released once: by :meth:`close` (idempotent: a second call, or one while closing,
    returns at once) or by leaving its ``with`` block (also when the block raises: the exception propagates).
    A subclass sets ``_state`` (:class:`Lifetime`) when it is opened and releases what it holds in
    :meth:`_close`, which runs once, ``CLOSING``; the state is ``CLOSED`` after it, even if it raises."""

    _state: Lifetime

    @property
    def state(self) -> Lifetime:
        """Where the resource is in its life (:class:`Lifetime`)."""
        return self._state

    def close(self) -> None:
        """Release the resource (:meth:`_close`), once."""
        if self._state.done:
            return
        self._state = Lifetime.CLOSING
        try:
            self._close()
        finally:
            self._state = Lifetime.CLOSED

    def _close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
