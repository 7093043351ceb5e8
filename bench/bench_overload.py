"""The overload curve (issue 43): drives whose trigger outruns the models, replayed at recorded speed.

One run, one machine: the sustainable rate is measured first (the default rig's 10 Hz drive replayed
``--rate lockstep``: frames per second, one at a time, every sensor awaited). Then, for each factor
(0.5x, 0.8x, 1x, 1.5x, 2x, 3x by default), a drive is simulated from the default rig with its lidar (the
trigger) at ``factor x sustainable`` Hz, replayed once in lockstep (the reference: every frame processed)
and once at recorded speed (``--rate 1.0``: what a vehicle sees; the overload policy sheds frames). All
replays share one embedded server. Each frame's work stays at most that of the 10 Hz drive: the lidar
merges at most the sweep before it (its ``accumulate_ms``, 120 ms at 10 Hz, times 10 Hz / the trigger's
rate above 10 Hz; with 120 ms at 25 Hz each frame would merge three sweeps and cost the lidar model half
as much again, which measures a heavier workload, not the overload). Per point:

* frames offered (records), processed, complete (status ok), shed (reason overload), predicted; the
  dropped frames by reason: superseded, too late, queue overflow (all three shed by the overload
  policy), other;
* the processed frames' latency p50/p99 (from the frame's intake) and deadline misses;
* the age of the answer from the trigger's capture, p50/p99, over every frame (a shed frame's answer
  is its predicted record): when the answer came out, against when the drive's clock says the lidar
  sweep was captured (the replay's pacing);
* lidar ok share of the processed frames; circuits opened (frames with a sensor skipped); frames that
  reused a decimated sensor's earlier result;
* wasted compute: Triton's compute (compute input + infer + output, its statistics) spent on requests
  whose answers were not used (late, cancelled or failed), as a share of all its compute; from the
  statistics: the failed requests' time (each at most the model's mean compute per request: a request
  rejected from the queue computed nothing), and successful requests beyond those answered in time
  (the mean compute per success each; a reused result is no request), less the runtime's warm-up (one
  request per instance);
* fused mAP over every frame of the drive (:func:`score`: a processed frame by its detections, a shed
  one by its prediction, a frame without an answer as nothing detected), lockstep's on the same drive
  and the ratio; the replay's own evaluation too (``fused_mAP``: it leaves out frames dropped without a
  prediction);
* at the factors below 1, whether every frame's detections equal lockstep's (as recorded), and how
  many are close to them (:func:`_close`);
* and the same drive through ``perception live`` (:func:`live`: ``live_session``, what the command
  runs, in this process against the bench's server: a publisher process plays the drive at its recorded
  timing, the live API assembles and processes it): the same counts (latency from the trigger's
  arrival), wasted compute, and fused mAP over every frame: its records are matched to the drive's
  frames by the trigger's time (:func:`host_offset`), and scored against the drive's ground truth as
  the replays are; below 1x, whether every frame was processed and its detections equal lockstep's.
  Its counts are over the drive's frames: the frames the live assembly makes on its timer after the
  drive's last sweep (no lidar in them) are counted apart, as are drive frames without a record.

``--issue-drive`` (on by default, about 2 minutes): issue 43's own drive, the default rig with the lidar
at 20 Hz and the profile's defaults (120 ms accumulation: three sweeps a frame), 20 s, seed 7, the same
three ways (the issue's table's columns: offered, processed, complete, shed, lidar ok, p99, mAP).

Writes ``bench/results/overload.json`` (with the load average at the start, after each point and at the
end: the host is shared) and ``bench/results/overload.png``. About 8 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from perception import load_config
from perception.benchmark import environment
from perception.config import RuntimeConfig
from perception.drives import DriveReader
from perception.evaluation import DetectionEvaluator
from perception.kinds import kind_def
from perception.live import live_session
from perception.metrics import frame_record
from perception.replay import Rate, ReplayOptions, each_frame, replay_drive
from perception.scheduler import Session
from perception.server import EmbeddedTriton
from perception.sim import generate_drive
from perception.triton import ClientOptions, TritonClient
from perception.types import Detection3D, FrameResult, FrameStatus, SensorStatus

log = logging.getLogger("bench_overload")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "overload.json"
PLOT = ROOT / "bench" / "results" / "overload.png"
PROFILE = ROOT / "launch" / "replay.yaml"
RIG = ROOT / "launch" / "rigs" / "default.yaml"
TRIGGER = "lidar_top"
MS = 1_000_000
STAGES = ("compute_input", "compute_infer", "compute_output")
#: Detections "close" to lockstep's (:func:`_close`): centres within this many metres, scores within this.
CLOSE_M = 0.1
CLOSE_SCORE = 0.05


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q / 100 * len(s)))], 1)


def rig_at(rate_hz: float, dest: Path) -> Path:
    """The default rig with its lidar (the trigger) at ``rate_hz``."""
    text = RIG.read_text()
    head, tail = text.split("  - name: cam_front", 1)
    assert "rate_hz: 10\n" in head, "the default rig's lidar is no longer at 10 Hz"
    dest.write_text(head.replace("rate_hz: 10\n", f"rate_hz: {rate_hz:g}\n") + "  - name: cam_front" + tail)
    return dest


MODELS = ("camera_detector", "lidar_detector", "radar_detector")


@dataclasses.dataclass
class Run:
    """One pass over a drive (a replay, or ``perception live``'s): its records and Triton's statistics."""

    results: list[FrameResult]
    #: When each record came out (host monotonic ns), in the records' order (the replays').
    emitted_ns: list[int]
    wall_s: float
    quality: dict[str, Any] | None
    stats_before: dict[str, dict[str, int]]
    stats_after: dict[str, dict[str, int]]
    #: Sensors whose requests are batched per model (the cameras).
    batched: dict[str, bool]
    #: The replay's ``report.json`` admission section (the overload policy's counts), or the live status.
    report: Mapping[str, Any] | None = None


async def _statistics(client: TritonClient) -> dict[str, dict[str, int]]:
    return {m: await client.model_statistics(m) for m in MODELS}


def _batched(drive: Path) -> dict[str, bool]:
    with DriveReader(drive) as reader:
        return {n: kind_def(spec.kind).contract.batched for n, spec in reader.source.rig.items()}


async def replay(drive: Path, config: RuntimeConfig, rate: Rate, client: TritonClient) -> Run:
    results: list[FrameResult] = []
    emitted: list[int] = []

    def add(result: FrameResult) -> None:
        results.append(result)
        emitted.append(time.monotonic_ns())

    before = await _statistics(client)
    t0 = time.monotonic()
    outcome = await replay_drive(
        drive,
        config,
        ReplayOptions(rate=rate, progress=False, report_md=False, server_split=False),
        sinks=[each_frame(add)],
        client=client,
    )
    wall = time.monotonic() - t0
    await anyio.sleep(1.0)  # Triton counts a request a moment after answering it
    after = await _statistics(client)
    return Run(results, emitted, wall, outcome.evaluation, before, after, _batched(drive), outcome.report.admission)


async def live(drive: Path, config: RuntimeConfig, client: TritonClient) -> Run:
    """``drive`` through the live API as ``perception live DRIVE`` plays it (the same
    :func:`live_session`: a publisher process plays the drive at its recorded timing over a Unix socket,
    a :class:`LiveRuntime` assembles and processes what arrives), in this process so that its records
    keep their detections; ``config``'s server (the bench's)."""

    def play() -> tuple[list[FrameResult], float, dict[str, Any]]:
        with DriveReader(drive, strict=True) as reader:  # as the CLI opens it
            session = Session.assemble(config, reader.source)
            t0 = time.monotonic()
            outcome = live_session(reader, session.config)
            return outcome.records, time.monotonic() - t0, outcome.summary

    before = await _statistics(client)
    records, wall, status = await anyio.to_thread.run_sync(play)
    await anyio.sleep(1.0)
    after = await _statistics(client)
    return Run(records, [], wall, None, before, after, _batched(drive), status)


def wasted_compute(run: Run) -> dict[str, Any]:
    """Server compute on requests whose answers were not used, as a share of all (module docs)."""
    used: dict[str, int] = {}
    for r in run.results:
        requests = {
            # the cameras of a frame share one batched request; every other sensor has its own
            s.model if run.batched.get(name) else f"{s.model}/{name}"
            for name, s in r.sensors.items()
            # a result reused from an earlier frame (a decimated sensor's) was no request of this frame
            if s.status is SensorStatus.OK and s.model and s.reused_age_ns is None
        }
        for request in requests:
            model = request.split("/")[0]
            used[model] = used.get(model, 0) + 1
    total_ns = wasted_ns = 0.0
    per_model: dict[str, Any] = {}
    for model, after in run.stats_after.items():
        before = run.stats_before[model]

        def delta(key: str, a: dict[str, int] = after, b: dict[str, int] = before) -> int:
            return a.get(key, 0) - b.get(key, 0)

        compute = sum(delta(f"{s}_ns") for s in STAGES)
        success = delta("success_count")
        per_success = compute / success if success else 0.0
        # A failed request's compute: Triton's ``fail`` duration is the request's whole time, its wait in
        # the queue included, and a request the queue policy rejected (its timeout passed while queued)
        # never computed at all. Each failed request is charged its time, at most what a request of
        # the model computes on average (one rejected after 500 ms in the queue had counted as 500 ms).
        failed_time_ns = delta("fail_ns")
        failed_ns = min(failed_time_ns, delta("fail_count") * per_success)
        unused = max(0, success - 1 - used.get(model, 0))  # one warm-up request per run (one instance)
        wasted = unused * per_success + failed_ns
        total_ns += compute + failed_ns
        wasted_ns += wasted
        per_model[model] = {
            "requests_ok": success,
            "requests_failed": delta("fail_count"),
            "failed_time_ms": round(failed_time_ns / MS, 1),
            "answers_used": used.get(model, 0),
            "compute_ms": round(compute / MS, 1),
            "wasted_ms": round(wasted / MS, 1),
        }
    return {"share": round(wasted_ns / total_ns, 4) if total_ns else None, "models": per_model}


def drop_reasons(results: Iterable[FrameResult]) -> dict[str, Any]:
    """The dropped frames by why: shed by the overload policy as ``superseded`` by fresher frames,
    ``too_late`` to finish within their budgets, or by the waiting queue's overflow
    (``queue_overflow``); ``other`` (failures, intake...); up to three reasons of the last two kinds."""
    counts: dict[str, Any] = {"superseded": 0, "too_late": 0, "queue_overflow": 0, "other": 0}
    others: list[str] = []
    late: list[str] = []
    for r in results:
        if r.status is not FrameStatus.DROPPED:
            continue
        reason = r.reason or ""
        shed = reason.startswith("overload")
        if shed and "superseded" in reason:
            counts["superseded"] += 1
        elif shed and "queue overflow" in reason:
            counts["queue_overflow"] += 1
        elif shed and ("waited" in reason or "too late" in reason):
            counts["too_late"] += 1
            if len(late) < 3:
                late.append(reason)
        else:
            counts["other"] += 1
            if len(others) < 3 and reason[:60] not in others:
                others.append(reason[:60])
    if late:
        counts["too_late_reasons"] = late
    if others:
        counts["other_reasons"] = others
    return counts


def frame_counts(results: list[FrameResult], budget_ns: int) -> dict[str, Any]:
    """What the records say (module docs), the same for a replay and ``perception live``."""
    processed = [r for r in results if r.status is not FrameStatus.DROPPED]
    shed = [r for r in results if r.status is FrameStatus.DROPPED and (r.reason or "").startswith("overload")]
    complete = sum(r.status is FrameStatus.OK for r in processed)
    lat = [r.latency.total_ns / MS for r in processed]
    lidar_ok = sum(
        r.sensors.get(TRIGGER) is not None and r.sensors[TRIGGER].status is SensorStatus.OK for r in processed
    )
    return {
        "frames_offered": len(results),
        "processed": len(processed),
        "complete": complete,
        "complete_share_of_processed": round(complete / len(processed), 3) if processed else None,
        "shed": len(shed),
        "predicted": sum(r.predicted for r in results),
        "other_dropped": sum(r.status is FrameStatus.DROPPED for r in results) - len(shed),
        "drop_reasons": drop_reasons(results),
        "latency_ms": {"p50": _pct(lat, 50), "p99": _pct(lat, 99), "budget": budget_ns / MS},
        "deadline_misses": sum(r.deadline_missed for r in processed),
        "lidar_ok_share_of_processed": round(lidar_ok / len(processed), 3) if processed else None,
        "frames_with_a_circuit_open": sum(
            any(s.status is SensorStatus.SKIPPED for s in r.sensors.values()) for r in processed
        ),
        # processed frames that reused a decimated sensor's earlier result instead of requesting it
        "frames_reusing_a_result": sum(any(s.reused_age_ns is not None for s in r.sensors.values()) for r in processed),
    }


def summarize(run: Run, budget_ns: int) -> dict[str, Any]:
    """A replay's point (module docs)."""
    res = run.results
    # the replay's pacing: the first frame was taken (created_ns) as the drive's clock started
    first = res[0]
    wall0, t0 = first.latency.start_ns, first.t_ns
    age = [(e - wall0 - (r.t_ns - t0)) / MS for r, e in zip(res, run.emitted_ns, strict=True)]
    counts = frame_counts(res, budget_ns)
    return {
        **counts,
        "processed_per_s": round(counts["processed"] / run.wall_s, 2),
        "answer_age_ms": {"p50": _pct(age, 50), "p99": _pct(age, 99)},
        "overload_policy": (run.report or {}).get("overload"),
        "wasted_compute": wasted_compute(run),
        "fused_mAP": round(run.quality["mAP"], 4) if run.quality and run.quality["mAP"] is not None else None,
    }


