"""Entry point of the publisher process ``perception live`` starts:
``python -m perception.live._publisher_main DRIVE SOCKET FAULTS_JSON``.

A module of its own, which nothing in the package imports: ``python -m`` first imports the package
``perception.live`` (whose ``__init__`` imports :mod:`perception.live._publisher`), so running
``_publisher`` itself with ``-m`` executed a second copy of it as ``__main__`` beside the one already
imported, two sets of classes, and runpy warned about it (a ``RuntimeWarning`` on every ``perception live``).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from pathlib import Path

from perception.errors import PerceptionError
from perception.live._publisher import Faults, publish
from perception.live._session import StopOnSignal


def main(argv: list[str] | None = None) -> int:
    drive, path, faults_json = sys.argv[1:] if argv is None else argv
    data = json.loads(faults_json)
    faults = Faults(
        silence=tuple(tuple(x) for x in data.get("silence", ())),
        bursts=tuple(tuple(x) for x in data.get("bursts", ())),
        jitter_ms=float(data.get("jitter_ms", 0.0)),
        clock_jumps=tuple(tuple(x) for x in data.get("clock_jumps", ())),
        seed=int(data.get("seed", 0)),
    )
    logging.basicConfig(level=logging.WARNING)
    # Ctrl-C reaches the host's whole process group, this process too: it stops playing and exits quietly
    # (the host reports the interruption); a KeyboardInterrupt traceback came out of its join of the threads.
    stop = threading.Event()
    on_signal = StopOnSignal(stop)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    try:
        publish(Path(drive), Path(path), faults, rate=float(data.get("rate", 1.0)), stop=stop)
    except PerceptionError as exc:  # a drive it cannot play: one line, as the host's errors (no traceback)
        sys.stderr.write(f"perception live publisher: error: {exc}\n")
        return 1
    return 128 + on_signal.received[0] if on_signal.received else 0  # the shell's code for a process a signal stopped


if __name__ == "__main__":
    raise SystemExit(main())
