"""Admission: how many frames may be in flight, adapted to what the servers sustain.

A frame's deadline runs from its intake (its budget clock, ``created_ns``). If more frames are admitted
than the servers can work on, the extra ones wait in Triton's queue *inside* their deadlines: on
CPU-bound models two frames in flight take about twice as long each, for no more frames per second, and
the tail misses the deadline. So admission is a limit ``L`` between 1 and ``pipeline.max_in_flight``,
adapted to the measured service time of frames (admission to result: what the servers take, not the
wait for a slot before it, which more frames in flight would shorten):

* it starts at 1 (every frame alone: lockstep's conditions, at lockstep's throughput or better);
* it probes ``L + 1`` only while frames are waiting for a slot and only if, even with full contention
  (service growing in proportion to the frames in flight), the slowest recent frame's service would
  still take less than :data:`HEADROOM` of the deadline;
* after :data:`HOLD` frames at the probed limit it keeps it only if throughput (``L / mean service``)
  rose by at least :data:`MIN_GAIN` — i.e. the servers really had capacity; otherwise the extra frame
  was only queueing, and the limit goes back;
* a frame whose service took more than :data:`HEADROOM` of the deadline, or that ended late (a sensor
  late at the join, or its deadline missed), halves the limit. Also a frame that ended late only because it
  waited long for its slot (``overload: queue``): not halving for those was tried and measured worse (a
  30 Hz drive, 1.6x the sustainable rate, queued: fused mAP 0.59-0.63 against 0.77-0.79, three runs each;
  kept at 2 in flight, the frames started with little budget left are cut at the join after using the
  servers, and the frames behind them wait longer still);
* after a step back, the next probe waits twice as long (up to :data:`MAX_BACKOFF` frames).

``pipeline.admission: fixed`` keeps ``L = max_in_flight`` (to measure a given depth: ``perception
budget --in-flight K``, ``perception bench``). The limit only governs how many frames are *started*;
frames beyond it wait for a slot (in the pipeline's queue under its overflow policy, or in the source
under ``block``, whose frames' clocks start once the queue has room). A frame waiting in the queue spends
its budget (the overload policy, :mod:`~perception.scheduler._shedding`, sheds it when what is left
cannot cover a service), but its wait is not part of the admission's measure.

A pipeline asks for a slot before it starts a frame and gives it back, with the frame's service time,
when the frame ends (:class:`AdmissionControl`). By default its slots are its own (an :class:`Admission`).
Pipelines that share servers share one admission instead, so that the frames in flight *together*
follow the rule above as one replay's do: a :class:`SharedAdmission` next to the servers (a fleet node's
:class:`~perception.fleet` server actor) holds the one :class:`Admission` and hands its slots out in
turn (first come, first served); each pipeline reaches it through a :class:`RemoteAdmission`
(``Runtime(..., admission=RemoteAdmission(server))``). Asking for a slot costs a call to the server
before the frame is admitted (a wait for a slot: outside the admission's measure); giving it back is
sent without waiting.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from statistics import fmean, median
from typing import Protocol

import anyio

__all__ = [
    "HEADROOM",
    "HOLD",
    "MAX_BACKOFF",
    "MIN_GAIN",
    "Admission",
    "AdmissionControl",
    "AdmissionProvider",
    "RemoteAdmission",
    "SharedAdmission",
]

log = logging.getLogger(__name__)

#: The share of a frame's deadline that frames in flight may take, worst case, when the limit rises.
HEADROOM = 0.6
#: Frames measured at a limit before it is judged (and the minimum wait before a probe).
HOLD = 8
#: The throughput gain (relative) that keeps a probed limit.
MIN_GAIN = 0.10
#: The longest wait, in frames, before probing again after a step back.
MAX_BACKOFF = 512


class AdmissionControl(Protocol):
    """What a pipeline asks before it starts a frame, and tells when the frame ends (one event loop)."""

    @property
    def limit(self) -> int:
        """The current limit of frames in flight (for the pipeline's buffers and the report)."""
        ...

    def try_acquire(self) -> bool:
        """A slot for a frame waiting to start, now, if there is one (the frame may be admitted)."""
        ...

    def release(self, service_ns: int | None, *, late: bool = False) -> None:
        """A frame admitted with :meth:`try_acquire` ended ``service_ns`` after its admission (``None``: it
        ended without a measure, e.g. cancelled, and its slot is only given back)."""
        ...

    async def granted(self) -> None:
        """Returns when a slot became available that the pipeline's own releases do not announce (a
        shared admission granted one); never, for slots that only the pipeline's releases free."""
        ...

    def report(self) -> dict[str, object]:
        """The admission's state for a run's report."""
        ...


class AdmissionProvider(Protocol):
    """Where a runtime gets the admission of each stream it runs (:meth:`perception.Runtime.run`)."""

    def open(
        self, max_in_flight: int, deadline_ns: int, *, adaptive: bool
    ) -> contextlib.AbstractAsyncContextManager[AdmissionControl]: ...


class Admission:
    """The in-flight limit of one pipeline (see the module docs), and its slots (:class:`AdmissionControl`).
    Not thread-safe: one event loop."""

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
        #: Frames admitted and not yet released.
        self.in_use = 0

    def try_acquire(self) -> bool:
        """A slot now if fewer than the limit are in use, or if a probe raises the limit (a frame waits)."""
        if self.in_use < self.limit or (self.in_use == self.limit and self.may_probe()):
            self.in_use += 1
            return True
        return False

    def release(self, service_ns: int | None, *, late: bool = False) -> None:
        """Give a slot back; with the frame's service time (admission to result), adapt the limit to it."""
        self.in_use = max(0, self.in_use - 1)
        if service_ns is not None:
            self.observe(service_ns, late=late)

    async def granted(self) -> None:
        await anyio.sleep_forever()  # only the pipeline's own releases free its slots

    def retune(self, max_in_flight: int, deadline_ns: int) -> None:
        """A new ceiling and deadline (a shared admission's pipelines changed); the limit stays within."""
        self.max = max_in_flight
        self.deadline_ns = deadline_ns
        if self.limit > max_in_flight:
            self._set(max_in_flight, why="a lower ceiling")
            self._probing = False

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


@dataclass
class _Client:
    """One pipeline attached to a :class:`SharedAdmission`."""

    owner: str
    max_in_flight: int
    deadline_ns: int
    in_use: int = 0
    granted: int = 0


@dataclass
class _Waiter:
    token: int
    event: anyio.Event = field(default_factory=anyio.Event)
    granted: bool = False


class SharedAdmission:
    """One :class:`Admission` whose slots several pipelines share (those of a fleet node's workers, which
    share its server): the frames in flight of all of them together follow the one rule.

    A pipeline :meth:`attach` es for a stream (its ceiling and deadline: the tightest of the attached ones
    apply) and gets a token; :meth:`acquire` waits for a slot, first come first served; :meth:`release`
    gives it back with the frame's service time, which the rule adapts to; :meth:`detach` ends the stream
    and frees whatever it still held; :meth:`drop_owner` does that for every stream of an owner that died.
    The rule starts afresh when no pipeline is attached. One event loop (a Ray actor's).
    """

    def __init__(self) -> None:
        self._rule: Admission | None = None
        self._clients: dict[int, _Client] = {}
        self._waiters: deque[_Waiter] = deque()
        self._next = 0
        #: Frames granted, and the most frames in flight together, since this admission was made.
        self.frames = 0
        self.peak_in_flight = 0

    @property
    def in_flight(self) -> int:
        return self._rule.in_use if self._rule is not None else 0

    def attach(self, max_in_flight: int, deadline_ns: int, *, adaptive: bool, owner: str = "") -> int:
        """A pipeline's stream starts: its token. The first attached stream sets whether the rule adapts."""
        self._next += 1
        self._clients[self._next] = _Client(owner, max(1, max_in_flight), deadline_ns)
        if self._rule is None:
            self._rule = Admission(max(1, max_in_flight), deadline_ns, adaptive=adaptive)
        else:
            self._retune()
        return self._next

    async def acquire(self, token: int) -> bool:
        """A slot for ``token``'s next frame, once it is its turn (False: the stream was detached). Cancelled
        while it waits, it leaves the line; a slot granted to it meanwhile goes back (to the next waiter)."""
        client = self._clients.get(token)
        if client is None or self._rule is None:
            return False
        if not self._waiters and self._rule.try_acquire():
            self._grant(client)
            return True
        waiter = _Waiter(token)
        self._waiters.append(waiter)
        try:
            await waiter.event.wait()
        except BaseException:  # cancelled: nobody takes the slot it waited for
            if waiter.granted:
                self.release(token, None)  # granted as it was cancelled: given back, unmeasured
            elif not waiter.event.is_set():
                self._waiters.remove(waiter)
            raise
        return waiter.granted

    def release(self, token: int, service_ns: int | None, late: bool = False) -> None:
        """``token``'s frame ended (see :meth:`Admission.release`); the slot goes to the next waiter."""
        client = self._clients.get(token)
        if client is None or self._rule is None or client.in_use == 0:
            return  # detached meanwhile: its slots were freed then
        client.in_use -= 1
        self._rule.release(service_ns, late=late)
        self._pump()

    def detach(self, token: int) -> None:
        """``token``'s stream ended: its waiters are turned away and the slots it still holds freed."""
        client = self._clients.pop(token, None)
        if client is None or self._rule is None:
            return
        for waiter in [w for w in self._waiters if w.token == token]:
            self._waiters.remove(waiter)
            waiter.event.set()
        for _ in range(client.in_use):
            self._rule.release(None)
        if not self._clients:
            self._rule = None  # the next stream starts afresh, as one replay does
            return
        self._retune()
        self._pump()

    def drop_owner(self, owner: str) -> None:
        """Detach every stream of ``owner`` (a worker that died holding slots)."""
        for token in [t for t, c in self._clients.items() if c.owner == owner]:
            self.detach(token)

    def report(self, token: int | None = None) -> dict[str, object]:
        """The shared rule's state, with ``token``'s own frames."""
        out: dict[str, object] = dict(self._rule.report()) if self._rule is not None else {}
        out.update(shared_by=len(self._clients), in_flight=self.in_flight, peak_in_flight=self.peak_in_flight)
        client = self._clients.get(token) if token is not None else None
        if client is not None:
            out["frames_granted"] = client.granted
        return out

    def in_process(self) -> AdmissionServer:
        """This admission's calls for pipelines on the same event loop (several runtimes of one process
        sharing servers): ``RemoteAdmission(shared.in_process())``."""
        return _InProcess(self)

    def _grant(self, client: _Client) -> None:
        client.in_use += 1
        client.granted += 1
        self.frames += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def _pump(self) -> None:
        while self._waiters and self._rule is not None and self._rule.try_acquire():
            waiter = self._waiters.popleft()
            self._grant(self._clients[waiter.token])
            waiter.granted = True
            waiter.event.set()

    def _retune(self) -> None:
        if self._rule is not None and self._clients:
            clients = self._clients.values()
            self._rule.retune(min(c.max_in_flight for c in clients), min(c.deadline_ns for c in clients))


class AdmissionServer(Protocol):
    """A :class:`SharedAdmission` as a pipeline reaches it (in process, or a Ray actor's methods)."""

    def attach(self, max_in_flight: int, deadline_ns: int, adaptive: bool, owner: str) -> Awaitable[int]: ...

    def acquire(self, token: int) -> Awaitable[bool]: ...

    def release(self, token: int, service_ns: int | None, late: bool) -> object:
        """Sent without waiting for it (a Ray call's reference, or nothing)."""
        ...

    def detach(self, token: int) -> Awaitable[object]: ...

    def report(self, token: int) -> Awaitable[dict[str, object]]: ...


class _InProcess:
    """A :class:`SharedAdmission` reached on its own event loop (:meth:`SharedAdmission.in_process`)."""

    def __init__(self, shared: SharedAdmission) -> None:
        self._shared = shared

    async def attach(self, max_in_flight: int, deadline_ns: int, adaptive: bool, owner: str) -> int:
        return self._shared.attach(max_in_flight, deadline_ns, adaptive=adaptive, owner=owner)

    async def acquire(self, token: int) -> bool:
        return await self._shared.acquire(token)

    def release(self, token: int, service_ns: int | None, late: bool) -> None:
        self._shared.release(token, service_ns, late)

    async def detach(self, token: int) -> None:
        self._shared.detach(token)

    async def report(self, token: int) -> dict[str, object]:
        return self._shared.report(token)


class RemoteAdmission:
    """An :class:`AdmissionProvider` over a shared admission: each stream a runtime runs attaches to it.

    ``server``: the :class:`SharedAdmission`'s calls (:class:`AdmissionServer`). ``owner`` names this
    process for :meth:`SharedAdmission.drop_owner`. Every stream attaches, whatever its ``max_in_flight``:
    a stream of one frame at a time (a lockstep replay) keeps one frame in flight *together with* the
    others, not one of its own beside theirs (its ceiling of 1 is the tightest, so it applies to all).
    """

    def __init__(self, server: AdmissionServer, owner: str = "") -> None:
        self.server = server
        self.owner = owner

    @contextlib.asynccontextmanager
    async def open(self, max_in_flight: int, deadline_ns: int, *, adaptive: bool) -> AsyncIterator[AdmissionControl]:
        token = await self.server.attach(max_in_flight, deadline_ns, adaptive, self.owner)
        client = _RemoteSlots(self.server, token, max_in_flight)
        try:
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                client.state = await self.server.report(token)
                await self.server.detach(token)


class _RemoteSlots:
    """A pipeline's :class:`AdmissionControl` over a shared admission (:class:`RemoteAdmission`).

    A frame that finds no slot in hand asks the server for one (:meth:`granted` makes the call, in the
    pipeline's task that waits for grants); the frame is admitted once it arrives, so the call's time is
    never part of its service time (the admission's measure; a frame waiting in the queue meanwhile
    spends its budget, as any wait for a slot does). Each grant's wait (the call, plus any turn behind
    other pipelines) is in the report (``slot_wait_ms``).
    """

    def __init__(self, server: AdmissionServer, token: int, ceiling: int) -> None:
        self._server = server
        self._token = token
        self._ceiling = ceiling
        self._held = 0  # slots granted, not yet taken by a frame
        self._want = anyio.Event()
        self._asking = False  # a request is with the server: it answers the frame that wants a slot
        self.waits_ns: list[int] = []  # each grant: from the request to the answer
        self.state: dict[str, object] = {}

    @property
    def limit(self) -> int:
        return self._ceiling

    def try_acquire(self) -> bool:
        if self._held:
            self._held -= 1
            return True
        if not self._asking:
            self._want.set()  # ask the server (granted(), in the pipeline's grant task)
        return False

    def release(self, service_ns: int | None, *, late: bool = False) -> None:
        self._server.release(self._token, service_ns, late)

    async def granted(self) -> None:
        while True:
            await self._want.wait()
            self._want, self._asking = anyio.Event(), True
            asked = time.monotonic_ns()
            try:
                ok = await self._server.acquire(self._token)
            finally:
                self._asking = False
            if ok:
                self.waits_ns.append(time.monotonic_ns() - asked)
                self._held += 1
                return
            await anyio.sleep_forever()  # detached: no slot any more

    def report(self) -> dict[str, object]:
        waits = sorted(self.waits_ns)
        # the shared rule's state when the stream ended (its limit, peak...), shared by how many streams
        out: dict[str, object] = {"max_in_flight": self._ceiling, **self.state, "shared": True}
        if waits:
            out["slot_wait_ms"] = {
                # the report's every p50 is the linear one (numpy.percentile's, metrics.percentiles)
                "p50": round(median(waits) / 1e6, 3),
                "min": round(waits[0] / 1e6, 3),
                "max": round(waits[-1] / 1e6, 3),
            }
        return out