def answers(results: Iterable[FrameResult], offset_ns: int = 0) -> dict[int, tuple[Detection3D, ...]]:
    """Each frame's answer by its trigger's time on the drive's clock (its ``t_ns`` less ``offset_ns``):
    a processed frame's detections, a shed frame's prediction; a frame dropped without one has none."""
    return {r.t_ns - offset_ns: r.detections for r in results if r.status is not FrameStatus.DROPPED or r.predicted}


def score(drive: Path, frames_t: Sequence[int], answer: Mapping[int, Sequence[Detection3D]]) -> float | None:
    """Fused mAP over every frame of ``drive`` (``frames_t``: its trigger's times), each scored by its
    answer in ``answer`` (by time), a frame without one as nothing detected: the drive's ground truth,
    ego poses and rig, as the replay's evaluation scores (``perception.replay``'s ``EvaluationSink``)."""
    with DriveReader(drive) as reader:
        source = reader.source
        if source.gt_at is None:
            return None
        evaluator = DetectionEvaluator(rig=reader.rig, ego_at=source.ego_at)
        for t in sorted(frames_t):
            evaluator.add(t, answer.get(t, ()), source.gt_at(t))
    value = evaluator.summary()["mAP"]
    return round(value, 4) if value is not None else None


def host_offset(live_t: Sequence[int], drive_t: Sequence[int]) -> int | None:
    """The offset (host clock less the drive's) that maps the most live frames' times exactly onto the
    drive's trigger times. The publisher stamps each sample with the host's clock at the start of the
    play plus the sample's exact offset into the drive, so one offset maps every frame its trigger made;
    the drive's trigger times are jittered, so any other maps next to none."""
    ref = set(drive_t)
    best, best_n = None, 0
    for first in sorted(live_t)[:3]:
        for t in drive_t:
            n = sum((x - (first - t)) in ref for x in live_t)
            if n > best_n:
                best, best_n = first - t, n
    return best


