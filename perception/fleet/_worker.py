"""The fleet's Ray actors: a worker holding one open Triton client, and one embedded Triton per node.

Both are plain classes, made Ray actors by the driver (``ray.remote(DriveWorker)``), so this module does
not import Ray. Their async methods run on the actor's event loop, where anyio runs as on any asyncio
loop.

The workers of a node share its server, and so its admission: the :class:`NodeServer` holds one
:class:`~perception.scheduler.SharedAdmission`, and each worker's replay takes its frames' slots from it
(a :class:`~perception.scheduler.RemoteAdmission` over the actor's methods), so that the frames in flight
on the server, all workers together, follow the rule one replay's follow. Each drive's output then holds
:data:`ADMISSION_FILE`: every frame's admission and end on the node's monotonic clock (one clock for all
the node's workers), and the shared admission's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perception._paths import FUSED_MCAP_FILE, MODES_FILE
from perception.config import RuntimeConfig, load_config
from perception.drives import DriveReader
from perception.errors import FleetError, PerceptionError
from perception.fleet._outputs import ADMISSION_FILE, SUMMARY_FILE, publish, staging_dir
from perception.fleet._summary import COUNTERS, BudgetResult, DriveSummary, Replayed
from perception.metrics import BUDGET_PERCENTILE, LatencyStats, RunCounters, budget_rows, budget_violations
from perception.replay import Rate, ReplayOptions, ReplayOutcome, each_frame, replay_drive, score_modes
from perception.scheduler import RemoteAdmission, Session, SharedAdmission
from perception.types import FrameResult, FrameStatus

__all__ = ["SUMMARY_FILE", "DriveJob", "DriveWorker", "NodeServer", "WorkerSettings"]

log = logging.getLogger(__name__)

#: Each drive's own fleet summary, beside its replay outputs in ``OUT/<drive>/``.


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """What every drive of a run shares (sent once to each worker)."""

    profile: str | None  # launch profile path; None: the default profile
    budget_ms: float | None = None
    percentile: float = BUDGET_PERCENTILE
    rate: Rate = "max"  # as parsed by perception.replay.parse_rate (the CLI's --rate)
    fused_mcap: bool = True
    report_md: bool = True  # OUT/<drive>/report.md with its rendered frames (about 2 s of CPU a drive)
    eval_modes: bool = False  # also score every sensor mode (perception eval), into modes.json


@dataclass(frozen=True, slots=True)
class DriveJob:
    name: str
    path: str
    out: str
    attempt: int


class _NodeAdmission:
    """A node's :class:`SharedAdmission` as a worker reaches it: the :class:`NodeServer` actor's methods."""

    def __init__(self, server: Any) -> None:
        self._server = server

    async def attach(self, max_in_flight: int, deadline_ns: int, adaptive: bool, owner: str) -> int:
        token: int = await self._server.admission_attach.remote(max_in_flight, deadline_ns, adaptive, owner)
        return token

    async def acquire(self, token: int) -> bool:
        granted: bool = await self._server.admission_acquire.remote(token)
        return granted

    def release(self, token: int, service_ns: int | None, late: bool) -> object:
        return self._server.admission_release.remote(token, service_ns, late)  # not waited for

    async def detach(self, token: int) -> None:
        await self._server.admission_detach.remote(token)

    async def report(self, token: int) -> dict[str, object]:
        state: dict[str, object] = await self._server.admission_report.remote(token)
        return state


class DriveWorker:
    """A Ray actor replaying one drive at a time over one open Triton client (shared by its drives).

    ``server``: its node's :class:`NodeServer` (its embedded Triton), whose admission its replays share
    with the node's other workers; ``owner`` names this worker there. None: external servers, and the
    worker's own admission. ``repositories``: those its node's embedded Triton serves (empty: servers by
    URL): a model of a drive's session they lack fails the drive at once, not after the start-up timeout."""

    def __init__(
        self,
        urls: list[str],
        settings: WorkerSettings,
        default_profile: str,
        server: Any = None,
        owner: str = "",
        repositories: Sequence[str] = (),
    ) -> None:
        self._urls = tuple(urls)
        self._repositories = [Path(r) for r in repositories]
        self._settings = settings
        self._profile_path = settings.profile or default_profile
        self._admission = RemoteAdmission(_NodeAdmission(server), owner=owner) if server is not None else None
        self._stack: contextlib.AsyncExitStack | None = None
        self._client: Any = None
        self._current: str | None = None
        self._frames = 0
        self._replay: asyncio.Task[Any] | None = None  # the replay running here
        self._interrupted = False

    def where(self) -> dict[str, Any]:
        return _where()

    def progress(self) -> tuple[str | None, int]:
        """The drive being replayed and its frames so far."""
        return self._current, self._frames

    async def _open(self, cfg: RuntimeConfig) -> Any:
        if self._repositories:  # the node's embedded server: a model it lacks would never be ready
            from perception.server import check_models_held

            models: dict[str, str] = {}
            for sensor in cfg.active_sensors:
                models.setdefault(sensor.model, sensor.name)
            check_models_held(self._repositories, models)
        if self._client is None:
            from perception.scheduler import client_options
            from perception.triton import TritonClient

            stack = contextlib.AsyncExitStack()
            await stack.__aenter__()
            try:
                client = await stack.enter_async_context(TritonClient(client_options(cfg.server, self._urls)))
                await client.wait_ready([s.model for s in cfg.active_sensors], timeout_s=cfg.server.startup_timeout_s)
            except BaseException:
                await stack.aclose()
                raise
            self._stack, self._client = stack, client
        return self._client

    async def interrupt(self) -> None:
        """The fleet is stopping: cancel the replay running here, and any sent here after it.

        Ray's own cancel is not enough: a replay sent to this worker just as the stop came was reported
        cancelled to the driver and ran on here to its end (a busy fresh-clone run: a whole drive replayed
        after Ctrl-C, holding the fleet's exit that long)."""
        self._interrupted = True
        if self._replay is not None:
            self._replay.cancel()

    async def close(self) -> None:
        if self._stack is not None:
            stack, self._stack, self._client = self._stack, None, None
            await stack.aclose()

    def _session(self, reader: DriveReader) -> Session:
        """The drive's session: the profile assembled against it once for the run, ``--budget-ms`` applied."""
        return Session.assemble(load_config(self._profile_path), reader.source).with_overrides(
            budget_ms=self._settings.budget_ms
        )

    async def replay(self, job: DriveJob) -> DriveSummary:
        """Replay ``job``'s drive into ``OUT/<name>/`` (staged, then renamed); its summary for the report.

        A drive that fails (cannot be read, a profile that does not fit it, no usable frame) is a summary
        with ``status`` and ``error``, not an exception: the other drives go on.
        """
        if self._interrupted:
            raise asyncio.CancelledError(f"drive {job.name}: the fleet is stopping")  # as Ray's cancel
        out = Path(job.out)
        staging = staging_dir(out, job.name, job.attempt)
        t0, cpu0 = time.monotonic(), time.process_time()
        self._current, self._frames = job.name, 0
        self._replay = asyncio.current_task()
        where = self.where()
        summary = DriveSummary(job.name, job.path, attempt=job.attempt, pid=where["pid"], host=where["host"])

        admitted: list[tuple[int, int, int]] = []  # frame id, admitted and ended (node's monotonic ns)

        def count(result: FrameResult) -> None:
            self._frames += 1
            if result.status is not FrameStatus.DROPPED and result.latency.start_ns:
                start = result.latency.start_ns
                admitted.append((result.frame_id, start, start + result.latency.total_ns))

        total_sketch: dict[str, Any] | None = None
        try:
            # the drive opened once for the run: the session, the replay and the modes read it
            with DriveReader(job.path, strict=False) as reader:
                summary, total_sketch = await self._replay_drive(job, reader, summary, staging, count, admitted)
        except PerceptionError as exc:
            log.warning("drive %s failed: %s", job.name, exc)
            summary = summary.failed(exc)
        finally:
            self._current, self._replay = None, None
        wall_s = round(time.monotonic() - t0, 3)
        summary = dataclasses.replace(
            summary,
            wall_s=wall_s,
            cpu_s=round(time.process_time() - cpu0, 3),  # this worker process, one drive at a time
            frames_per_s=round(summary.frames / max(wall_s, 1e-9), 2),
        )
        try:
            (staging / SUMMARY_FILE).write_text(_json(summary.to_json(sketch=True)))  # (read back: pooled too)
            publish(staging, out / job.name)
        except FleetError as exc:  # OUT/<name> is not ours to replace: this drive fails, named
            log.warning("drive %s failed: %s", job.name, exc)
            summary = summary.failed(exc)
        return dataclasses.replace(summary, total_sketch=total_sketch)

    async def _replay_drive(
        self,
        job: DriveJob,
        reader: DriveReader,
        summary: DriveSummary,
        staging: Path,
        count: Callable[[FrameResult], None],
        admitted: list[tuple[int, int, int]],
    ) -> tuple[DriveSummary, dict[str, Any] | None]:
        """Replay the open drive; its summary and its frame totals' sketch. A failure after the replay
        ran (the modes) keeps what the replay reported: the summary says it failed, with the error."""
        total_sketch: dict[str, Any] | None = None
        try:
            session = self._session(reader)
            cfg = session.config
            summary = dataclasses.replace(summary, ground_truth=reader.has_ground_truth)
            client = await self._open(cfg)
            summary = dataclasses.replace(summary, urls=tuple(client.urls))
            results: list[FrameResult] = []  # --eval re-fuses them offline
            sinks = [each_frame(count)]
            if self._settings.eval_modes:
                sinks.append(each_frame(results.append))
            if self._settings.fused_mcap:
                from perception.viz import recorder_sink

                sinks.append(recorder_sink(mcap_path=staging / FUSED_MCAP_FILE))
            # No per-frame server split: a server shared with other workers makes it unavailable (their
            # requests show in its statistics), and its polls hold each next frame back a little (frames
            # 91 ms apart with it, 88 ms without, measured on the sleepy models). The drive's report keeps
            # Triton's time per model (server_ms).
            options = ReplayOptions(
                rate=self._settings.rate,
                out_dir=staging,
                progress=False,
                server_split=False,
                report_md=self._settings.report_md,
            )
            outcome = await replay_drive(
                reader,
                session,
                options,
                client=client,
                sinks=sinks,
                admission_provider=self._admission,
            )
            summary = self._summarise(summary, outcome, cfg)
            if self._admission is not None:
                state = outcome.report.admission
                (staging / ADMISSION_FILE).write_text(_json({"admission": state, "frames": admitted}))
            # the drive's frame totals as a mergeable sketch, for the fleet's pooled percentiles (not in
            # the drive's own file): a fixed size per drive, however long the drive
            total_sketch = outcome.latency.total_ns.to_dict()
            if self._settings.eval_modes:
                # a drive without ground truth is not an error: its summary says so (modes None)
                has_modes = bool(summary.ground_truth) and outcome.evaluation is not None
                modes = self._modes(reader, results, session, staging) if has_modes else None
                summary = dataclasses.replace(summary, evaluated=True, modes=modes)
        except PerceptionError as exc:
            log.warning("drive %s failed: %s", job.name, exc)
            summary = summary.failed(exc)
        return summary, total_sketch

    def _summarise(self, summary: DriveSummary, outcome: ReplayOutcome, cfg: RuntimeConfig) -> DriveSummary:
        r = outcome.report.counters
        latency = outcome.report.latency
        replayed = Replayed(
            RunCounters(**{k: getattr(r, k) for k in COUNTERS}),  # the first errors stay in report.json
            latency_ms={
                "total": (latency.total or LatencyStats()).as_dict(),
                "stages": {k: {"p50": v.p50, "p99": v.p99} for k, v in latency.stages.items()},
            },
            mAP=(outcome.evaluation or {}).get("mAP"),
            admission=outcome.report.admission,
        )
        budget = None
        if self._settings.budget_ms is not None:
            rows = budget_rows(outcome.latency, self._settings.budget_ms, cfg.budget.stages, self._settings.percentile)
            violations = budget_violations(rows)
            budget = BudgetResult(
                self._settings.budget_ms, self._settings.percentile, not violations, tuple(violations)
            )
        s = dataclasses.replace(summary, status="ok", error=None, replayed=replayed, budget=budget)
        problem = outcome.drive_error or outcome.unusable()
        if outcome.interrupted:
            return dataclasses.replace(s, status="interrupted")
        if problem is not None:
            status = "damaged" if outcome.drive_error is not None else "failed"
            return dataclasses.replace(s, status=status, error=str(problem), error_type=type(problem).__name__)
        return s

    def _modes(
        self, reader: DriveReader, results: list[FrameResult], session: Session, staging: Path
    ) -> dict[str, Any]:
        modes = score_modes(results, session, reader)
        (staging / MODES_FILE).write_text(_json(modes))
        return {m: v.get("mAP") for m, v in modes.items()}


