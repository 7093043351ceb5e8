"""Replay a drive through the runtime and write its outputs.

``DIR/detections.jsonl`` gets exactly one record per frame, written and flushed as each frame
completes (so an interrupted replay leaves complete records up to the last finished frame);
``DIR/report.json`` gets the counters and latency percentiles (and detection quality when the drive
has ground truth); ``DIR/report.md`` presents them with a few rendered frames (:mod:`perception.viz`).
The replay is a runtime plus sinks (:mod:`perception.replay._sinks`): the records, the evaluation and
the progress bar are sinks; extra outputs (a fused MCAP recording, a live Foxglove view, a timeline)
plug in as ``sinks`` too. ``report.json`` is one typed object, :class:`perception.metrics.RunReport`.

Every record's latency tree splits each request into the client's share (preprocessing, serialisation)
and the time in flight, split further into Triton's own queue / compute input / compute infer / compute
output time and the remaining overhead (network, gRPC, client scheduling). The embedded server traces
every request (``server.trace``), so the split is per request at any number of frames in flight
(:class:`perception.metrics.TraceSplitter`). Against an external server, when asked for
(``server_split=True``: ``perception budget``, ``perception replay --server-split``), it comes from Triton's
statistics between frames (:class:`perception.metrics.ServerSplitter`), with one frame in flight only
(``--rate lockstep`` or ``pipeline.max_in_flight: 1``): the next frame is held back until they are read,
outside any frame's timed path (a statistics request a frame: not free, so not the default); otherwise the
report has Triton's mean time per request over the run only (``server_ms``). ``report.json``'s
``server_split`` says which source, or why none.

A damaged drive costs only what is damaged: a chunk that cannot be read (bad CRC, decompression
error, bad record) is skipped and the replay goes on with the next chunk; a truncated file is
replayed up to the cut. ``drive_damage`` in the report (and a section of report.md) says what was
lost -- chunks with byte offsets, per topic and per sensor the messages and time ranges, the frames
in the damaged time with their statuses and missing sensors (:mod:`perception.replay._damage`) --
and :attr:`ReplayOutcome.damage` / :attr:`ReplayOutcome.drive_error` carry it to the caller (the
CLI exits 3). A message that does not decode still ends the replay there with every output written
(``drive_error`` in the report), then its :class:`DriveError` is raised.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from perception._paths import DETECTIONS_FILE, REPORT_FILE, safe_output_path
from perception.config import RuntimeConfig
from perception.drives import DriveDamage, DriveReader
from perception.errors import ConfigError, DriveDamagedError, DriveError, ReplayError, ReplayStoppedError
from perception.metrics import (
    LatencyAccumulator,
    ModelServed,
    RunReport,
    ServerSplit,
    ServerSplitter,
    TraceSplitter,
    late_causes,
    with_in_flight,
)
from perception.replay._damage import FrameSeen, damage_section
from perception.replay._sinks import EvaluationSink, FrameSink, ProgressSink, RecordsSink, ReplaySink
from perception.replay._source import DriveSource
from perception.scheduler import (
    AdmissionProvider,
    InferClient,
    RunObserver,
    Runtime,
    Session,
    server_time_breakdown,
)
from perception.types import Frame, FrameResult

__all__ = ["Rate", "ReplayOptions", "ReplayOutcome", "parse_rate", "replay_drive", "safe_output_path"]

log = logging.getLogger(__name__)

#: Replay pacing: a multiplier of the recorded speed (1.0 = as recorded), ``"max"`` (as fast as frames
#: finish) or ``"lockstep"`` (each frame waits for the previous one's result).
Rate = float | Literal["max", "lockstep"]

#: The fastest multiplier of the recorded speed a :data:`Rate` may be.
MAX_RATE = 1000.0
#: The slowest: a hundred times slower than recorded (a 10 s drive in 17 minutes). Slower is no use and a
#: slip of the exponent (``1e-9``: a 10 s drive in three centuries) hangs the run with no sign of why.
MIN_RATE = 0.01


def parse_rate(text: str) -> Rate:
    """A :data:`Rate` from its text form (a ``--rate`` value): ``max``, ``lockstep`` or a multiplier
    within [:data:`MIN_RATE`, :data:`MAX_RATE`]. Anything else is a :class:`ConfigError` (key ``rate``)."""
    if text in ("max", "lockstep"):
        return "max" if text == "max" else "lockstep"
    try:
        rate = float(text)
    except ValueError:
        raise ConfigError(f"must be a number, 'max' or 'lockstep', got {text!r}", key="rate") from None
    if not MIN_RATE <= rate <= MAX_RATE:
        raise ConfigError(f"must be within [{MIN_RATE:g}, {MAX_RATE:g}], got {text}", key="rate")
    return rate


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    rate: Rate = "max"
    out_dir: Path | None = None
    progress: bool | None = None  # None: when stderr is a terminal
    fusion: bool = True
    evaluate: bool = True
    include_outputs: bool = False  # raw per-sensor model outputs in each record
    start_ns: int | None = None
    end_ns: int | None = None
    report_md: bool = True  # DIR/report.md (latency tables, quality, rendered frames) when out_dir is set
    #: Triton's time per request in every frame's latency tree (see module docs). ``None``: where it
    #: costs the run nothing it did not pay anyway (the embedded server's trace, at any depth); ``True``:
    #: also from the statistics, with one frame in flight (a statistics request after every frame, the
    #: next frame held back until it is read: about 0.75 ms of the client's CPU a frame on the bundled
    #: drive, and the server's; ``perception budget``'s default, ``perception replay --server-split``),
    #: and where neither can be it is a :class:`ConfigError`; ``False``: off (and no trace).
    server_split: bool | None = None


@dataclass
class ReplayOutcome:
    report: RunReport
    latency: LatencyAccumulator
    evaluation: dict[str, Any] | None = None
    interrupted: bool = False
    #: The drive is damaged (skipped chunks, truncation...): everything readable was replayed; the
    #: error names the file and the first damage (``drive_damage`` in the report says it all).
    drive_error: DriveDamagedError | None = None
    damage: DriveDamage = field(default_factory=DriveDamage)
    #: A message that did not decode ended the replay there (raised once every output is written).
    source_error: DriveError | None = field(default=None, repr=False)

    def unusable(self) -> ReplayError | None:
        """The error to report when no frame had a sensor answer ok (``usable`` in the report is 0), else None.

        Frames that failed in every sensor are still one record each; but a run made only of them
        (every model erroring, a server refusing every request, every request late) is a failure, not
        a result. An interrupted run is judged by its own exit status instead.
        """
        c = self.report.counters
        if self.interrupted or c.usable > 0:
            return None
        statuses = "; ".join(
            f"{sensor} " + ", ".join(f"{status} {n}" for status, n in sorted(counts.items()))
            for sensor, counts in c.sensor_status.items()
        )
        errors = "; ".join(f"{sensor}: {' '.join(text.split())[:200]}" for sensor, text in c.first_errors.items())
        message = (
            f"no usable frame: no sensor answered ok in any of the {c.frames} frames"
            if c.frames
            else "no usable frame: the drive gave no frame to replay"
        )
        return ReplayError(
            message + (f" ({statuses})" if statuses else "") + (f"; first errors: {errors}" if errors else ""),
            file=self.report.drive,
        )


def _effective(config: RuntimeConfig, rate: Rate) -> RuntimeConfig:
    if rate == "lockstep":
        # One frame at a time, never dropped, every sensor awaited: deterministic regression output.
        pipe = dataclasses.replace(config.pipeline, max_in_flight=1, queue_size=0, overflow="block")
        return dataclasses.replace(config, pipeline=pipe)
    if rate == "max":
        # As fast as the pipeline allows: the reader waits for a free slot (no queue), so no frame is
        # dropped and a frame's budget clock starts when it can actually be dispatched.
        pipe = dataclasses.replace(config.pipeline, queue_size=0, overflow="block")
        return dataclasses.replace(config, pipeline=pipe)
    return config


def _server_splitter(
    rt: Runtime, cfg: RuntimeConfig, wanted: bool | None
) -> tuple[ServerSplitter | TraceSplitter | None, str | None]:
    """The splitter for this replay, or why there is none: Triton's trace when the runtime's server
    writes one (any number of frames in flight), else its statistics (one frame in flight)."""
    from perception.triton import TraceReader, TritonClient

    k = cfg.pipeline.max_in_flight
    if wanted is False:
        return None, "turned off"
    sensors = [(s.name, s.kind, s.model) for s in cfg.active_sensors]
    batched = cfg.pipeline.camera_requests == "batched"
    trace_dir = getattr(rt.server, "trace_dir", None)
    if trace_dir is not None:
        return TraceSplitter(TraceReader(trace_dir), sensors, batched_cameras=batched), None
    if k > 1:
        if wanted:
            raise ConfigError(
                f"the per-frame server split needs one frame in flight or the server's trace, the pipeline "
                f"has {k} and the server's trace is not readable here "
                "(use --rate lockstep or pipeline.max_in_flight: 1)",
                key="pipeline.max_in_flight",
            )
        return None, (
            f"{k} frames in flight: Triton's statistics cannot tell them apart and its trace is not readable "
            "here (an external server; use --rate lockstep)"
        )
    client = rt.client
    if not isinstance(client, TritonClient):
        return None, "not a Triton client"
    if wanted is None:
        return None, (
            "Triton's statistics per frame were not asked for: a statistics request after every frame, the next "
            "frame held back until it is read (an external server, whose trace is not readable here; "
            "perception replay --server-split, perception budget)"
        )
    return ServerSplitter(client.models_statistics, sensors, batched_cameras=batched), None


async def _gated(frames: AsyncIterator[Frame], gate: anyio.Semaphore) -> AsyncIterator[Frame]:
    """``frames``, each released only once the previous frame's result was handled (``gate`` released)."""
    async for frame in frames:
        await gate.acquire()
        yield frame


