"""What recording a run costs (issue 47): the client's CPU per frame and bytes per second, on the bundled drive.

The bundled drive is replayed at its recorded speed (``--rate 1``, the vehicle's timing) through the
embedded Triton serving the reference models, with the default profile, alternately without and with a
:class:`perception.record.RunRecorder` (``perception replay --rate 1 --record FILE``'s path). Each run is
measured in its **steady state**: from the :data:`WARMUP`-th frame result to the last one (the start-up
before it -- the server's start, connections, the first kernels, the recording's segment opened with the
source's poses -- is not a per-frame cost and would inflate the client's CPU per frame by ~40 %).

* ``client_cpu_ms``: this process's CPU time (user + system, every thread: intake, dispatch, fusion, gRPC,
  the recorder's writer) per frame over that window; Triton runs in its own processes and is not counted.
  A recorded run's window also counts the writer's CPU after the last result (it writes the frames still
  queued when the recording is closed);
* ``cost_ms``: what recording costs the process per frame, **all of it**: the recorded run's
  ``client_cpu_ms`` minus the plain run's just before it (the runs alternate, so a pair saw about the same
  load). This includes what no counter of the recorder's sees: page faults of the memory it keeps alive,
  the run's threads slowed by the writer sharing their caches and the GIL;
* ``writer_cpu_ms``: the recorder's writer thread, all of its CPU time (waking, encoding, file writes,
  finishing the segment; formats 1-3 also digested each frame, format 4 leaves that to the reader) over
  the whole run, per frame; ``hook_cpu_ms``: the recorder's calls on the run's
  threads (handing samples, poses and results over, the tracker state's copy) per frame, timed here
  (:class:`_Timed`: the recorder does not time itself, a thread's CPU clock is a system call, ~1.7 us; the
  two a call here, ~28 us a frame, are counted in the recorded runs' CPU: the cost is overstated by that):
  the cost its own counters see (``direct_share``: their sum over the plain client);
* ``writer_system_share``: the kernel's part of the writer's CPU in the window (10 ms ticks): its file
  writes (the segments are written with ``O_DIRECT``: hardly any; written buffered, where the file system
  refuses it, the page cache's pages allocated and the payloads copied into them);
* ``share_of_client``: ``cost_ms`` / the plain run's ``client_cpu_ms``, the median over the pairs, with
  ``share_spread`` (min, max): the target is at most 5 %. ``minor_faults``: page faults per frame.
  ``cost_ms_median_interval``: a 95 % bootstrap interval of that median: two runs of one build differ by
  more than the cost (the process's CPU moves by ±1 ms a frame from run to run here), so the median of a
  few pairs is itself uncertain by ~±0.3 ms a frame;
* ``components_ms_per_frame``: the cost from its parts, each with little noise: the writer's and the
  calls' CPU in the window, plus the minor faults the recording adds to its pair's plain run at
  ``fault_us`` each (a fault's cost measured here, fresh pages touched one by one); it misses what the
  run's threads lose to the writer beside them in the caches (the difference above holds that, noisily).
  ``components_share_of_client``: over the plain client;
* ``bytes_per_s``: the recording's size over the drive's duration;
* ``decisions_only``: the same measures for a recording of everything but the samples (a third run beside
  each pair, ``_DecisionsOnly``): the recorder's calls on the run's threads as in a full recording, the
  frames' records, results and arrivals written, no sample queued or written. What the decisions alone
  cost, whatever writes the samples: the floor under the 5 % target;
* ``writer_alone_ms``: the writer's own work, away from any run (a diagnostic, with little noise): the
  items a recorded run handed over are kept, then written by this thread alone, :data:`ALONE_REPEATS`
  times; its CPU per frame for each kind of item (``begin``: the segment opened with the source's poses, once
  a segment), the median over the repeats. What the in-run ``writer_cpu_ms`` adds to it is the run beside it.

The recording's chunks are uncompressed and carry no CRC (the recorder's defaults; why: bench/README.md).

    .venv/bin/python bench/bench_record.py [--repeats 6] [--compression none|lz4|zstd]
        [--drive FILE] [--warmup N] [--out FILE]

Writes ``bench/results/record.json`` (another ``--drive``: ``record-STEM.json``). ``--drive`` measures the
recording on another drive (a longer one: the recorder's steady state, past the frames its queue and heap
take to fill; ``--warmup``: the frame results before the window opens).
"""