class NodeServer:
    """A Ray actor owning the embedded Triton of one node, shared by that node's workers, and their
    shared admission (the ``admission_*`` methods: :class:`~perception.scheduler.SharedAdmission`'s)."""

    def __init__(self) -> None:
        self._stack: contextlib.AsyncExitStack | None = None
        #: EmbeddedTriton.supervise of the node's server (a task of the actor's event loop: Ray's own)
        self._supervision: asyncio.Future[None] | None = None
        self._admission = SharedAdmission()

    async def where(self) -> dict[str, Any]:
        return _where()

    async def admission_attach(self, max_in_flight: int, deadline_ns: int, adaptive: bool, owner: str) -> int:
        return self._admission.attach(max_in_flight, deadline_ns, adaptive=adaptive, owner=owner)

    async def admission_acquire(self, token: int) -> bool:
        return await self._admission.acquire(token)

    async def admission_release(self, token: int, service_ns: int | None, late: bool) -> None:
        self._admission.release(token, service_ns, late)

    async def admission_detach(self, token: int) -> None:
        self._admission.detach(token)

    async def admission_drop(self, owner: str) -> None:
        """Free what a worker that died held (its streams detached)."""
        self._admission.drop_owner(owner)

    async def admission_report(self, token: int | None = None) -> dict[str, object]:
        return self._admission.report(token)

    async def start(self, repositories: list[str], startup_timeout_s: float, restarts: int = 0) -> str:
        """Start the node's server; one that crashes is restarted on its ports, at most ``restarts`` times
        within 10 minutes (:meth:`~perception.server.EmbeddedTriton.supervise`)."""
        from perception.server import EmbeddedTriton

        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            emb = await stack.enter_async_context(
                EmbeddedTriton([Path(r) for r in repositories], startup_timeout_s=startup_timeout_s)
            )
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        if restarts:
            self._supervision = asyncio.ensure_future(emb.supervise(restarts))
        url: str = emb.grpc_url
        return url

    async def stop(self) -> None:
        """Stop the server, then remove shared memory left by this node's dead workers."""
        from perception.server import cleanup_stale_shm

        supervision, self._supervision = self._supervision, None
        if supervision is not None:  # ended before the stop, which is no crash
            supervision.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervision
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()
        cleanup_stale_shm()


def _where() -> dict[str, Any]:
    """An actor's process: its pid and host (the driver waits for the process to end after killing it)."""
    return {"pid": os.getpid(), "host": socket.gethostname()}


def _json(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"
