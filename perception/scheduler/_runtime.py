"""The runtime: ``async with Runtime(config) as rt`` — process frames against Triton, with fusion.

Opening a runtime, in order (each step rolled back if a later one fails):

1. the embedded Triton server, when ``server.url`` is ``embedded`` (otherwise the given URL is used);
2. the Triton client (channels, replicas, TLS, headers);
3. a readiness check of every configured model and a check of its tensor contract against its
   sensor kind — a model that is not READY or does not match is a clear error naming it.

Then ``await rt.process(frame)`` runs one frame, and ``async for r in rt.run(frames)`` runs a stream
with pipelining (K in flight, ordered output, overflow policy). Closing stops intake, drains the
in-flight frames up to the drain timeout, emits every record, and releases the client and server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectSendStream

from perception._allocator import freed_memory_kept
from perception._gc import startup_heap_frozen
from perception.config import RuntimeConfig, SensorConfig, ServerConfig
from perception.errors import ConfigError, InputError, ModelContractError, PerceptionError, RuntimeClosedError
from perception.kinds import stamp_problem
from perception.scheduler._admission import AdmissionControl, AdmissionProvider
from perception.scheduler._dispatch import Dispatcher, InferClient
from perception.scheduler._faults import FaultInjectingClient
from perception.scheduler._lifetime import Lifetime
from perception.scheduler._order import HandInOrder
from perception.scheduler._pipeline import OrderedPipeline, admission_adapts
from perception.scheduler._reuse import SensorReuse
from perception.scheduler._rig_check import RigCheck
from perception.scheduler._session import FusionStage, Session, TrackingStage
from perception.scheduler._shedding import OverloadPolicy, Superseded
from perception.scheduler._tensors import output_names, prepare_inputs, sensor_kind
from perception.scheduler._threads import client_thread_limits
from perception.triton import ClientOptions, InferRequest
from perception.types import (
    FUSION_HANDOFF,
    LIVE_METADATA,
    SERVER_STAGES,
    Detection3D,
    Frame,
    FrameResult,
    FrameStatus,
    ImageSample,
    LatencyTree,
    PointCloudSample,
    Sample,
    SensorResult,
    SensorSpec,
    SensorStatus,
    SessionSource,
)

__all__ = ["Runtime", "abandoned_fusion_running", "client_options", "server_time_breakdown"]

log = logging.getLogger(__name__)

#: How often a fusion waiting for an abandoned fusion call (:meth:`Runtime._fuse`) looks whether it returned.
ABANDONED_POLL_S = 0.005

#: Fusion calls abandoned in their worker threads that have not returned yet, over every runtime of the process
#: (under its lock): see :func:`abandoned_fusion_running`.
_abandoned_lock = threading.Lock()
_abandoned_running = [0]


def abandoned_fusion_running() -> int:
    """How many fusion calls abandoned still running (:meth:`Runtime._fuse`: a fusion that hung past the drain
    timeout at close) have not returned yet, over every runtime of this process. Each holds a worker thread,
    which the interpreter's exit waits for when it is not a daemon thread (one started from the main thread's
    event loop is not): a program may end without joining it (the ``perception`` command does, naming it)."""
    with _abandoned_lock:
        return _abandoned_running[0]


def _count_abandoned_running(delta: int) -> None:
    with _abandoned_lock:
        _abandoned_running[0] += delta


#: Upper bound of one model's warm-up request at start (see :meth:`Runtime._warm_up`).
WARMUP_TIMEOUT_S = 10.0


def client_options(server: ServerConfig, urls: Sequence[str]) -> ClientOptions:
    """The Triton client options of a profile's ``server`` section, for ``urls``."""
    tls = server.tls
    return ClientOptions(
        urls=tuple(urls),
        channels=server.channels,
        ssl=tls.enabled,
        root_certificates=str(tls.root_certificates) if tls.root_certificates else None,
        private_key=str(tls.private_key) if tls.private_key else None,
        certificate_chain=str(tls.certificate_chain) if tls.certificate_chain else None,
        headers=dict(server.headers),
    )


def _check_repositories(config: RuntimeConfig) -> None:
    """A model repository of the embedded server that is not there is a :class:`ConfigError` naming the
    profile's key. It said "model 'lidar_detector' ... is not in this model repository (models there:
    none)" of a folder that does not exist: a profile outside ``launch/`` takes a relative
    ``server.models`` from its own folder."""
    for repo in config.server.models:
        if not Path(repo).is_dir():
            raise ConfigError(
                f"model repository {repo} does not exist (a relative path is taken from the profile's folder, "
                "the repository's root for launch/)",
                file=str(config.source) if config.source else None,
                key="server.models",
            )