async def replay_drive(
    drive: str | os.PathLike[str] | DriveReader,
    config: RuntimeConfig | Session,
    options: ReplayOptions | None = None,
    *,
    sinks: Sequence[ReplaySink] = (),
    stop: anyio.Event | None = None,
    client: InferClient | None = None,
    admission_provider: AdmissionProvider | None = None,
    observer: RunObserver | None = None,
) -> ReplayOutcome:
    """Replay ``drive`` through a :class:`Runtime` built from ``config``; see module docs for outputs.

    ``drive`` is a path, or a :class:`DriveReader` the caller opened for the whole run (used and left
    open: the CLI and a fleet worker read the drive once, for the session, the replay and the modes);
    ``config`` a profile, or the :class:`Session` the caller assembled from it against that reader's
    source (then used as it is: the session is assembled once per run).

    The replay is a runtime plus sinks (:mod:`perception.replay._sinks`): the records, the evaluation
    and the progress bar, then ``sinks`` in their order, each getting every frame result in order.

    ``stop``: once set, intake ends and the frames in flight drain (every record written, the report
    says ``interrupted``); set before the runtime is up, the start is abandoned (the server stopped)
    and :class:`ReplayStoppedError` is raised: nothing was replayed.
    ``client``: an open Triton client to share (a fleet worker replays many drives over one); the
    runtime then uses it instead of opening its own server and client from ``config.server``.
    ``admission_provider``: the runtime's admission (a fleet worker's: shared with the other workers of its
    server).
    ``observer``: sees the session (once the runtime is up: a recorder replaces an earlier recording then, so
    a replay that never starts leaves it), every sample as it is read, every frame fusion consumes and every
    result (a :class:`perception.scheduler.RunObserver`, e.g. a recorder; its fusion stage asked for first)."""
    opts = options or ReplayOptions()
    started: list[Runtime] = []
    if stop is None:
        outcome = await _replay(drive, config, opts, sinks, client, admission_provider, started, observer)
    else:
        maybe: ReplayOutcome | None = None
        error: Exception | None = None
        async with anyio.create_task_group() as tg:

            async def watch(stop: anyio.Event) -> None:
                await stop.wait()
                if not started:
                    tg.cancel_scope.cancel()  # still starting: abandon the start
                for rt in started:
                    rt.stop()

            tg.start_soon(watch, stop)
            try:
                maybe = await _replay(drive, config, opts, sinks, client, admission_provider, started, observer)
            except Exception as exc:  # raised as it is, not in the task group's exception group
                error = exc
            finally:
                tg.cancel_scope.cancel()
        if error is not None:
            raise error
        if maybe is None:
            raise ReplayStoppedError("stopped before the replay started: nothing was replayed", file=_name(drive))
        outcome = maybe
        outcome.interrupted = stop.is_set()
    if outcome.source_error is not None:
        raise outcome.source_error
    return outcome


