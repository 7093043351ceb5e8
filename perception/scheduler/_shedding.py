"""Overload: when frames arrive faster than the servers finish them, shed whole frames, never a sensor.

A vehicle's sensors do not wait. When frames come faster than the models finish them, something has to
give. Queueing them only moves the problem into the frames' deadlines: a frame that waited for a slot
starts with less of its budget left, its slowest sensor (the lidar) is late, and every frame after it
waits longer still. Skipping a sensor gives up the wrong thing. So on every real-time path (a source
that does not wait: ``replay --rate R``, ``perception live``, the ROS node, :class:`LiveRuntime`,
:meth:`Runtime.run` fed by a live source, :meth:`ThreadedRuntime.submit`) this one policy decides, each
time a slot frees, which frame runs:

* every waiting frame that can still finish within its budget runs, one after another; when they cannot
  all, the oldest are *superseded* and shed (their answers would be older than the fresher ones', and
  computing them would push those past their budgets): the frame that runs is the oldest from which
  every waiting frame still finishes within its budget, each taking the frames' measured service time
  (:class:`ServiceTimes`: start to result, the 90th percentile of the latest frames; a frame cut short
  by its deadline counts as taking its whole budget) after the one before it. Under sustained overload
  that is the freshest;
* when not even the freshest can finish within its budget (what is left of it, the budget less the
  time it already waited, is less than the service time) it is shed too: the next frame to arrive finds
  the slot free and starts with its whole budget. Nothing is hard-wired: the service time is what this
  machine measured, recently.
* A frame that finds a slot free when it arrives runs, whatever it spent of its budget before (a live
  frame's clock starts at its trigger's arrival, and assembly waits for the other sensors): the next
  frame would spend as much, and shedding it frees nothing for a fresher one. Nor are the first
  frames: until a few service times were measured after the stream's first frame (whose one-time
  costs no later frame pays), frames run first come, first served.

A shed frame is decided before any of its requests is sent: it costs the servers nothing. It still
yields its one record, status ``dropped`` with the reason :data:`OVERLOAD` (``report.json``'s
``drop_reasons``, ``LiveRuntime.status()``, the ROS node's ``/diagnostics``), carrying the tracker's
prediction at its time, marked ``predicted`` (read-only: the tracker is never advanced by it, nor out of
order), so that downstream has an answer at the sensors' rate.

Sources that wait (``overflow: block``: ``--rate max``, ``--rate lockstep``) never have frames waiting
for a slot, and are left alone. ``pipeline.overload: queue`` turns the policy off (the frames then queue
under ``queue_size`` and ``overflow`` as before: to measure what the policy avoids).

A source may shed a frame itself, before building it (:class:`Superseded`): a live assembler holding a
backlog of due frames larger than the pipeline holds (a flood of trigger samples) builds only the newest
(building one may cost tens of milliseconds of sweeps and images, on the event loop); each older one goes
to the pipeline as the stub of its id, time and ego pose, which the pipeline records shed in its turn
like its own (the tracker's prediction: it reads nothing else of the frame), never running it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from perception.config import PipelineConfig
from perception.types import Frame

__all__ = [
    "MEASURED_MIN",
    "OVERLOAD",
    "SERVICE_WINDOW",
    "WARMUP_FRAMES",
    "OverloadPolicy",
    "ServiceTimes",
    "Superseded",
    "Verdict",
    "sheds",
]

#: The reason of a shed frame's record (its first word: the key in ``drop_reasons``).
OVERLOAD = "overload"
#: Frames whose service times the estimate spans (the newest ones).
SERVICE_WINDOW = 16
#: A stream's first frames, whose service times the estimate leaves out: they carry one-time costs (the
#: first requests on new connections and shared-memory regions, first calls into the fusion's kernels,
#: threads starting; seconds on a busy host) that no later frame pays.
WARMUP_FRAMES = 1
#: Service times measured (after the warm-up) before the policy sheds: until then frames run first come,
#: first served. One measurement is not an estimate of the slow ones.
MEASURED_MIN = 3


@dataclass(frozen=True, slots=True)
class Superseded:
    """A frame its source shed before building it (module docs), handed to :meth:`Runtime.run` in its
    place in the stream: ``frame`` is its stub (id, time, ego pose, ``created_ns``; no samples), ``reason``
    its record's (``overload (...)``). The pipeline records it shed in its turn (the tracker's prediction,
    by ``shed``), a pipeline without the overload policy ``dropped``; it is never processed."""

    frame: Frame
    reason: str

    @property
    def frame_id(self) -> int:
        return self.frame.frame_id


def sheds(config: PipelineConfig) -> bool:
    """Whether a pipeline of ``config`` sheds under overload (a source that does not wait, policy on)."""
    return config.overload == "shed" and config.overflow != "block"


class ServiceTimes:
    """The service times (ns, a frame's start to its result) of the latest :data:`SERVICE_WINDOW` frames;
    the estimate of the next frame's is their 90th percentile (nearest rank): a frame started now must
    finish in time even if it is among the slow ones, and a cautious estimate sheds a frame that might
    have made it, which the next arrival replaces, rather than start one that ends late. Not the
    slowest: one frame slowed by something else (a stall of the host) would turn the rule off for the
    whole window."""

    def __init__(self, window: int = SERVICE_WINDOW, *, warmup: int = WARMUP_FRAMES, least: int = MEASURED_MIN) -> None:
        self._recent: deque[int] = deque(maxlen=window)
        self._warmup = warmup
        self._least = max(1, min(least, window))

    def observe(self, service_ns: int) -> None:
        if self._warmup > 0:
            self._warmup -= 1  # a warm-up frame's (WARMUP_FRAMES): not an estimate of the next ones
            return
        self._recent.append(service_ns)

    def estimate(self) -> int | None:
        """The service time to expect of a frame started now; ``None`` until enough were measured
        (``least``, after the ``warmup`` frames: :data:`WARMUP_FRAMES`, :data:`MEASURED_MIN`)."""
        if len(self._recent) < self._least:
            return None
        ranked = sorted(self._recent)
        return ranked[min(len(ranked) - 1, -(-9 * len(ranked) // 10) - 1)]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with the frames waiting for a slot (indices into them, oldest first)."""

    #: The frame to start now, or ``None``.
    start: int | None
    #: The frames shed, each with its reason (``overload (...)``).
    shed: tuple[tuple[int, str], ...]


class OverloadPolicy:
    """The overload policy (module docs): which waiting frame runs and which are shed.

    ``budget_ns``: a frame's budget from the moment its clock starts (``Frame.created_ns``: its
    trigger's arrival on a live host, its intake in a replay). Pure bookkeeping on times passed in
    (:meth:`choose`'s ``now_ns``), so it is tested with service times and clocks fed in.
    """

    def __init__(self, budget_ns: int, service: ServiceTimes | None = None) -> None:
        self.budget_ns = budget_ns
        self.service = service or ServiceTimes()
        #: Frames shed so far: superseded by a fresher one, or too late to finish in their budget.
        self.superseded = 0
        self.too_late = 0
        #: Frames shed because the queue of waiting frames overflowed (``queue_size``, ``overflow``).
        self.queue_overflow = 0

    def observe(self, service_ns: int, *, cut: bool = False) -> None:
        """A frame ended ``service_ns`` after it was admitted (the admission's measure). ``cut``: it ended
        late (a sensor late at the join, or its deadline missed), cut short by its deadline: it needed more
        than it had, which says only that frames take longer -- taken as its whole budget. (Frames started
        with little of their budget left, as the first ones are, first come first served, end soon after
        they start: taken as their times, three such frames of ``perception budget --rate 2`` made frames
        seem to take 97 ms where a whole one took 176, and a frame that had waited 81 ms was started, to
        be late in every sensor.)"""
        self.service.observe(max(service_ns, self.budget_ns) if cut else service_ns)

    def choose(self, started_ns: Sequence[int], now_ns: int, *, arrived: bool = False, parallel: int = 1) -> Verdict:
        """A slot is free: ``started_ns`` are the budget clocks' starts of the frames waiting for it
        (oldest first). The oldest frame from which every waiting frame can still finish within its
        budget, ``parallel`` at a time (the admission's limit), runs; the older ones are shed. When not
        even the freshest can, all are shed -- unless it has just ``arrived`` to the free slot (it
        waited for none): then it runs."""
        parallel = max(1, parallel)
        n = len(started_ns)
        if not n:
            return Verdict(None, ())
        expected = self.service.estimate()
        if expected is None or (arrived and n == 1):
            return Verdict(0, ())  # nothing measured yet: first come, first served
        start = next(
            (
                i
                for i in range(n)
                if all(
                    now_ns - started_ns[k] + -(-(k - i + 1) // parallel) * expected <= self.budget_ns
                    for k in range(i, n)
                )
            ),
            n - 1 if arrived else None,
        )
        kept = start if start is not None else n - 1
        shed = [(i, f"{OVERLOAD} (superseded: the {n - i - 1} fresher frame(s) waiting could not all finish "
                 f"within their budgets after it)") for i in range(kept)]  # fmt: skip
        self.superseded += kept
        if start is None:
            waited = max(0, now_ns - started_ns[-1])
            left = self.budget_ns - waited
            self.too_late += 1
            shed.append(
                (
                    n - 1,
                    f"{OVERLOAD} (waited {waited / 1e6:.0f} ms: {left / 1e6:.0f} ms of its budget left, "
                    f"frames take up to {expected / 1e6:.0f} ms)",
                )
            )
        return Verdict(start, tuple(shed))

    def report(self) -> dict[str, object]:
        """The policy's counts for a run's report (the records say which frames)."""
        expected = self.service.estimate()
        return {
            "superseded": self.superseded,
            "too_late": self.too_late,
            "queue_overflow": self.queue_overflow,
            "service_estimate_ms": round(expected / 1e6, 3) if expected is not None else None,
        }
