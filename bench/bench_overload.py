"""The overload curve (issue 43): drives whose trigger outruns the models, replayed at recorded speed.

One run, one machine: the sustainable rate is measured first (the default rig's 10 Hz drive replayed
``--rate lockstep``: frames per second, one at a time, every sensor awaited). Then, for each factor
(0.5x, 1x, 1.5x, 2x, 3x by default), a drive is simulated from the default rig with its lidar (the
trigger) at ``factor x sustainable`` Hz, replayed once in lockstep (the reference: every frame processed)
and once at recorded speed (``--rate 1.0``: what a vehicle sees; the overload policy sheds frames). All
replays share one embedded server. Each frame's work stays at most that of the 10 Hz drive: the lidar
merges at most the sweep before it (its ``accumulate_ms``, 120 ms at 10 Hz, times 10 Hz / the trigger's
rate above 10 Hz; with 120 ms at 25 Hz each frame would merge three sweeps and cost the lidar model half
as much again, which measures a heavier workload, not the overload). Per point:

* frames offered (records), processed, complete (status ok), shed (reason overload), predicted;
* the processed frames' latency p50/p99 (from the frame's intake) and deadline misses;
* the age of the answer from the trigger's capture, p50/p99, over every frame (a shed frame's answer
  is its predicted record): when the answer came out, against when the drive's clock says the lidar
  sweep was captured (the replay's pacing);
* lidar ok share of the processed frames; circuits opened (frames with a sensor skipped);
* wasted compute: Triton's compute (compute input + infer + output, its statistics) spent on requests
  whose answers were not used (late, cancelled or failed), as a share of all its compute; from the
  statistics: the failed requests' time, and successful requests beyond those answered in time
  (the mean compute per success each), less the runtime's warm-up (one request per instance);
* fused mAP over all frames (shed frames scored by their prediction), and lockstep's on the same drive;
* at the factors below 1, whether every frame's detections equal lockstep's;
* and the same drive through ``perception live`` (a publisher process plays it at its recorded timing,
  the live API assembles and processes it; ``--url`` of the bench's server): frames, processed,
  complete, shed, latency from the trigger's arrival p50/p99 (processed frames; every frame's answer
  too), lidar ok share, frames with a circuit open (no ground truth there: no mAP).

Writes ``bench/results/overload.json`` and ``bench/results/overload.png``. A few minutes with the
default 6 s drives (the simulation of each drive is most of it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from perception import load_config
from perception.benchmark import environment
from perception.config import RuntimeConfig
from perception.drives import DriveReader
from perception.kinds import kind_def
from perception.metrics import frame_record
from perception.replay import Rate, ReplayOptions, each_frame, replay_drive
from perception.server import EmbeddedTriton
from perception.sim import generate_drive
from perception.triton import ClientOptions, TritonClient
from perception.types import FrameResult, FrameStatus, SensorStatus

log = logging.getLogger("bench_overload")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "overload.json"
PLOT = ROOT / "bench" / "results" / "overload.png"
PROFILE = ROOT / "launch" / "replay.yaml"
RIG = ROOT / "launch" / "rigs" / "default.yaml"
TRIGGER = "lidar_top"
MS = 1_000_000
STAGES = ("compute_input", "compute_infer", "compute_output")


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


@dataclasses.dataclass
class Replayed:
    results: list[FrameResult]
    emitted_ns: list[int]
    wall_s: float
    quality: dict[str, Any] | None
    stats_before: dict[str, dict[str, int]]
    stats_after: dict[str, dict[str, int]]
    #: Sensors whose requests are batched per model (the cameras).
    batched: dict[str, bool]


async def replay(drive: Path, config: RuntimeConfig, rate: Rate, client: TritonClient) -> Replayed:
    results: list[FrameResult] = []
    emitted: list[int] = []

    def add(result: FrameResult) -> None:
        results.append(result)
        emitted.append(time.monotonic_ns())

    models = sorted({"lidar_detector", "radar_detector", "camera_detector"})
    before = {m: await client.model_statistics(m) for m in models}
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
    after = {m: await client.model_statistics(m) for m in models}
    with DriveReader(drive) as reader:
        batched = {n: kind_def(spec.kind).contract.batched for n, spec in reader.source.rig.items()}
    return Replayed(results, emitted, wall, outcome.evaluation, before, after, batched)


def wasted_compute(run: Replayed) -> dict[str, Any]:
    """Server compute on requests whose answers were not used, as a share of all (module docs)."""
    used: dict[str, int] = {}
    for r in run.results:
        requests = {
            # the cameras of a frame share one batched request; every other sensor has its own
            s.model if run.batched.get(name) else f"{s.model}/{name}"
            for name, s in r.sensors.items()
            if s.status is SensorStatus.OK and s.model
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
        failed_ns = delta("fail_ns")  # a failed (e.g. cancelled) request's time: its compute at most
        per_success = compute / success if success else 0.0
        unused = max(0, success - 1 - used.get(model, 0))  # one warm-up request per replay (one instance)
        wasted = unused * per_success + failed_ns
        total_ns += compute + failed_ns
        wasted_ns += wasted
        per_model[model] = {
            "requests_ok": success,
            "requests_failed": delta("fail_count"),
            "answers_used": used.get(model, 0),
            "compute_ms": round(compute / MS, 1),
            "wasted_ms": round(wasted / MS, 1),
        }
    return {"share": round(wasted_ns / total_ns, 4) if total_ns else None, "models": per_model}


def summarize(run: Replayed, budget_ns: int, rate_hz: float) -> dict[str, Any]:
    res = run.results
    processed = [r for r in res if r.status is not FrameStatus.DROPPED]
    shed = [r for r in res if r.status is FrameStatus.DROPPED and (r.reason or "").startswith("overload")]
    lat = [r.latency.total_ns / MS for r in processed]
    # the replay's pacing: the first frame was taken (created_ns) as the drive's clock started
    first = res[0]
    wall0, t0 = first.latency.start_ns, first.t_ns
    age = [(e - wall0 - (r.t_ns - t0)) / MS for r, e in zip(res, run.emitted_ns, strict=True)]
    lidar_ok = sum(
        r.sensors.get(TRIGGER) is not None and r.sensors[TRIGGER].status is SensorStatus.OK for r in processed
    )
    skipped = sum(any(s.status is SensorStatus.SKIPPED for s in r.sensors.values()) for r in processed)
    return {
        "trigger_hz": rate_hz,
        "frames_offered": len(res),
        "processed": len(processed),
        "complete": sum(r.status is FrameStatus.OK for r in processed),
        "complete_share_of_processed": round(sum(r.status is FrameStatus.OK for r in processed) / len(processed), 3)
        if processed
        else None,
        "shed": len(shed),
        "predicted": sum(r.predicted for r in res),
        "other_dropped": sum(r.status is FrameStatus.DROPPED for r in res) - len(shed),
        "processed_per_s": round(len(processed) / run.wall_s, 2),
        "latency_ms": {"p50": _pct(lat, 50), "p99": _pct(lat, 99), "budget": budget_ns / MS},
        "deadline_misses": sum(r.deadline_missed for r in processed),
        "answer_age_ms": {"p50": _pct(age, 50), "p99": _pct(age, 99)},
        "lidar_ok_share_of_processed": round(lidar_ok / len(processed), 3) if processed else None,
        "frames_with_a_circuit_open": skipped,
        "wasted_compute": wasted_compute(run),
        "fused_mAP": round(run.quality["mAP"], 4) if run.quality else None,
    }


def _live_profile(out: Path, accumulate_ms: float) -> Path:
    """The default profile with the lidar accumulating ``accumulate_ms``, written into ``out``."""
    text = PROFILE.read_text()
    line = "  lidar:  {model: lidar_detector, "
    assert line in text, "launch/replay.yaml's lidar defaults moved"
    out.mkdir(parents=True, exist_ok=True)
    profile = out / "profile.yaml"
    profile.write_text(text.replace(line, f"{line}accumulate_ms: {accumulate_ms}, "))
    return profile


def _live_summary(out: Path) -> dict[str, Any]:
    """``perception live --out``'s per-frame lines and status, summarized (module docs)."""
    lines = [json.loads(line) for line in (out / "frames.jsonl").read_text().splitlines()]
    processed = [r for r in lines if r["status"] != "dropped"]
    status = json.loads((out / "live.json").read_text())
    lat = [r["latency_ms"] for r in processed]
    every = [r["latency_ms"] for r in lines]
    return {
        "frames": len(lines),
        "processed": len(processed),
        "complete": sum(r["status"] == "ok" for r in processed),
        "shed": status.get("shed"),
        "latency_from_arrival_ms": {"p50": _pct(lat, 50), "p99": _pct(lat, 99)},
        "answer_after_arrival_ms": {"p50": _pct(every, 50), "p99": _pct(every, 99)},
        "deadline_misses": status.get("deadline_misses"),
        "lidar_ok_share_of_processed": round(
            sum(r["sensors"].get(TRIGGER) == "ok" for r in processed) / len(processed), 3
        )
        if processed
        else None,
        "frames_with_a_circuit_open": sum("skipped" in r["sensors"].values() for r in processed),
    }


