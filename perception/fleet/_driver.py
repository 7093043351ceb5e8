"""The fleet driver: a Ray cluster, workers placed on its nodes, one task per drive, one report.

* **Cluster.** Without an address, a local cluster sized to the machine is started and stopped at the
  end; with one (``auto``, ``ray://host:port``), that cluster is joined and left running.
* **Placement.** Workers are spread over the cluster's nodes in proportion to their CPUs, each pinned
  to its node. Each node with workers gets one embedded Triton (a :class:`NodeServer` actor) that its
  workers share over loopback (shared memory included), unless ``urls`` name external servers; then
  every worker's client spreads its requests over all of them by outstanding requests. The workers of a
  node share its server's admission too (the :class:`NodeServer` holds it): together they keep as many
  frames in flight as one replay would on that server, not as many each (a node's only worker keeps its
  own, which is the same). A worker that dies is removed from it (what it held is freed) before its
  drive goes back in the queue.
* **Tasks.** The driver hands the next drive to the next free worker. A worker that dies mid-drive
  (its process killed, its node lost) is restarted by Ray; its drive goes back in the queue for any
  worker (one left idle waits while drives are out, for that), up to ``retries`` more attempts, and the
  report lists the attempts. Outputs are staged and
  renamed into place (:mod:`perception.fleet._outputs`), so a retry never leaves two copies.
* **Stop.** ``stop`` set (Ctrl-C, SIGTERM): running drives are cancelled (by Ray's cancel, and by each
  worker itself, :meth:`DriveWorker.interrupt`: Ray's can miss a replay sent as the stop came) and
  their staging removed, queued ones are not started (both reported as interrupted: ``cancelled``,
  ``not run``), finished drives are kept and reported (one whose worker published it just before the
  stop included), workers and servers are closed, and a cluster we started is stopped.
* **Close.** Every run ends by closing its workers and servers and killing their actors; the driver then
  waits (at most :data:`ACTOR_EXIT_S`) until their processes on its own host have ended, so that a run
  that returned leaves no worker behind.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from perception._progress import Progress
from perception.config import load_config
from perception.errors import FleetError, PerceptionError
from perception.fleet._baseline import BaselineComparison, Tolerances, check_baseline, compare_runs
from perception.fleet._outputs import claim_output, clear_staging, earlier_drives
from perception.fleet._plan import FleetDrive
from perception.fleet._report import fleet_totals, write_report
from perception.fleet._summary import DriveSummary, FleetTotals
from perception.fleet._worker import SUMMARY_FILE, DriveJob, DriveWorker, NodeServer, WorkerSettings
from perception.server import pid_alive

__all__ = ["FleetOptions", "FleetOutcome", "run_fleet"]

log = logging.getLogger(__name__)

#: How long a restarted worker may take to answer again before it is given up.
WORKER_RESTART_S = 120.0
#: How long the close waits for the killed actors' processes (on this host) to end.
ACTOR_EXIT_S = 10.0


@dataclass(frozen=True, slots=True)
class FleetOptions:
    out: Path
    profile: Path
    address: str | None = None  # None: start a local cluster
    workers: int | None = None  # None: what the servers can serve (default_workers)
    urls: tuple[str, ...] = ()  # external Triton servers; empty: one embedded server per node
    settings: WorkerSettings = field(default_factory=lambda: WorkerSettings(profile=None))
    retries: int = 2  # more attempts of a drive whose worker died
    progress: bool | None = None  # None: when stderr is a terminal
    baseline: Path | None = None  # an earlier fleet run of the same drives to compare with
    tolerances: Tolerances = field(default_factory=Tolerances)
    force: bool = False  # write into an OUT that holds other files (never replacing what is not ours)

    def __post_init__(self) -> None:
        from perception.errors import ConfigError

        if self.workers is not None and not 1 <= self.workers <= 1024:
            raise ConfigError(f"must be within 1..1024, got {self.workers}", key="--workers")
        if not 0 <= self.retries <= 10:
            raise ConfigError(f"must be within 0..10, got {self.retries}", key="--retries")


@dataclass
class FleetOutcome:
    """A fleet run: each drive's summary, the totals over them (typed), and ``fleet.json`` as written."""

    drives: list[DriveSummary]
    totals: FleetTotals
    report: dict[str, Any]
    interrupted: bool = False
    baseline: BaselineComparison | None = None


