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
(:class:`perception.metrics.TraceSplitter`). Against an external server it comes from Triton's
statistics between frames (:class:`perception.metrics.ServerSplitter`), with one frame in flight only
(``--rate lockstep`` or ``pipeline.max_in_flight: 1``): the next frame is held back until they are read,
outside any frame's timed path; with more frames in flight the report then has Triton's mean time per
request over the run only (``server_ms``). ``report.json``'s ``server_split.source`` says which.

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

import dataclasses
import functools
import logging
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from perception._paths import DETECTIONS_FILE, REPORT_FILE, REPORT_MD_FILE, safe_output_path
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
from perception.replay._damage import FrameSeen, damage_markdown, damage_section
from perception.replay._sinks import EvaluationSink, ProgressSink, RecordsSink, ReplaySink
from perception.replay._source import DriveSource
from perception.scheduler import AdmissionProvider, InferClient, Runtime, server_time_breakdown
from perception.types import Frame

__all__ = ["Rate", "ReplayOptions", "ReplayOutcome", "parse_rate", "replay_drive", "safe_output_path"]

log = logging.getLogger(__name__)

#: Replay pacing: a multiplier of the recorded speed (1.0 = as recorded), ``"max"`` (as fast as frames
#: finish) or ``"lockstep"`` (each frame waits for the previous one's result).
Rate = float | Literal["max", "lockstep"]

#: The fastest multiplier of the recorded speed a :data:`Rate` may be.
MAX_RATE = 1000.0


def parse_rate(text: str) -> Rate:
    """A :data:`Rate` from its text form (a ``--rate`` value): ``max``, ``lockstep`` or a multiplier
    within (0, :data:`MAX_RATE`]. Anything else is a :class:`ConfigError` (key ``rate``)."""
    if text in ("max", "lockstep"):
        return "max" if text == "max" else "lockstep"
    try:
        rate = float(text)
    except ValueError:
        raise ConfigError(f"must be a number, 'max' or 'lockstep', got {text!r}", key="rate") from None
    if not 0 < rate <= MAX_RATE:
        raise ConfigError(f"must be within (0, {MAX_RATE:g}], got {text}", key="rate")
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
    #: Triton's time per request in every frame's latency tree (see module docs). ``None``: whenever it
    #: can be (the embedded server's trace at any depth, else the statistics with one frame in flight);
    #: ``True`` where it cannot is a :class:`ConfigError`; ``False``: off (and no trace).
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
    return ServerSplitter(client.model_statistics, sensors, batched_cameras=batched), None


async def _gated(frames: AsyncIterator[Frame], gate: anyio.Semaphore) -> AsyncIterator[Frame]:
    """``frames``, each released only once the previous frame's result was handled (``gate`` released)."""
    async for frame in frames:
        await gate.acquire()
        yield frame


async def replay_drive(
    drive: str | os.PathLike[str],
    config: RuntimeConfig,
    options: ReplayOptions | None = None,
    *,
    sinks: Sequence[ReplaySink] = (),
    stop: anyio.Event | None = None,
    client: InferClient | None = None,
    admission_provider: AdmissionProvider | None = None,
) -> ReplayOutcome:
    """Replay ``drive`` through a :class:`Runtime` built from ``config``; see module docs for outputs.

    The replay is a runtime plus sinks (:mod:`perception.replay._sinks`): the records, the evaluation
    and the progress bar, then ``sinks`` in their order, each getting every frame result in order.

    ``stop``: once set, intake ends and the frames in flight drain (every record written, the report
    says ``interrupted``); set before the runtime is up, the start is abandoned (the server stopped)
    and :class:`ReplayStoppedError` is raised: nothing was replayed.
    ``client``: an open Triton client to share (a fleet worker replays many drives over one); the
    runtime then uses it instead of opening its own server and client from ``config.server``.
    ``admission_provider``: the runtime's admission (a fleet worker's: shared with the other workers of its
    server)."""
    opts = options or ReplayOptions()
    started: list[Runtime] = []
    if stop is None:
        outcome = await _replay(drive, config, opts, sinks, client, admission_provider, started)
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
                maybe = await _replay(drive, config, opts, sinks, client, admission_provider, started)
            except Exception as exc:  # raised as it is, not in the task group's exception group
                error = exc
            finally:
                tg.cancel_scope.cancel()
        if error is not None:
            raise error
        if maybe is None:
            raise ReplayStoppedError("stopped before the replay started: nothing was replayed", file=str(drive))
        outcome = maybe
        outcome.interrupted = stop.is_set()
    if outcome.source_error is not None:
        raise outcome.source_error
    return outcome