def _close(a: Sequence[Detection3D], b: Sequence[Detection3D]) -> bool:
    """The same objects (ids, labels, in order), centres within 0.1 m and scores within 0.05."""
    return len(a) == len(b) and all(
        x.id == y.id
        and x.label == y.label
        and math.dist(x.center, y.center) <= CLOSE_M
        and abs(x.score - y.score) <= CLOSE_SCORE
        for x, y in zip(a, b, strict=True)
    )


def equal_frames(results: Iterable[FrameResult], lock: list[FrameResult], offset_ns: int = 0) -> tuple[int, int]:
    """How many of lockstep's frames got the same detections in ``results`` (by the trigger's time): as
    recorded (``detections.jsonl``'s rounding), and close to them (:func:`_close`)."""
    by_t = {r.t_ns - offset_ns: r for r in results}
    equal = close = 0
    for r in lock:
        other = by_t.get(r.t_ns)
        if other is None:
            continue
        equal += frame_record(other)["detections"] == frame_record(r)["detections"]
        close += _close(other.detections, r.detections)
    return equal, close


def live_summary(drive: Path, run: Run, lock: Run, budget_ns: int, lock_map: float | None) -> dict[str, Any]:
    """``perception live``'s records on ``drive``, matched to lockstep's frames by the trigger's time
    (:func:`host_offset`) and scored over every frame (module docs). The counts are over the records of
    the drive's frames; the records the live assembly made on its timer (the trigger silent: after the
    drive's last sweep, until the session closed) are counted apart."""
    res = run.results
    status = run.report or {}
    if status.get("publisher_exit_code"):
        return {"error": f"the publisher exited {status['publisher_exit_code']}"}
    drive_t = [r.t_ns for r in lock.results]
    frames = set(drive_t)
    offset = host_offset([r.t_ns for r in res], drive_t) if res else None
    if offset is None:
        return {"error": f"none of the {len(res)} records is at a drive frame's time"}
    on_drive: dict[int, int] = {}
    for r in res:
        on_drive[r.t_ns - offset] = on_drive.get(r.t_ns - offset, 0) + 1
    mine = [r for r in res if r.t_ns - offset in frames]
    apart = [r for r in res if r.t_ns - offset not in frames]
    every = [r.latency.total_ns / MS for r in mine]
    counts = frame_counts(mine, budget_ns)
    mAP = score(drive, drive_t, answers(mine, offset))
    intake = status.get("intake", {})
    return {
        **counts,
        "drive_frames": len(drive_t),
        "drive_frames_with_one_record": sum(on_drive.get(t, 0) == 1 for t in drive_t),
        "drive_frames_without_a_record": sum(t not in on_drive for t in drive_t),
        "drive_frames_with_several_records": sum(on_drive.get(t, 0) > 1 for t in drive_t),
        "records_on_no_drive_frame": {
            "records": len(apart),
            "after_the_last_sweep": sum(r.t_ns - offset > max(drive_t) for r in apart),
            "by_timer": intake.get("frames_by_timer"),
            "statuses": {
                s.value: sum(r.status is s for r in apart) for s in FrameStatus if any(r.status is s for r in apart)
            },
        },
        # samples the live intake did not use (late, out of order, duplicate, its queue full)
        "intake_not_used": {
            k: intake[k]
            for k in ("late", "out_of_order", "duplicate", "clock_jump", "intake_overflow")
            if intake.get(k)
        },
        "processed_per_s": round(counts["processed"] / run.wall_s, 2),
        "answer_after_arrival_ms": {"p50": _pct(every, 50), "p99": _pct(every, 99)},
        "wasted_compute": wasted_compute(run),
        "fused_mAP_every_frame": mAP,
        "mAP_over_lockstep": round(mAP / lock_map, 3) if mAP is not None and lock_map else None,
        "_offset_ns": offset,
    }


