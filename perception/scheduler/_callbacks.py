"""The bounded callback thread of the facades for hosts that are not async.

Host callbacks run on one thread of their own, in submission order, never on the event-loop (I/O)
thread: a slow callback cannot stall the scheduler. It cannot grow memory either: at most ``maxsize``
calls wait; beyond that the oldest waiting one is dropped and counted (:attr:`CallbackQueue.dropped`)
-- a vehicle host wants the newest results. Closing runs what is queued within a time bound, then
abandons the thread (a daemon) with a warning instead of waiting for a callback that never returns.
A callback that raises is counted (:attr:`CallbackQueue.failed`), its first failure of each exception
type logged with its traceback, and closing logs the count of each type: a callback that raises on
every result is one traceback and one count, not a traceback per result.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from perception._lifetime import Lifetime

__all__ = ["CallbackQueue"]

log = logging.getLogger(__name__)


class CallbackQueue:
    """``submit(fn, *args)`` never blocks; ``fn(*args)`` runs on the callback thread (module docs)."""

    def __init__(self, maxsize: int, *, name: str) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize: must be >= 1, got {maxsize}")
        self._maxsize = maxsize
        self._calls: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._cond = threading.Condition()
        self._state = Lifetime.OPENED  # the thread runs from construction on
        #: Calls dropped because ``maxsize`` were already waiting (the oldest waiting goes), or submitted once the
        #: queue was closing (never run: a callback runs on this thread, before its close returns, or not at all).
        self.dropped = 0
        #: Calls that raised (the thread goes on), and how many of each exception type.
        self.failed = 0
        self._failed_types: Counter[str] = Counter()
        self._failed_logged: Counter[str] = Counter()  # the counts logged at close
        #: A callback is closing the host that owns this queue (:meth:`host_closing`).
        self._closed_by_callback = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        return len(self._calls)

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._cond:
            if self._state is not Lifetime.OPENED:
                self.dropped += 1  # a host's frame ending as it closes: counted, not run after the close
                return
            if len(self._calls) >= self._maxsize:
                self._calls.popleft()
                self.dropped += 1
            self._calls.append((fn, args))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._calls and self._state is Lifetime.OPENED:
                    self._cond.wait()
                if not self._calls:
                    return  # closing and nothing left
                fn, args = self._calls.popleft()
            try:
                fn(*args)
            except Exception as exc:
                kind = type(exc).__name__
                with self._cond:
                    self.failed += 1
                    self._failed_types[kind] += 1
                    first = self._failed_types[kind] == 1
                if first:
                    log.warning(
                        "a result callback raised %s (counted; more of this type are counted, not logged: "
                        "their number is logged at close)",
                        kind,
                        exc_info=True,
                    )

    def host_closing(self) -> None:
        """A host's close calls this first, on its own thread: when that is the callback thread (a
        callback closing its host), :meth:`close` does not wait for the thread, which waits for that
        close; the calls still queued run once the callback returns, then the thread ends."""
        if threading.current_thread() is self._thread:
            self._closed_by_callback = True

    def close(self, timeout_s: float) -> bool:
        """Run what is queued, for at most ``timeout_s``; True when the thread has ended. After the
        bound, what is still queued is dropped (counted) and a callback still running is abandoned.
        Closing again returns at once (whether the thread has ended by now). Closed by a callback (on
        the callback thread, or after :meth:`host_closing` there), it returns at once: the thread runs
        what is queued after that callback and ends."""
        with self._cond:
            if self._state.done:
                return not self._thread.is_alive()
            self._state = Lifetime.CLOSING
            self._cond.notify()
        if self._closed_by_callback or threading.current_thread() is self._thread:
            self._state = Lifetime.CLOSED
            self._log_failures()  # so far: the calls after this one are not waited for
            return False
        try:
            self._thread.join(max(0.0, timeout_s))
            if self._thread.is_alive():
                with self._cond:
                    self.dropped += len(self._calls)
                    self._calls.clear()
                log.warning(
                    "a result callback still running %.1f s after close was abandoned (its thread is a daemon)",
                    timeout_s,
                )
                return False
            return True
        finally:
            self._state = Lifetime.CLOSED
            self._log_failures()

    def _log_failures(self) -> None:
        """At close: how many calls raised, of each type, since the last count logged (once each)."""
        with self._cond:
            counts = self._failed_types - self._failed_logged
            self._failed_logged += counts
        if counts:
            kinds = ", ".join(f"{kind} x{n}" for kind, n in counts.most_common())
            log.warning("result callbacks raised %d times (%s)", sum(counts.values()), kinds)

    @property
    def state(self) -> Lifetime:
        """Where the queue is in its life (:class:`~perception._lifetime.Lifetime`)."""
        return self._state

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