class Runtime(anyio.AsyncContextManagerMixin):
    """Frame scheduler + fusion, as an async context manager.

    The runtime runs a :class:`Session`: the profile resolved against its source, the one assembly every
    entry point shares (so a replay runs what the vehicle runs). Give the source:

    * ``source=reader.source`` for a drive (its rig, metadata, ego poses and ground truth);
    * ``rig=`` for a vehicle (its sensors' mounts and calibrations; the same as
      ``source=SessionSource.live(rig)``);
    * or an assembled :class:`Session` in place of ``config``.

    ``fusion``: by default (``"profile"``) the session's fusion stage, so results carry fused, tracked
    detections; pass a stage of your own, or ``None`` for the models' raw outputs only.
    ``client`` may be passed to share an already open Triton client (the runtime then neither opens
    nor closes it); otherwise the runtime opens its own from ``config.server``.
    ``trace_requests``: an embedded server traces every request (when ``server.trace`` allows) for a
    reader of ``rt.server.trace_dir`` (a replay's per-request server split); off by default, since trace
    files nobody reads would pile up.
    ``admission``: where each stream of :meth:`run` gets its slots; by default its own
    :class:`~perception.scheduler._admission.Admission`. Runtimes whose servers are shared (a fleet
    node's workers) pass one shared admission (a ``RemoteAdmission``), so that their frames in flight
    together follow the rule one runtime's follow.

    Its lifetime is one ``async with`` (the one lifetime pattern, :mod:`perception.scheduler._lifetime`):
    the streams of :meth:`run` run in a task group it holds while open, entered and left by the task
    that opened it; :attr:`state` says where it is (a runtime is opened once).
    """

    def __init__(
        self,
        config: RuntimeConfig | Session,
        *,
        source: SessionSource | None = None,
        rig: Mapping[str, SensorSpec] | None = None,
        fusion: FusionStage | Literal["profile"] | None = "profile",
        client: InferClient | None = None,
        check_models: bool = True,
        join_timeout_ns: int | None = None,
        trace_requests: bool = False,
        admission: AdmissionProvider | None = None,
    ) -> None:
        if source is not None and rig:
            raise TypeError("pass the source (source=) or a vehicle's rig (rig=), not both")
        if isinstance(config, Session):
            if source is not None or rig:
                raise TypeError("a Session is already assembled against its source: pass no source= or rig=")
            session = config
        else:
            session = Session.assemble(config, source if source is not None or not rig else SessionSource.live(rig))
        self.session = session
        self.config = config = session.config
        # Lockstep replays wait for every sensor: a join timeout longer than the budget.
        self._join_ns = join_timeout_ns if join_timeout_ns is not None else config.budget.join_ns
        self.rig = dict(session.rig)
        if fusion == "profile":
            fusion = session.fusion()
        self._fusion = fusion
        pipe = config.pipeline
        #: Sensors decimated while frames are shed, their latest results reused (_reuse).
        self.reuse = SensorReuse.of(
            tuple(s.name for s in config.active_sensors),
            config.trigger.sensor,
            pipe.required_sensors,
            pipe.reuse_max_age_ms,
            file=str(config.source) if config.source else None,
        )
        self._external_client = client
        self._check_models = check_models
        self._trace = trace_requests
        self._client: InferClient | None = client
        self._dispatcher: Dispatcher | None = None
        self._state = Lifetime.UNOPENED
        #: The task group of :meth:`run`'s streams, held while the runtime is open (entered and left with
        #: it, in the same task, by ``async with``).
        self._streams: anyio.abc.TaskGroup | None = None
        self.server: Any = None  # EmbeddedTriton when embedded
        self.url: str | None = None
        self._pipelines: set[OrderedPipeline] = set()
        #: :attr:`undelivered` and :attr:`intake_held` of the streams that ended.
        self._undelivered = 0
        self._intake_held = 0
        self._admission_provider = admission
        #: The admission of the latest stream (:meth:`run`): its in-flight limit and how it moved.
        self.admission: AdmissionControl | None = None
        #: The turns of the frames handed to :meth:`process`: they are fused in that order.
        self._fusion_order = HandInOrder()
        #: The check of the samples of a frame handed in whole (:meth:`_taken`): an image must be of its camera's
        #: calibrated size when the runtime serves a vehicle (its rig); a replay counts such images instead.
        self._rig_check = RigCheck(
            config.active_sensors, self.rig, image_sizes=session.source.metadata == LIVE_METADATA
        )
        self._refused_said: set[str] = set()  # sensors whose refused samples were logged
        #: The checks this runtime made for an intake that checks a host's samples as they arrive
        #: (:meth:`intake_check`): a stream :meth:`run` is told its frames' samples passed one is not checked again.
        self._intake_checks: set[RigCheck] = set()
        #: The frame whose fusion call runs in a worker thread (None: none), under its lock (held only to
        #: read or set it). A call whose frame is cancelled while it runs (a close past its drain timeout)
        #: is abandoned, still running: until it returns no fusion or prediction starts (:meth:`_fuse`).
        self._fusion_lock = threading.Lock()
        self._fusing: int | None = None
        #: Fusion calls abandoned still running (each logged as an error).
        self.fusion_abandoned = 0
        #: The overload policy of the latest stream (when it sheds): its counts (``report()``).
        self.overload: OverloadPolicy | None = None
        self._stopping = False
        #: Execution instances of each model, from its served configuration (warm-up).
        self._instances: dict[str, int] = {}
        #: Triton's statistics of each model when the runtime opened, and the requests answered since by
        #: the warm-up (the dispatcher counts its own): what :meth:`server_statistics` waits to see counted.
        self._stats_base: dict[str, dict[str, int]] = {}
        self._warmup_answered: Counter[str] = Counter()
        self._warmup_ns: dict[str, int] = {}
        #: Camera models' network input (width, height), from their served configuration (decode scale).
        self._input_sizes: dict[str, tuple[int, int]] = {}
        #: Image sensors whose model decodes their samples: ``decode: server``, and ``auto`` where the served
        #: model takes the encoded image and answers an undecodable one on its own (known once the models
        #: are checked; else they decode here).
        self._server_decode: set[str] = {s.name for s in self.config.sensors if s.decode == "server"}
        #: Models that answer an image they cannot decode on its own (their kind's ``decode_error`` output).
        self._decode_errors: set[str] = set()

    # -- lifetime -------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncIterator[Runtime]:
        """``async with Runtime(...) as rt``: open in order (module docs), each step rolled back if a later
        one fails; on leaving, stop the streams, drain them (bounded) and release the client and server
        -- all in the one task that entered it. A runtime is opened once."""
        self._state.check_unopened("runtime")
        stack = contextlib.AsyncExitStack()
        try:
            stack.enter_context(client_thread_limits())  # the client's BLAS/OpenMP pools (_threads.py)
            stack.enter_context(freed_memory_kept())  # malloc reuses the frames' freed arrays (perception._allocator)
            if self._client is None:
                self._client = await self._open_client(stack)
            if self._check_models:
                await self._verify_models()
                await self._warm_up()
            dispatch_client: InferClient = self._client
            if self.config.faults:
                dispatch_client = FaultInjectingClient(self._client, self.config.faults)
                log.warning("fault injection on: %s", ", ".join(f.model for f in self.config.faults))
            self._dispatcher = Dispatcher(
                dispatch_client,
                self.config.sensors,
                self.config.pipeline,
                input_sizes=self._input_sizes,
                server_decode=self._server_decode,
                decode_errors=self._decode_errors,
            )
            # the circuits know each model's service time from its warm-up (load or fault: _circuit.py)
            for model, ns in self._warmup_ns.items():
                self._dispatcher.breakers[model].observe(ns)
            # what is alive now lives as long as the runtime: out of the garbage collector's walks (perception._gc)
            stack.enter_context(startup_heap_frozen())
            # The streams of run(): opened last, closed first (they drain before the client goes). Around them,
            # the circuit breakers' measuring requests (_circuit), which outlive their frames: cut at the close.
            error: Exception | None = None
            async with anyio.create_task_group() as measurements:
                self._dispatcher.measure_in(measurements)
                try:
                    async with anyio.create_task_group() as streams:
                        self._streams = streams
                        # The embedded server's supervisor (restarts a server that crashed).
                        supervisor = anyio.CancelScope()
                        if self.server is not None and self.config.server.restarts:
                            streams.start_soon(self._supervise, self.server, supervisor, self.config.server.restarts)
                        self._state = Lifetime.OPENED
                        try:
                            yield self
                        except Exception as exc:
                            error = exc  # the host's block failed: its streams still drain, as on any close
                        finally:
                            self._state = Lifetime.CLOSING
                            supervisor.cancel()  # before the server stops: a stop is no crash
                            # every stream stops, those still starting too (their pipelines not registered
                            # yet: _run_stream stops them); the stopped streams drain (bounded) as the task
                            # group is left
                            self.stop()
                finally:
                    measurements.cancel_scope.cancel()
            if error is not None:
                raise error
        finally:
            self._state = Lifetime.CLOSED
            with anyio.CancelScope(shield=True):  # released even when the closing task is cancelled
                await stack.aclose()

    @property
    def state(self) -> Lifetime:
        """Where the runtime is in its life (a :class:`~perception.scheduler.Lifetime`)."""
        return self._state

    async def _open_client(self, stack: contextlib.AsyncExitStack) -> InferClient:
        from perception.triton import TritonClient

        server = self.config.server
        if server.embedded:
            from perception.server import EmbeddedTriton, check_models_held

            _check_repositories(self.config)
            # a model its repositories lack is said now, not after server.startup_timeout_s ran out
            models: dict[str, str] = {}
            for sensor in self.config.active_sensors:
                models.setdefault(sensor.model, sensor.name)
            check_models_held(list(server.models), models)
            emb = EmbeddedTriton(
                list(server.models), startup_timeout_s=server.startup_timeout_s, trace=server.trace and self._trace
            )
            await stack.enter_async_context(emb)
            self.server = emb
            urls: tuple[str, ...] = (emb.grpc_url, *server.replicas)
        else:
            urls = (server.url, *server.replicas)
        self.url = urls[0]
        return await stack.enter_async_context(TritonClient(client_options(server, urls)))

    @staticmethod
    async def _supervise(server: Any, scope: anyio.CancelScope, restarts: int) -> None:
        with scope:
            await server.supervise(restarts)

    async def _verify_models(self) -> None:
        from perception.triton import ModelContract, TritonClient, check_contract, check_encoded_input

        client = self._client
        if not isinstance(client, TritonClient):
            return
        # every kind a model serves is checked: sensors of two kinds may share one model
        uses: dict[tuple[str, str], list[SensorConfig]] = {}  # (model, kind) -> its sensors
        for s in self.config.active_sensors:
            uses.setdefault((s.model, s.kind), []).append(s)
        models = sorted({model for model, _ in uses})
        server = self.config.server
        await client.wait_ready(
            models,
            timeout_s=server.startup_timeout_s,
            # the embedded server is already up; an external one that never answers is a wrong URL
            connect_timeout_s=None if server.embedded else server.connect_timeout_s,
        )
        contracts: dict[str, ModelContract] = {}
        for model in models:
            self._stats_base[model] = await client.model_statistics(model)
            contracts[model] = contract = await client.model_contract(model)
            self._instances[model] = contract.instances
            if contract.input_size is not None:
                self._input_sizes[model] = contract.input_size
        for (model, kind), sensors in uses.items():
            contract = contracts[model]
            try:
                check_contract(kind, contract)
            except ModelContractError as exc:  # named by the sensors that use the model as this kind
                raise ModelContractError(
                    exc.message, **{**exc.context, "sensor": ", ".join(s.name for s in sensors)}
                ) from None
            required = [s.name for s in sensors if s.decode == "server"]  # to send the encoded image
            if required:
                check_encoded_input(kind, contract, required)
            expected = sensor_kind(kind).contract
            takes_encoded = expected.encoded is not None and contract.input(expected.encoded.name) is not None
            # checked by check_contract when served: one undecodable image is then its camera's error alone
            if expected.decode_error is not None and contract.output(expected.decode_error.name) is not None:
                self._decode_errors.add(model)
            # auto: the model decodes when it takes the encoded image and answers a bad one on its own
            auto = takes_encoded and model in self._decode_errors
            if required and model not in self._decode_errors and expected.decode_error is not None:
                log.warning(
                    "decode: server for %s, but model %s does not declare %s: one image it cannot decode "
                    "fails the request of every camera batched with it",
                    ", ".join(required),
                    model,
                    expected.decode_error.name,
                )
            self._server_decode |= {s.name for s in sensors if s.decode == "server" or (s.decode == "auto" and auto)}

    async def _warm_up(self) -> None:
        """Representative requests to every execution instance of every model before the first frame.

        First requests pay one-off costs (lazy allocation, JIT/graph set-up, python imports inside the
        backend) in *each* instance: ~140 ms for a python-backend instance here. Without a warm-up they
        would be late and trip the circuit breakers on the first frames — a model with two instances
        answers frame 0 from one and frame 1 from the other. So each model gets as many concurrent
        requests as it has instances, for each kind of sensor it serves; Triton hands each to an idle
        instance. (A dynamic batcher may merge them into one execution: such a model's other instances
        then start cold.)
        Each warm-up is bounded by :data:`WARMUP_TIMEOUT_S`: a hanging model must not hold the start
        for minutes. It then starts cold (a warning); its circuit breaker handles it like any fault.
        """
        client = self._client
        assert client is not None
        seen: dict[tuple[str, str], str] = {}  # (model, kind) -> its first sensor
        decode: dict[tuple[str, str], str] = {}
        for s in self.config.active_sensors:
            seen.setdefault((s.model, s.kind), s.name)
            # the model is warmed up the way its first sensor of the kind sends
            decode.setdefault((s.model, s.kind), "server" if s.name in self._server_decode else "client")
        timeout_s = min(WARMUP_TIMEOUT_S, self.config.server.startup_timeout_s)

        async def request(model: str, inputs: dict[str, Any], kind: str, sensor: str, i: int) -> None:
            try:
                req = InferRequest(model, inputs, outputs=output_names(kind), request_id=f"warmup-{i}", sensor=sensor)
                sent = time.monotonic_ns()
                await client.infer_request(req)
                self._warmup_answered[model] += 1
                # the model's first measured service time, for its circuit breaker (_circuit: load vs fault)
                self._warmup_ns[model] = max(self._warmup_ns.get(model, 0), time.monotonic_ns() - sent)
            except PerceptionError as exc:
                log.warning("warm-up of model %s failed: %s", model, exc)

        async def one(model: str, kind: str, sensor: str) -> None:
            sample = sensor_kind(kind, sensor).warmup(sensor, self.rig.get(sensor))
            input_size = self._input_sizes.get(model)
            try:
                with anyio.fail_after(timeout_s):
                    if isinstance(sample, ImageSample):
                        # Frames decode full-size images in a worker thread: take the same path, so
                        # the decoder and the thread are warm too (without it, frame 0's camera request
                        # went out 10-25 ms later than the next frames', on a busy 2-core machine).
                        inputs = await anyio.to_thread.run_sync(
                            functools.partial(
                                prepare_inputs, kind, sample, input_size=input_size, decode=decode[model, kind]
                            )
                        )
                    else:
                        inputs = prepare_inputs(kind, sample, input_size=input_size, decode=decode[model, kind])
                    async with anyio.create_task_group() as tg:
                        for i in range(self._instances.get(model, 1)):
                            tg.start_soon(request, model, inputs, kind, sensor, i)
            except TimeoutError:
                log.warning("warm-up of model %s: no answer within %g s; starting cold", model, timeout_s)
            except PerceptionError as exc:  # the decoder's
                log.warning("warm-up of model %s failed: %s", model, exc)

        async with anyio.create_task_group() as tg:
            for (model, kind), sensor in seen.items():
                tg.start_soon(one, model, kind, sensor)

    # -- processing -----------------------------------------------------------------------------
    @property
    def client(self) -> InferClient:
        """The Triton client in use (a :class:`perception.triton.TritonClient` unless one was passed)."""
        if self._client is None or self._state is not Lifetime.OPENED:
            raise RuntimeClosedError("the runtime is not open")
        return self._client

    async def server_statistics(self) -> dict[str, dict[str, int]]:
        """Triton's cumulative statistics of every configured model (empty for a non-Triton client or
        when the server does not answer). Diff two snapshots with :func:`server_time_breakdown`.

        Each model's snapshot is taken once Triton has counted every request this runtime got an answer
        for (it counts them a moment after answering; a bounded wait, then the snapshot as it is)."""
        from perception.triton import TritonClient

        client = self._client
        if not isinstance(client, TritonClient):
            return {}
        answered = self._warmup_answered + (self._dispatcher.answered if self._dispatcher is not None else Counter())
        # a restarted embedded server counts from 0 again: its snapshot is taken as it is
        restarted = self.server is not None and self.server.restarts > 0
        out: dict[str, dict[str, int]] = {}
        for model in sorted({s.model for s in self.config.active_sensors}):
            base = self._stats_base.get(model)
            at_least = None if base is None or restarted else {"success_count": base["success_count"] + answered[model]}
            try:
                with anyio.fail_after(15):
                    out[model] = await client.model_statistics(model, at_least=at_least)
            except (PerceptionError, TimeoutError) as exc:
                log.warning("statistics of model %s unavailable: %s", model, exc)
        return out

    @property
    def dispatcher(self) -> Dispatcher:
        if self._dispatcher is None or self._state is not Lifetime.OPENED:
            raise RuntimeClosedError("the runtime is not open")
        return self._dispatcher

    def circuits(self) -> dict[str, dict[str, Any]]:
        """Each model's circuit breaker (:meth:`CircuitBreaker.report`); empty before the runtime opens."""
        dispatcher = self._dispatcher
        return {} if dispatcher is None else {m: b.report() for m, b in dispatcher.breakers.items()}

    async def process(self, frame: Frame) -> FrameResult:
        """Process one frame now (no queueing): dispatch, join by the deadline, fuse.

        Frames in flight together are fused in the order they were handed in (the tracker must see
        them in time order, as a lockstep replay does): a frame whose requests end before its
        predecessor's waits for that one's fusion (``fusion_wait`` in its latency tree), or for it to
        end unfused (an error, a cancellation) -- never does a frame pass one handed in before it."""
        return await self._process(frame)

    async def _process(self, frame: Frame, *, checked: bool = False) -> FrameResult:
        """:meth:`process`; ``checked``: each of the frame's samples passed one of this runtime's intake checks
        as it arrived (a stream of :meth:`run` told so: :meth:`intake_check`), and is not checked again."""
        dispatcher = self.dispatcher
        frame, refused = (frame, {}) if checked else self._taken(frame)
        start = time.monotonic_ns()
        origin = frame.created_ns or start
        order = self._fusion_order
        turn = order.take()
        try:
            sent, reused = self.reuse.plan(frame)  # while frames are shed, sensors not required are decimated
            results = self.reuse.merge(await dispatcher.dispatch(sent, origin + self._join_ns, refused=refused), reused)
            joined = time.monotonic_ns()
            detections: tuple[Detection3D, ...] = ()
            fusion_stages: dict[str, int] = {}
            if self._fusion is not None:
                fusion = self._fusion
                waited = joined
                if not order.is_turn(turn):
                    await order.wait(turn)
                    waited = time.monotonic_ns()
                # 0 when its turn had come: the frames that did not wait are in the stage's percentiles too
                fusion_stages["fusion_wait"] = waited - joined
                detections, stages = await self._fuse(fusion, frame, results)
                fusion_stages.update(stages)
            end = time.monotonic_ns()
        finally:
            order.end(turn)  # fused, or never to be: the next frame's turn once the earlier ones ended
        return self._record(frame, results, origin, start, joined, end, detections, fusion_stages)

    def _taken(self, frame: Frame) -> tuple[Frame, dict[str, tuple[str, int | None]]]:
        """``frame`` as the runtime takes it, and its configured sensors' samples refused: why, and the sample's
        stamp (None when that is what is wrong). A host may hand frames in whole (:meth:`process`,
        ``ThreadedRuntime.submit``, its own stream to :meth:`run`), so every sample passes the rig's check
        (:class:`RigCheck`, the live intake's): one refused is its sensor's error, counted as its input's fault,
        and is seen by neither its model nor fusion; a point cloud naming its kind's fields in another order is
        reordered (fusion reads x, y, z by position). What is not a sample at all is an :class:`InputError` for
        the frame. (The frames of a live assembly passed this check at intake, :meth:`intake_check`'s, and are not
        checked again (:meth:`run`'s ``checked``); a drive's passed :func:`perception.kinds.sample_problem` and
        are: the rig's frames and an image's calibrated size aside, a few microseconds.)"""
        samples: dict[str, Sample | None] | None = None
        refused: dict[str, tuple[str, int | None]] = {}
        check = self._rig_check
        for name, sample in frame.samples.items():
            if sample is None:
                continue
            if not isinstance(sample, PointCloudSample | ImageSample):  # a clear error, not one deep inside
                raise InputError(f"not a sample: a {type(sample).__name__}", sensor=name, frame=frame.frame_id)
            if name not in check.kinds:
                continue  # not a configured sensor's: never sent
            taken: Sample | str | None = check.taken(name, sample)
            if isinstance(taken, str):
                refused[name] = (taken, sample.t_ns if stamp_problem(sample.t_ns) is None else None)
                if name not in self._refused_said:  # once a sensor: each frame's record says it
                    self._refused_said.add(name)
                    log.warning("frame %d: sensor %s: sample refused (its error): %s", frame.frame_id, name, taken)
                taken = None
            if taken is not sample:
                if samples is None:
                    samples = dict(frame.samples)
                samples[name] = taken
        return (frame if samples is None else dataclasses.replace(frame, samples=samples)), refused

    async def _fuse(
        self, fusion: FusionStage, frame: Frame, results: Mapping[str, SensorResult]
    ) -> tuple[tuple[Detection3D, ...], Mapping[str, int]]:
        """``fusion`` of ``frame`` in a worker thread, in its turn. Cancelled while it runs (a close past
        its drain timeout), the call is abandoned in its thread, not waited for (a hung fusion held a close
        forever: the frames in flight are cancelled at the drain timeout, but a thread cannot be); cancelled
        before it started, it never starts. Until an abandoned call returns the next fusion waits for it
        (:meth:`_fusion_idle`, cancellable): never two fusions at once (the tracker is not thread-safe)."""
        cancelled = False

        def call() -> tuple[tuple[Detection3D, ...], Mapping[str, int]]:
            with self._fusion_lock:
                if cancelled:
                    return (), {}  # the frame was cancelled before its call started: never fused
                assert self._fusing is None, "two fusion calls at once"  # _fusion_idle waited for the last
                self._fusing = frame.frame_id
            try:
                return fusion(frame, results)
            finally:
                with self._fusion_lock:
                    self._fusing = None
                    if cancelled:  # abandoned while it ran (counted then, under this lock): it returned now
                        _count_abandoned_running(-1)

        await self._fusion_idle()
        try:
            return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            with self._fusion_lock:
                cancelled = True
                abandoned = self._fusing == frame.frame_id
                if abandoned:
                    _count_abandoned_running(1)  # until the call returns (call's finally, under this lock)
            if abandoned:
                self.fusion_abandoned += 1
                log.error(
                    "frame %d: its fusion call was cancelled while it ran and is abandoned in its worker thread, "
                    "still running; no fusion or prediction starts until it returns",
                    frame.frame_id,
                )
            raise

    async def _fusion_idle(self) -> None:
        """Return once no abandoned fusion call runs (:meth:`_fuse`); at once unless one was abandoned, then
        polling every :data:`ABANDONED_POLL_S` (its thread cannot wake this loop, which may be gone)."""
        while True:
            with self._fusion_lock:
                if self._fusing is None:
                    return
            await anyio.sleep(ABANDONED_POLL_S)

    def _record(
        self,
        frame: Frame,
        results: Mapping[str, SensorResult],
        origin: int,
        start: int,
        joined: int,
        end: int,
        detections: tuple[Detection3D, ...],
        fusion_stages: Mapping[str, int],
    ) -> FrameResult:
        # Disjoint stages that add up to the total: waiting for a slot, requests until the last answer
        # (ok or error), the join's wait after it (late requests being cut off), then fusion/tracking and
        # what the fusion's own clock does not see (FUSION_HANDOFF).
        answered = [r for r in results.values() if r.status in (SensorStatus.OK, SensorStatus.ERROR)]
        last_answer = min(joined, max((start + r.latency_ns for r in answered), default=start))
        stages = {
            "schedule_wait": start - origin,
            "dispatch": last_answer - start,
            "join_wait": joined - last_answer,
            **fusion_stages,
        }
        rest = max(0, end - joined - sum(fusion_stages.values()))
        if fusion_stages.keys() - {"fusion_wait"}:  # the fusion timed its own stages: the rest is its handoff
            stages[FUSION_HANDOFF] = rest
        else:  # no fusion, or one that times nothing of its own: the rest is its stage
            stages["fusion"] = rest
        sensors = {name: {"total": r.latency_ns, **r.stages} for name, r in results.items() if r.latency_ns or r.stages}
        total = end - origin
        status = (
            FrameStatus.OK
            if results and all(r.status is SensorStatus.OK for r in results.values())
            else FrameStatus.DEGRADED
        )
        return FrameResult(
            frame_id=frame.frame_id,
            t_ns=frame.t_ns,
            status=status,
            sensors=dict(results),
            detections=detections,
            latency=LatencyTree(total_ns=total, stages=stages, sensors=sensors, start_ns=origin),
            deadline_missed=total > self.config.budget.total_ns,
        )

    def dropped(self, frame: Frame, reason: str) -> FrameResult:
        """The record of a frame that was never processed."""
        return FrameResult(
            frame_id=frame.frame_id,
            t_ns=frame.t_ns,
            status=FrameStatus.DROPPED,
            sensors={},
            reason=reason,
        )

    async def shed(self, frame: Frame, reason: str) -> FrameResult:
        """The record of a frame shed under overload (:mod:`perception.scheduler._shedding`): no request
        is sent; its detections are the tracker's prediction at its time (``predicted``), read-only and
        taken in its fusion turn (after the frames handed in before it are fused, before the later ones)."""
        origin = frame.created_ns or time.monotonic_ns()
        self.reuse.shed(frame)
        order = self._fusion_order
        turn = order.take()
        detections: tuple[Detection3D, ...] = ()
        predict = self._fusion.predict if isinstance(self._fusion, TrackingStage) else None
        try:
            if predict is not None:
                if not order.is_turn(turn):
                    await order.wait(turn)
                await self._fusion_idle()  # an abandoned fusion call still in the tracker (_fuse)
                detections = predict(frame)
        finally:
            order.end(turn)  # predicted, or never to be: the next frame's turn once the earlier ones ended
        total = time.monotonic_ns() - origin
        return FrameResult(
            frame_id=frame.frame_id,
            t_ns=frame.t_ns,
            status=FrameStatus.DROPPED,
            sensors={},
            detections=detections,
            latency=LatencyTree(total_ns=total, stages={"shed": total}, start_ns=origin),
            reason=reason,
            predicted=predict is not None,
        )

    def intake_check(self) -> RigCheck:
        """The check of an intake that takes a host's samples one by one (a live assembler's): this runtime's
        sensors and rig, an image of its camera's calibrated size. A stream of frames made of samples it passed
        (and of what the runtime's own assembly made of them: restamped, accumulated) is not checked again when
        :meth:`run` is given it (``checked``)."""
        check = RigCheck(self.config.active_sensors, self.rig, image_sizes=True)
        self._intake_checks.add(check)
        return check

    async def run(
        self,
        frames: AsyncIterable[Frame | Superseded] | Iterable[Frame | Superseded],
        *,
        checked: RigCheck | None = None,
    ) -> AsyncIterator[FrameResult]:
        """Process a stream of frames with pipelining; yields exactly one result per frame, in order (a
        frame the source shed before building it, :class:`~perception.scheduler._shedding.Superseded`: its
        shed record, :meth:`shed`'s, in its turn). ``checked``: every sample of the frames passed this check as
        it arrived, one of this runtime's :meth:`intake_check` (another is a :class:`ValueError`): they are not
        checked again (:meth:`_taken`); without it each is.

        The stream's work runs in a task of the runtime (opened with it), not in the consumer's task: no
        cancel scope is held across the ``yield``, so a consumer may be cancelled between two results,
        or leave the loop, without corrupting its own cancel scopes. Closing the generator (``aclose()``,
        ``contextlib.aclosing`` or its finalization) ends the stream: the frames it holds are cancelled
        and no further frame is taken. A consumer that leaves the loop keeping the generator holds the
        stream (it runs until its buffer is full, then waits) until the generator is closed or the runtime
        is (or :meth:`stop`): then the frames in flight finish within the drain timeout, their records
        wait in the buffer as far as it has room, and those the consumer did not take are counted
        (:attr:`undelivered`) and logged -- a close waits for a reader only while it reads (the drain
        timeout from the last record it took). An error of the source is raised once the records of the
        frames taken before it were delivered.
        """
        streams = self._streams
        self.dispatcher  # noqa: B018 - raises when closed
        assert streams is not None
        if checked is not None and checked not in self._intake_checks:
            raise ValueError("run(checked=): not an intake check of this runtime (Runtime.intake_check)")
        source = frames if isinstance(frames, AsyncIterable) else _aiter(frames)
        pipe = self.config.pipeline
        send, recv = anyio.create_memory_object_stream[FrameResult](
            max_buffer_size=pipe.max_in_flight + pipe.queue_size + 1
        )
        stream = _Stream()
        try:
            await streams.start(self._run_stream, source, send, stream, checked is not None)
        except BaseException:
            send.close()
            recv.close()
            raise
        try:
            async for result in recv:
                yield result
            await stream.done.wait()  # its admission released and reported (rt.admission.report())
            if stream.error is not None:
                raise stream.error
        finally:
            recv.close()  # a pipeline still sending learns that nobody reads: it never blocks on us
            stream.scope.cancel()  # a no-op once the stream ended; else the consumer left: nobody waits

    async def _run_stream(
        self,
        source: AsyncIterable[Frame | Superseded],
        send: MemoryObjectSendStream[FrameResult],
        stream: _Stream,
        checked: bool,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """One stream of :meth:`run`, in the runtime's task group: its admission and its pipeline (``checked``:
        its frames' samples passed an intake check, :meth:`_process`). Fails :meth:`run`'s start when the
        admission cannot open; a later error is the stream's."""
        pipe, deadline_ns = self.config.pipeline, self.config.budget.total_ns
        started = False
        try:
            with stream.scope:
                async with contextlib.AsyncExitStack() as stack:
                    admission: AdmissionControl | None = None
                    if self._admission_provider is not None:
                        opened = self._admission_provider.open(
                            pipe.max_in_flight, deadline_ns, adaptive=admission_adapts(pipe, deadline_ns)
                        )
                        admission = await stack.enter_async_context(opened)
                    process = functools.partial(self._process, checked=True) if checked else self.process
                    pipeline = OrderedPipeline(
                        process, self.dropped, pipe, deadline_ns=deadline_ns, admission=admission, shed=self.shed
                    )
                    if self._stopping:  # stopped (a close stops too) before this stream started: it takes no frame
                        pipeline.stop()
                    self._pipelines.add(pipeline)
                    stack.callback(self._stream_ended, pipeline)
                    self.admission = pipeline.admission
                    self.overload = pipeline.overload
                    task_status.started()
                    started = True
                    await pipeline.run(source, send)
        except Exception as exc:
            if not started:
                raise
            stream.error = exc
        finally:
            send.close()
            stream.done.set()

    def _stream_ended(self, pipeline: OrderedPipeline) -> None:
        self._pipelines.discard(pipeline)
        self._undelivered += pipeline.undelivered
        self._intake_held += pipeline.intake_held

    @property
    def undelivered(self) -> int:
        """Records of :meth:`run`'s streams their consumers did not take once stopped (closing, :meth:`stop`;
        logged), the streams running counted too (a live host's status says them while it runs)."""
        return self._undelivered + sum(p.undelivered for p in tuple(self._pipelines))  # (read from any thread)

    @property
    def intake_held(self) -> int:
        """Frames of :meth:`run`'s streams whose intake waited for a consumer far behind (logged once a
        stream), the streams running counted too."""
        return self._intake_held + sum(p.intake_held for p in tuple(self._pipelines))

    def stop(self) -> None:
        """Stop taking frames in every running stream (they drain and end); streams started later
        take none. A stop that lands between opening the runtime and starting :meth:`run` (a signal
        handler's usual timing) is therefore never lost. Closing the runtime stops it so (a stream still
        starting as the host leaves takes no frame)."""
        self._stopping = True
        for p in list(self._pipelines):
            p.stop()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called (closing the runtime calls it)."""
        return self._stopping


@dataclasses.dataclass(eq=False)
class _Stream:
    """What :meth:`Runtime.run` shares with the task running its stream."""

    scope: anyio.CancelScope = dataclasses.field(default_factory=anyio.CancelScope)
    #: Set once the stream's task has ended (its pipeline and its admission closed).
    done: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    error: Exception | None = None


def server_time_breakdown(
    before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, float]]:
    """Server-side mean ms per request of each stage between two statistics snapshots, per model.

    Triton's own accounting: ``queue`` (waiting for an instance), ``compute_input`` (copying inputs
    in), ``compute_infer`` (the model), ``compute_output`` (copying outputs out). Client time minus
    their sum is network, serialisation and client overhead.
    """
    out: dict[str, dict[str, float]] = {}
    for model, b in before.items():
        a = after.get(model)
        if a is None:
            continue
        n = a.get("success_count", 0) - b.get("success_count", 0)
        row: dict[str, float] = {"requests": float(n)}
        for stage in SERVER_STAGES:
            count = a.get(f"{stage}_count", 0) - b.get(f"{stage}_count", 0)
            ns = a.get(f"{stage}_ns", 0) - b.get(f"{stage}_ns", 0)
            row[f"{stage}_ms"] = round(ns / count / 1e6, 3) if count > 0 else 0.0
        row["total_ms"] = round(sum(row[f"{s}_ms"] for s in SERVER_STAGES), 3)
        out[model] = row
    return out


async def _aiter(frames: Iterable[Frame | Superseded]) -> AsyncIterator[Frame | Superseded]:
    for f in frames:
        yield f
        await anyio.lowlevel.checkpoint()