async def point_runs(
    drive: Path, config: RuntimeConfig, client: TritonClient, budget_ns: int, *, with_live: bool, compare: bool
) -> dict[str, Any]:
    """``drive`` in lockstep, at ``--rate 1.0`` and (``with_live``) through ``perception live``, summarized;
    ``compare``: whether every frame's detections equal lockstep's (below the sustainable rate)."""
    lock = await replay(drive, config, "lockstep", client)
    paced = await replay(drive, config, 1.0, client)
    drive_t = [r.t_ns for r in lock.results]
    lock_map = score(drive, drive_t, answers(lock.results))
    own = lock.quality["mAP"] if lock.quality else None
    if lock_map is not None and own is not None and abs(lock_map - own) > 1e-3:
        log.warning("lockstep scored %.4f over every frame, its replay's evaluation %.4f", lock_map, own)
    paced_map = score(drive, drive_t, answers(paced.results))
    out: dict[str, Any] = {
        **summarize(paced, budget_ns),
        "fused_mAP_every_frame": paced_map,
        "lockstep_fused_mAP": lock_map,
        "mAP_over_lockstep": round(paced_map / lock_map, 3) if paced_map is not None and lock_map else None,
        "lockstep_frames": len(lock.results),
        "lockstep_frames_per_s": round(len(lock.results) / lock.wall_s, 2),
        "lockstep_circuits_opened": frame_counts(lock.results, budget_ns)["frames_with_a_circuit_open"],
    }
    if compare:
        same, close = equal_frames(paced.results, lock.results)
        out["frames_equal_lockstep"] = same
        out["frames_close_to_lockstep"] = close
        out["detections_equal_lockstep"] = same == len(lock.results) == len(paced.results)
    if with_live:
        run = await live(drive, config, client)
        summary = live_summary(drive, run, lock, budget_ns, lock_map)
        offset = summary.pop("_offset_ns", None)
        if compare and offset is not None:
            same, close = equal_frames(run.results, lock.results, offset)
            n = len(lock.results)
            summary["every_frame_processed"] = summary["processed"] == summary["drive_frames_with_one_record"] == n
            summary["frames_equal_lockstep"] = same
            summary["frames_close_to_lockstep"] = close
            summary["detections_equal_lockstep"] = same == len(lock.results)
        out["perception_live"] = summary
    return out


