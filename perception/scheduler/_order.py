"""Turns in hand-in order: the frames in flight together are fused one after another, in the order they
were handed in, however each of them ends.

Each frame takes a ticket when it is handed in (:meth:`HandInOrder.take`), waits for its turn before it
is fused (:meth:`HandInOrder.wait`) and ends its ticket on *every* way out (:meth:`HandInOrder.end`:
fused, or never fused because it errored, was cancelled, or was shed). A frame's turn comes once every
frame handed in before it has ended, so a frame that ends without its turn (cancelled while its requests
were out) does not let the frames after it past the ones before it: the tracker sees the fused frames in
hand-in order, and never a frame older than one it already saw.
"""

from __future__ import annotations

import anyio

__all__ = ["HandInOrder"]


class HandInOrder:
    """Tickets taken in hand-in order; a ticket's turn comes once every earlier ticket has ended.
    One event loop."""

    def __init__(self) -> None:
        self._next = 0  # the next ticket handed out
        self._turn = 0  # the oldest ticket not ended: its turn
        self._ended: set[int] = set()  # tickets ended before their turn
        self._waiting: dict[int, anyio.Event] = {}

    def take(self) -> int:
        """A ticket for a frame handed in now."""
        ticket = self._next
        self._next += 1
        return ticket

    def is_turn(self, ticket: int) -> bool:
        """Whether every ticket taken before ``ticket`` has ended."""
        return ticket <= self._turn

    async def wait(self, ticket: int) -> None:
        """Returns once it is ``ticket``'s turn (at once if it is)."""
        if self.is_turn(ticket):
            return
        event = self._waiting.setdefault(ticket, anyio.Event())
        await event.wait()

    def end(self, ticket: int) -> None:
        """``ticket`` is done with its turn (fused), or gives it up (it will not be fused). Call it on every
        way out, exactly once per ticket."""
        self._ended.add(ticket)
        self._waiting.pop(ticket, None)
        while self._turn in self._ended:
            self._ended.discard(self._turn)
            self._turn += 1
        event = self._waiting.pop(self._turn, None)
        if event is not None:
            event.set()
