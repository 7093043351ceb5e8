"""A minimal terminal progress bar on stderr, shown only when stderr is a terminal."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``with Progress(total, "replay") as bar: bar.update(n, note)`` — silent when not a TTY."""

    def __init__(self, total: float, label: str, *, enabled: bool | None = None, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._enabled = self._stream.isatty() if enabled is None else enabled
        self._total = max(float(total), 1e-9)
        self._label = label
        self._last_draw = 0.0
        self._start = time.monotonic()
        self._done = 0.0
        self._note = ""

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._enabled:
            self._draw(self._note, force=True)
            self._stream.write("\n")
            self._stream.flush()

    @property
    def enabled(self) -> bool:
        return self._enabled

    def close(self) -> None:
        self.__exit__(None, None, None)

    def update(self, done: float, note: str = "") -> None:
        self._done = min(max(done, 0.0), self._total)
        self._note = note
        if self._enabled:
            self._draw(note)

    def _draw(self, note: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < 0.1:
            return
        self._last_draw = now
        frac = self._done / self._total
        width = 30
        filled = int(frac * width)
        elapsed = now - self._start
        bar = "#" * filled + "-" * (width - filled)
        self._stream.write(f"\r{self._label} [{bar}] {frac * 100:5.1f}% {elapsed:6.1f}s {note}\x1b[K")
        self._stream.flush()
