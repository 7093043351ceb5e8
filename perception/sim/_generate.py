"""Drive generation: sensor clocks, the merged timeline, (optionally parallel) capture, MCAP output.

Every sample is a pure function of ``(scenario, seed, duration, rig, sensor, frame index)``: the
scene is analytic in time and each frame draws from its own random stream. Worker processes can
therefore produce samples in any order and the file is byte-identical for any ``workers`` (on one
machine; across CPU models see :mod:`perception.sim._precision`).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path
from typing import Any

import numpy as np

from perception._allocator import freed_memory_kept, keep_freed_memory
from perception._progress import Progress
from perception.errors import ConfigError
from perception.kinds import kind_def
from perception.sim._camera import CameraFrame, CameraModel
from perception.sim._kinds import SimSensorModel, sim_kind
from perception.sim._precision import round_ego_pose, round_ground_truth
from perception.sim._random import Stream, name_key, stream
from perception.sim._rig import RigConfig, SimSensor, builtin_rig_path, load_rig
from perception.sim._scenarios import Scenario, get_scenario
from perception.sim._world import Scene, World
from perception.types import SIM_GENERATOR, EgoPose, GroundTruth, ImageSample, PointCloudSample, SensorKind

__all__ = ["MAX_DURATION_S", "SimSummary", "Simulator", "generate_drive"]

log = logging.getLogger(__name__)

NS = 1_000_000_000
#: The longest drive simulated, in seconds (``perception sim --duration``'s bound too).
MAX_DURATION_S = 3600.0
RigLike = RigConfig | str | os.PathLike[str] | None

# timeline event kinds, in the order they are written when times tie
_EGO, _GT, _SENSOR = 0, 1, 2


def resolve_rig(rig: RigLike, scenario: Scenario) -> RigConfig:
    """A rig config from a :class:`RigConfig`, a YAML path, or ``None`` (the scenario's bundled rig)."""
    if isinstance(rig, RigConfig):
        return rig
    path = builtin_rig_path(scenario.rig) if rig is None else Path(rig)
    if rig is None and not path.is_file():
        raise ConfigError(f"bundled rig {scenario.rig!r} not found; pass a rig file", file=str(path))
    return load_rig(path)


class Simulator:
    """Random access to a simulated drive: scenes, samples, ego poses and ground truth at any time.

    ``Simulator("urban", seed=7, duration_s=12).sample("cam_front", 5)`` is the 6th front image;
    the same arguments always give the same bytes on the same machine (across CPU models: see
    :mod:`perception.sim._precision`).
    """

    def __init__(self, scenario: str | Scenario = "urban", *, seed: int = 0, duration_s: float = 10.0,
                 rig: RigLike = None) -> None:
        if not (isinstance(seed, int) and seed >= 0):
            raise ConfigError(f"seed must be a non-negative integer, got {seed!r}", key="seed")
        if not 0 < duration_s <= MAX_DURATION_S:
            raise ConfigError(f"duration must be in (0, {MAX_DURATION_S:g}] s, got {duration_s!r}", key="duration")
        self.scenario = get_scenario(scenario) if isinstance(scenario, str) else scenario
        self.seed = seed
        self.duration_s = float(duration_s)
        self.duration_ns = round(self.duration_s * NS)
        self.rig = resolve_rig(rig, self.scenario)
        self.world = World(self.scenario, seed, self.duration_s)
        self._models: dict[str, SimSensorModel] = {}
        self._scenes: OrderedDict[int, Scene] = OrderedDict()
        self._times: dict[str, list[int]] = {}

    # -- clocks --------------------------------------------------------------------------------------

    def _sensor(self, name: str) -> SimSensor:
        try:
            return self.rig.sensor(name)
        except KeyError:
            names = ", ".join(s.name for s in self.rig.sensors)
            raise ConfigError(f"no sensor {name!r} in rig {self.rig.name!r} (has {names})", key="sensor") from None

    def capture_times(self, sensor: str) -> list[int]:
        """Capture times (ns) of ``sensor``: ``offset + k / rate`` plus clipped Gaussian jitter."""
        if sensor not in self._times:
            cfg = self._sensor(sensor)
            period = NS / cfg.rate_hz
            n = int(np.ceil((self.duration_ns - cfg.offset_ms * 1e6) / period)) + 1
            rng = stream(self.seed, Stream.CLOCK, name_key(sensor))
            jitter = np.clip(rng.standard_normal(max(n, 0)), -3.0, 3.0) * cfg.jitter_ms * 1e6
            t = np.round(cfg.offset_ms * 1e6 + np.arange(max(n, 0)) * period + jitter).astype(np.int64)
            self._times[sensor] = [int(x) for x in t if 0 <= x < self.duration_ns]
        return self._times[sensor]

    def ego_times(self) -> list[int]:
        period = NS / self.rig.ego_pose_rate_hz
        return [round(k * period) for k in range(int(np.ceil(self.duration_ns / period)))
                if round(k * period) < self.duration_ns]

    def ground_truth_times(self) -> list[int]:
        """At the first lidar's capture times, or at ``ground_truth_rate_hz`` (10 Hz without a lidar)."""
        lidars = [s.name for s in self.rig.sensors if s.kind == SensorKind.LIDAR]
        if self.rig.ground_truth_rate_hz is None and lidars:
            return self.capture_times(lidars[0])
        period = NS / (self.rig.ground_truth_rate_hz or 10.0)
        return [round(k * period) for k in range(int(np.ceil(self.duration_ns / period)))
                if round(k * period) < self.duration_ns]

    def timeline(self) -> list[tuple[int, int, int, str, int]]:
        """Every message of the drive as ``(t_ns, kind, sensor index, sensor, k)``, in write order."""
        events = [(t, _EGO, 0, "", k) for k, t in enumerate(self.ego_times())]
        events += [(t, _GT, 0, "", k) for k, t in enumerate(self.ground_truth_times())]
        for i, s in enumerate(self.rig.sensors):
            events += [(t, _SENSOR, i, s.name, k) for k, t in enumerate(self.capture_times(s.name))]
        events.sort()
        return events

    # -- world ---------------------------------------------------------------------------------------

    def scene(self, t_ns: int) -> Scene:
        scene = self._scenes.get(t_ns)
        if scene is None:
            scene = self.world.scene(t_ns)
            self._scenes[t_ns] = scene
            if len(self._scenes) > 8:
                self._scenes.popitem(last=False)
        return scene

    def ego_pose(self, t_ns: int) -> EgoPose:
        """The ego pose as the drive holds it: rounded to the grid of :mod:`perception.sim._precision`."""
        return round_ego_pose(self.world.ego_pose(t_ns))

    def ground_truth(self, t_ns: int) -> GroundTruth:
        """Ground truth as the drive holds it: the scene's boxes rounded to the grid of
        :mod:`perception.sim._precision` (1 µm, 1e-8 rad), so that it is the same on any CPU."""
        scene = self._scenes.get(t_ns)
        return round_ground_truth(scene.ground_truth() if scene is not None else self.world.ground_truth(t_ns))

    # -- sensors -------------------------------------------------------------------------------------

    def model(self, sensor: str) -> SimSensorModel:
        """The simulator model of ``sensor`` (its kind's :class:`~perception.sim._kinds.SimKind`), built once."""
        m = self._models.get(sensor)
        if m is None:
            cfg = self._sensor(sensor)
            m = sim_kind(cfg.kind).model(cfg, self.seed)
            self._models[sensor] = m
        return m

    def frame_rng(self, sensor: str, k: int) -> np.random.Generator:
        return stream(self.seed, Stream.SENSOR, name_key(sensor), k)

    def sample(self, sensor: str, k: int) -> PointCloudSample | ImageSample:
        """Frame ``k`` of ``sensor`` at its own capture time."""
        times = self.capture_times(sensor)
        if not 0 <= k < len(times):
            raise ConfigError(f"sensor {sensor!r} has frames 0..{len(times) - 1}, not {k}", key="frame")
        t = times[k]
        cfg = self._sensor(sensor)
        m = self.model(sensor)
        rng = self.frame_rng(sensor, k)
        scene = self.scene(t)
        payload = m.capture(scene, rng)
        defn = kind_def(cfg.kind)
        if defn.is_image:
            if not isinstance(payload, bytes):
                raise TypeError(f"simulator model of {cfg.kind} sensor {sensor!r} returned {type(payload).__name__}, "
                                "not encoded image bytes")  # fmt: skip
            return ImageSample(sensor=sensor, t_ns=t, frame_id=cfg.frame_id, data=payload, seq=k,
                               format=sim_kind(cfg.kind).image_format)  # fmt: skip
        if isinstance(payload, bytes) or payload.ndim != 2 or payload.shape[1] != len(defn.point_fields):
            got = "bytes" if isinstance(payload, bytes) else f"shape {list(payload.shape)}"
            raise TypeError(f"simulator model of {cfg.kind} sensor {sensor!r} returned {got}, not "
                            f"[N, {len(defn.point_fields)}] points ({', '.join(defn.point_fields)})")  # fmt: skip
        return PointCloudSample(sensor=sensor, t_ns=t, frame_id=cfg.frame_id, points=payload,
                                fields=defn.point_fields, seq=k)  # fmt: skip

    def render(self, camera: str, t_ns: int, *, noise: bool = True) -> CameraFrame:
        """Render ``camera`` at any time (image + per-pixel object ids), e.g. for training data."""
        m = self.model(camera)
        if not isinstance(m, CameraModel):
            raise ConfigError(f"{camera!r} is a {self._sensor(camera).kind}, not a camera", key="sensor")
        rng = stream(self.seed, Stream.SENSOR, name_key(camera), t_ns) if noise else None
        return m.render(self.scene(t_ns), rng)


# ---------------------------------------------------------------------------------------------
# parallel capture
# ---------------------------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _worker_init(scenario: Scenario, seed: int, duration_s: float, rig: RigConfig) -> None:
    keep_freed_memory()  # this worker's life (perception._allocator)
    if "sim" not in _WORKER:  # forked workers inherit the parent's simulator
        _WORKER["sim"] = Simulator(scenario, seed=seed, duration_s=duration_s, rig=rig)


def _worker_batch(jobs: list[tuple[str, int]]) -> list[PointCloudSample | ImageSample]:
    sim: Simulator = _WORKER["sim"]
    return [sim.sample(name, k) for name, k in jobs]


class _Producer:
    """Sensor samples in timeline order, made in-process or by a pool (bounded read-ahead)."""

    BATCH_S = 0.5  # sim seconds of sensor samples per pool task

    def __init__(self, sim: Simulator, events: list[tuple[int, int, int, str, int]], workers: int) -> None:
        self.sim = sim
        self.jobs = [(name, k) for _, kind, _, name, k in events if kind == _SENSOR]
        self.workers = workers
        self.pool: ProcessPoolExecutor | None = None

    def __iter__(self) -> Generator[PointCloudSample | ImageSample, None, None]:
        if self.workers <= 1:
            for name, k in self.jobs:
                yield self.sim.sample(name, k)
            return
        times = {s.name: self.sim.capture_times(s.name) for s in self.sim.rig.sensors}
        batches: list[list[tuple[str, int]]] = []
        start = 0.0
        for job in self.jobs:
            t = times[job[0]][job[1]] / NS
            if not batches or t >= start + self.BATCH_S:
                batches.append([])
                start = t
            batches[-1].append(job)
        sim = self.sim
        # fork (where available) inherits the built world; spawn rebuilds it in each worker. Never fork once
        # grpc is loaded in this process (a host or test that talked to Triton): grpc's objects are not
        # fork-safe, and a forked worker was seen spinning for minutes in grpc's deallocator.
        forkable = "fork" in get_all_start_methods() and "grpc" not in sys.modules
        method = "fork" if forkable else "spawn"
        if method == "fork":
            _WORKER["sim"] = sim
        self.pool = ProcessPoolExecutor(
            max_workers=self.workers, mp_context=get_context(method), initializer=_worker_init,
            initargs=(sim.scenario, sim.seed, sim.duration_s, sim.rig),
        )
        try:
            pending: list[Future[list[PointCloudSample | ImageSample]]] = []
            it = iter(batches)
            for b in it:
                pending.append(self.pool.submit(_worker_batch, b))
                if len(pending) >= 2 * self.workers:
                    break
            while pending:
                done = pending.pop(0).result()
                nxt = next(it, None)
                if nxt is not None:
                    pending.append(self.pool.submit(_worker_batch, nxt))
                yield from done
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
            _WORKER.pop("sim", None)


# ---------------------------------------------------------------------------------------------
# summary and progress
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SimSummary:
    path: str
    scenario: str
    seed: int
    duration_s: float
    rig: str
    messages: Mapping[str, int] = field(default_factory=dict)  # per sensor, plus "ego_pose", "ground_truth"
    lidar_points_mean: float = 0.0
    lidar_points_max: int = 0
    objects_mean: float = 0.0  # ground-truth objects within 100 m
    bytes: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    workers: int = 1

    @property
    def realtime_factor(self) -> float:
        """Wall time / simulated time (< 1: faster than real time)."""
        return self.wall_s / self.duration_s if self.duration_s else 0.0

    def format(self) -> str:
        lines = [
            f"wrote {self.path} ({self.bytes / 1e6:.1f} MB): {self.scenario}, seed {self.seed}, "
            f"{self.duration_s:g} s, rig {self.rig}",
            "  " + ", ".join(f"{k} {v}" for k, v in self.messages.items()),
            f"  lidar points/sweep {self.lidar_points_mean:.0f} (max {self.lidar_points_max}), "
            f"objects within 100 m {self.objects_mean:.1f}",
            f"  {self.wall_s:.1f} s wall ({self.realtime_factor:.2f}x real time, {self.workers} worker(s))",
        ]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# generate_drive
# ---------------------------------------------------------------------------------------------


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def generate_drive(
    path: str | os.PathLike[str],
    *,
    scenario: str = "urban",
    seed: int = 0,
    duration_s: float = 10.0,
    rig: RigLike = None,
    progress: bool | Callable[[float], None] = False,
    workers: int | None = 1,
    compression: str = "zstd",
) -> SimSummary:
    """Simulate a drive and write it as an MCAP drive file; returns a summary.

    ``progress=True`` draws a bar on stderr; a callable receives the simulated seconds done.
    ``workers`` > 1 captures samples in that many processes (``None``: up to 2, one per core); the
    file is byte-identical whatever the number of workers (on one machine). ``compression`` is the drive's chunk
    compression (``zstd``, ``lz4`` -- faster for big lidar drives -- or ``none``).
    """
    from perception.drives import DriveWriter

    wall0, cpu0 = time.monotonic(), time.process_time()
    sim = Simulator(scenario, seed=seed, duration_s=duration_s, rig=rig)
    n_workers = default_workers() if workers is None else max(1, int(workers))
    events = sim.timeline()
    bar: Callable[[float], None] | None
    closer: Progress | None = None
    if progress is True:
        closer = Progress(sim.duration_s, "sim", enabled=True)
        started = time.monotonic()

        def draw(sim_s: float, shown: Progress = closer) -> None:
            rtf = (time.monotonic() - started) / sim_s if sim_s > 0 else 0.0
            shown.update(sim_s, f"{sim_s:6.1f}/{sim.duration_s:g} s  {rtf:5.2f}x RT")

        bar = draw
    else:
        bar = progress or None
    meta = {
        "generator": SIM_GENERATOR,
        "scenario": sim.scenario.name,
        "seed": str(seed),
        "duration_s": f"{sim.duration_s:g}",
        "rig": sim.rig.name,
        "sky": sim.world.sky,
    }
    counts: dict[str, int] = {s.name: 0 for s in sim.rig.sensors}
    counts.update(ego_pose=0, ground_truth=0)
    lidar_sizes: list[int] = []
    n_objects: list[int] = []
    producer = _Producer(sim, events, n_workers)
    samples = iter(producer)
    made = False
    try:
        with freed_memory_kept(), DriveWriter(path, sim.rig.specs, metadata=meta, compression=compression) as writer:
            made = True
            for t, kind, _, name, k in events:
                if kind == _EGO:
                    writer.write_ego_pose(sim.ego_pose(t))
                    counts["ego_pose"] += 1
                elif kind == _GT:
                    gt = sim.ground_truth(t)
                    writer.write_ground_truth(gt)
                    counts["ground_truth"] += 1
                    n_objects.append(sum(1 for o in gt.objects if np.hypot(o.center[0], o.center[1]) <= 100.0))
                else:
                    sample = next(samples)
                    assert sample.sensor == name and sample.seq == k
                    writer.write(sample)
                    counts[name] += 1
                    if isinstance(sample, PointCloudSample) and sample.kind_hint == "lidar":
                        lidar_sizes.append(int(sample.points.shape[0]))
                if bar is not None:
                    bar(t / NS)
            if bar is not None:
                bar(sim.duration_s)
    except BaseException:
        # Stopped (Ctrl-C) or failed: what was written is a valid but shorter drive that its metadata
        # says is the whole one; it is not left under the name asked for.
        if made:
            Path(path).unlink(missing_ok=True)
        raise
    finally:
        samples.close()  # stops the worker pool early on errors
        if closer is not None:
            closer.close()
    return SimSummary(
        path=str(path),
        scenario=sim.scenario.name,
        seed=seed,
        duration_s=sim.duration_s,
        rig=sim.rig.name,
        messages=counts,
        lidar_points_mean=float(np.mean(lidar_sizes)) if lidar_sizes else 0.0,
        lidar_points_max=max(lidar_sizes, default=0),
        objects_mean=float(np.mean(n_objects)) if n_objects else 0.0,
        bytes=Path(path).stat().st_size,
        wall_s=time.monotonic() - wall0,
        cpu_s=time.process_time() - cpu0,
        workers=n_workers,
    )
