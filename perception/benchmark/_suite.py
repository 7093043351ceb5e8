"""The side-by-side suite behind ``perception bench``: one server, one set of frames, variants interleaved.

Sections (each a dict in the results; a section that cannot run says why under ``skipped``):

``dispatch``
    The classic pattern — the synchronous ``tritonclient.grpc`` client, one request at a time, each
    awaited (:class:`SequentialClient`) — against the runtime's concurrent dispatch
    (:meth:`Runtime.process`, fusion off), frame by frame, the order of the variants rotating every
    frame. ``concurrent_grpc`` is the runtime with every sensor forced to plain gRPC: it separates what
    concurrency buys from what shared memory buys. Latency is the wall time of one frame; throughput
    is frames over the summed wall time (one frame at a time).
``transport``
    gRPC versus system shared memory per tensor size through the ``sink`` test model
    (:func:`measure_transport`), requests alternating. Skipped when the server has no ``sink`` or is
    not on this host (shared memory needs the server's ``/dev/shm``).
``cameras``
    One request per camera versus one batched request (``pipeline.camera_requests``), frame by frame.
``pipelining``
    ``Runtime.run`` (``overflow: block``, no queue) for every combination of ``server.channels`` and
    ``pipeline.max_in_flight``, over chunks of frames, the order of the variants rotating every chunk.
    Latency is the runtime's own frame latency (admission to result), throughput frames over the wall
    time of the variant's chunks. Summarised two ways: channels (most / fewest) at each K, and K
    frames in flight versus one, per channel count.

Every runtime here awaits every sensor (a join deadline of a minute): variants must do the same work
for their times to compare, so the profile's budget does not cut slow sensors short. After each measured
frame (chunk) the suite idles ``settle_s``: CPU-bound models keep working for a while after they answer
(measured: back-to-back frames took 101 ms at p50 where frames 100 ms apart took 83 ms), and without the
pause each variant would inherit the tail of the one before it -- favouring whichever follows a light one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio

from perception.benchmark._env import load_average
from perception.benchmark._models import bench_model_repository
from perception.benchmark._sequential import SequentialClient
from perception.benchmark._stats import ratio, ratio_interval, throughput
from perception.benchmark._transport import SINK_MODEL, measure_transport
from perception.config import RuntimeConfig
from perception.errors import ConfigError, ConnectError, ModelNotReadyError
from perception.metrics import percentiles
from perception.scheduler import Runtime, Session
from perception.triton import ClientOptions, TritonClient, is_loopback
from perception.types import Frame

__all__ = ["AWAIT_ALL_NS", "SECTIONS", "BenchSettings", "run_suite", "variant_config"]

log = logging.getLogger(__name__)

SECTIONS = ("dispatch", "transport", "cameras", "pipelining")
#: Join deadline of every benchmarked runtime: long enough that every sensor is awaited.
AWAIT_ALL_NS = 60_000_000_000
_WARMUP_FRAMES = 2
_DEFAULT_FRAMES = 60

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BenchSettings:
    """How much to measure. ``preset(quick=True)`` is the ~1-minute preset."""

    frames: int = _DEFAULT_FRAMES
    transport_points: tuple[int, ...] = (10_000, 100_000, 300_000)
    transport_repeats: int = 30
    transport_warmup: int = 3
    channels: tuple[int, ...] = (1, 4)
    in_flight: tuple[int, ...] = (1, 2, 4)
    chunk: int = 10  # frames per pipelining chunk
    #: Idle time after each measured frame (each chunk for pipelining), not counted: the models' CPU
    #: work outlives their answers (thread pools spinning down, memory released), so without it a variant
    #: would pay for whichever variant ran just before it.
    settle_s: float = 0.1
    sections: tuple[str, ...] = SECTIONS
    quick: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.sections) - set(SECTIONS)
        if unknown:
            raise ConfigError(f"unknown section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}", key="sections")
        for key in ("frames", "chunk", "transport_repeats"):
            if getattr(self, key) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, key)}", key=key)
        if not self.transport_points or min(self.transport_points) < 1 or self.settle_s < 0:
            raise ConfigError("transport points must be >= 1 and settle_s >= 0", key="transport_points")
        if not self.channels or not self.in_flight or min(*self.channels, *self.in_flight) < 1:
            raise ConfigError("channels and in_flight need values >= 1", key="channels")

    @classmethod
    def preset(cls, *, quick: bool, frames: int | None = None) -> BenchSettings:
        if not quick:
            return cls(frames=frames or _DEFAULT_FRAMES)
        return cls(
            frames=frames or 12,
            transport_repeats=10,
            transport_warmup=2,
            chunk=6,
            quick=True,
        )


def variant_config(
    config: RuntimeConfig,
    *,
    channels: int | None = None,
    in_flight: int | None = None,
    camera_requests: Literal["batched", "per_camera"] | None = None,
    transport: Literal["grpc", "shm", "auto"] | None = None,
) -> RuntimeConfig:
    """``config`` with one knob changed; pipelining variants block (no queue, never drop)."""
    server, pipeline, sensors = config.server, config.pipeline, config.sensors
    if channels is not None:
        server = dataclasses.replace(server, channels=channels)
    if in_flight is not None:
        pipeline = dataclasses.replace(
            pipeline, max_in_flight=in_flight, admission="fixed", queue_size=0, overflow="block"
        )
    if camera_requests is not None:
        pipeline = dataclasses.replace(pipeline, camera_requests=camera_requests)
    if transport is not None:
        sensors = tuple(dataclasses.replace(s, transport=transport) for s in sensors)
    return dataclasses.replace(config, server=server, pipeline=pipeline, sensors=sensors)


@contextlib.asynccontextmanager
async def _runtimes(configs: Mapping[str, RuntimeConfig], session: Session) -> AsyncIterator[dict[str, Runtime]]:
    """A runtime per variant: the run's session (assembled against the drive) with the variant's knobs."""
    async with contextlib.AsyncExitStack() as stack:
        out: dict[str, Runtime] = {}
        for name, cfg in configs.items():
            variant = dataclasses.replace(session, config=cfg)
            runtime = Runtime(variant, fusion=None, join_timeout_ns=AWAIT_ALL_NS)  # the scheduler alone
            out[name] = await stack.enter_async_context(runtime)
        yield out


def _rotated(items: Sequence[T], shift: int) -> list[T]:
    k = shift % len(items)
    return [*items[k:], *items[:k]]


class _Recorder:
    """Per variant: latency samples (per frame), wall times (per unit of work: a frame, or a chunk of
    frames), frame counts and sensor statuses. Units are measured in the same order for every variant,
    so sample ``i`` of two variants is a pair (same frame or chunk, similar load)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.latency: dict[str, list[int]] = {n: [] for n in names}
        self.extra: dict[str, list[int]] = {n: [] for n in names}
        self.walls: dict[str, list[int]] = {n: [] for n in names}
        self.frames: Counter[str] = Counter()
        self.status: dict[str, Counter[str]] = {n: Counter() for n in names}

    def summary(self, name: str, *, extra_key: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "latency": percentiles(self.latency[name]),
            "frames_per_s": throughput(self.frames[name], sum(self.walls[name])),
            "sensor_status": dict(sorted(self.status[name].items())),
        }
        if extra_key is not None:
            out[extra_key] = percentiles(self.extra[name])
        return out

    def compare(self, a: str, b: str) -> dict[str, Any]:
        """Ratios of variant ``a`` over ``b`` -- latency (< 1: ``a`` is faster), throughput (> 1: ``a``
        is) -- each with a 95 % paired-bootstrap interval (``*_ci95``)."""
        la, lb = self.latency[a], self.latency[b]
        sa, sb = percentiles(la), percentiles(lb)
        ta = throughput(self.frames[a], sum(self.walls[a]))
        tb = throughput(self.frames[b], sum(self.walls[b]))
        return {
            "latency_p50": ratio(sa.get("p50"), sb.get("p50")),
            "latency_p50_ci95": ratio_interval(la, lb, "p50"),
            "latency_p99": ratio(sa.get("p99"), sb.get("p99")),
            "latency_p99_ci95": ratio_interval(la, lb, "p99"),
            "throughput": ratio(ta, tb),
            "throughput_ci95": ratio_interval(self.walls[b], self.walls[a], "sum"),
        }