#: CPUs of a node per worker when the node's own embedded Triton serves its workers: the models of one
#: replay's frame compute concurrently on about two cores (lidar, cameras, radar), and the worker decodes
#: and fuses beside them. More workers than that only queue frames in the shared server, inside their
#: deadlines (issue 27: one worker per CPU degraded every frame on a 2-core machine).
CPUS_PER_WORKER_EMBEDDED = 4


def default_workers(nodes: list[tuple[str, float]], *, embedded: bool) -> int:
    """How many workers a fleet runs unless told: what the servers can serve. With each node's own
    embedded Triton on its CPUs, one per :data:`CPUS_PER_WORKER_EMBEDDED` CPUs of a node (at least one a
    node); with external servers, whose models do not run here, one per CPU."""
    if not embedded:
        return max(1, int(sum(c for _, c in nodes)))
    return sum(max(1, int(c // CPUS_PER_WORKER_EMBEDDED)) for _, c in nodes)


def worker_count(requested: int | None, nodes: list[tuple[str, float]], *, embedded: bool) -> int:
    """How many workers a fleet runs: ``requested`` (``--workers``) up to the cluster's CPUs (a local
    cluster's are this machine's), else :func:`default_workers`. More workers than CPUs would only take
    turns on them, each a process with its own imports and memory (1024 on a laptop: 1024 processes), so
    a request above it is lowered to it with a warning saying so."""
    if requested is None:
        return default_workers(nodes, embedded=embedded)
    cpus = max(1, int(sum(c for _, c in nodes)))
    if requested > cpus:
        log.warning(
            "--workers %d: the Ray cluster has %d CPU(s); running %d worker(s) (more would only take turns on them)",
            requested,
            cpus,
            cpus,
        )
        return cpus
    return requested


def _spread(nodes: list[tuple[str, float]], workers: int) -> list[str]:
    """Node ids for ``workers`` workers, in proportion to each node's CPUs (largest remainder)."""
    total = sum(c for _, c in nodes)
    shares = [(n, workers * c / total) for n, c in nodes]
    counts = {n: math.floor(s) for n, s in shares}
    rest = workers - sum(counts.values())
    for n, _ in sorted(shares, key=lambda x: x[1] - math.floor(x[1]), reverse=True)[:rest]:
        counts[n] += 1
    return [n for n, _ in nodes for _ in range(counts[n])]


class _Fleet:
    def __init__(self, drives: list[FleetDrive], options: FleetOptions) -> None:
        self.drives = drives
        self.opts = options
        self.queue: deque[tuple[FleetDrive, int]] = deque((d, 1) for d in drives)
        self.results: dict[str, DriveSummary] = {}
        self.retried: dict[str, list[str]] = {}
        self.running: dict[str, Any] = {}  # drive name -> ObjectRef: the drives out (taken, not done nor back)
        self._change: anyio.Event | None = None  # what idle workers wait on (_changed)
        self.workers: list[Any] = []
        self.servers: list[Any] = []
        self.server_of: dict[int, Any] = {}  # a worker (index in workers) -> its node's server, if embedded
        self.stopped = False
        self.failed = 0
        self.first_dispatch: float | None = None  # monotonic, the drive phase: first task sent ...
        self.last_done: float | None = None  # ... to the last one answered

    # -- cluster ----------------------------------------------------------------------------
    def connect(self) -> bool:
        import ray

        if ray.is_initialized():
            return False
        kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING}
        kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}}
        # ray.init takes SIGTERM over (a Python handler that exits, and its core worker's crash handler,
        # which aborts the process): a SIGTERM then killed the driver without stopping the cluster's
        # actors or writing the report. Give SIGTERM back to whoever had it (run_with_signals: stop).
        sigterm = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
        try:
            if self.opts.address is None:
                ray.init(num_cpus=os.cpu_count() or 1, **kwargs)
            else:
                ray.init(address=self.opts.address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise FleetError(
                f"cannot start or join the Ray cluster: {exc}{_join_hint(self.opts.address)}", address=self.opts.address
            ) from exc
        finally:
            if sigterm is not None:
                signal.signal(signal.SIGTERM, sigterm)
        return self.opts.address is None

    async def start(self) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [
            (n["NodeID"], float(n["Resources"].get("CPU", 0)))
            for n in _nodes()
            if n.get("Alive") and n["Resources"].get("CPU", 0) > 0
        ]
        if not nodes:
            raise FleetError("the Ray cluster has no alive node with CPUs", address=self.opts.address)
        count = worker_count(self.opts.workers, nodes, embedded=not self.opts.urls)
        placement = _spread(nodes, count)
        urls: dict[str, list[str]] = {}
        node_servers: dict[str, Any] = {}
        repos: list[str] = []  # those of the nodes' embedded servers (none: servers by URL)
        if self.opts.urls:
            urls = {n: list(self.opts.urls) for n in set(placement)}
        else:
            cfg = load_config(self.opts.profile)
            repos = [str(p) for p in cfg.server.models]
            server_cls: Any = ray.remote(NodeServer)
            starting = {}
            for node in sorted(set(placement)):
                actor = server_cls.options(
                    num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False), max_restarts=0
                ).remote()
                self.servers.append(actor)
                node_servers[node] = actor
                starting[node] = actor.start.remote(repos, cfg.server.startup_timeout_s, cfg.server.restarts)
            for node, ref in starting.items():
                urls[node] = [await _unwrapped(ref)]
            log.info("embedded Triton per node: %s", {n[:8]: u for n, u in urls.items()})
        worker_cls: Any = ray.remote(DriveWorker)
        for i, node in enumerate(placement):
            # a node's only worker keeps its own admission: the same rule, without a call to the server
            # actor before each frame
            server = node_servers.get(node) if placement.count(node) > 1 else None
            if server is not None:
                self.server_of[i] = server
            self.workers.append(
                worker_cls.options(
                    num_cpus=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                    max_restarts=self.opts.retries + 1,
                    max_task_retries=0,  # the driver retries a drive, on any worker
                    max_concurrency=4,  # a replay, plus progress and close calls beside it
                ).remote(urls[node], self.opts.settings, str(self.opts.profile), server, _owner(i), repos)
            )
        # every worker process up (its imports done) before the first drive is sent: a task's time
        # beyond the worker's own replay is then Ray's overhead, not the actor's start
        await _gather([w.where.remote() for w in self.workers])

    # -- tasks ------------------------------------------------------------------------------
    async def work(self, worker: Any) -> None:
        """One worker's loop: the next drive from the queue, until the fleet is stopped, or the queue is
        empty and no drive is out (one out may come back to it: its worker died; an idle worker waits for
        that), or this worker died and did not come back."""
        while not self.stopped:
            if not self.queue:
                if not self.running:
                    return
                await self._wait_change()
                continue
            drive, attempt = self.queue.popleft()
            try:
                ended = await self._drive(worker, drive, attempt)
            finally:
                self._changed()
            if ended == "stopped" or (ended == "died" and not await self._back(worker)):
                return

    def _changed(self) -> None:
        """Wake the idle workers: a drive went back in the queue, or one is done, or the fleet stopped."""
        change, self._change = self._change, None
        if change is not None:
            change.set()

    async def _wait_change(self) -> None:
        if self._change is None:
            self._change = anyio.Event()
        await self._change.wait()

    async def _drive(self, worker: Any, drive: FleetDrive, attempt: int) -> Literal["done", "died", "stopped"]:
        """``drive`` on ``worker``, to its summary (``done``: ok or failed), or back in the queue (or failed)
        because the worker died, or cancelled (the fleet stopped)."""
        from ray.exceptions import RayActorError, RayTaskError, TaskCancelledError

        job = DriveJob(drive.name, str(drive.path), str(self.opts.out), attempt)
        sent = time.monotonic()
        if self.first_dispatch is None:
            self.first_dispatch = sent
        ref = worker.replay.remote(job)
        self.running[drive.name] = ref
        try:
            summary: DriveSummary = await ref
            self.last_done = time.monotonic()
            # the task as the driver saw it; beyond the worker's own wall time it is Ray's overhead
            # (argument and result transfer, actor dispatch), with the worker's wall time timed there
            task_s = round(self.last_done - sent, 3)
            overhead_s = round(task_s - (summary.wall_s or 0.0), 3)
            summary = dataclasses.replace(summary, task_s=task_s, ray_overhead_s=overhead_s)
        except TaskCancelledError:
            return "stopped"
        except RayActorError as exc:
            if self.stopped:
                return "stopped"
            reason = f"attempt {attempt}: worker died ({type(exc).__name__})"
            self.retried.setdefault(drive.name, []).append(reason)
            log.warning("drive %s: %s", drive.name, reason)
            await self._forget(worker)
            if attempt <= self.opts.retries:
                self.queue.append((drive, attempt + 1))
            else:
                self._done(self._lost(drive, attempt, f"worker died in each of {attempt} attempts"))
            return "died"
        except RayTaskError as exc:
            # the worker reports every error of ours as the drive's status; anything else raised
            # there is a bug, and it fails this drive only, with its cause, while the others go on
            cause = getattr(exc, "cause", None) or exc
            log.error("drive %s: the worker raised %s", drive.name, type(cause).__name__, exc_info=exc)
            self._done(self._lost(drive, attempt, f"worker error: {type(cause).__name__}: {cause}"))
            return "done"
        finally:
            self.running.pop(drive.name, None)
        self._done(summary)
        return "done"

    async def _forget(self, worker: Any) -> None:
        """A worker died: what it held of its node's shared admission goes to the node's other workers."""
        i = self.workers.index(worker)
        server = self.server_of.get(i)
        if server is not None:
            with anyio.move_on_after(30):
                await _gather([server.admission_drop.remote(_owner(i))])

    async def _back(self, worker: Any) -> bool:
        """Whether a worker that died answers again (Ray restarts it) within :data:`WORKER_RESTART_S`."""
        from ray.exceptions import RayActorError

        with anyio.move_on_after(WORKER_RESTART_S):
            while not self.stopped:
                try:
                    await worker.where.remote()
                    return True
                except RayActorError:
                    await anyio.sleep(0.5)
        log.warning("a worker did not come back; its drives go to the others")
        return False

    def _lost(self, drive: FleetDrive, attempt: int, error: str) -> DriveSummary:
        return DriveSummary(drive.name, str(drive.path), attempt=attempt, status="failed", error=error)

    def _not_run(self, drive: FleetDrive, attempt: int) -> DriveSummary:
        """A queued drive of a stopped fleet: interrupted before it (or its next attempt) started."""
        error = "not run: the fleet was stopped"
        return DriveSummary(drive.name, str(drive.path), attempt=attempt, status="interrupted", error=error)

    def _done(self, summary: DriveSummary) -> None:
        name = summary.name
        summary = dataclasses.replace(summary, attempts=summary.attempt, retries=tuple(self.retried.get(name, [])))
        self.results[name] = summary
        if summary.status != "ok":
            self.failed += 1

    async def watch(self, stop: anyio.Event) -> None:
        import ray

        await stop.wait()
        self.stopped = True  # no drive is started any more; the queued ones are reported as not run
        self._changed()  # the idle workers end
        for ref in list(self.running.values()):
            ray.cancel(ref)
        # and each worker cancels its replay itself: Ray's cancel can miss one sent as the stop came
        for w in self.workers:
            w.interrupt.remote()

    async def show(self, bar: Progress) -> None:
        """Refresh the progress display every second (the last refresh is :meth:`shown`'s, at the end)."""
        while True:
            frames = sum(r.frames for r in self.results.values())
            for current in await _gather([w.progress.remote() for w in self.workers]):
                if current is not None and current[0] is not None:
                    frames += current[1]
            self.shown(bar, frames)
            await anyio.sleep(1.0)

    def shown(self, bar: Progress, frames: int | None = None) -> None:
        """Drives done (of all), running and failed, frames so far and frames/s since the first drive was sent;
        without ``frames``: those of the finished drives (the final line)."""
        if frames is None:
            frames = sum(r.frames for r in self.results.values())
        since = self.first_dispatch
        rate = frames / max(time.monotonic() - since, 1e-9) if since is not None else 0.0
        bar.update(
            len(self.results),
            f"{len(self.results)}/{len(self.drives)} done, {len(self.running)} running, {self.failed} failed, "
            f"{frames} frames, {rate:.1f} frames/s",
        )

    async def close(self) -> None:
        import ray

        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(30):
                await _gather([w.close.remote() for w in self.workers])
            places: list[Any] = []
            with anyio.move_on_after(10):
                places = await _gather([a.where.remote() for a in [*self.workers, *self.servers]])
            for w in self.workers:
                ray.kill(w, no_restart=True)
            with anyio.move_on_after(60):
                await _gather([s.stop.remote() for s in self.servers])
            for s in self.servers:
                ray.kill(s, no_restart=True)
            await _exited([p for p in places if p is not None])