def _name(drive: str | os.PathLike[str] | DriveReader) -> str:
    return str(drive.path) if isinstance(drive, DriveReader) else str(drive)


@contextlib.contextmanager
def _opened(drive: str | os.PathLike[str] | DriveReader) -> Iterator[DriveReader]:
    """The caller's open reader as it is, or the drive opened for this replay (and closed after it)."""
    if isinstance(drive, DriveReader):
        yield drive
        return
    with DriveReader(drive, strict=False) as reader:
        yield reader


async def _replay(
    drive: str | os.PathLike[str] | DriveReader,
    config: RuntimeConfig | Session,
    opts: ReplayOptions,
    sinks: Sequence[ReplaySink],
    client: InferClient | None,
    admission_provider: AdmissionProvider | None,
    started: list[Runtime],
    observer: RunObserver | None = None,
) -> ReplayOutcome:
    rate = opts.rate if isinstance(opts.rate, float | int) else None
    with _opened(drive) as reader:
        # the profile resolved against the drive (as every entry point resolves it), once per run: the
        # caller's session when it assembled one, with the pacing's pipeline settings
        session = config if isinstance(config, Session) else Session.assemble(config, reader.source)
        session = dataclasses.replace(session, config=_effective(session.config, opts.rate))
        source = DriveSource(reader, session, rate=rate, start_ns=opts.start_ns, end_ns=opts.end_ns, observer=observer)
        cfg = session.config
        fusion = session.fusion() if opts.fusion else None
        if observer is not None:  # (begun once the runtime is up, as the sinks are opened)
            fusion = observer.fusion(fusion)  # the recorder sees every frame fusion consumes
        tally = _Tally(cfg.budget.total_ns)
        own, evaluation = _own_sinks(session, opts, fusion is not None)
        join_override = None if opts.rate != "lockstep" else max(cfg.budget.join_ns, 60_000_000_000)
        watch = _ServerWatch()
        with ExitStack() as stack:
            # the embedded server traces every request for the per-request server split
            async with Runtime(
                session,
                fusion=fusion,
                client=client,
                join_timeout_ns=join_override,
                trace_requests=opts.server_split is not False,
                admission=admission_provider,
            ) as rt:
                # every sink opened, and the observer begun (a recorder replaces an earlier recording then),
                # once the runtime is up, before the first frame (a server that never came up, or a stop
                # meanwhile, leaves an earlier run's outputs as they were); closed however the replay ends, in
                # reverse order, after the runtime
                if observer is not None:
                    observer.begin(session)
                opened = [stack.enter_context(open_sink(reader, source.rig)) for open_sink in (*own, *sinks)]
                opened.append(stack.enter_context(ProgressSink(opts.progress)(reader, source.rig)))
                started.append(rt)
                await watch.begin(rt)
                split = await _run_frames(rt, source, cfg, opts, tally, opened, observer)
                stopped = rt.stopping
                # the circuits that did something: opened, or sent a measuring request (load or a fault)
                circuits = {m: c for m, c in rt.circuits().items() if c["opened"] or any(c["measurements"].values())}
                admission = _admission_section(rt)
                await watch.end(rt)
        quality = evaluation.evaluator.summary() if evaluation is not None else None
        report = _run_report(
            _name(drive),
            opts,
            cfg,
            source,
            reader,
            tally,
            watch,
            split,
            stopped=stopped,
            admission=admission,
            circuits=circuits or None,
            quality=quality,
        )
        outcome = ReplayOutcome(report, tally.acc, evaluation=quality, source_error=source.error)
        damage = reader.damage
        if damage:
            outcome.damage = damage
            outcome.drive_error = damage.error(_name(drive))
        if opts.out_dir is not None:
            await _write_report(opts.out_dir, report, tally.acc, report_md=opts.report_md, stopped=stopped)
    return outcome