async def live(drive: Path, url: str, out: Path, accumulate_ms: float) -> dict[str, Any]:
    """``perception live DRIVE --url URL`` (the lidar accumulating as in the replays), summarized."""
    import os
    import sys

    profile = _live_profile(out, accumulate_ms)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "perception", "live", str(drive), "--url", url, "--out", str(out)]
    cmd += ["--config", str(profile)]
    done = await anyio.run_process(cmd, check=False, env=env)
    if done.returncode != 0:
        return {"error": f"perception live exited {done.returncode}: {done.stderr.decode()[-500:]}"}
    return _live_summary(out)


def _same(a: list[FrameResult], b: list[FrameResult]) -> bool:
    return [frame_record(r)["detections"] for r in a] == [frame_record(r)["detections"] for r in b]


async def run(duration_s: float, factors: list[float], seed: int, work: Path, with_live: bool) -> dict[str, Any]:
    config = load_config(PROFILE)
    async with EmbeddedTriton([ROOT / "models"]) as server:
        cfg = dataclasses.replace(config, server=dataclasses.replace(config.server, url=server.grpc_url))
        async with TritonClient(ClientOptions(urls=(server.grpc_url,), channels=2)) as client:
            base = work / "base.mcap"
            generate_drive(base, scenario="urban", seed=seed, duration_s=duration_s, rig=rig_at(10, work / "r10.yaml"))
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
                    drive, scenario="urban", seed=seed, duration_s=duration_s, rig=rig_at(hz, work / "r.yaml")
                )
                defaults = cfg.sensor_defaults
                lidar = dataclasses.replace(defaults.lidar, accumulate_ms=round(min(120.0, 1200.0 / hz), 1))
                at_hz = dataclasses.replace(cfg, sensor_defaults=dataclasses.replace(defaults, lidar=lidar))
                lock = await replay(drive, at_hz, "lockstep", client)
                paced = await replay(drive, at_hz, 1.0, client)
                point = {"factor": factor, **summarize(paced, cfg.budget.total_ns, hz)}
                point["lidar_accumulate_ms"] = lidar.accumulate_ms
                point["lockstep_fused_mAP"] = round(lock.quality["mAP"], 4) if lock.quality else None
                point["lockstep_frames_per_s"] = round(len(lock.results) / lock.wall_s, 2)
                point["trigger_over_its_lockstep_rate"] = round(hz / point["lockstep_frames_per_s"], 2)
                if factor <= 0.8:
                    point["detections_equal_lockstep"] = _same(paced.results, lock.results)
                if with_live:
                    point["perception_live"] = await live(
                        drive, server.grpc_url, work / f"live{factor:g}", lidar.accumulate_ms or 0.0
                    )
                log.info("%s", json.dumps(point))
                points.append(point)
    return {
        "sustainable_frames_per_s": round(sustainable, 2),
        "sustainable_measured_on": f"the default rig's 10 Hz drive, {duration_s:g} s, lockstep ({frames} frames)",
        "drive_s": duration_s,
        "seed": seed,
        "budget_ms": config.budget.total_ms,
        "points": points,
    }


