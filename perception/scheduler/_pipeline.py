"""Pipelining: up to K frames in flight, results emitted in frame order, bounded queue with a policy.

Frames enter in source order and get a sequence number. At most the admission's limit (adaptive up to
``max_in_flight``, :class:`~perception.scheduler._admission.Admission`) are processed at once (with an
admission shared by several pipelines, :class:`~perception.scheduler._admission.SharedAdmission`: all
their frames together); the rest wait in a bounded queue of ``queue_size``. When the queue overflows:

* ``drop-oldest`` drops the oldest waiting frame (a live host wants the freshest data),
* ``drop-newest`` refuses the incoming frame,
* ``block`` makes the source wait (offline replay; never drops).

A dropped frame is not lost: it is emitted, in order, as a record with status ``dropped`` and the
reason. Every frame that enters yields exactly one result. The records go out as the consumer takes
them; a source that does not wait is never held back by its consumer (up to :data:`RECORD_BACKLOG`
records behind), only ``block``'s is.

A stopped pipeline (:meth:`OrderedPipeline.stop`; a runtime closing) ends whatever its consumer does:
the frames in flight get the drain timeout to finish (later they are cancelled, with a ``shutdown``
record), and their records are sent while the consumer takes them; a record that waited the drain
timeout for a consumer that took nothing in that time (one that left the loop keeping its generator, or
never reads again) ends the wait: the records left go as far as the output has room, the others are
counted (``undelivered``) and logged with their frames. A consumer that reads gets every record.

With a source that does not wait (any ``overflow`` but ``block``) and a deadline, the overload policy
decides too (``pipeline.overload: shed``, :mod:`perception.scheduler._shedding`): when a slot frees, the
oldest waiting frame from which every waiting frame can still finish within its budget starts, and the
older ones are shed (under sustained overload: the freshest starts), each recorded by ``shed`` (the
runtime's: the tracker's prediction at its time) in its turn, before any request of theirs is sent; a
frame the queue overflows is shed the same way (the queue holds at least the freshest). A frame its
source shed before building it (:class:`~perception.scheduler._shedding.Superseded`) takes its turn and
is recorded the same way (without the policy: ``dropped``), never started. A frame shed while older ones
wait in the queue (one superseded, or the newest one the queue overflows under ``drop-newest``) is shed
once they have left it: its prediction takes its fusion turn after theirs, in the order the source handed
them in, and so covers them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterable, Awaitable, Callable, Iterator
from dataclasses import replace

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from perception.config import PipelineConfig
from perception.errors import InputError, RuntimeClosedError
from perception.scheduler._admission import Admission, AdmissionControl
from perception.scheduler._shedding import OVERLOAD, OverloadPolicy, Superseded, sheds
from perception.types import Frame, FrameResult, SensorStatus

__all__ = ["CANCELLED_IN_FLIGHT", "OrderedPipeline", "admission_adapts", "ended_late", "failure_reason"]

log = logging.getLogger(__name__)

#: Records ready but not yet taken by the consumer beyond which the intake of a source that does not
#: wait waits for it (memory stays bounded when it stops reading). Below it the intake never waits
#: for the consumer: a consumer's hiccup (a sink writing, the server split waiting for a trace) would
#: hold the source's frames back, and they would arrive together, as a burst the queue overflows.
RECORD_BACKLOG = 256

Process = Callable[[Frame], Awaitable[FrameResult]]
Drop = Callable[[Frame, str], FrameResult]
Shed = Callable[[Frame, str], Awaitable[FrameResult]]


#: The reason recorded for a frame cancelled in flight (a runtime closing past its drain timeout).
CANCELLED_IN_FLIGHT = "shutdown: cancelled while in flight"


def failure_reason(exc: BaseException) -> str:
    """The reason recorded for a frame whose processing raised ``exc`` (its record is ``dropped``): the
    host's malformed frame (``invalid input``), the runtime closed before the frame could start
    (``shutdown``), or a bug (``internal error``, named by its type)."""
    if isinstance(exc, InputError):
        return f"invalid input: {exc}"
    if isinstance(exc, RuntimeClosedError):
        return f"shutdown: {exc}"
    return f"internal error: {type(exc).__name__}: {exc}"


def ended_late(result: FrameResult) -> bool:
    """A frame the admission halves its limit for: a sensor late at the join, or the frame's deadline missed."""
    return result.deadline_missed or any(s.status is SensorStatus.LATE for s in result.sensors.values())