@dataclass
class _Context:
    url: str
    config: RuntimeConfig
    session: Session
    frames: Sequence[Frame]
    settings: BenchSettings


# -- sections ------------------------------------------------------------------------------------------


async def _dispatch(ctx: _Context) -> dict[str, Any]:
    cfg = ctx.config
    configs = {"concurrent": cfg}
    if any(s.transport != "grpc" for s in cfg.active_sensors):
        configs["concurrent_grpc"] = variant_config(cfg, transport="grpc")
    names = ["sequential", *configs]
    rec = _Recorder(names)
    sensor_ns: dict[str, dict[str, list[int]]] = {n: {} for n in names}
    with SequentialClient(ctx.url, cfg.sensors) as seq:
        async with _runtimes(configs, ctx.session) as rts:

            async def one(name: str, frame: Frame, record: bool) -> None:
                if name == "sequential":
                    res = await anyio.to_thread.run_sync(seq.process, frame)
                    latency, statuses = res.latency_ns, [s.value for s in res.status.values()]
                    per_sensor = res.sensor_ns
                else:
                    t0 = time.perf_counter_ns()
                    result = await rts[name].process(frame)
                    latency = time.perf_counter_ns() - t0
                    statuses = [r.status.value for r in result.sensors.values()]
                    per_sensor = {n: r.latency_ns for n, r in result.sensors.items() if r.latency_ns}
                await anyio.sleep(ctx.settings.settle_s)
                if record:
                    for sensor, ns in per_sensor.items():
                        sensor_ns[name].setdefault(sensor, []).append(ns)
                    rec.latency[name].append(latency)
                    rec.walls[name].append(latency)
                    rec.frames[name] += 1
                    rec.status[name].update(statuses)

            for frame in ctx.frames[:_WARMUP_FRAMES]:
                for name in names:
                    await one(name, frame, record=False)
            for i, frame in enumerate(ctx.frames):
                for name in _rotated(names, i):
                    await one(name, frame, record=True)
    variants = {n: rec.summary(n) for n in names}
    for n in names:  # each sensor's own time: its request alone (sequential) or within the frame
        variants[n]["sensors"] = {sensor: percentiles(v) for sensor, v in sensor_ns[n].items()}
    ratios = {f"{n}_over_sequential": rec.compare(n, "sequential") for n in configs}
    return {"variants": variants, "ratios": ratios}