def plot(result: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = result["points"]
    x = [p["factor"] for p in pts]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    offered = [p["frames_offered"] for p in pts]
    a.plot(x, [p["processed"] / n for p, n in zip(pts, offered, strict=True)], "o-", label="processed / offered")
    a.plot(x, [p["complete_share_of_processed"] or 0 for p in pts], "o-", label="complete / processed")
    a.plot(x, [p["lidar_ok_share_of_processed"] or 0 for p in pts], "o-", label="lidar ok / processed")
    a.plot(x, [p["fused_mAP"] or 0 for p in pts], "s-", label="fused mAP (all frames)")
    a.plot(x, [p["lockstep_fused_mAP"] or 0 for p in pts], "s--", label="fused mAP lockstep")
    a.plot(x, [p["wasted_compute"]["share"] or 0 for p in pts], "x-", label="wasted compute share")
    a.set_xlabel("trigger rate / sustainable rate")
    a.set_ylim(0, 1.05)
    a.legend(fontsize=8)
    a.set_title(f"sustainable {result['sustainable_frames_per_s']} frames/s")
    b.plot(x, [p["latency_ms"]["p50"] for p in pts], "o-", label="processed latency p50")
    b.plot(x, [p["latency_ms"]["p99"] for p in pts], "o-", label="processed latency p99")
    b.plot(x, [p["answer_age_ms"]["p50"] for p in pts], "s-", label="answer age p50 (all frames)")
    b.plot(x, [p["answer_age_ms"]["p99"] for p in pts], "s-", label="answer age p99 (all frames)")
    b.axhline(result["budget_ms"], color="grey", linestyle=":", label="budget")
    b.set_xlabel("trigger rate / sustainable rate")
    b.set_ylabel("ms")
    b.legend(fontsize=8)
    fig.suptitle("replay --rate 1.0 of drives whose lidar outruns the models (bench/bench_overload.py)")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=6.0, help="seconds of each simulated drive")
    parser.add_argument("--factors", default="0.5,1,1.5,2,3", help="trigger rates, times the sustainable rate")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-live", action="store_true", help="no perception live pass per point")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    factors = [float(f) for f in args.factors.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench_overload-") as tmp:
        result = anyio.run(run, args.duration, factors, args.seed, Path(tmp), not args.no_live)
    out = {"environment": environment(), "benchmark": "overload curve (issue 43)", **result}
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    plot(out)
    print(f"wrote {RESULTS} and {PLOT}")


if __name__ == "__main__":
    main()