async def issue_drive(
    cfg: RuntimeConfig, client: TritonClient, work: Path, seed: int, with_live: bool
) -> dict[str, Any]:
    """Issue 43's own drive: the default rig with its lidar at 20 Hz and the profile's defaults (the lidar
    accumulating 120 ms: three sweeps a frame), 20 s, replayed in lockstep, at ``--rate 1.0`` and through
    ``perception live``: the issue's table's columns, and the drops by reason."""
    drive = work / "issue20.mcap"
    t0 = time.monotonic()
    generate_drive(drive, scenario="urban", seed=seed, duration_s=20.0, rig=rig_at(20, work / "r20.yaml"), workers=2)
    log.info("issue drive simulated in %.0f s", time.monotonic() - t0)
    runs = await point_runs(drive, cfg, client, cfg.budget.total_ns, with_live=with_live, compare=False)
    runs["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    log.info("issue drive: %s", json.dumps(runs))
    accumulate = cfg.sensor_defaults.lidar.accumulate_ms
    return {
        "drive": f"default rig, lidar 20 Hz (launch/rigs/default.yaml, rate_hz: 20), urban, seed {seed}, 20 s",
        "lidar_accumulate_ms": kind_def("lidar").accumulate_ms if accumulate is None else accumulate,
        "replay_rate_1": runs,
    }


async def run(
    duration_s: float, factors: list[float], seed: int, work: Path, with_live: bool, with_issue: bool
) -> dict[str, Any]:
    config = load_config(PROFILE)
    budget_ns = config.budget.total_ns
    async with EmbeddedTriton([ROOT / "models"]) as server:
        cfg = dataclasses.replace(config, server=dataclasses.replace(config.server, url=server.grpc_url))
        async with TritonClient(ClientOptions(urls=(server.grpc_url,), channels=2)) as client:
            base = work / "base.mcap"
            generate_drive(
                base, scenario="urban", seed=seed, duration_s=duration_s, rig=rig_at(10, work / "r10.yaml"), workers=2
            )
            await replay(base, cfg, "lockstep", client)  # warms the process (fusion's compiled loops, models)
            ref = await replay(base, cfg, "lockstep", client)
            frames = len(ref.results)
            sustainable = frames / ref.wall_s
            log.info("sustainable: %d frames in %.1f s lockstep = %.2f frames/s", frames, ref.wall_s, sustainable)
            points = []
            for factor in factors:
                hz = round(factor * sustainable * 2) / 2  # to 0.5 Hz
                drive = work / f"x{factor:g}.mcap"
                generate_drive(
                    drive,
                    scenario="urban",
                    seed=seed,
                    duration_s=duration_s,
                    rig=rig_at(hz, work / "r.yaml"),
                    workers=2,
                )
                defaults = cfg.sensor_defaults
                lidar = dataclasses.replace(defaults.lidar, accumulate_ms=round(min(120.0, 1200.0 / hz), 1))
                at_hz = dataclasses.replace(cfg, sensor_defaults=dataclasses.replace(defaults, lidar=lidar))
                runs = await point_runs(drive, at_hz, client, budget_ns, with_live=with_live, compare=factor < 1)
                point = {"factor": factor, "trigger_hz": hz, "lidar_accumulate_ms": lidar.accumulate_ms, **runs}
                point["load_average_1m_after"] = round(os.getloadavg()[0], 2)
                point["trigger_over_its_lockstep_rate"] = round(hz / point["lockstep_frames_per_s"], 2)
                log.info("%s", json.dumps(point))
                points.append(point)
            issue = await issue_drive(cfg, client, work, seed, with_live) if with_issue else None
    return {
        "sustainable_frames_per_s": round(sustainable, 2),
        "sustainable_measured_on": f"the default rig's 10 Hz drive, {duration_s:g} s, lockstep ({frames} frames)",
        "drive_s": duration_s,
        "seed": seed,
        "budget_ms": config.budget.total_ms,
        "points": points,
        "issue_drive": issue,
    }


def plot(result: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = result["points"]
    x = [p["factor"] for p in pts]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.3))
    offered = [p["frames_offered"] for p in pts]
    a.plot(x, [p["processed"] / n for p, n in zip(pts, offered, strict=True)], "o-", label="processed / offered")
    a.plot(x, [p["complete_share_of_processed"] or 0 for p in pts], "o-", label="complete / processed")
    a.plot(x, [p["lidar_ok_share_of_processed"] or 0 for p in pts], "o-", label="lidar ok / processed")
    a.plot(x, [p["fused_mAP_every_frame"] or 0 for p in pts], "s-", label="fused mAP (every frame)")
    a.plot(x, [p["lockstep_fused_mAP"] or 0 for p in pts], "s--", label="fused mAP lockstep")
    live = [(p["factor"], p["perception_live"].get("fused_mAP_every_frame")) for p in pts if "perception_live" in p]
    if live:
        a.plot([f for f, _ in live], [m or 0 for _, m in live], "^:", label="fused mAP perception live (every frame)")
    a.plot(x, [p["wasted_compute"]["share"] or 0 for p in pts], "x-", label="wasted compute share")
    a.set_xlabel("trigger rate / sustainable rate")
    a.set_ylim(0, 1.05)
    a.legend(fontsize=7)
    a.set_title(f"sustainable {result['sustainable_frames_per_s']} frames/s")
    b.plot(x, [p["latency_ms"]["p50"] for p in pts], "o-", label="processed latency p50")
    b.plot(x, [p["latency_ms"]["p99"] for p in pts], "o-", label="processed latency p99")
    b.plot(x, [p["answer_age_ms"]["p50"] for p in pts], "s-", label="answer age p50 (all frames)")
    b.plot(x, [p["answer_age_ms"]["p99"] for p in pts], "s-", label="answer age p99 (all frames)")
    b.axhline(result["budget_ms"], color="grey", linestyle=":", label="budget")
    b.set_xlabel("trigger rate / sustainable rate")
    b.set_ylabel("ms")
    b.legend(fontsize=8)
    fig.suptitle(
        "replay --rate 1.0 (and perception live's mAP) of drives whose lidar outruns the models\n"
        f"bench/bench_overload.py; load average {result['environment']['load_average_at_start'][0]:g} at the start",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(PLOT, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=6.0, help="seconds of each simulated drive")
    parser.add_argument("--factors", default="0.5,0.8,1,1.5,2,3", help="trigger rates, times the sustainable rate")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-live", action="store_true", help="no perception live pass per point")
    parser.add_argument(
        "--issue-drive",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="issue 43's own 20 Hz drive, 20 s, as a named case (about 2 min; default: on)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    factors = [float(f) for f in args.factors.split(",")]
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="bench_overload-") as tmp:
        result = anyio.run(run, args.duration, factors, args.seed, Path(tmp), not args.no_live, args.issue_drive)
    out = {"environment": environment(), "benchmark": "overload curve (issue 43)", **result}
    out["environment"]["load_average_at_start"] = load_at_start
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    plot(out)
    print(f"wrote {RESULTS} and {PLOT}")


if __name__ == "__main__":
    main()
