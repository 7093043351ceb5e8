"""Live ingestion: the host pushes samples from its own threads; fused results come back.

``LiveRuntime`` wraps a :class:`perception.scheduler.Runtime` (which builds its fusion stage from the
profile) with a :class:`LiveAssembler` on the host's monotonic clock, or on the ``clock`` it is given (the
ROS clock of a node on simulated time: stamps are aligned to arrivals, and frames completed, on the clock the
samples are stamped on, whatever the rate a bag is played at; the frames' budgets stay on the monotonic
clock). Two ways to hold it:

* from threads (no asyncio in the host): ``with LiveRuntime(config, rig, on_result=cb) as live:`` —
  an event loop runs in a background thread, callbacks run on a callback thread;
* from async code: ``async with LiveRuntime(config, rig) as live: async for r in live.results(): ...``.

:meth:`LiveRuntime.push` is thread-safe and never blocks: the sample goes into a bounded intake
queue (the oldest is dropped, and counted, when it is full) and the event loop is woken -- unless the
item can neither open nor complete a frame (an ego pose, or a sample of a sensor other than the trigger
that leaves every pending frame waiting for another sensor) and the loop looks at the intake within
:data:`LAZY_WAIT_NS` anyway: it is taken then, before any frame is made, so the frames are the same,
and the loop wakes about twice a frame, not once per push (a 50 Hz odometry alone was five wake-ups a
frame at 10 Hz). For a sample of the trigger sensor it returns a future of the frame that sample
triggers (or :class:`~perception.errors.SampleDroppedError` when it could not be used). Closing stops
intake, completes the pending frames with what has arrived -- at most ``pipeline.max_in_flight +
pipeline.queue_size`` of them, the newest: each older one is recorded dropped unassembled (a flood of
trigger samples left hundreds pending, each tens of milliseconds to make) --, drains the frames in flight
within ``pipeline.drain_timeout_s`` and releases the runtime (server, channels, shared memory, threads).
While running, one assembly likewise makes at most that many of the frames due at once, those the pipeline
keeps of a backlog: the newest (``overflow: drop-oldest``, the default), each older one going to the pipeline
unmade (:class:`perception.scheduler.Superseded`, the stub of its id, time and ego pose), counted in
``status()["intake"]["superseded_unassembled"]``; or the oldest (``drop-newest``), each newer one unmade,
counted in ``overflowed_unassembled``. An unmade frame is recorded in its turn: shed, with the tracker's
prediction, under the overload policy (``overload: shed``), else dropped (``queue overflow ...``). A flood made
every due frame on the event loop first, to shed or drop all but those. Under ``block`` every due frame is
made (the source waits for the pipeline).

One task owns all of it (:meth:`LiveRuntime._lifetime`: the runtime and the callback thread entered
with ``async with`` and left by the same task on close), whether the host holds the runtime from
threads (a :class:`perception.scheduler.ThreadHost`: the task runs on the runtime's event-loop thread)
or from async code (:func:`perception.scheduler.hosted_in_task`). Nothing in assembly or
processing raises into it: an item that raises is counted against its sensor (``status()["failed"]``)
and dropped, the futures of the frames it took down are answered. Every frame the assembler makes
reaches its future, ``on_result`` and ``results()`` in order, a failed one as the record a stream makes
of it (status ``dropped``, reason by :func:`perception.scheduler.failure_reason`): one whose making
raised, one taken down with a stream that raised, one still unanswered past the drain timeout at close
(``CANCELLED_IN_FLIGHT``), one still to be assembled then (the assembler waiting for room in the pipeline:
what it held, items pushed too, recorded unassembled, counted in ``status()["intake"]["closed_unassembled"]``).
A loss without a frame (assembly itself raising) is counted in ``status()["failed"]["assembly"]`` and logged
once per kind. ``on_result`` callbacks wait in a
bounded queue (:class:`perception.scheduler.CallbackQueue`): a slow callback costs dropped calls
(counted), not memory, and close does not wait for it past the drain timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Literal

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from perception.config import RuntimeConfig
from perception.errors import InputError, RuntimeClosedError, SampleDroppedError
from perception.kinds import in_kind_order, kind_def
from perception.live._assembler import EGO, HOST_CLOCK, TIME_BASE_REMEDY, LiveAssembler, LiveStats
from perception.metrics import LatencyAccumulator, LatencyStats
from perception.scheduler import (
    CANCELLED_IN_FLIGHT,
    OVERLOAD,
    CallbackQueue,
    FusionStage,
    Lifetime,
    RunObserver,
    Runtime,
    Session,
    Superseded,
    ThreadHost,
    failure_reason,
    hosted_in_task,
    sheds,
)
from perception.types import (
    EgoPose,
    Frame,
    FrameResult,
    ImageSample,
    PointCloudSample,
    Sample,
    SensorSpec,
    SessionSource,
)

__all__ = ["LiveRuntime"]

log = logging.getLogger(__name__)

Callback = Callable[[FrameResult], None]
ResultFuture = concurrent.futures.Future[FrameResult]

#: A push that opens no frame and completes none does not wake the event loop when the loop takes the intake
#: within this anyway (it is awake, or its next deadline is this close): an ego pose or a sample of another
#: sensor than the trigger's while no pending frame has items of every sensor it waits for (odometry among
#: them: :meth:`LiveAssembler.awaited`, none can complete). The loop takes every item pushed so far before
#: it makes or opens a frame, so waiting changes no frame; it saves
#: a wake-up per pose (50 a second from a typical odometry) and per sample that completes no frame. It
#: bounds how long such an item waits to be counted in ``status()``.
LAZY_WAIT_NS = 250_000_000
#: Items waiting so (their pushes did not wake the loop) at most; past it, or past half the intake queue,
#: a push wakes it: waiting never fills the intake queue.
LAZY_MAX = 64
#: ``_wake_by_ns`` while the loop will not wake before a push wakes it (no deadline).
_NEVER = 2**63
#: The loop's longest sleep before the assembler's next deadline on a ``clock`` of its own (not the host's
#: monotonic one): the wall time to a deadline on it is unknown (a bag played at another rate, paused). The host
#: wakes the loop as its clock moves (:meth:`LiveRuntime.clock_moved`); this bounds the wait of a host that
#: does not.
CLOCK_POLL_S = 0.5
#: The reason recorded for a frame still pending in assembly when serving ended before the assembler's close
#: (:meth:`LiveRuntime._abandon_assembly`).
_ABANDONED_UNASSEMBLED = "shutdown: closed before the frame was assembled (serving ended first)"


@dataclasses.dataclass
class _Item:
    sample: Sample | EgoPose
    arrival_ns: int  # on the assembler's clock
    future: ResultFuture | None
    host_ns: int  # on the host's monotonic clock


class LiveRuntime(anyio.AsyncContextManagerMixin):
    """Frames from live samples on the host clock, processed by a :class:`Runtime` (see module docs)."""

    def __init__(
        self,
        config: RuntimeConfig,
        rig: Mapping[str, SensorSpec] | SessionSource,
        *,
        on_result: Callback | None = None,
        fusion: FusionStage | Literal["profile"] | None = "profile",
        results_buffer: int = 256,
        callback_queue: int = 256,
        observer: RunObserver | None = None,
        clock: Callable[[], int] | None = None,
        clock_name: str = HOST_CLOCK,
        time_base_remedy: str = TIME_BASE_REMEDY,
    ) -> None:
        """``callback_queue``: results whose ``on_result`` call may wait while the callback is busy;
        beyond it the oldest waiting is dropped, counted in ``status()["callbacks_dropped"]``; a call that
        raises is logged and counted in ``status()["callbacks_failed"]``.
        ``observer``: sees the session (once the runtime is up: a runtime that never came up leaves an earlier
        recording as it was), every sample of the sensors enabled and every pose pushed (with its arrival),
        every frame fusion consumes and every result (a :class:`perception.scheduler.RunObserver`, e.g. a
        recorder; its fusion stage asked for here), each arrival on the host's monotonic clock.
        ``clock``: now in ns on the clock the samples' stamps are aligned on (their arrivals) and frames are
        completed by (the assembler's deadlines, its silence timer); default the host's monotonic clock. A ROS
        node on simulated time gives its ROS clock, which a bag's ``/clock`` drives at whatever rate it is
        played: aligned on the monotonic clock by an offset, stamps drifted past ``live.max_stamp_skew_ms`` and
        were dropped as clock jumps. The frames' budgets and latencies (``created_ns``) stay on the monotonic
        clock. The host calls :meth:`clock_moved` as its clock moves forward: a frame due by it is made then (the
        loop otherwise looks at such a clock every :data:`CLOCK_POLL_S` only). ``clock_name``: that clock as
        warnings name it (stamps off it), ``time_base_remedy``: what they say stamps on another clock need (default
        the profile's ``live.time_base``; a host that sets it its own way names its own setting)."""
        # The vehicle's rig is a live source of real sensors; a drive's source (``perception live DRIVE``)
        # resolves as its replay does. Poses come from the host (push_ego), never from a file.
        source = rig if isinstance(rig, SessionSource) else SessionSource.live(rig)
        source = dataclasses.replace(source, ego_at=None, gt_at=None)
        session = Session.assemble(config, source)
        rig = session.rig
        self.config = config = session.config
        self._observer = observer
        self._session = session
        if observer is not None:  # (begun once the runtime is up: a recorder replaces an earlier recording then)
            fusion = observer.fusion(session.fusion() if fusion == "profile" else fusion)
        self._runtime = Runtime(session, fusion=fusion)
        rates = {name: spec.rate_hz for name, spec in rig.items() if spec.rate_hz > 0}
        #: The intake's check of each sample pushed, the runtime's own: the frames made of them are not checked
        #: again (Runtime.run's ``checked``).
        self._check = self._runtime.intake_check()
        self._assembler: LiveAssembler[ResultFuture] = LiveAssembler(
            config.active_sensors,
            config.trigger,
            config.live,
            rates=rates,
            rig=rig,
            clock_name=clock_name,
            check=self._check,
            time_base_remedy=time_base_remedy,
        )
        self._trigger = config.trigger.sensor
        #: The point sensors' kinds: a cloud naming its kind's fields in another order is put in the kind's
        #: order as it is pushed (``perception.kinds.point_columns``), before the observer sees it.
        self._point_kinds = {s.name: kind for s in config.active_sensors if not (kind := kind_def(s.kind)).is_image}
        #: The sensors the run uses (enabled): the observer sees their samples alone, as a replay's does. Another
        #: one's (a disabled sensor's) is in no frame: the intake drops it (unknown sensor); recorded, it took
        #: the recorder's queue and bytes from the run's own.
        self._used = frozenset(s.name for s in config.active_sensors)
        #: Pending frames made at close at most (the newest): what the pipeline holds (in flight and queued);
        #: the older ones are recorded dropped unassembled (LiveAssembler.close), so close stays bounded.
        self._close_limit = config.pipeline.max_in_flight + config.pipeline.queue_size
        #: Due frames made at once at most: what the pipeline holds. The others go to it unmade (LiveAssembler.due,
        #: Superseded), those it would not keep of a backlog (``_due_keep``): under ``drop-oldest`` the older ones,
        #: under ``drop-newest`` the newer, each recorded in its turn (shed, with the tracker's prediction, under
        #: the overload policy; else dropped). Under ``block`` every due frame is made (the source waits).
        pipe = config.pipeline
        self._due_limit = None if pipe.overflow == "block" else self._close_limit
        self._due_keep: Literal["newest", "oldest"] = "oldest" if pipe.overflow == "drop-newest" else "newest"
        self._sheds = sheds(pipe)
        self._on_result = on_result
        self._clock = clock
        self._lock = threading.Lock()
        self._intake: deque[_Item] = deque()
        self._intake_max = config.live.intake_queue
        self._wake_pending = False
        #: Hosts inside :meth:`batch`: their pushes wait in the intake, untaken, till the last one leaves it.
        self._batching = 0
        #: Host time by which the loop takes the intake without being woken (0: it is awake and looks at
        #: the intake again before it sleeps), the sensors each pending frame waited for when it went to
        #: sleep, and the sensors of the samples pushed since it last took the intake: what a push that
        #: need not wake the loop reads (LAZY_WAIT_NS).
        self._wake_by_ns = _NEVER
        #: The ``clock`` reading of a :meth:`clock_moved` while the loop was awake (0: none): the loop, going to
        #: sleep, takes it under the lock and looks again if a frame is due by it.
        self._moved_ns = 0
        self._awaited: tuple[frozenset[str], ...] = ()
        self._queued: set[str] = set()
        self._lazy_max = min(LAZY_MAX, config.live.intake_queue // 2)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: anyio.Event | None = None
        self._state = Lifetime.UNOPENED  # changed under the intake lock: push reads it there
        self._futures: dict[int, ResultFuture] = {}
        #: Every frame the assembler made and whose result was not delivered yet, by id: the frame, or the
        #: dropped record of one whose making raised (delivered in its turn). What is left when the
        #: frames in flight are abandoned at close is delivered as dropped (CANCELLED_IN_FLIGHT).
        self._made: dict[int, Frame | FrameResult] = {}
        self._results_recv: MemoryObjectReceiveStream[FrameResult] | None = None
        self._results_buffer = results_buffer
        self._results_overflow = 0
        self._assembly_cpu_ns = 0  # CPU time of the event-loop thread in intake and assembly
        self._latency = LatencyAccumulator(budget_ns=config.budget.total_ns)
        self._callback_queue = callback_queue
        self._callbacks: CallbackQueue | None = None
        self._callbacks_dropped = 0
        self._host = ThreadHost(self._lifetime, name="live-loop")  # held from threads (``with``)
        self._served: anyio.Event | None = None  # set when the result task has ended
        #: Trigger futures whose frames the assembler still holds (answered when their frame is).
        self._in_assembly: set[ResultFuture] = set()
        self._failed: Counter[str] = Counter()
        self._logged: set[tuple[str, str]] = set()
        self._failure: BaseException | None = None
        #: Observer calls that raised (any thread; under the intake lock), and the types logged.
        self._observer_failed = 0
        self._observer_logged: set[str] = set()
        self._status_frames: dict[str, Any] = {}
        self._status_intake: dict[str, Any] = {}
        self._publish_frames()
        self._publish_intake()

    # -- pushing (any thread) -------------------------------------------------------------------
    def push(self, sample: Sample, arrived: tuple[int, int] | None = None) -> ResultFuture | None:
        """Hand one sample over; thread-safe and non-blocking. Returns a future of the frame a
        trigger sample opens, else None. Raises :class:`RuntimeClosedError` once closing, and
        :class:`InputError` for what is not a sample (the loop would fail on it, and every frame after).
        A point cloud naming its kind's fields in another order is taken in the kind's order
        (:func:`perception.kinds.point_columns`; one it would misread is refused by the intake check); an
        image's bytearray or memoryview is taken as bytes (a copy: the host may reuse its buffer). ``arrived``: when
        the sample came (on the runtime's clock, on the host's monotonic clock), if the host held it since; default
        now."""
        if not isinstance(sample, PointCloudSample | ImageSample):
            hint = " (an ego pose goes to push_ego)" if isinstance(sample, EgoPose) else ""
            raise InputError(f"push takes a PointCloudSample or ImageSample, got {type(sample).__name__}{hint}")
        if not isinstance(sample.sensor, str):
            raise InputError(f"a sample's sensor is a sensor name (str), got {sample.sensor!r}")
        self._check_open()
        if isinstance(sample, PointCloudSample) and (kind := self._point_kinds.get(sample.sensor)) is not None:
            sample = in_kind_order(sample, kind)  # read by name (the observer records it so too)
        elif isinstance(sample, ImageSample) and isinstance(sample.data, bytearray | memoryview):
            # a copy, as a cloud's points are: the host may reuse its buffer (and a memoryview is no bytes)
            sample = dataclasses.replace(sample, data=bytes(sample.data))
        future: ResultFuture | None = ResultFuture() if sample.sensor == self._trigger else None
        item = self._item(sample, future, arrived)
        if self._observer is not None and sample.sensor in self._used:  # before its frame can reach fusion
            self._observe(self._observer.sample, sample, item.host_ns)
        self._enqueue(item, sample.sensor)
        return future

    def push_ego(self, pose: EgoPose, arrived: tuple[int, int] | None = None) -> None:
        """Hand over an ego pose (odometry); frames carry the nearest one for the tracker. Raises
        :class:`InputError` for what is not an :class:`EgoPose` (a sample goes to :meth:`push`). ``arrived``:
        as :meth:`push`'s."""
        if not isinstance(pose, EgoPose):
            raise InputError(f"push_ego takes an EgoPose, got {type(pose).__name__}", sensor=EGO)
        self._check_open()
        item = self._item(pose, None, arrived)
        if self._observer is not None:
            self._observe(self._observer.ego, pose, item.host_ns)
        self._enqueue(item, EGO)

    def clock_moved(self) -> None:
        """The ``clock`` given moved forward (a ROS node's ``/clock``): the loop is woken if a frame is due by it
        now. Thread-safe and non-blocking; it does nothing on the host's monotonic clock (the loop's timers
        are on it) nor when nothing is due."""
        if self._clock is None:
            return
        now = self._clock()
        with self._lock:
            if self._wake_by_ns == 0:  # awake: it takes this before it sleeps
                self._moved_ns = now
            wake = not self._wake_pending and 0 < self._wake_by_ns <= now and self._state is Lifetime.OPENED
            self._wake_pending |= wake
            loop = self._loop
        if wake and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(self._set_wake)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Pushes made inside are taken by the loop together, as the block ends (thread-safe): a host handing
        over what it held (a ROS node's messages that came while it reopened its runtime) has the frames they
        open made with all of them, not with the few the loop took first (their stamps are old: each frame is
        due at once)."""
        with self._lock:
            self._batching += 1
        try:
            yield
        finally:
            with self._lock:
                self._batching -= 1
                wake = not self._batching and bool(self._intake) and not self._wake_pending
                self._wake_pending |= wake
                loop = self._loop
            if wake and loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closing: close() takes what is left
                    loop.call_soon_threadsafe(self._set_wake)

    def _item(self, sample: Sample | EgoPose, future: ResultFuture | None, arrived: tuple[int, int] | None) -> _Item:
        """``sample`` arriving now (or when ``arrived`` says), on the assembler's clock and on the monotonic one."""
        if arrived is not None:
            return _Item(sample, arrived[0], future, arrived[1])
        host = time.monotonic_ns()
        return _Item(sample, host if self._clock is None else self._clock(), future, host)

    def _check_open(self) -> None:
        """Refuse an item before the observer sees it, unless open (read without the lock: ``_enqueue``
        checks again under it), so a recorder does not record samples the runtime never took."""
        if self._state is not Lifetime.OPENED:
            raise RuntimeClosedError("the live runtime is not open")

    def _observe(self, call: Callable[..., None], *args: Any) -> None:
        """Call the observer (any thread): what it raises is counted (``status()["failed"]["observer"]``)
        and logged once per type, never raised into the host's push nor into the delivery of a result."""
        try:
            call(*args)
        except Exception as exc:
            with self._lock:
                self._observer_failed += 1
                first = type(exc).__name__ not in self._observer_logged
                self._observer_logged.add(type(exc).__name__)
            if first:
                log.warning("live: the observer's %s raised (counted; first of its kind): %r", call.__name__, exc)

    def _enqueue(self, item: _Item, sensor: str) -> None:
        """Queue ``item`` (a sample of ``sensor``, or a pose: ``EGO``) for the loop and wake it, unless a
        wake is pending already or the item may wait (:meth:`_may_wait`)."""
        old: _Item | None = None
        with self._lock:
            if self._state is not Lifetime.OPENED:
                raise RuntimeClosedError("the live runtime is not open")
            if len(self._intake) >= self._intake_max:
                old = self._intake.popleft()
                self._assembler.stats.intake_overflow += 1
            self._intake.append(item)
            wake = not self._wake_pending and not self._may_wait(item, sensor) and not self._batching
            self._wake_pending |= wake
            loop = self._loop
        if old is not None and old.future is not None:
            # answered without the lock: its done callbacks run here, and may push
            old.future.set_exception(SampleDroppedError("intake queue full", sensor=_sensor(old.sample)))
        if wake and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing: close() takes what is left
                loop.call_soon_threadsafe(self._set_wake)

    def _may_wait(self, item: _Item, sensor: str) -> bool:
        """Under the intake lock: whether ``item``, just queued, may wait for the loop's next look without
        waking it (LAZY_WAIT_NS): it opens no frame (not the trigger's sample), completes none (a sample or
        a pose, ``EGO``, after which no pending frame has new items of every sensor it waits for), the loop
        looks within LAZY_WAIT_NS anyway and at most LAZY_MAX items wait."""
        self._queued.add(sensor)
        return (
            item.future is None
            and not any(waits <= self._queued for waits in self._awaited)
            and len(self._intake) <= self._lazy_max
            and self._wake_by_ns - item.arrival_ns <= LAZY_WAIT_NS
        )

    def _set_wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- results --------------------------------------------------------------------------------
    async def results(self) -> AsyncIterator[FrameResult]:
        """Every frame's result in order (async hosts); ends when the runtime closes (at once, asked after it
        was closed: the results not read were released with it)."""
        if self._results_recv is None:
            raise RuntimeClosedError("the live runtime is not open")
        with contextlib.suppress(anyio.ClosedResourceError):  # released at close: anyio's bare error reached the host
            async for r in self._results_recv:
                yield r

    def status(self) -> dict[str, Any]:
        """Counters, current time-base offsets, latency from the trigger's arrival to the result, and the
        embedded server's crashes and restarts (``server_crashes``, ``server_restarts``).

        A snapshot the event-loop thread publishes as it works (after each intake batch and each
        result, before it answers that batch's or result's futures), so a host that saw a future
        answered sees its counts here. Reading it is a few dict copies whatever the frames: no lock
        and no percentile is computed on the host's thread, which would hold the GIL against the
        pushing threads and the loop (a GIL switch interval, 5 ms, at worst)."""
        intake = self._status_intake
        frames = self._status_frames
        callbacks = self._callbacks
        return {
            **frames,
            **intake,
            # pushed on the host's threads, under the intake lock: read as it is now
            "intake": {**intake["intake"], "intake_overflow": self._assembler.stats.intake_overflow},
            "failed": {**intake["failed"], **({"observer": n} if (n := self._observer_failed) else {})},
            "results_overflow": self._results_overflow,
            "callbacks_dropped": callbacks.dropped if callbacks is not None else self._callbacks_dropped,
            # on_result calls that raised (each logged on the callback thread; the next result goes on)
            "callbacks_failed": callbacks.failed if callbacks is not None else 0,
        }

    def _publish_frames(self) -> None:
        """On the event-loop thread, after a result was counted: the frame counters and latency."""
        counters = self._latency.counters()
        latency = LatencyStats.of(self._latency.total_ns.percentiles())  # a run report's latency type
        self._status_frames = {
            "frames": counters.frames,
            "ok": counters.ok,
            "degraded": counters.degraded,
            "dropped": counters.dropped,
            "drop_reasons": counters.drop_reasons,
            # frames shed under overload (among the dropped): each answered with the tracker's prediction
            "shed": counters.drop_reasons.get(OVERLOAD, 0),
            "deadline_misses": counters.deadline_misses,
            "latency_ms": latency.as_dict(),
            "sensor_status": counters.sensor_status,
            # the embedded server's crashes (Triton's own), each restarted up to server.restarts
            "server_crashes": server.crashes if (server := self._runtime.server) is not None else 0,
            "server_restarts": server.restarts if server is not None else 0,
            # each model's circuit: state, openings, late answers by verdict, measuring requests (load or fault)
            "circuits": self._runtime.circuits(),
            # the runtime's stream: frames whose intake waited for the results' consumer far behind it, and the
            # records that consumer did not take (each logged)
            "intake_held": self._runtime.intake_held,
            "undelivered": self._runtime.undelivered,
        }

    def _publish_intake(self) -> None:
        """On the event-loop thread, after an intake batch: intake, time base, accumulation, failures."""
        stats: LiveStats = self._assembler.stats
        self._status_intake = {
            # counters (a dict of them copied too): not asdict's recursive deep copy
            "intake": {k: dict(v) if isinstance(v, dict) else v for k, v in vars(stats).items()},
            "accumulation": self._assembler.accumulator.report(),
            "offsets_ms": {k: v / 1e6 for k, v in self._assembler.offsets_ns().items()},
            # items that raised in assembly or processing, per sensor (``assembly``/``processing`` when
            # no one sensor is to blame): counted and dropped, never raised to the host (status() adds
            # the observer's calls that raised, ``observer``: counted, the item or result goes on); ``fusion``:
            # fusion calls abandoned still running (a fusion that hung past the drain timeout at close)
            "failed": {**self._failed, **({"fusion": n} if (n := self._runtime.fusion_abandoned) else {})},
            "assembly_cpu_us_per_frame": round(self._assembly_cpu_ns / 1e3 / max(1, stats.frames), 1),
        }

    # -- lifetime -------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _lifetime(self) -> AsyncIterator[None]:
        """The whole lifetime, in the one task that enters it: the runtime (server, channels, shared
        memory), the callback thread and the two tasks are entered here and left here, in reverse order,
        when the host closes -- or when something failed, which is logged and counted, never raised into
        the host (only an error opening the runtime is raised, by the open)."""
        with self._lock:
            self._state.check_unopened("live runtime")
        started = False
        pipeline = self.config.pipeline
        try:
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(self._runtime)
                if self._observer is not None:  # a runtime that never came up leaves an earlier recording
                    self._observer.begin(self._session)
                callbacks = CallbackQueue(self._callback_queue, name="live-cb")
                self._callbacks = callbacks
                stack.push_async_callback(self._close_callbacks, callbacks, pipeline.drain_timeout_s)
                frames_send, frames_recv = anyio.create_memory_object_stream[Frame | FrameResult | Superseded](
                    max_buffer_size=pipeline.max_in_flight + pipeline.queue_size
                )
                results_send, results_recv = anyio.create_memory_object_stream[FrameResult](
                    max_buffer_size=self._results_buffer
                )
                stack.callback(results_recv.close)
                self._results_recv = results_recv
                self._wake = anyio.Event()
                self._served = anyio.Event()
                self._loop = asyncio.get_running_loop()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._assemble, frames_send)
                    tg.start_soon(self._serve, frames_recv, results_send)
                    with self._lock:
                        self._state = Lifetime.OPENED
                    started = True
                    try:
                        yield
                    finally:
                        self._begin_close()
                    # The assembler completes the pending frames and ends; the results task ends once
                    # the runtime has answered them: bounded by the drain timeout.
                    with anyio.move_on_after(pipeline.drain_timeout_s + 1.0) as scope:
                        await self._served.wait()
                    if scope.cancelled_caught:
                        log.warning(
                            "live runtime: frames still in flight after %.1f s were abandoned",
                            pipeline.drain_timeout_s + 1.0,
                        )
                        tg.cancel_scope.cancel()
        except Exception as exc:
            if not started:
                raise
            self._failed["runtime"] += 1
            log.exception("live runtime failed; everything it held is released")
            self._failure = exc
        finally:
            with self._lock:
                self._state = Lifetime.CLOSED
            for fut in [*self._futures.values(), *self._in_assembly]:
                if not fut.done():
                    fut.set_exception(RuntimeClosedError("closed before the frame finished"))
            self._futures.clear()
            self._in_assembly.clear()
            self._publish_frames()
            self._publish_intake()

    async def _close_callbacks(self, callbacks: CallbackQueue, timeout_s: float) -> None:
        # joining the thread off the event loop; a callback stuck past the bound is abandoned (logged)
        await anyio.to_thread.run_sync(callbacks.close, timeout_s, abandon_on_cancel=True)
        self._callbacks_dropped = callbacks.dropped

    def _begin_close(self) -> None:
        """On the event loop: stop intake, wake the assembler (it completes the pending frames)."""
        with self._lock:
            if self._state is Lifetime.OPENED:
                self._state = Lifetime.CLOSING
        self._set_wake()

    # -- lifetime (async) -----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncIterator[LiveRuntime]:
        """``async with``: the lifetime held in a task of its own, so a failure inside it never cancels
        the host's block; leaving the block closes it (drain bounded, everything released)."""
        async with hosted_in_task(self._lifetime()):
            yield self

    # -- lifetime (threads) ---------------------------------------------------------------------
    def __enter__(self) -> LiveRuntime:
        self._host.open()  # the lifetime on an event-loop thread; raises what opening raised
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def cancel_open(self) -> None:
        """Give up the thread-side open (``with``/``__enter__``) under way: it raises
        :class:`RuntimeClosedError`, the runtime released. Callable from any thread and from a signal
        handler (it takes no lock, waits for nothing); once open it does nothing (close it)."""
        self._host.cancel_open()

    def close(self) -> None:
        """Thread-side close: stop intake, complete pending frames, drain in-flight ones, release
        everything; returns within the drain timeout plus the runtime's own release (a fusion call still
        running then, hung, is abandoned in its worker thread: logged, ``status()["failed"]["fusion"]``).

        Bounded whatever is pending: of the frames pending in assembly, the newest ``pipeline.max_in_flight
        + pipeline.queue_size`` (what the pipeline holds) are made; each older one goes to ``on_result``,
        ``results()`` and its future as a ``dropped`` record in its turn (reason ``shutdown: closed before
        the frame was assembled ...``), counted in ``status()["intake"]["closed_unassembled"]``.

        On a runtime held with ``async with`` (from any thread, or its own loop) it stops intake and
        completes the pending frames, so ``results()`` ends once they are answered; leaving the block
        releases the rest.

        Intake stops at once, on the calling thread: pushes raise :class:`RuntimeClosedError` from here
        on, also while the event loop is still busy with what was pushed before (hosts pushing faster
        than the loop takes had it wait for the loop, and kept pushing: a close took minutes)."""
        loop = self._loop
        with self._lock:
            if self._state is Lifetime.OPENED:
                self._state = Lifetime.CLOSING
        if loop is not None:
            try:
                on_loop = asyncio.get_running_loop() is loop
            except RuntimeError:
                on_loop = False
            if on_loop:
                self._set_wake()
            else:
                with contextlib.suppress(RuntimeError):  # the loop has ended: nothing left to wake
                    loop.call_soon_threadsafe(self._set_wake)
        if self._host.state is Lifetime.UNOPENED and loop is not None:  # held with ``async with``
            return
        if self._callbacks is not None:
            self._callbacks.host_closing()  # a callback closing the runtime: close does not wait for it
        self._host.close(self.config.pipeline.drain_timeout_s)

    # -- the loop -------------------------------------------------------------------------------
    def _take_intake(self) -> tuple[list[_Item], bool]:
        """The items pushed so far, and whether intake was closed when they were taken: read together
        under the lock, so a sample pushed before the close is always taken (push refuses after it)."""
        with self._lock:
            closing = self._state in (Lifetime.CLOSING, Lifetime.CLOSED)
            if self._batching and not closing:  # a host's batch, taken once whole: its end wakes the loop (batch)
                self._wake_pending = False
                self._wake_by_ns = 0
                return [], False
            items = list(self._intake)
            self._intake.clear()
            self._wake_pending = False
            self._wake_by_ns = 0  # awake: the intake is looked at again before the loop sleeps
            self._queued.clear()
            return items, closing

    def _fail(self, key: str, exc: BaseException, what: str) -> None:
        """Count an item that raised against ``key`` (its sensor) and log it (once per key and type)."""
        self._failed[key] += 1
        self._publish_intake()
        seen = (key, type(exc).__name__)
        if seen not in self._logged:
            self._logged.add(seen)
            log.warning("live: %s of %s failed and was dropped (counted; first of its kind): %r", what, key, exc)

    def _add_items(self, items: list[_Item]) -> list[tuple[ResultFuture, BaseException]]:
        """Hand ``items`` to the assembler; the futures of the trigger samples it refused, with why (answered
        by the caller once the counts are published)."""
        asm = self._assembler
        refused: list[tuple[ResultFuture, BaseException]] = []
        for item in items:
            sensor = _sensor(item.sample)
            try:
                if isinstance(item.sample, EgoPose):
                    asm.add_ego(item.sample, item.arrival_ns)
                    continue
                dropped = asm.add(item.sample, item.arrival_ns, token=item.future, host_ns=item.host_ns)
            except Exception as exc:  # an item that breaks assembly is dropped, not raised
                self._fail(sensor, exc, "a sample")
                dropped = f"rejected: {type(exc).__name__}: {exc}"
            if item.future is not None:
                if dropped is None:
                    self._in_assembly.add(item.future)
                else:
                    refused.append((item.future, SampleDroppedError(dropped, sensor=sensor)))
        return refused

    def _abandon_assembly(self) -> None:
        """Serving ended before the assembler's close (abandoned past the drain timeout at close while the
        assembler waited for room in the pipeline, or the runtime failed): intake stops, and what the assembler
        never took or made -- the items pushed, the frames pending -- is recorded, each frame opened dropped
        (``closed_unassembled``) in its turn, as the frames made and not answered are (:meth:`_abandon`). After
        the assembler's own close there is nothing left: this does nothing."""
        self._begin_close()
        items, _ = self._take_intake()
        refused = self._add_items(items)
        asm = self._assembler
        asm.close(0)  # nothing made: the frames pending are recorded unassembled
        unassembled = asm.take_unassembled()
        if unassembled:
            log.warning(
                "live runtime: serving ended before assembly closed: %d pending frame(s) recorded %r",
                len(unassembled),
                _ABANDONED_UNASSEMBLED,
            )
        for unmade in unassembled:
            record = self._runtime.dropped(unmade.frame, _ABANDONED_UNASSEMBLED)
            if unmade.token is not None:
                self._in_assembly.discard(unmade.token)
                self._futures[record.frame_id] = unmade.token
            self._made[record.frame_id] = record
        self._publish_intake()
        for fut, why in refused:
            if not fut.done():
                fut.set_exception(why)

    async def _assemble(self, frames: MemoryObjectSendStream[Frame | FrameResult | Superseded]) -> None:
        asm = self._assembler
        async with frames:
            while True:
                assert self._wake is not None
                cpu0 = time.thread_time_ns()
                items, closing = self._take_intake()
                refused = self._add_items(items)  # answered once the counts are published
                host_now = time.monotonic_ns()
                now = host_now if self._clock is None else self._clock()
                try:
                    ready: list[tuple[Frame | FrameResult | Superseded, ResultFuture | None]] = list(
                        asm.close(self._close_limit)
                        if closing
                        else asm.due(now, self._due_limit, keep=self._due_keep, host_now=host_now)
                    )
                except Exception as exc:
                    # Assembly itself broke (a frame that cannot be built costs no other: take_lost): what
                    # it popped is lost without a frame; their futures say so.
                    self._fail("assembly", exc, "a frame")
                    ready = []
                    pending = set(asm.pending_tokens())
                    for fut in [f for f in self._in_assembly if f not in pending]:
                        self._in_assembly.discard(fut)
                        lost = SampleDroppedError(f"frame assembly failed: {exc!r}", sensor="assembly")
                        refused.append((fut, lost))
                superseded, overflowed = asm.take_superseded(), asm.take_overflowed()
                if superseded or overflowed:
                    # A backlog of due frames beyond what the pipeline holds: those it keeps were made (the
                    # newest; drop-newest: the oldest), the others go to it unmade, each recorded in its turn:
                    # shed under the overload policy (the tracker's prediction), else dropped.
                    due = f"{len(superseded) + len(overflowed) + len(ready)} frames were due at once"
                    if superseded:
                        held = f"the pipeline holds {self._close_limit}: the newest were assembled"
                        reason = (
                            f"{OVERLOAD} (superseded before assembly: {due}, {held})"
                            if self._sheds
                            else f"queue overflow (drop-oldest; not assembled: {due}, {held})"
                        )
                        ready.extend((Superseded(stub, reason), token) for stub, token in superseded)
                    if overflowed:
                        held = f"the pipeline holds {self._close_limit}: the oldest were assembled"
                        reason = f"queue overflow (drop-newest; not assembled: {due}, {held})"
                        reason = f"{OVERLOAD} ({reason})" if self._sheds else reason
                        ready.extend((Superseded(stub, reason), token) for stub, token in overflowed)
                unassembled = asm.take_unassembled()
                if unassembled:
                    # Pending at close beyond what the pipeline holds: not made (bounded close), each
                    # recorded dropped in its turn -- every frame opened has its record.
                    log.warning(
                        "live runtime: %d pending frame(s) not assembled at close (the newest %d were), recorded %r",
                        len(unassembled),
                        self._close_limit,
                        failure_reason(unassembled[0].error),
                    )
                for unmade in unassembled:
                    ready.append((self._runtime.dropped(unmade.frame, failure_reason(unmade.error)), unmade.token))
                for unmade in asm.take_lost():
                    # A frame whose making raised (e.g. a pose or sweep that breaks the motion model): its
                    # dropped record goes out in its turn, as a frame's whose processing raised.
                    self._fail("assembly", unmade.error, "a frame")
                    record = self._runtime.dropped(unmade.frame, failure_reason(unmade.error))
                    ready.append((record, unmade.token))
                ready.sort(key=lambda made: made[0].frame_id)
                self._assembly_cpu_ns += time.thread_time_ns() - cpu0
                self._publish_intake()
                for fut, why in refused:
                    if not fut.done():
                        fut.set_exception(why)
                for made, token in ready:
                    if token is not None:
                        self._in_assembly.discard(token)
                        self._futures[made.frame_id] = token
                    self._made[made.frame_id] = made.frame if isinstance(made, Superseded) else made
                for made, _ in ready:
                    await frames.send(made)
                if closing:
                    return
                deadline = asm.next_deadline()
                if deadline is None:
                    wait_s = None
                elif self._clock is None:
                    wait_s = max(0.0, (deadline - time.monotonic_ns()) / 1e9)
                else:  # a clock of its own, at whatever rate it runs: clock_moved wakes the loop when it is due
                    wait_s = min(CLOCK_POLL_S, max(0.0, (deadline - self._clock()) / 1e9))
                self._wake = anyio.Event() if self._wake.is_set() else self._wake
                with self._lock:  # a push (a clock_moved) sees when the loop next looks, or the loop sees it
                    moved, self._moved_ns = self._moved_ns, 0
                    more = (bool(self._intake) and not self._batching) or (deadline is not None and deadline <= moved)
                    if not more:
                        self._wake_by_ns = _NEVER if deadline is None else deadline
                        self._awaited = asm.awaited()
                if more:
                    # pushed meanwhile: taken next, after the loop's other tasks (results, a close) had
                    # their turn -- hosts pushing without pause kept the intake never empty, and the
                    # assembler held the loop: no result delivered, no close honoured
                    await anyio.lowlevel.checkpoint()
                    continue
                # the deadline as a timer that sets the wake event: a loop timer, not a cancel scope per
                # wait (this wakes about twice a frame)
                assert self._loop is not None
                timer = None if wait_s is None else self._loop.call_later(wait_s, self._set_wake)
                try:
                    await self._wake.wait()
                finally:
                    if timer is not None:
                        timer.cancel()

    async def _serve(
        self,
        frames: MemoryObjectReceiveStream[Frame | FrameResult | Superseded],
        results: MemoryObjectSendStream[FrameResult],
    ) -> None:
        try:
            await self._serve_results(frames, results)
        finally:
            assert self._served is not None
            self._served.set()

    async def _serve_results(
        self,
        frames: MemoryObjectReceiveStream[Frame | FrameResult | Superseded],
        results: MemoryObjectSendStream[FrameResult],
    ) -> None:
        taken: dict[int, Frame] = {}  # frames the runtime took and has not answered (shed ones: their stubs)
        held: deque[FrameResult] = deque()  # records of frames lost in assembly, waiting for their turn

        def deliver_held() -> None:
            """The held records whose turn has come: no frame before them is still in the runtime."""
            first = min(taken, default=None)
            while held and (first is None or held[0].frame_id < first):
                self._deliver(held.popleft(), results)

        taken_since = [0]  # frames the stream took since it (re)started

        async def source() -> AsyncIterator[Frame | Superseded]:
            async for made in frames:
                if isinstance(made, FrameResult):
                    held.append(made)
                    deliver_held()
                    continue
                taken[made.frame_id] = made.frame if isinstance(made, Superseded) else made
                taken_since[0] += 1
                yield made

        async with results, frames:
            try:
                while True:
                    try:
                        async for result in self._runtime.run(source(), checked=self._check):
                            taken.pop(result.frame_id, None)
                            self._deliver(result, results)
                            deliver_held()
                        return
                    except Exception as exc:
                        # A frame whose processing raised: it and the frames in flight with it are
                        # recorded as dropped (their futures answered), and processing goes on. A stream that
                        # failed before it took a frame would fail again at once, for ever: serving ends (the
                        # frames made answered dropped, below), the error the runtime's (counted as such).
                        if not taken_since[0]:
                            raise
                        taken_since[0] = 0
                        self._fail("processing", exc, "a frame")
                        for fid in sorted(taken):
                            self._deliver(self._runtime.dropped(taken.pop(fid), failure_reason(exc)), results)
                        deliver_held()
            finally:
                try:
                    self._abandon_assembly()
                finally:
                    self._abandon(results)

    def _abandon(self, results: MemoryObjectSendStream[FrameResult]) -> None:
        """The frames made and not answered when serving ended (abandoned after the drain timeout at
        close, or the runtime failed): each delivered as dropped, in order, so that every frame made
        reaches ``on_result``, ``results()`` and its future."""
        left = sorted(self._made.items())
        if left:
            log.warning("live runtime: %d frame(s) abandoned unanswered, recorded %r", len(left), CANCELLED_IN_FLIGHT)
        for _, made in left:
            self._deliver(
                made if isinstance(made, FrameResult) else self._runtime.dropped(made, CANCELLED_IN_FLIGHT), results
            )

    def _deliver(self, result: FrameResult, results: MemoryObjectSendStream[FrameResult]) -> None:
        self._made.pop(result.frame_id, None)
        if self._observer is not None:
            self._observe(self._observer.result, result)
        self._latency.add(result)
        self._publish_frames()  # before the future is answered: a host that saw it sees its count
        fut = self._futures.pop(result.frame_id, None)
        if fut is not None and not fut.done():
            fut.set_result(result)
        if self._on_result is not None and self._callbacks is not None:
            self._callbacks.submit(_run_callback, self._on_result, result)
        try:
            results.send_nowait(result)
        except anyio.WouldBlock:
            self._results_overflow += 1  # nobody reads results(): the oldest is not kept
            with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
                assert self._results_recv is not None
                self._results_recv.receive_nowait()
                results.send_nowait(result)


def _run_callback(callback: Callback, result: FrameResult) -> None:
    callback(result)  # on the callback thread; what it raises is logged and counted there


def _sensor(sample: Sample | EgoPose) -> str:
    return sample.sensor if not isinstance(sample, EgoPose) else "ego"