def _admission_section(rt: Runtime) -> dict[str, Any] | None:
    """report.json's ``admission``: the stream's admission (its in-flight limit and how it moved), the frames
    whose intake waited for the records' consumer far behind it (``intake_held``) and the records it did not
    take (``undelivered``: the runtime's counts, logged as they happen), and, when the stream sheds, what its
    overload policy shed (``overload``)."""
    if rt.admission is None:
        return None
    admission = {**rt.admission.report(), "intake_held": rt.intake_held, "undelivered": rt.undelivered}
    if rt.overload is not None:
        # the frames shed under overload: superseded, or too late to finish (_shedding); the sensors decimated
        # meanwhile, their results reused (_reuse)
        admission["overload"] = {**rt.overload.report(), "reused": dict(rt.reuse.reused)}
    return admission


class _Tally:
    """What the report counts of every frame: latency (the accumulator), the versions of each sensor's
    model that answered, and what each frame saw (for the damage section)."""

    def __init__(self, budget_ns: int) -> None:
        self.acc = LatencyAccumulator(budget_ns=budget_ns)
        self.versions: dict[str, set[str]] = {}
        self.seen: list[FrameSeen] = []

    def add(self, result: FrameResult) -> None:
        self.acc.add(result)
        for name, s in result.sensors.items():
            if s.model_version:
                self.versions.setdefault(name, set()).add(s.model_version)
        self.seen.append(FrameSeen.of(result))


