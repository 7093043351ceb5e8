"""Admission: how many frames may be in flight, adapted to what the servers sustain.

A frame admitted into flight starts its deadline clock. If more frames are admitted than the servers
can work on, the extra ones wait in Triton's queue *inside* their deadlines: on CPU-bound models two
frames in flight take about twice as long each, for no more frames per second, and the tail misses
the deadline. So admission is a limit ``L`` between 1 and ``pipeline.max_in_flight``, adapted to the
measured service time of frames (admission to result):

* it starts at 1 (every frame alone: lockstep's conditions, at lockstep's throughput or better);
* it probes ``L + 1`` only while frames are waiting for a slot and only if, even with full contention
  (service growing in proportion to the frames in flight), the slowest recent frame would still end
  within :data:`HEADROOM` of the deadline;
* after :data:`HOLD` frames at the probed limit it keeps it only if throughput (``L / mean service``)
  rose by at least :data:`MIN_GAIN` — i.e. the servers really had capacity; otherwise the extra frame
  was only queueing, and the limit goes back;
* a frame that ended past :data:`HEADROOM` of its deadline, or with a sensor late, halves the limit;
* after a step back, the next probe waits twice as long (up to :data:`MAX_BACKOFF` frames).

``pipeline.admission: fixed`` keeps ``L = max_in_flight`` (to measure a given depth: ``perception
budget --in-flight K``, ``perception bench``). The limit only governs how many frames are *started*;
frames beyond it wait outside the deadline (in the pipeline's queue under its overflow policy, or in
the source under ``block``).
"""

from __future__ import annotations

import logging
from collections import deque
from statistics import fmean

__all__ = ["HEADROOM", "HOLD", "MAX_BACKOFF", "MIN_GAIN", "Admission"]

log = logging.getLogger(__name__)

#: The share of a frame's deadline that frames in flight may take, worst case, when the limit rises.
HEADROOM = 0.6
#: Frames measured at a limit before it is judged (and the minimum wait before a probe).
HOLD = 8
#: The throughput gain (relative) that keeps a probed limit.
MIN_GAIN = 0.10
#: The longest wait, in frames, before probing again after a step back.
MAX_BACKOFF = 512


class Admission:
    """The in-flight limit of one pipeline (see the module docs). Not thread-safe: one event loop."""

    def __init__(self, max_in_flight: int, deadline_ns: int, *, adaptive: bool = True) -> None:
        self.max = max_in_flight
        self.deadline_ns = deadline_ns
        self.adaptive = adaptive and max_in_flight > 1
        self.limit = 1 if self.adaptive else max_in_flight
        self._recent: deque[int] = deque(maxlen=HOLD)  # service ns of frames at the current limit
        self._throughput: dict[int, float] = {}  # frames per ns at each limit, as last measured
        self._probing = False
        self._wait = HOLD  # frames before the next probe
        self._since = 0  # frames since the limit last changed
        self._backoff = HOLD
        #: Frames that ended past the headroom or with a sensor late; limit changes (for the report).
        self.overloaded = 0
        self.changes = 0
        self.peak = self.limit

    def observe(self, service_ns: int, *, late: bool) -> None:
        """One frame ended ``service_ns`` after it was admitted; ``late``: a sensor missed the join."""
        if not self.adaptive:
            return
        self._since += 1
        over = late or service_ns > HEADROOM * self.deadline_ns
        if over:
            self.overloaded += 1
            if self.limit > 1:
                self._set(max(1, self.limit // 2), why="a frame used its deadline's headroom")
                self._back_off()
            return
        self._recent.append(service_ns)
        if len(self._recent) < HOLD:
            return
        throughput = self.limit / fmean(self._recent)
        if self._probing:
            self._probing = False
            before = self._throughput.get(self.limit - 1, 0.0)
            if throughput < before * (1.0 + MIN_GAIN):
                self._set(self.limit - 1, why=f"{self.limit} in flight gained no throughput")
                self._back_off()
                return
            self._backoff = HOLD  # the probe paid: probe on soon
            self._wait = HOLD
        self._throughput[self.limit] = throughput

    def may_probe(self) -> bool:
        """Frames are waiting for a slot: raise the limit if that is safe (see the module docs)."""
        if not self.adaptive or self._probing or self.limit >= self.max:
            return False
        if self._since < self._wait or len(self._recent) < HOLD:
            return False
        worst = max(self._recent) * (self.limit + 1) / self.limit  # full contention
        if worst > HEADROOM * self.deadline_ns:
            return False
        self._throughput[self.limit] = self.limit / fmean(self._recent)
        self._probing = True
        self._set(self.limit + 1, why="probing")
        return True

    def _set(self, limit: int, *, why: str) -> None:
        if limit != self.limit:
            log.debug("admission: %d -> %d frames in flight (%s)", self.limit, limit, why)
            self.changes += 1
        self.limit = limit
        self.peak = max(self.peak, limit)
        self._recent.clear()
        self._since = 0

    def _back_off(self) -> None:
        self._probing = False
        self._backoff = min(MAX_BACKOFF, self._backoff * 2)
        self._wait = self._backoff

    def report(self) -> dict[str, object]:
        """The admission's state for a run's report."""
        return {
            "mode": "adaptive" if self.adaptive else "fixed",
            "limit": self.limit,
            "peak": self.peak,
            "max_in_flight": self.max,
            "changes": self.changes,
            "overloaded_frames": self.overloaded,
        }