def admission_adapts(config: PipelineConfig, deadline_ns: int | None) -> bool:
    """Whether a pipeline's admission adapts its limit (``adaptive``, with a deadline to keep frames in)."""
    return config.admission == "adaptive" and deadline_ns is not None


class OrderedPipeline:
    """Runs frames through ``process`` with bounded concurrency and ordered, lossless output."""

    def __init__(
        self,
        process: Process,
        dropped: Drop,
        config: PipelineConfig,
        *,
        deadline_ns: int | None = None,
        admission: AdmissionControl | None = None,
        shed: Shed | None = None,
    ) -> None:
        """``deadline_ns``: a frame's budget from its intake (its ``created_ns``), which the overload policy
        sheds frames by and the adaptive admission keeps their service (admission to result) well within
        (without one the admission is fixed at ``max_in_flight``). ``admission``: the slots
        to start frames in (a shared admission's); by default the pipeline's own :class:`Admission`.
        ``shed``: the record of a frame shed under overload (by default ``dropped``'s)."""
        self._process = process
        self._dropped = dropped
        self.admission: AdmissionControl = admission or Admission(
            config.max_in_flight,
            deadline_ns or 0,
            adaptive=admission_adapts(config, deadline_ns),
        )
        self._queue_size = config.queue_size
        self._overflow = config.overflow
        self._drain_s = config.drain_timeout_s
        self._cond = anyio.Condition()
        self._out_lock = anyio.Lock(fast_acquire=True)
        self._pending: deque[tuple[int, Frame]] = deque()
        self._in_flight: dict[int, Frame] = {}
        self._done: dict[int, FrameResult] = {}
        self._next_seq = 0
        self._next_emit = 0
        self._intake = anyio.CancelScope()
        self._out: MemoryObjectSendStream[FrameResult] | None = None
        self.dropped_count = 0
        #: Records the consumer did not take by the end of a stopped pipeline's drain (logged with their frames).
        self.undelivered = 0
        #: When a stopped pipeline's frames in flight are cancelled, and when its sends give up (the drain
        #: timeout after the last record went out); the event loop's clock. The waits they bound (True: a send).
        self._drain_by: float | None = None
        self._send_by: float | None = None
        self._bounded: dict[anyio.CancelScope, bool] = {}
        #: Frames whose intake waited for the consumer (:data:`RECORD_BACKLOG` records behind it).
        self.intake_held = 0
        #: Frames shed under overload (also among the dropped records, reason ``overload``).
        self.shed_count = 0
        #: The overload policy (module docs), when this pipeline sheds; its frames being recorded.
        self.overload = OverloadPolicy(deadline_ns) if deadline_ns is not None and sheds(config) else None
        self._shed = shed
        self._shedding: dict[int, Frame] = {}
        #: Frames shed while older frames wait (a waiting frame's seq -> those shed after it, in order): each
        #: is recorded once that frame has left the queue (started, shed or dropped), so that its prediction
        #: takes its fusion turn after the older frames' (see :meth:`_shed_in_turn`).
        self._after: dict[int, list[tuple[int, Frame, str]]] = {}

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def stop(self) -> None:
        """Stop taking frames; in-flight frames drain and their records are sent, all within the drain
        timeout from now; the rest are recorded (see the module docs)."""
        self._intake.cancel()
        if self._drain_by is None:
            self._drain_by = self._send_by = anyio.current_time() + self._drain_s
            for scope in self._bounded:
                scope.deadline = self._drain_by

    def _sent(self) -> None:
        """A record went out while stopping: the sends wait the drain timeout again from now."""
        if self._send_by is not None:
            self._send_by = anyio.current_time() + self._drain_s
            for scope, sending in self._bounded.items():
                if sending:
                    scope.deadline = self._send_by

    @contextlib.contextmanager
    def _until_drained(self, *, sending: bool) -> Iterator[anyio.CancelScope]:
        """A scope that ends when a stopped pipeline's drain does, or its sends give up (``sending``);
        also if :meth:`stop` comes later."""
        by = self._send_by if sending else self._drain_by
        scope = anyio.CancelScope(deadline=math.inf if by is None else by)
        self._bounded[scope] = sending
        try:
            with scope:
                yield scope
        finally:
            del self._bounded[scope]

    async def run(self, source: AsyncIterable[Frame | Superseded], out: MemoryObjectSendStream[FrameResult]) -> None:
        """Consume ``source``, sending exactly one result per frame to ``out`` in order (a frame the source
        shed, :class:`Superseded`: its shed record); then close it. An error of the source ends the intake
        as its end would (the frames taken before it finish and are recorded) and is raised, as it is,
        once their records were sent."""
        self._out = out
        cancelled = False
        error: Exception | None = None
        async with out:
            try:
                async with anyio.create_task_group() as tg:
                    grants = anyio.CancelScope()
                    tg.start_soon(self._grants, tg, grants)
                    with self._intake:
                        frames = aiter(source)
                        while True:
                            try:
                                frame = await anext(frames)
                            except StopAsyncIteration:
                                break
                            except Exception as exc:  # kept from the task group, which would cancel the frames taken
                                error = exc
                                break
                            await self._admit(frame, tg)
                    # Source finished (or failed) or stop(): let in-flight frames finish, bounded when stopping.
                    with self._until_drained(sending=False) as drain:
                        async with self._cond:
                            while (
                                self._in_flight or self._shedding or (self._pending and not self._intake.cancel_called)
                            ):
                                await self._cond.wait()
                    grants.cancel()
                    if drain.cancelled_caught:
                        log.warning("drain timeout: cancelling %d in-flight frame(s)", len(self._in_flight))
                        tg.cancel_scope.cancel()
            except anyio.get_cancelled_exc_class():
                cancelled = True
                raise
            finally:
                # Cancelled (its consumer left, or everything is being cancelled): the records go out as
                # far as the stream has room, without waiting for a reader that may never come back.
                # Stopped: only while the consumer takes records (one that keeps the generator and never
                # reads again does not hold the close); what is left is sent as far as there is room.
                with anyio.CancelScope(shield=True):
                    self._abandon()
                    if not cancelled:
                        await self._flush()
                    await self._flush(wait=False)
                    if self._next_emit < self._next_seq:  # never silent: a frame taken without a record is a bug
                        log.error(
                            "pipeline: frame %d of this stream has no record (a bug): it and the %d after it "
                            "were not delivered",
                            self._next_emit,
                            self._next_seq - self._next_emit - 1,
                        )
        if error is not None:
            raise error

    async def _admit(self, frame: Frame | Superseded, tg: TaskGroup) -> None:
        try:
            if isinstance(frame, Superseded):
                async with self._cond:
                    self._supersede(tg, frame)
            else:
                await self._enqueue(frame, tg)
        except anyio.get_cancelled_exc_class():
            # stop() while the frame waited for room (``block``): it was taken from the source, so it
            # gets its record like the queued frames do (emitted by run's final flush). Cancellation
            # can only land before the frame is queued: nothing in _enqueue awaits after that.
            unmade = frame.frame if isinstance(frame, Superseded) else frame
            self._done[self._next_seq] = self._dropped(unmade, "shutdown: never started")
            self._next_seq += 1
            self.dropped_count += 1
            raise
        if self._overflow == "block":
            await self._flush()  # a source that waits: it may wait for its consumer too
        elif len(self._done) >= RECORD_BACKLOG:
            self.intake_held += 1
            if self.intake_held == 1:
                log.warning(
                    "the consumer of the records is %d behind: the intake waits for it (frames arriving "
                    "meanwhile are late; counted in intake_held)",
                    len(self._done),
                )
            await self._flush()
        elif not self._out_lock.locked():  # else its holder sends them, in order
            tg.start_soon(self._flush, name="records")

    async def _enqueue(self, frame: Frame, tg: TaskGroup) -> None:
        async with self._cond:
            slot = False
            if self._overflow == "block":
                # No room in the queue: the source waits for a slot (the admission may raise its limit
                # for a waiting frame, or a shared admission grant one), which this frame then takes.
                while len(self._pending) >= self._queue_size:
                    if self.admission.try_acquire():
                        slot = True
                        break
                    await self._cond.wait()
            if not frame.created_ns:
                # The frame's budget clock starts when it is taken in. Under ``block`` the source is
                # held back until there is room, so that is after the wait above: stamping before it
                # would charge the previous frames' service time to this frame's deadline.
                frame = replace(frame, created_ns=time.monotonic_ns())
            seq = self._next_seq
            self._next_seq += 1
            self._pending.append((seq, frame))
            self._start_ready(tg, slot=slot, arrived=True)
            # under the overload policy the freshest frame may always wait for the next slot
            room = max(1, self._queue_size) if self.overload is not None else self._queue_size
            while len(self._pending) > room:
                victim_seq, victim = self._pending.popleft() if self._overflow == "drop-oldest" else self._pending.pop()
                reason = (
                    f"queue overflow ({self._overflow}; {len(self._in_flight)} in flight, queue of {self._queue_size})"
                )
                self.dropped_count += 1
                if self.overload is not None:  # a shed frame like the others: its record has the prediction
                    self.overload.queue_overflow += 1
                    self._shed_in_turn(tg, victim_seq, victim, f"{OVERLOAD} ({reason})")
                else:
                    self._done[victim_seq] = self._dropped(victim, reason)
                self._left_queue(tg, victim_seq)

    def _supersede(self, tg: TaskGroup, superseded: Superseded) -> None:
        """A frame its source shed before building it: its record in its turn, shed (the overload policy's
        prediction, counted superseded) or, without the policy, dropped; never started."""
        seq = self._next_seq
        self._next_seq += 1
        if self.overload is not None:
            self.overload.superseded += 1
            self._shed_in_turn(tg, seq, superseded.frame, superseded.reason)
        else:
            self.dropped_count += 1
            self._done[seq] = self._dropped(superseded.frame, superseded.reason)

    def _start_ready(self, tg: TaskGroup, *, slot: bool = False, arrived: bool = False) -> None:
        """Start waiting frames while the admission gives slots (``slot``: one is already taken); under
        the overload policy, the freshest that can finish in time, the others shed (``arrived``: the
        freshest has just arrived, see :meth:`OverloadPolicy.choose`)."""
        while self._pending and (slot or self.admission.try_acquire()):
            slot = False
            if self.overload is not None:
                waiting = list(self._pending)
                self._pending.clear()
                now = time.monotonic_ns()
                started = [f.created_ns for _, f in waiting]
                verdict = self.overload.choose(started, now, arrived=arrived, parallel=self.admission.limit)
                arrived = False
                for i, reason in verdict.shed:  # the older first: their records take their turns first
                    if i != verdict.start:
                        self._shed_frame(tg, *waiting[i], reason)
                        self._left_queue(tg, waiting[i][0])
                if verdict.start is None:
                    self.admission.release(None)  # nothing to start: the slot goes back
                    return
                seq, frame = waiting[verdict.start]
                self._pending.extend(waiting[verdict.start + 1 :])  # the fresher ones wait for their slots
            else:
                seq, frame = self._pending.popleft()
            self._in_flight[seq] = frame
            tg.start_soon(self._work, seq, frame, tg, name=f"frame-{frame.frame_id}")
            self._left_queue(tg, seq)
        if slot:  # not used (cannot happen: the frame that took it is waiting): give it back
            self.admission.release(None)

    async def _grants(self, tg: TaskGroup, scope: anyio.CancelScope) -> None:
        """Start waiting frames whenever a shared admission grants a slot (cancelled once drained)."""
        with scope:
            while True:
                await self.admission.granted()
                async with self._cond:
                    self._cond.notify_all()  # a source waiting under ``block`` takes it
                    if not self._intake.cancel_called:
                        self._start_ready(tg)

    def _shed_in_turn(self, tg: TaskGroup, seq: int, frame: Frame, reason: str) -> None:
        """Shed ``frame`` (:meth:`_shed_frame`) once every older frame waiting in the queue has left it: its
        prediction takes its turn into fusion (the runtime's, taken as ``process`` or ``shed`` starts) after
        theirs, as the source handed them in -- not before frames it is newer than (a frame the source
        superseded, or the newest one the queue overflows under ``drop-newest``, while older ones wait)."""
        if self._pending and self._pending[0][0] < seq:  # (not the oldest the queue overflows: drop-oldest's)
            anchor = max(s for s, _ in self._pending if s < seq)  # the newest older frame waiting
            self._after.setdefault(anchor, []).append((seq, frame, reason))
        else:
            self._shed_frame(tg, seq, frame, reason)

    def _left_queue(self, tg: TaskGroup, seq: int) -> None:
        """The waiting frame ``seq`` left the queue (its turn taken, or recorded without one): the frames shed
        after it (:meth:`_shed_in_turn`) are shed now, in order."""
        for after_seq, frame, reason in self._after.pop(seq, ()):
            self._shed_frame(tg, after_seq, frame, reason)

    def _shed_frame(self, tg: TaskGroup, seq: int, frame: Frame, reason: str) -> None:
        """Record ``frame`` as shed under overload (by ``shed`` in a task of its own: in its turn)."""
        self.shed_count += 1
        if self._shed is None:
            self._done[seq] = self._dropped(frame, reason)
            return
        self._shedding[seq] = frame
        tg.start_soon(self._shed_work, seq, frame, reason, self.admission.limit, name=f"shed-{frame.frame_id}")

    async def _shed_work(self, seq: int, frame: Frame, reason: str, limit: int) -> None:
        assert self._shed is not None
        try:
            result = replace(await self._shed(frame, reason), admission_limit=limit)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                async with self._cond:
                    self._finish(seq, self._dropped(frame, reason))
            raise
        except Exception:  # a bug in the prediction must not lose the frame: its record without one
            log.exception("frame %d: the shed frame's prediction failed", frame.frame_id)
            result = self._dropped(frame, reason)
        async with self._cond:
            self._finish(seq, result)
        await self._flush()

    async def _work(self, seq: int, frame: Frame, tg: TaskGroup) -> None:
        released = False
        started = time.monotonic_ns()
        limit = self.admission.limit  # in force as the frame starts (recorded with its result)
        try:
            result = replace(await self._process(frame), admission_limit=limit)
            # admission to result: what the servers take (the wait for a slot before it is the frame's
            # budget's, from its intake, not theirs), as the thread runtime measures it
            service = time.monotonic_ns() - started
            released = True
            self.admission.release(service, late=ended_late(result))
            if self.overload is not None:
                self.overload.observe(service, cut=ended_late(result))  # how long a frame takes once started
        except anyio.get_cancelled_exc_class():
            if not released:
                self.admission.release(None)
            with anyio.CancelScope(shield=True):
                async with self._cond:
                    self._finish(seq, self._dropped(frame, CANCELLED_IN_FLIGHT))
            raise
        except (InputError, RuntimeClosedError) as exc:
            # the host's frame is malformed, or the runtime closed before the frame could start: recorded
            # as such, no traceback
            if not released:
                self.admission.release(None)
            log.warning("frame %d dropped: %s", frame.frame_id, exc)
            result = self._dropped(frame, failure_reason(exc))
        except Exception as exc:  # a bug must not lose the frame: record it and keep running
            if not released:
                self.admission.release(None)
            log.exception("frame %d: processing failed", frame.frame_id)
            result = self._dropped(frame, failure_reason(exc))
        async with self._cond:
            self._finish(seq, result)
            if not self._intake.cancel_called:
                self._start_ready(tg)
        await self._flush()

    def _finish(self, seq: int, result: FrameResult) -> None:
        self._in_flight.pop(seq, None)
        self._shedding.pop(seq, None)
        self._done[seq] = result
        self._cond.notify_all()

    async def _flush(self, *, wait: bool = True) -> None:
        """Send the finished results in order. ``wait=False``: only as many as the stream has room for;
        the others are logged as not delivered."""
        assert self._out is not None
        lost: list[int] = []
        with self._until_drained(sending=True) if wait else contextlib.nullcontext():
            async with self._out_lock:
                while self._next_emit in self._done:
                    result = self._done[self._next_emit]
                    try:
                        if wait:
                            await self._out.send(result)  # removed only once delivered (send may be cancelled)
                            self._sent()
                        else:
                            self._out.send_nowait(result)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.WouldBlock):
                        lost.append(result.frame_id)
                    del self._done[self._next_emit]
                    self._next_emit += 1
        self.undelivered += len(lost)
        if lost:
            log.warning(
                "result consumer went away: %d frame(s) not delivered (%s)",
                len(lost),
                ", ".join(map(str, lost[:10])) + (", ..." if len(lost) > 10 else ""),
            )

    def _abandon(self) -> None:
        """Record frames that will never be processed (shutdown)."""
        for seq, frame in self._pending:
            self._done[seq] = self._dropped(frame, "shutdown: never started")
            self.dropped_count += 1
        self._pending.clear()
        for after in self._after.values():  # shed after a frame that never started: shed, without a prediction
            for seq, frame, reason in after:
                self.shed_count += 1
                self._done[seq] = self._dropped(frame, f"{reason}; shutdown before its record")
        self._after.clear()
        for seq, frame in list(self._in_flight.items()):
            self._done.setdefault(seq, self._dropped(frame, "shutdown: in flight"))
        self._in_flight.clear()
        for seq, frame in list(self._shedding.items()):
            self._done.setdefault(seq, self._dropped(frame, f"{OVERLOAD} (shed; shutdown before its record)"))
        self._shedding.clear()