def _own_sinks(session: Session, opts: ReplayOptions, fused: bool) -> tuple[list[ReplaySink], EvaluationSink | None]:
    """Replay's own outputs: the records (with an output directory) and the evaluation (ground truth and
    fusion)."""
    own: list[ReplaySink] = []
    if opts.out_dir is not None:
        opts.out_dir.mkdir(parents=True, exist_ok=True)
        own.append(RecordsSink(safe_output_path(opts.out_dir, DETECTIONS_FILE), include_outputs=opts.include_outputs))
    evaluation = None
    if opts.evaluate and session.source.gt_at is not None and fused:
        from perception.evaluation import DetectionEvaluator

        evaluation = EvaluationSink(
            DetectionEvaluator(rig=session.rig, ego_at=session.source.ego_at), session.source.gt_at
        )
        own.append(evaluation)
    return own, evaluation


@dataclass
class _ServerWatch:
    """Triton over the replay: its time per model (statistics before and after: ``server_ms``, none when
    it restarted meanwhile, having counted from 0 again) and the crashes it had (``server_crashes``)."""

    stats_before: Any = None
    restarts_before: int = 0
    crashes_before: int = 0
    server_ms: dict[str, Any] = field(default_factory=dict)
    crashes: dict[str, Any] | None = None

    async def begin(self, rt: Runtime) -> None:
        self.stats_before = await rt.server_statistics()
        self.restarts_before = rt.server.restarts if rt.server is not None else 0
        self.crashes_before = rt.server.crashes if rt.server is not None else 0

    async def end(self, rt: Runtime) -> None:
        with anyio.CancelScope(shield=True):
            stats_after = await rt.server_statistics()
        restarts = rt.server.restarts if rt.server is not None else 0
        if restarts == self.restarts_before:
            self.server_ms = server_time_breakdown(self.stats_before, stats_after)
        crashes = rt.server.crashes - self.crashes_before if rt.server is not None else 0
        if crashes and rt.server is not None:
            self.crashes = {
                "crashes": crashes,
                "restarts": restarts - self.restarts_before,
                "logs": [str(p) for p in rt.server.crash_logs],
            }