async def _exited(places: list[dict[str, Any]]) -> None:
    """Wait, at most :data:`ACTOR_EXIT_S`, for the killed actors' processes on this host to end: Ray's kill
    only asks for it, and a run that returned with its workers still alive would leave them to whatever
    the host starts next (a busy host was seen to keep one past the driver's exit). Actors on other nodes
    end on their own: their processes are not this host's to watch."""
    host = socket.gethostname()
    pids = {p["pid"] for p in places if p.get("host") == host and p.get("pid") != os.getpid()}
    with anyio.move_on_after(ACTOR_EXIT_S):
        while True:
            pids = {pid for pid in pids if pid_alive(pid)}
            if not pids:
                break
            await anyio.sleep(0.05)
    if pids:
        log.warning("fleet: actor processes %s still running %.0f s after they were killed", sorted(pids), ACTOR_EXIT_S)


def _owner(worker: int) -> str:
    """How a worker is named in its node's shared admission."""
    return f"worker-{worker}"


def _join_hint(address: str | None) -> str:
    """What to check when joining ``address`` failed. ``ray start --head`` turns Ray's token authentication on
    when a token exists (``~/.ray/auth_token``, which any local ``ray.init`` creates), and Ray sends the token
    to a cluster found on this machine (``auto``) but never to an explicit address unless told to: there, a
    join without ``RAY_AUTH_MODE=token`` is refused (after Ray's connect timeout, as "failed to connect")."""
    if address is None or address == "auto" or os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        return ""
    return (
        " (if the cluster uses token authentication, the default of `ray start --head` when ~/.ray/auth_token "
        "exists: set RAY_AUTH_MODE=token, with the cluster's token in ~/.ray/auth_token, RAY_AUTH_TOKEN or "
        "RAY_AUTH_TOKEN_PATH; or use --address auto on the head)"
    )


