"""One frame: concurrent per-sensor requests, joined under the frame's deadline.

Each request runs as its own task in a task group inside a ``move_on_after`` scope set to the join
deadline. When the scope expires the still-running tasks are cancelled — which cancels their gRPC
calls, without waiting for grpc to wind them down (:class:`perception.triton.TritonClient` abandons
them) — and their sensors are marked ``late``. A request that fails is ``error`` with the translated
message; a sensor without a usable sample is ``missing``; a sensor whose model's circuit is open is
``skipped``. Nothing here ever waits past the deadline. One request is not cancelled there: a circuit
breaker's measuring request (:mod:`._circuit`: load or a fault; its model's first request of the frame, the
others plain), which runs on in the runtime's task group (:meth:`Dispatcher.measure_in`); its frame takes its
answer only if it comes by the frame's deadline.

The frame's latency is that of its slowest request, so that request is issued first: requests start
in decreasing order of their model's recent latency (a running average), the others — which have
slack — after it. Camera images are decoded on the event loop when small (cheaper than a worker
thread's round trip) and otherwise in worker threads, all cameras of a batch at once, while the loop
goes on issuing the other sensors' requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import threading
import time
from collections import Counter
from collections.abc import Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.abc
import numpy as np
import numpy.typing as npt

from perception.config import PipelineConfig, SensorConfig
from perception.errors import ConnectError, DeadlineError, InputError, ModelContractError, PerceptionError
from perception.scheduler._circuit import CircuitBreaker, CircuitState
from perception.scheduler._tensors import (
    batch_groups,
    decode_inline,
    output_names,
    prepare_sample,
    scale_camera_boxes,
    sensor_kind,
    split_batch,
)
from perception.triton import InferRequest
from perception.types import Frame, ImageSample, Sample, SensorResult, SensorStatus

__all__ = ["Dispatcher", "InferClient", "SensorOutcome"]

log = logging.getLogger(__name__)

Arrays = Mapping[str, npt.NDArray[Any]]

#: Weight of the newest request in a model's running-average latency (issue order only).
_LATENCY_EWMA = 0.2
#: Worker threads decoding large camera images at once, per dispatcher. A decode the join abandons at
#: its deadline keeps its slot until its thread ends (a decode cannot be interrupted), so later decodes
#: wait for a slot instead of adding threads.
DECODE_THREADS = 4


class _InferResultLike(Protocol):
    @property
    def outputs(self) -> Arrays: ...


class InferClient(Protocol):
    """What the dispatcher needs from :class:`perception.triton.TritonClient`: one request in, its outputs out."""

    async def infer_request(self, req: InferRequest) -> _InferResultLike: ...


@dataclass
class SensorOutcome:
    """Mutable per-sensor bookkeeping while a frame is in flight."""

    sensor: str
    model: str
    status: SensorStatus | None = None
    outputs: Arrays = field(default_factory=dict)
    error: str | None = None
    sample_t_ns: int | None = None
    start_ns: int = 0
    end_ns: int = 0
    stages: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    #: Image kinds: factors from the pixels of the image sent to the original's (decoded at the model's scale).
    box_scale: tuple[float, float] = (1.0, 1.0)
    model_version: str = ""
    #: Its error is its own input's (an image that did not decode, of another size than its batch's), not
    #: the model's: no failure of the model's circuit breaker.
    input_fault: bool = False


class _Verdict(enum.Enum):
    """What one request to a model (the sensors it carried) says of the model, for its circuit breaker."""

    #: A member's error that is not its own input's: the model failed.
    FAILED = "failed"
    #: A member had no answer (late, or not yet): a fault, or load (:mod:`._circuit`).
    UNANSWERED = "unanswered"
    #: Every member's own input was refused before the request: nothing reached the model.
    REFUSED = "refused"
    #: The model answered (the members not refused): the success's service time is the slowest answer's.
    ANSWERED = "answered"


def _verdict(results: Sequence[SensorOutcome]) -> tuple[_Verdict, int | None]:
    """One request's verdict on its model, and (``ANSWERED``) its service time in ns -- the one reading of a
    request's outcomes, used by every request: a frame's, judged at the join, and a measuring request, judged
    when it ends. In this order: a model error outweighs everything (one member's error is the model's failure
    even if another answered); then a missing answer; a sensor's own bad input is not the model's failure (a
    camera sending undecodable images must not switch its model off for the other cameras sharing it)."""
    if any(oc.status is SensorStatus.ERROR and not oc.input_fault for oc in results):
        return _Verdict.FAILED, None
    if any(oc.status is None or oc.status is SensorStatus.LATE for oc in results):
        return _Verdict.UNANSWERED, None
    answered = [oc.end_ns - oc.start_ns for oc in results if oc.status is SensorStatus.OK]
    if not answered:
        return _Verdict.REFUSED, None
    return _Verdict.ANSWERED, max(answered)


def _transport_flag(cfg: SensorConfig) -> bool | None:
    return {"grpc": False, "shm": True, "auto": None}[cfg.transport]


class Dispatcher:
    """Sends a frame's sensor requests concurrently and joins them under a deadline."""

    def __init__(
        self,
        client: InferClient,
        sensors: Sequence[SensorConfig],
        pipeline: PipelineConfig,
        *,
        clock: Any = time.monotonic_ns,
        input_sizes: Mapping[str, tuple[int, int]] | None = None,
        server_decode: Collection[str] = (),
        decode_errors: Collection[str] = (),
    ) -> None:
        """``input_sizes``: camera models' network input ``(width, height)`` (from their served configs),
        so their JPEGs are decoded at the model's scale (:func:`~perception.scheduler.camera_input`).
        ``server_decode``: image sensors whose samples go as recorded, for the model to decode (their
        ``decode`` setting resolved against the served models). ``decode_errors``: models that answer a
        sample they cannot decode on its own (their kind's ``decode_error`` output, asked for whenever
        they are sent samples to decode): that sensor's error, the batch's other sensors answered."""
        self._client = client
        self._input_sizes = dict(input_sizes or {})
        self._decode = {s.name: "server" if s.name in server_decode else "client" for s in sensors}
        self._decode_errors = frozenset(decode_errors)
        self._sensors = [s for s in sensors if s.enabled]
        self._by_name = {s.name: s for s in self._sensors}
        #: Sensors of a batching kind (camera): one request per model for all of them.
        self._batched = {s.name: sensor_kind(s.kind, s.name).contract.batched for s in self._sensors}
        self._pipeline = pipeline
        self._clock = clock
        self.breakers: dict[str, CircuitBreaker] = {}
        for s in self._sensors:
            self.breakers.setdefault(s.model, CircuitBreaker(s.model, pipeline.circuit))
        #: Running average of each model's request latency (ns): requests are issued slowest first.
        self.expected_ns: dict[str, float] = {}
        #: Requests the server answered, per model (each one Triton counts among its successes).
        self.answered: Counter[str] = Counter()
        self._decode_slots: anyio.CapacityLimiter | None = None
        #: Where measuring requests run (:meth:`measure_in`), and the latest frame's time (sensor time: their
        #: verdicts come after their frame).
        self._measurements: anyio.abc.TaskGroup | None = None
        self._now = 0

    def measure_in(self, task_group: anyio.abc.TaskGroup) -> None:
        """Run the circuit breakers' measuring requests (:mod:`._circuit`: load or a fault, told by one request
        given more than its frame's deadline) in ``task_group``, which outlives the frames (the runtime's,
        cancelled at its close). Without it a breaker's patience opens the circuit."""
        self._measurements = task_group
        for breaker in self.breakers.values():
            breaker.can_measure = True

    async def _in_decode_thread(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` in a worker thread holding one of :data:`DECODE_THREADS` slots until the thread
        is done with it, even when the caller is cancelled and abandons it."""
        if self._decode_slots is None:
            self._decode_slots = anyio.CapacityLimiter(DECODE_THREADS)
        slots, token = self._decode_slots, object()
        await slots.acquire_on_behalf_of(token)
        loop = asyncio.get_running_loop()
        lock = threading.Lock()
        state = {"started": False, "abandoned": False}

        def job() -> Any:
            with lock:
                if state["abandoned"]:  # cancelled before it started: the caller gave the slot back
                    return None
                state["started"] = True
            try:
                return fn(*args)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop is gone: so is the limiter
                    loop.call_soon_threadsafe(slots.release_on_behalf_of, token)

        try:
            return await anyio.to_thread.run_sync(job, abandon_on_cancel=True)
        except BaseException:
            with lock:
                release = not state["started"]
                state["abandoned"] = True
            if release:
                slots.release_on_behalf_of(token)
            raise

    @property
    def sensors(self) -> Sequence[SensorConfig]:
        return self._sensors

    async def dispatch(
        self, frame: Frame, deadline_ns: int, *, refused: Mapping[str, tuple[str, int | None]] | None = None
    ) -> dict[str, SensorResult]:
        """Run every sensor request of ``frame``; return by the absolute monotonic ``deadline_ns``.
        ``refused``: sensors whose samples the runtime refused (not in ``frame``), with why and the sample's
        stamp: their error, their input's fault (:meth:`perception.scheduler.Runtime.process`)."""
        outcomes = {s.name: SensorOutcome(s.name, s.model) for s in self._sensors}
        for name, (why, t_ns) in (refused or {}).items():
            if name in outcomes:
                outcomes[name].sample_t_ns = t_ns
                fault = InputError(why, sensor=name, frame=frame.frame_id)
                self._fail([self._by_name[name]], outcomes, str(fault), input_fault=True)
        # Circuit breakers run on sensor time (the frame's capture time), not wall time: a replay at
        # any rate then opens and re-probes circuits at the same frames as the live run would.
        now = frame.t_ns
        self._now = max(self._now, now)
        groups: list[tuple[str, list[SensorConfig]]] = []  # (model, sensors) per request
        cams: dict[str, list[SensorConfig]] = {}
        for s in self._sensors:
            sample = frame.samples.get(s.name)
            oc = outcomes[s.name]
            if sample is None:
                if oc.status is None:  # (not refused)
                    oc.status = SensorStatus.MISSING
                continue
            oc.sample_t_ns = sample.t_ns
            if self._batched[s.name] and self._pipeline.camera_requests == "batched":
                cams.setdefault(s.model, []).append(s)
            else:
                groups.append((s.model, [s]))
        groups.extend(cams.items())

        runnable: list[tuple[str, list[SensorConfig]]] = []
        probes: set[str] = set()  # models whose half-open probe this frame reserved
        for model, members in groups:
            breaker = self.breakers[model]
            if breaker.allow(now):
                runnable.append((model, members))
                if breaker.state is CircuitState.HALF_OPEN:
                    probes.add(model)
            else:
                for s in members:
                    outcomes[s.name].status = SensorStatus.SKIPPED
                    outcomes[s.name].error = f"circuit open for model {model}"

        # Every breaker that said yes is settled on every way out of here: success or failure after the
        # join, or -- when the caller's frame is cancelled (a host's cancel scope, a cancelled
        # ThreadedRuntime future, stop) or something below raises -- its half-open probe is released,
        # so that the next frame probes the model again instead of finding it skipped for good.
        # (Only the probes this frame reserved: a closed breaker has nothing to release, and another
        # frame's probe is not this frame's to give back.)
        unsettled = probes
        # Models whose breaker asks for a measuring request (_circuit): this frame's request is it, the time
        # it may run (past the frame's deadline, in the runtime's task group); the ones sent (launched) settle
        # their breaker themselves, the others are given back below.
        measuring: dict[str, int] = {}
        launched: set[str] = set()
        try:
            if self._measurements is not None:
                frame_budget = max(0, deadline_ns - self._clock())
                for model, _ in runnable:
                    budget = self.breakers[model].take_measurement(frame_budget)
                    if budget is not None:
                        measuring[model] = budget
            # Slowest first (a stable sort: configuration order among equals and before any history).
            runnable.sort(key=lambda group: -self.expected_ns.get(group[0], 0.0))
            # A breaker asks for one measuring request: its model's first request is it. (A model shared by
            # sensors that are not batched, several radars, gets one request per sensor: the others are plain.)
            carriers: dict[str, list[SensorConfig]] = {}
            for model, members in runnable:
                if model in measuring:
                    carriers.setdefault(model, members)
            remaining_s = max(0.0, (deadline_ns - self._clock()) / 1e9)

            def send(model: str, members: list[SensorConfig]) -> Coroutine[Any, Any, None]:
                """The frame's request to ``model``: a plain one, or its breaker's measuring request."""
                if carriers.get(model) is not members:
                    return self._request(frame, model, members, outcomes, deadline_ns)
                return self._measuring_request(frame, model, members, outcomes, measuring[model], launched)

            with anyio.move_on_after(remaining_s):
                async with anyio.create_task_group() as tg:
                    for model, members in runnable[1:]:
                        tg.start_soon(send, model, members)
                    if runnable:  # the slowest runs right here: no wait for a task to be scheduled
                        await send(*runnable[0])
            end = self._clock()
            for model, members in runnable:
                measures = model in launched and carriers.get(model) is members  # the measuring request's sensors
                late = [s for s in members if outcomes[s.name].status is None]
                if late:  # it took at least this long
                    self._observe(model, end - min(outcomes[s.name].start_ns or end for s in members))
                for s in late:
                    oc = outcomes[s.name]
                    oc.status = SensorStatus.LATE
                    oc.end_ns = end
                    oc.error = (
                        "no answer by the join deadline; the request goes on, measuring the model"
                        if measures
                        else "no answer by the join deadline; request cancelled"
                    )
                breaker = self.breakers[model]
                unsettled.discard(model)  # settled by the verdict below
                if measures:  # the measuring request settles the breaker when it ends
                    continue
                verdict, service_ns = _verdict([outcomes[s.name] for s in members])
                if verdict is _Verdict.FAILED:
                    breaker.record_failure(frame.t_ns)
                elif verdict is _Verdict.UNANSWERED:  # a fault, or load (_circuit: load is not a fault)
                    breaker.record_late(frame.t_ns, end - min(outcomes[s.name].start_ns or end for s in members))
                elif verdict is _Verdict.REFUSED:
                    breaker.release_probe()
                else:
                    breaker.record_success(service_ns)
        finally:
            for model in unsettled:  # synchronous: runs even under cancellation, no shield needed
                self.breakers[model].release_probe()
            for model in measuring.keys() - launched:  # taken, never sent (the frame cancelled first)
                self.breakers[model].abandon_measurement()
        return {name: self._result(oc) for name, oc in outcomes.items()}

    async def _measuring_request(
        self,
        frame: Frame,
        model: str,
        members: list[SensorConfig],
        outcomes: dict[str, SensorOutcome],
        budget_ns: int,
        launched: set[str],
    ) -> None:
        """The request that tells load from a fault (:mod:`._circuit`): run in the runtime's task group for up to
        ``budget_ns``, whatever happens to its frame; the frame takes its answer if it comes by the frame's
        deadline (else the sensors are late, the request going on), the breaker its verdict when it ends."""
        assert self._measurements is not None
        breaker = self.breakers[model]
        start = self._clock()
        own = {s.name: dataclasses.replace(outcomes[s.name]) for s in members}  # the request's, not the frame's
        for s in members:
            outcomes[s.name].start_ns = start
        done = anyio.Event()

        async def measure() -> None:
            settled = False
            try:
                with anyio.move_on_after(budget_ns / 1e9):
                    await self._request(frame, model, members, own, start + budget_ns)
                verdict, service_ns = _verdict([own[s.name] for s in members])  # as any request's
                if verdict is _Verdict.FAILED:
                    breaker.abandon_measurement()
                    breaker.record_failure(self._now)
                elif verdict is _Verdict.UNANSWERED:
                    breaker.measured(self._now, None, budget_ns)  # no answer in all that time: a fault
                elif verdict is _Verdict.REFUSED:
                    breaker.abandon_measurement()
                else:
                    breaker.measured(self._now, service_ns, budget_ns)
                settled = True
            except Exception:  # never into the runtime's task group: the request is lost, said so
                log.exception("measuring request to model %s failed", model)
            finally:
                if not settled:
                    breaker.abandon_measurement()
                done.set()

        self._measurements.start_soon(measure, name=f"measuring {model}")
        launched.add(model)
        try:
            await done.wait()  # cut at the frame's deadline (the join's scope): the request goes on
        finally:  # the frame takes what is settled by then, cut or not: a sensor's refused input is its error
            for s in members:
                mine = own[s.name]
                if mine.status is not None:
                    outcomes[s.name] = dataclasses.replace(mine, start_ns=start)

    # ------------------------------------------------------------------------------------------
    async def _request(
        self,
        frame: Frame,
        model: str,
        members: list[SensorConfig],
        outcomes: dict[str, SensorOutcome],
        deadline_ns: int,
    ) -> None:
        start = self._clock()
        for s in members:
            outcomes[s.name].start_ns = start
        kind = members[0].kind
        try:
            inputs, index = await self._prepare(frame, members, outcomes)
        except PerceptionError as exc:
            self._fail(members, outcomes, str(exc), input_fault=isinstance(exc, InputError))
            return
        prepared = self._clock()
        use_shm = _transport_flag(members[0])
        names = ",".join(s.name for s in members)
        contract = sensor_kind(kind).contract
        # The model decodes some of these samples and answers one it cannot decode on its own: ask for that.
        flagged = (
            contract.decode_error
            if model in self._decode_errors and any(self._decode[s.name] == "server" for s in members)
            else None
        )
        outputs = output_names(kind) if flagged is None else (*output_names(kind), flagged.name)
        attempt = 0
        while True:
            attempt += 1
            timeout = deadline_ns - self._clock()
            try:
                result = await self._client.infer_request(
                    InferRequest(
                        model,
                        inputs,
                        outputs=outputs,
                        timeout_ns=max(timeout, 1_000_000),
                        request_id=f"{frame.frame_id}:{names}",
                        sensor=names,
                        frame=frame.frame_id,
                        use_shm=use_shm,
                    )
                )
                break
            except ConnectError as exc:
                left = deadline_ns - self._clock()
                if (
                    attempt == 1
                    and self._pipeline.retry_unavailable
                    and left >= round(self._pipeline.min_retry_budget_ms * 1e6)
                ):
                    log.info(
                        "frame %d: %s unavailable, retrying once (%.1f ms left)", frame.frame_id, model, left / 1e6
                    )
                    continue
                self._fail(members, outcomes, str(exc), attempt)
                return
            except DeadlineError:
                # The gRPC deadline is the join deadline: whichever fires first, the model did not
                # answer in time. Left undecided, the join marks it late like the cancelled ones.
                return
            except PerceptionError as exc:
                self._fail(members, outcomes, str(exc), attempt)
                return
        end = self._clock()
        self.answered[model] += 1
        self._observe(model, end - start)
        # One check on every answer: outputs outside the kind's contract are these sensors' error (and a
        # breaker failure), never an exception in the splitting and scaling below or in fusion.
        answer = result.outputs
        problem = contract.outputs_problem(answer, batch=len(index) if index else None)
        undecoded: dict[int, str] = {}  # batch row -> why the model could not decode its image
        if flagged is not None and problem is None and index:
            try:
                undecoded = contract.decode_errors(answer, batch=len(index))
            except InputError as exc:
                problem = f"{flagged.name}: {exc.message}"
            answer = {name: array for name, array in answer.items() if name != flagged.name}
        if problem is not None:
            err = ModelContractError(f"answer outside the {kind} contract: {problem}", sensor=names, model=model)
            self._fail(members, outcomes, str(err), attempt)
            return
        # The client's own share of the request: serialisation or the shared-memory copy (TritonClient).
        serialize = int(getattr(result, "prepare_ns", 0) or 0)
        version = str(getattr(result, "model_version", "") or "")
        for s in members:
            oc = outcomes[s.name]
            if index and s.name not in index:
                continue  # left out of the batch (its image did not decode, or is another size): its error stands
            if index and index[s.name] in undecoded:  # the model could not decode it: this camera's error alone
                encoded = contract.encoded.name if contract.encoded is not None else None
                reason = f"not decoded by the model: {undecoded[index[s.name]]}"
                fault = InputError(reason, sensor=s.name, tensor=encoded, model=model, frame=frame.frame_id)
                self._fail([s], outcomes, str(fault), attempt, input_fault=True)
                continue
            oc.outputs = split_batch(answer, index[s.name]) if index else dict(answer)
            if oc.box_scale != (1.0, 1.0):  # an image sent at another scale than the original's
                oc.outputs = scale_camera_boxes(oc.outputs, oc.box_scale)
            oc.status = SensorStatus.OK
            oc.end_ns = end
            oc.attempts = attempt
            oc.model_version = version
            oc.stages = {"preprocess": prepared - start, "serialize": serialize, "request": end - prepared}

    async def _prepare(
        self, frame: Frame, members: list[SensorConfig], outcomes: dict[str, SensorOutcome]
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, int]]:
        """Build the request tensors; sensors of a batching kind (cameras) of one model are stacked into
        one batch. A sample becomes tensors by its kind's ``prepare``; images too large to decode on the
        event loop are prepared in worker threads."""
        kind = members[0].kind
        defn = sensor_kind(kind, members[0].name)
        input_size = self._input_sizes.get(members[0].model)
        if not defn.contract.batched:
            (s,) = members
            sample = frame.samples[s.name]
            assert sample is not None
            tensors, outcomes[s.name].box_scale = prepare_sample(defn, sample, input_size, self._decode[s.name])
            return tensors, {}
        prepared: dict[str, dict[str, npt.NDArray[Any]]] = {}

        def prepare(s: SensorConfig, sample: Sample) -> None:
            try:
                prepared[s.name], outcomes[s.name].box_scale = prepare_sample(
                    defn, sample, input_size, self._decode[s.name]
                )
            except PerceptionError as exc:
                self._fail([s], outcomes, str(exc), input_fault=isinstance(exc, InputError))

        async def prepare_in_thread(s: SensorConfig, sample: Sample) -> None:
            try:
                # A big image can take longer than the frame's budget: at the deadline the join
                # abandons the decode (the thread finishes on its own, inside the pool's bound)
                # instead of waiting for it.
                tensors, scale = await self._in_decode_thread(defn.prepare, sample, input_size)
            except PerceptionError as exc:
                self._fail([s], outcomes, str(exc), input_fault=isinstance(exc, InputError))
                return
            prepared[s.name], outcomes[s.name].box_scale = tensors, scale

        inline: list[tuple[SensorConfig, Sample]] = []
        threaded: list[tuple[SensorConfig, Sample]] = []
        for s in members:
            sample = frame.samples[s.name]
            assert sample is not None
            # nothing to decode here when the model decodes (decode: server): no thread needed
            small = not isinstance(sample, ImageSample) or self._decode[s.name] == "server" or decode_inline(sample)
            (inline if small else threaded).append((s, sample))
        if len(threaded) == 1 and not inline:
            await prepare_in_thread(*threaded[0])
        elif threaded:
            async with anyio.create_task_group() as tg:
                for s, sample in threaded:  # the threads start first, the small ones decode meanwhile
                    tg.start_soon(prepare_in_thread, s, sample)
                await anyio.lowlevel.checkpoint()
                for s, sample in inline:
                    prepare(s, sample)
        else:
            for s, sample in inline:
                prepare(s, sample)
        ok = [s for s in members if s.name in prepared]
        rows = [prepared[s.name] for s in ok]
        if not ok:
            names = ",".join(s.name for s in members)
            raise InputError(f"every {kind} in the batch failed preprocessing", sensor=names)
        if len(ok) == 1:
            return {name: t[None] for name, t in rows[0].items()}, {ok[0].name: 0}
        groups = batch_groups(rows)
        # Cameras of different resolutions cannot share a batch: keep the largest group in this
        # request and mark the rest as errors with a clear reason (configure per_camera for them).
        main = max(groups, key=len)
        for g in groups:
            if g is not main:
                for i in g:
                    msg = "image size differs from the other cameras in the batch"
                    self._fail([ok[i]], outcomes, msg, input_fault=True)
        batch = {name: np.stack([rows[i][name] for i in main]) for name in rows[main[0]]}
        return batch, {ok[i].name: j for j, i in enumerate(main)}

    def _observe(self, model: str, ns: int) -> None:
        old = self.expected_ns.get(model)
        self.expected_ns[model] = float(ns) if old is None else old + _LATENCY_EWMA * (ns - old)

    def _fail(
        self,
        members: Sequence[SensorConfig],
        outcomes: dict[str, SensorOutcome],
        msg: str,
        attempts: int = 1,
        *,
        input_fault: bool = False,
    ) -> None:
        end = self._clock()
        for s in members:
            oc = outcomes[s.name]
            if oc.status is None:
                oc.status = SensorStatus.ERROR
                oc.error = msg
                oc.end_ns = end
                oc.attempts = attempts
                oc.input_fault = input_fault

    @staticmethod
    def _result(oc: SensorOutcome) -> SensorResult:
        status = oc.status or SensorStatus.MISSING
        latency = max(0, oc.end_ns - oc.start_ns) if oc.start_ns else 0
        return SensorResult(
            sensor=oc.sensor,
            status=status,
            latency_ns=latency,
            outputs=oc.outputs if status is SensorStatus.OK else {},
            error=oc.error,
            sample_t_ns=oc.sample_t_ns,
            model=oc.model,
            stages=oc.stages,
            model_version=oc.model_version,
        )