async def _run_frames(
    rt: Runtime,
    source: DriveSource,
    cfg: RuntimeConfig,
    opts: ReplayOptions,
    tally: _Tally,
    opened: Sequence[FrameSink],
    observer: RunObserver | None = None,
) -> ServerSplit:
    """Run the drive's frames through ``rt``: each result attributed its server time, tallied and given
    to every sink in order. A sink that fails stops the runtime; its error is raised once it drained.
    Returns how the server split was made (the report's ``server_split`` without its models)."""
    splitter, split_off = _server_splitter(rt, cfg, opts.server_split)
    frames = source.frames()
    gate = anyio.Semaphore(1)
    gated = splitter is not None and splitter.gated
    if splitter is not None:
        await splitter.start()
    if gated:
        frames = _gated(frames, gate)
    failed: Exception | None = None  # a sink's: the runtime stops, drains, then it is raised
    async for raw in rt.run(frames):
        result = await splitter.attribute(raw) if splitter is not None else with_in_flight(raw)
        tally.add(result)
        if observer is not None:
            observer.result(result)
        if failed is None:
            try:
                for sink in opened:
                    sink.add(result)
            except Exception as exc:  # not raised inside the stream: it ends in order first
                failed = exc
                rt.stop()
        if gated:
            gate.release()  # the next frame starts once this one is fully handled
    if failed is not None:
        raise failed
    return ServerSplit(
        per_frame=split_off is None,
        source=splitter.source if splitter is not None else None,  # trace | statistics
        why_not=split_off,
    )


def _run_report(
    drive: str,
    opts: ReplayOptions,
    cfg: RuntimeConfig,
    source: DriveSource,
    reader: DriveReader,
    tally: _Tally,
    watch: _ServerWatch,
    split: ServerSplit,
    *,
    stopped: bool,
    admission: dict[str, Any] | None,
    circuits: dict[str, Any] | None,
    quality: dict[str, Any] | None,
) -> RunReport:
    acc = tally.acc
    counters = acc.counters()
    models = {s.name: ModelServed(s.model, tuple(sorted(tally.versions.get(s.name, ())))) for s in cfg.active_sensors}
    damage = reader.damage
    invalid = source.invalid
    return RunReport(
        counters,
        acc.latency_summary(),
        drive=drive,
        rate=opts.rate,
        # the model that served each sensor, and the versions of it that answered
        models=models,
        # with the samples and poses the reader skipped (live's intake counters of the same: invalid, by sensor)
        alignment={
            **dataclasses.asdict(source.assembler.stats),
            "invalid": sum(invalid.values()),
            "invalid_by_sensor": invalid,
        },
        accumulation=source.assembler.accumulator.report() if source.assembler.accumulator else None,
        # Triton's own per-stage accounting (mean ms per request): queue, compute input/infer/output
        server_ms=watch.server_ms or None,
        # why requests were late: the servers' queue or the models' compute
        late_causes=late_causes(counters, models, watch.server_ms) or None,
        server_split=dataclasses.replace(split, models=acc.server_split()),
        interrupted=stopped,
        admission=admission,
        image_size_mismatch=dict(source.image_size_mismatch) if source.image_size_mismatch else None,
        server_crashes=watch.crashes,
        circuits=circuits,
        drive_truncated=str(reader.truncated) if reader.truncated is not None else None,
        drive_damage=damage_section(damage, cfg, source.rig, tally.seen) if damage else None,
        drive_error=str(source.error) if source.error is not None else None,
        quality=quality,
    )


async def _write_report(
    out_dir: Path, report: RunReport, acc: LatencyAccumulator, *, report_md: bool, stopped: bool
) -> None:
    """``report.json`` and (``report_md``) ``report.md``, its damage section included."""
    report.write(safe_output_path(out_dir, REPORT_FILE))
    if report_md:
        from perception.viz import write_replay_report

        # Rendering takes seconds: off the event loop (a second Ctrl-C still forces the exit), and
        # no frames after a stop (perception render DIR --frame N draws any frame later).
        render = functools.partial(write_replay_report, out_dir, report, latency=acc, n_frames=0 if stopped else 3)
        await anyio.to_thread.run_sync(render, abandon_on_cancel=True)