async def _transport(ctx: _Context) -> dict[str, Any]:
    s = ctx.settings
    if not is_loopback(ctx.url):
        return {"skipped": f"server {ctx.url} is not on this host: system shared memory needs its /dev/shm"}
    options = ClientOptions(urls=(ctx.url,), channels=ctx.config.server.channels)
    async with TritonClient(options) as client:
        try:
            await client.wait_ready([SINK_MODEL], timeout_s=5.0)
        except (ModelNotReadyError, ConnectError) as exc:
            where = bench_model_repository() / SINK_MODEL
            return {"skipped": f"the server has no ready {SINK_MODEL!r} model (served from {where}): {exc}"}
        cases = [
            await measure_transport(client, n, repeats=s.transport_repeats, warmup=s.transport_warmup)
            for n in s.transport_points
        ]
    return {"model": SINK_MODEL, "channels": ctx.config.server.channels, "cases": cases}


async def _cameras(ctx: _Context) -> dict[str, Any]:
    cams = Counter(s.model for s in ctx.config.active_sensors if s.kind == "camera")
    if not cams or max(cams.values()) < 2:
        return {"skipped": "needs at least two enabled cameras served by the same model"}
    configs: dict[str, RuntimeConfig] = {
        "per_camera": variant_config(ctx.config, camera_requests="per_camera"),
        "batched": variant_config(ctx.config, camera_requests="batched"),
    }
    cam_names = {s.name for s in ctx.config.active_sensors if s.kind == "camera"}
    names = list(configs)
    rec = _Recorder(names)
    async with _runtimes(configs, ctx.session) as rts:
        for frame in ctx.frames[:_WARMUP_FRAMES]:
            for name in names:
                await rts[name].process(frame)
                await anyio.sleep(ctx.settings.settle_s)
        for i, frame in enumerate(ctx.frames):
            for name in _rotated(names, i):
                t0 = time.perf_counter_ns()
                result = await rts[name].process(frame)
                latency = time.perf_counter_ns() - t0
                await anyio.sleep(ctx.settings.settle_s)
                rec.latency[name].append(latency)
                rec.walls[name].append(latency)
                rec.frames[name] += 1
                rec.status[name].update(r.status.value for r in result.sensors.values())
                cam_ns = [r.latency_ns for n, r in result.sensors.items() if n in cam_names and r.latency_ns]
                if cam_ns:
                    rec.extra[name].append(max(cam_ns))
    variants = {n: rec.summary(n, extra_key="cameras_done") for n in names}
    ratios = rec.compare("batched", "per_camera")
    ratios["cameras_done_p50"] = ratio(
        variants["batched"]["cameras_done"].get("p50"), variants["per_camera"]["cameras_done"].get("p50")
    )
    ratios["cameras_done_p50_ci95"] = ratio_interval(rec.extra["batched"], rec.extra["per_camera"], "p50")
    return {"cameras": dict(cams), "variants": variants, "ratios": {"batched_over_per_camera": ratios}}