async def _replay(
    drive: str | os.PathLike[str],
    config: RuntimeConfig,
    opts: ReplayOptions,
    sinks: Sequence[ReplaySink],
    client: InferClient | None,
    admission_provider: AdmissionProvider | None,
    started: list[Runtime],
) -> ReplayOutcome:
    cfg = _effective(config, opts.rate)
    rate = opts.rate if isinstance(opts.rate, float | int) else None
    acc = LatencyAccumulator(budget_ns=cfg.budget.total_ns)
    with DriveReader(drive, strict=False) as reader:
        source = DriveSource(reader, cfg, rate=rate, start_ns=opts.start_ns, end_ns=opts.end_ns)
        session = source.session  # the profile resolved against the drive, as every entry point resolves it
        cfg = session.config
        fusion = session.fusion() if opts.fusion else None
        own: list[ReplaySink] = []
        out_dir = opts.out_dir
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            own.append(RecordsSink(safe_output_path(out_dir, DETECTIONS_FILE), include_outputs=opts.include_outputs))
        evaluation = None
        if opts.evaluate and session.source.gt_at is not None and fusion is not None:
            from perception.evaluation import DetectionEvaluator

            evaluation = EvaluationSink(
                DetectionEvaluator(rig=session.rig, ego_at=session.source.ego_at), session.source.gt_at
            )
            own.append(evaluation)
        seen: list[FrameSeen] = []
        versions: dict[str, set[str]] = {}  # of the model that answered, per sensor
        join_override = None if opts.rate != "lockstep" else max(cfg.budget.join_ns, 60_000_000_000)
        server_crashes: dict[str, Any] | None = None
        with ExitStack() as stack:
            # every sink opened before the first frame, closed however the replay ends (in reverse order)
            opened = [stack.enter_context(open_sink(reader, source.rig)) for open_sink in (*own, *sinks)]
            opened.append(stack.enter_context(ProgressSink(opts.progress)(reader, source.rig)))
            # the embedded server traces every request for the per-request server split
            trace = opts.server_split is not False
            async with Runtime(
                session,
                fusion=fusion,
                client=client,
                join_timeout_ns=join_override,
                trace_requests=trace,
                admission=admission_provider,
            ) as rt:
                started.append(rt)
                stats_before = await rt.server_statistics()
                restarts_before = rt.server.restarts if rt.server is not None else 0
                crashes_before = rt.server.crashes if rt.server is not None else 0
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
                    acc.add(result)
                    for name, s in result.sensors.items():
                        if s.model_version:
                            versions.setdefault(name, set()).add(s.model_version)
                    seen.append(FrameSeen.of(result))
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
                stopped = rt.stopping
                admission = rt.admission.report() if rt.admission is not None else None
                if admission is not None and rt.overload is not None:
                    # the frames shed under overload: superseded, or too late to finish (_shedding); the
                    # sensors decimated meanwhile, their results reused (_reuse)
                    admission = {**admission, "overload": {**rt.overload.report(), "reused": dict(rt.reuse.reused)}}
                with anyio.CancelScope(shield=True):
                    stats_after = await rt.server_statistics()
                # a server restarted during the replay (a crash) counted from 0 again: no breakdown
                restarts = rt.server.restarts if rt.server is not None else 0
                server_ms = server_time_breakdown(stats_before, stats_after) if restarts == restarts_before else {}
                crashes = rt.server.crashes - crashes_before if rt.server is not None else 0
                if crashes:
                    server_crashes = {
                        "crashes": crashes,
                        "restarts": restarts - restarts_before,
                        "logs": [str(p) for p in rt.server.crash_logs],
                    }
        counters = acc.counters()
        models = {s.name: ModelServed(s.model, tuple(sorted(versions.get(s.name, ())))) for s in cfg.active_sensors}
        damage = reader.damage
        quality = evaluation.evaluator.summary() if evaluation is not None else None
        report = RunReport(
            counters,
            acc.latency_summary(),
            drive=str(drive),
            rate=opts.rate,
            # the model that served each sensor, and the versions of it that answered
            models=models,
            alignment=dataclasses.asdict(source.assembler.stats),
            accumulation=source.assembler.accumulator.report() if source.assembler.accumulator else None,
            # Triton's own per-stage accounting (mean ms per request): queue, compute input/infer/output
            server_ms=server_ms or None,
            # why requests were late: the servers' queue or the models' compute
            late_causes=late_causes(counters, models, server_ms) or None,
            server_split=ServerSplit(
                per_frame=split_off is None,
                source=splitter.source if splitter is not None else None,  # trace | statistics
                why_not=split_off,
                models=acc.server_split(),
            ),
            interrupted=stopped,
            admission=admission,
            image_size_mismatch=dict(source.image_size_mismatch) if source.image_size_mismatch else None,
            server_crashes=server_crashes,
            drive_truncated=str(reader.truncated) if reader.truncated is not None else None,
            drive_damage=damage_section(damage, cfg, source.rig, seen) if damage else None,
            drive_error=str(source.error) if source.error is not None else None,
            quality=quality,
        )
        outcome = ReplayOutcome(report, acc, evaluation=quality, source_error=source.error)
        if damage:
            outcome.damage = damage
            outcome.drive_error = damage.error(str(drive))
        if out_dir is not None:
            report.write(safe_output_path(out_dir, REPORT_FILE))
            if opts.report_md:
                from perception.viz import write_replay_report

                # Rendering takes seconds: off the event loop (a second Ctrl-C still forces the exit), and
                # no frames after a stop (perception render DIR --frame N draws any frame later).
                n_frames = 0 if stopped else 3
                render = functools.partial(write_replay_report, out_dir, report, latency=acc, n_frames=n_frames)
                await anyio.to_thread.run_sync(render, abandon_on_cancel=True)
                if report.drive_damage is not None:
                    md = safe_output_path(out_dir, REPORT_MD_FILE)
                    with md.open("a", encoding="utf-8") as f:
                        f.write("\n" + "\n".join(damage_markdown(report.drive_damage)) + "\n")
    return outcome