def _phase(first: float | None, last: float | None) -> float | None:
    """Seconds from the first drive sent to the last one answered (the run minus start and close)."""
    return None if first is None or last is None else round(last - first, 3)


async def _unwrapped(ref: Any) -> Any:
    """``await ref``, with our own error raised as it is (one line for the user), not Ray's wrapper."""
    from ray.exceptions import RayTaskError

    try:
        return await ref
    except RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, PerceptionError):
            raise cause from exc
        raise


def _nodes() -> list[dict[str, Any]]:
    import ray

    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return nodes


async def _gather(refs: list[Any]) -> list[Any]:
    """Each ref's value, or None for one that failed (a dead actor...)."""
    out: list[Any] = []
    for ref in refs:
        try:
            out.append(await ref)
        except Exception:
            out.append(None)
    return out


def _published(out: Path, drive: FleetDrive, *, since: float) -> dict[str, Any] | None:
    """The summary a worker published for ``drive`` in this run (written after ``since``, wall clock)."""
    path = out / drive.name / SUMMARY_FILE
    try:
        if path.stat().st_mtime < since:
            return None  # an earlier run's output
        summary: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if summary.get("name") == drive.name else None


async def run_fleet(drives: list[FleetDrive], options: FleetOptions, stop: anyio.Event | None = None) -> FleetOutcome:
    """Replay ``drives`` on a Ray cluster into ``options.out`` and write ``fleet.json``/``fleet.md``."""
    if options.baseline is not None:  # compared after the run: refused now if it cannot be
        check_baseline(options.baseline, options.out)
    claim_output(options.out, force=options.force)  # before any cluster: a refused OUT costs nothing
    earlier = earlier_drives(options.out, [d.name for d in drives])
    if earlier:
        shown = ", ".join(earlier[:10]) + (f" and {len(earlier) - 10} more" if len(earlier) > 10 else "")
        log.info(
            "%s holds %d drive output(s) of an earlier run not replayed now (%s): kept, and no part of this "
            "run's fleet.json nor of a comparison with it",
            options.out,
            len(earlier),
            shown,
        )
    import ray

    clear_staging(options.out)
    fleet = _Fleet(drives, options)
    stop = stop or anyio.Event()
    started, started_wall = time.monotonic(), time.time()
    ours = fleet.connect()
    try:
        try:
            with Progress(len(drives), "fleet", enabled=options.progress) as bar:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(fleet.watch, stop)
                    await fleet.start()
                    if bar.enabled:
                        tg.start_soon(fleet.show, bar)
                    async with anyio.create_task_group() as work:
                        for w in fleet.workers:
                            work.start_soon(fleet.work, w)
                    tg.cancel_scope.cancel()
                fleet.shown(bar)  # the final counts, not the last refresh's
        finally:
            await fleet.close()
    finally:
        if ours:
            ray.shutdown()
            from perception.server import cleanup_stale_shm

            cleanup_stale_shm()  # regions of workers that were killed, now that they are gone
        clear_staging(options.out)
    for d, attempt in list(fleet.queue):  # never started (or not retried): attempts so far
        if fleet.stopped:
            fleet._done(fleet._not_run(d, attempt - 1))
        else:  # every worker was given up
            fleet._done(fleet._lost(d, attempt - 1, "not run: no worker left"))
    summaries = [fleet.results[d.name] for d in drives if d.name in fleet.results]
    for d in drives:
        if d.name not in fleet.results:
            # cancelled while running, unless its worker had already published it (the stop came while
            # the summary was on its way back): then it finished, and its output is there to report
            published = _published(options.out, d, since=started_wall)
            summaries.append(
                DriveSummary.from_json(published)
                if published is not None
                else DriveSummary(d.name, str(d.path), status="interrupted", error="cancelled")
            )
    meta = {
        "address": options.address or "local",
        "workers": len(fleet.workers),
        "servers": list(options.urls) or f"{len(fleet.servers)} embedded (one per node)",
        "profile": str(options.profile),
        "wall_s": round(time.monotonic() - started, 3),
        "drive_phase_s": _phase(fleet.first_dispatch, fleet.last_done),
        "settings": dataclasses.asdict(options.settings),
    }
    comparison = None
    if options.baseline is not None and not fleet.stopped:
        names = [d.name for d in drives]  # not an earlier run's drive directories in a reused OUT
        comparison = compare_runs(options.out, options.baseline, options.tolerances, replayed=names)
    totals = fleet_totals(summaries)
    report = write_report(options.out, summaries, meta, comparison, fleet=totals)
    return FleetOutcome(drives=summaries, totals=totals, report=report, interrupted=fleet.stopped, baseline=comparison)