async def _pipelining(ctx: _Context) -> dict[str, Any]:
    s = ctx.settings
    grid = [(c, k) for c in s.channels for k in s.in_flight]
    key = {(c, k): f"channels={c},in_flight={k}" for c, k in grid}
    configs = {key[v]: variant_config(ctx.config, channels=v[0], in_flight=v[1]) for v in grid}
    names = list(configs)
    rec = _Recorder(names)
    chunks = [ctx.frames[i : i + s.chunk] for i in range(0, len(ctx.frames), s.chunk)]
    async with _runtimes(configs, ctx.session) as rts:
        for name in names:  # untimed: first frames through each runtime's pipeline
            async for _ in rts[name].run(ctx.frames[:_WARMUP_FRAMES]):
                pass
        for i, chunk in enumerate(chunks):
            for name in _rotated(names, i):
                t0 = time.perf_counter_ns()
                async for result in rts[name].run(chunk):
                    rec.latency[name].append(result.latency.total_ns)
                    rec.status[name].update(r.status.value for r in result.sensors.values())
                    rec.frames[name] += 1
                rec.walls[name].append(time.perf_counter_ns() - t0)
                await anyio.sleep(ctx.settings.settle_s)
    variants = {key[v]: {"channels": v[0], "in_flight": v[1], **rec.summary(key[v])} for v in grid}
    lo, hi = min(s.channels), max(s.channels)
    channels_ratios = (
        {f"in_flight={k}": rec.compare(key[(hi, k)], key[(lo, k)]) for k in s.in_flight} if hi != lo else {}
    )
    k1 = min(s.in_flight)
    in_flight_ratios = {
        f"channels={c}": {f"in_flight={k}": rec.compare(key[(c, k)], key[(c, k1)]) for k in s.in_flight}
        for c in s.channels
    }
    return {
        "chunk": s.chunk,
        "variants": variants,
        "ratios": {
            f"channels_{hi}_over_{lo}": channels_ratios,
            f"in_flight_over_{k1}": in_flight_ratios,
        },
    }


_SECTIONS: dict[str, Callable[[_Context], Any]] = {
    "dispatch": _dispatch,
    "transport": _transport,
    "cameras": _cameras,
    "pipelining": _pipelining,
}


async def run_suite(
    url: str,
    session: Session,
    frames: Sequence[Frame],
    settings: BenchSettings,
) -> dict[str, Any]:
    """Run the selected sections against the server at ``url``; returns ``{section: results}``.

    ``session``'s config gives the sensors, models and knobs (its ``server.url`` is replaced by ``url``);
    each section reports its wall time and the machine's load average before and after it.
    """
    config = session.config
    cfg = dataclasses.replace(config, server=dataclasses.replace(config.server, url=url, replicas=()))
    ctx = _Context(url=url, config=cfg, session=session, frames=list(frames[: settings.frames]), settings=settings)
    out: dict[str, Any] = {}
    for name in settings.sections:
        load_before = load_average()
        t0 = time.monotonic()
        log.info("bench: %s ...", name)
        section: dict[str, Any] = await _SECTIONS[name](ctx)
        section["wall_s"] = round(time.monotonic() - t0, 1)
        section["load_average_1m"] = [load_before, load_average()]
        out[name] = section
        if "skipped" in section:
            log.warning("bench: %s skipped: %s", name, section["skipped"])
    return out