from __future__ import annotations

import argparse
import json
import logging
import mmap
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from perception.benchmark import environment
from perception.config import load_config
from perception.drives import DriveReader
from perception.record import RecordOptions, RunRecorder
from perception.replay import ReplayOptions, replay_drive
from perception.scheduler import FusionStage, RunObserver, Session
from perception.types import EgoPose, FrameResult, Sample

log = logging.getLogger("bench_record")

ROOT = Path(__file__).resolve().parents[1]
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"
PROFILE = ROOT / "launch" / "replay.yaml"
RESULTS = ROOT / "bench" / "results" / "record.json"


#: Frame results before the steady-state window opens (start-up, connections, first kernels, segment open).
WARMUP = 5
#: Times the captured items are written for ``writer_alone_ms``.
ALONE_REPEATS = 7


class _Timed(RunRecorder):
    """A recorder whose calls on the run's threads count their CPU time (``hook_cpu_ns``): ``hook_cpu_ms``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hook_cpu_ns = 0

    def _timed(self, call: Callable[..., None], *args: Any) -> None:
        """``call(*args)``, its CPU time on this thread counted in ``hook_cpu_ns``."""
        t0 = time.thread_time_ns()
        call(*args)
        self.hook_cpu_ns += time.thread_time_ns() - t0

    def sample(self, sample: Sample, arrival_ns: int) -> None:
        self._timed(super().sample, sample, arrival_ns)

    def ego(self, pose: EgoPose, arrival_ns: int) -> None:
        self._timed(super().ego, pose, arrival_ns)

    def result(self, result: FrameResult) -> None:
        self._timed(super().result, result)

    def fused(self, *args: Any) -> None:  # the tracker state's copy included
        self._timed(super().fused, *args)

    def predicted(self, *args: Any) -> None:
        self._timed(super().predicted, *args)


class _Captured(_Timed):
    """A recorder whose writer is never started: what the run hands over is kept, in order (``items``)."""

    def __init__(self, path: Path, poses: tuple[EgoPose, ...]) -> None:
        super().__init__(path, RecordOptions(), ego_poses=poses)
        self.items: list[tuple[str, Any]] = []

    def _put(self, kind: str, item: Any, size: int = 0) -> bool:
        self.items.append((kind, item))
        return True


class _DecisionsOnly(_Timed):
    """A recorder of everything but the samples (``decisions_only``, module docs): its calls on the run's
    threads do what they do in a full recording (the images and sweeps remembered, the clouds traced), but a
    sample is neither queued nor written; the frames' records, results and arrivals are. What recording the
    decisions alone costs: the floor under any way of writing the samples."""

    def _put(self, kind: str, item: Any, size: int = 0) -> bool:
        return True if kind == "sample" else super()._put(kind, item)


def _writer_alone(tmp: Path, poses: tuple[EgoPose, ...], drive: Path) -> dict[str, float]:
    """The writer's CPU per frame and kind of item, on a recorded run's items written by this thread alone
    (``writer_alone_ms``, module docs)."""
    captured = _Captured(tmp / "captured.mcap", poses)
    window = _Window(captured, WARMUP, writer=False)  # its writer never started: no writer thread to read
    options = ReplayOptions(rate=1.0, progress=False, evaluate=False, server_split=False)
    anyio.run(lambda: replay_drive(drive, load_config(PROFILE), options, observer=window))
    items = [item for item in captured._items if item is not None] + captured.items  # begin(), then the rest
    frames = max(1, window.results)
    rows: dict[str, list[float]] = {}
    for i in range(ALONE_REPEATS):
        writer = RunRecorder(tmp / f"alone{i}.mcap", RecordOptions(), ego_poses=poses)
        writer._names = dict(captured._names)  # what begin() set on the run's threads
        spent: dict[str, int] = {}
        for kind, item in items:
            t0 = time.thread_time_ns()
            writer._write(kind, item)
            spent[kind] = spent.get(kind, 0) + time.thread_time_ns() - t0
        t0 = time.thread_time_ns()
        writer._finish_segment()
        spent["begin"] = spent.get("begin", 0) + time.thread_time_ns() - t0  # a segment's open and close
        spent["all"] = sum(spent.values())
        for kind, ns in spent.items():
            rows.setdefault(kind, []).append(ns / 1e6 / frames)
    return {kind: round(float(np.median(v)), 3) for kind, v in sorted(rows.items())}


class _Window(RunObserver):
    """The run's observer (the recorder's, when recording): reads the process's CPU (user + system, every
    thread), its minor page faults and (``writer``: the recorder's is running) the writer thread's CPU at the
    ``warmup``-th result and at the last one."""

    def __init__(self, recorder: _Timed | None, warmup: int, *, writer: bool = True) -> None:
        self.recorder = recorder
        self.warmup = warmup
        self.writer = writer and recorder is not None
        self.results = 0
        self.marks: list[tuple[float, int, float, float, float]] = []

    def begin(self, session: Session) -> None:
        if self.recorder is not None:
            self.recorder.begin(session)

    def fusion(self, stage: FusionStage | None) -> FusionStage | None:
        return self.recorder.fusion(stage) if self.recorder is not None else stage

    def sample(self, sample: Sample, arrival_ns: int) -> None:
        if self.recorder is not None:
            self.recorder.sample(sample, arrival_ns)

    def ego(self, pose: EgoPose, arrival_ns: int) -> None:
        if self.recorder is not None:
            self.recorder.ego(pose, arrival_ns)

    def result(self, result: FrameResult) -> None:
        if self.recorder is not None:
            self.recorder.result(result)
        self.results += 1
        if self.results >= self.warmup:  # the window's start, then its end so far
            hooks = self.recorder.hook_cpu_ns / 1e6 if self.recorder is not None else 0.0
            self.marks[self.results > self.warmup :] = [(*_mark(self.writer), hooks)]


def _mark(recording: bool) -> tuple[float, int, float, float]:
    """The process's CPU (ms), its minor page faults, and the recorder's writer thread's CPU and the system
    (kernel) part of it (ms) so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    writer = system = 0.0
    if recording:
        (tid,) = [t.native_id for t in threading.enumerate() if t.name == "run-recorder"]
        with open(f"/proc/self/task/{tid}/schedstat") as f:  # its time on the CPU, ns
            writer = int(f.read().split()[0]) / 1e6
        with open(f"/proc/self/task/{tid}/stat") as f:  # stime: the 13th field after the name, clock ticks
            system = int(f.read().rsplit(")", 1)[1].split()[12]) * 1e3 / os.sysconf("SC_CLK_TCK")
    return 1e3 * (usage.ru_utime + usage.ru_stime), usage.ru_minflt, writer, system


def _run(recorder: _Timed | None, drive: Path = DRIVE, warmup: int = WARMUP) -> dict[str, float]:
    config = load_config(PROFILE)
    options = ReplayOptions(rate=1.0, progress=False, evaluate=False, server_split=False)
    window = _Window(recorder, warmup)
    outcome = anyio.run(lambda: replay_drive(drive, config, options, observer=window))
    (cpu0, faults0, writer0, system0, hooks0), (cpu1, faults1, writer1, system1, hooks1) = window.marks
    after = 0.0
    if recorder is not None:
        recorder.close()  # the frames still queued at the last result, written now: counted in the window
        after = max(0.0, recorder.cpu_ns / 1e6 - writer1)
    frames = outcome.report.counters.frames
    n = max(1, window.results - warmup)
    return {
        "frames": frames,
        "window_frames": n,
        "client_cpu_ms": (cpu1 - cpu0 + after) / n,
        "minor_faults": (faults1 - faults0) / n,
        "writer_window_cpu_ms": (writer1 - writer0) / n,
        "writer_window_system_ms": (system1 - system0) / n,
        # the writer's and the calls' CPU in the window (the writer's after it included, as in client_cpu_ms)
        "writer_steady_cpu_ms": (writer1 - writer0 + after) / n,
        "hook_steady_cpu_ms": (hooks1 - hooks0) / n,
    }


def _fault_us() -> float:
    """What a minor page fault costs this process here (us, CPU): fresh anonymous pages touched one by one
    (the kernel's fault and its zeroing of the page), the median of three 64 MB maps."""
    page = mmap.PAGESIZE
    costs = []
    for _ in range(3):
        with mmap.mmap(-1, 64 << 20) as m:
            t0 = time.thread_time_ns()
            for at in range(0, len(m), page):
                m[at] = 1
            costs.append((time.thread_time_ns() - t0) / 1e3 / (len(m) // page))
    return float(np.median(costs))


def _median_interval(values: list[float], seed: int = 47) -> list[float]:
    """A 95 % bootstrap interval of the median of ``values`` (the pairs' costs): how far the headline median
    could be from the machine's own, given the spread of these pairs."""
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(np.asarray(values), size=(4000, len(values))), axis=1)
    return [round(float(np.percentile(medians, 2.5)), 3), round(float(np.percentile(medians, 97.5)), 3)]


def _components(plain: dict[str, float], rec: dict[str, Any], fault_us: float) -> float:
    """A recording's cost per frame from its parts, each measured with little noise: the writer's and the calls'
    CPU in the window, and the minor faults it adds to the plain run's (the pair's) at ``fault_us`` each."""
    faults = max(0.0, rec["minor_faults"] - plain["minor_faults"])
    return float(rec["writer_steady_cpu_ms"] + rec["hook_steady_cpu_ms"] + faults * fault_us / 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--compression", default=RecordOptions().compression, choices=("lz4", "zstd", "none"))
    parser.add_argument("--drive", type=Path, default=DRIVE, help="the drive replayed (default: the bundled one)")
    parser.add_argument(
        "--warmup", type=int, default=WARMUP, help=f"frame results before the window opens (default {WARMUP})"
    )
    parser.add_argument(
        "--out", type=Path, help="the results' file (default: record.json for the bundled drive, else record-STEM.json)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    drive: Path = args.drive
    out: Path = args.out or (RESULTS if drive == DRIVE else RESULTS.with_name(f"record-{drive.stem}.json"))
    with DriveReader(drive) as reader:
        duration_s = (reader.end_ns - reader.start_ns) / 1e9
        poses = tuple(reader.ego_poses())
    plain: list[dict[str, float]] = []
    recorded: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []

    def recording(rec: _Timed) -> dict[str, Any]:
        with rec:
            row: dict[str, Any] = _run(rec, drive, args.warmup)
        frames = max(1, row["frames"])
        row.update(
            writer_cpu_ms=rec.cpu_ns / 1e6 / frames,
            hook_cpu_ms=rec.hook_cpu_ns / 1e6 / frames,
            bytes=rec.bytes,
            bytes_per_s=rec.bytes / duration_s,
            gaps={k: v for k, v in rec.stats.items() if k.startswith("dropped_") or k in ("refused", "failed")},
            fused=rec.stats["fused"],
        )
        return row

    fault_us = _fault_us()
    with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp:
        options = RecordOptions(compression=args.compression)
        for i in range(args.repeats):
            plain.append(_run(None, drive, args.warmup))
            decisions.append(recording(_DecisionsOnly(Path(tmp) / f"decisions{i}.mcap", options, ego_poses=poses)))
            recorded.append(recording(_Timed(Path(tmp) / f"run{i}.mcap", options, ego_poses=poses)))
            log.warning("repeat %d: plain %s, decisions %s, recorded %s", i, plain[-1], decisions[-1], recorded[-1])
        alone = _writer_alone(Path(tmp), poses, drive)
    costs = [r["client_cpu_ms"] - p["client_cpu_ms"] for p, r in zip(plain, recorded, strict=True)]
    shares = [c / p["client_cpu_ms"] for c, p in zip(costs, plain, strict=True)]
    client = float(np.median([r["client_cpu_ms"] for r in plain]))
    writer = float(np.median([r["writer_cpu_ms"] for r in recorded]))
    hook = float(np.median([r["hook_cpu_ms"] for r in recorded]))
    floor_costs = [d["client_cpu_ms"] - p["client_cpu_ms"] for p, d in zip(plain, decisions, strict=True)]
    floor_writer = float(np.median([d["writer_cpu_ms"] for d in decisions]))
    floor_hook = float(np.median([d["hook_cpu_ms"] for d in decisions]))
    parts = [_components(p, r, fault_us) for p, r in zip(plain, recorded, strict=True)]
    floor_parts = [_components(p, d, fault_us) for p, d in zip(plain, decisions, strict=True)]
    result = {
        "drive": str(drive.resolve().relative_to(ROOT)) if drive.resolve().is_relative_to(ROOT) else str(drive),
        "profile": str(PROFILE.relative_to(ROOT)),
        "rate": 1.0,
        "compression": args.compression,
        "duration_s": duration_s,
        "steady_state_from_result": args.warmup,
        "client_cpu_ms_per_frame": round(client, 2),
        "client_cpu_ms_per_frame_recording": round(float(np.median([r["client_cpu_ms"] for r in recorded])), 2),
        "cost_ms_per_frame": round(float(np.median(costs)), 3),
        "cost_ms_spread": [round(min(costs), 3), round(max(costs), 3)],
        "cost_ms_median_interval": _median_interval(costs),
        "share_of_client": round(float(np.median(shares)), 4),
        "share_spread": [round(min(shares), 4), round(max(shares), 4)],
        "target_share": 0.05,
        "fault_us": round(fault_us, 2),
        "components_ms_per_frame": round(float(np.median(parts)), 3),
        "components_share_of_client": round(float(np.median(parts)) / client, 4),
        "writer_cpu_ms_per_frame": round(writer, 3),
        "writer_cpu_ms_spread": [
            round(min(r["writer_cpu_ms"] for r in recorded), 3),
            round(max(r["writer_cpu_ms"] for r in recorded), 3),
        ],
        "hook_cpu_ms_per_frame": round(hook, 3),
        "writer_system_share": round(
            float(np.median([r["writer_window_system_ms"] / max(1e-9, r["writer_window_cpu_ms"]) for r in recorded])), 2
        ),
        "direct_share": round((writer + hook) / client, 4),
        "minor_faults_per_frame": {
            "plain": round(float(np.median([r["minor_faults"] for r in plain]))),
            "recording": round(float(np.median([r["minor_faults"] for r in recorded]))),
        },
        "bytes_per_s": round(float(np.median([r["bytes_per_s"] for r in recorded]))),
        "decisions_only": {
            "cost_ms_per_frame": round(float(np.median(floor_costs)), 3),
            "cost_ms_spread": [round(min(floor_costs), 3), round(max(floor_costs), 3)],
            "cost_ms_median_interval": _median_interval(floor_costs),
            "share_of_client": round(float(np.median(floor_costs)) / client, 4),
            "components_ms_per_frame": round(float(np.median(floor_parts)), 3),
            "components_share_of_client": round(float(np.median(floor_parts)) / client, 4),
            "writer_cpu_ms_per_frame": round(floor_writer, 3),
            "hook_cpu_ms_per_frame": round(floor_hook, 3),
            "direct_share": round((floor_writer + floor_hook) / client, 4),
            "minor_faults_per_frame": round(float(np.median([d["minor_faults"] for d in decisions]))),
            "bytes_per_s": round(float(np.median([d["bytes_per_s"] for d in decisions]))),
        },
        "writer_alone_ms_per_frame": alone,
        "runs": {"plain": plain, "decisions_only": decisions, "recorded": recorded},
        "environment": environment(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    sys.stdout.write(json.dumps({k: v for k, v in result.items() if k not in ("runs", "environment")}, indent=2) + "\n")


if __name__ == "__main__":
    main()
