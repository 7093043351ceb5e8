"""Triton's per-request trace (issue 30): what it costs, and whether it agrees with Triton's statistics.

The bundled drive, served by the production models on two embedded servers started side by side, one
with the trace on (``server.trace: true``, the default) and one without:

* **cost**: chunks of frames at a fixed depth (``--depth``, frames in flight), alternately on each
  runtime (the order rotates every round), the traced one also attributing every request from the trace
  as a replay does (:class:`perception.metrics.TraceSplitter`). Frames/s per chunk, the ratio traced /
  untraced per round and its 95 % paired-bootstrap interval (a ratio below 0.97 is a cost over 3 %).
* **agreement**: one frame in flight on the traced server, each frame's result split twice, from Triton's
  statistics (:class:`perception.metrics.ServerSplitter`, the path external servers keep) and from the
  trace; per sensor and server stage, the two p50s and their difference (issue 30: within 0.5 ms).
  The trace's stages end when the response left; the statistics also count what the python backend
  does after it (``after_response``, the difference of the two ``compute_output``), which the client
  never waits for.
* **timeline**: the traced chunks' frames as a Chrome trace (``bench/results/trace_timeline.json``, open it in
  ui.perfetto.dev) and one frame of it drawn with matplotlib from the same events
  (``bench/results/trace_frame.png``).

Writes ``bench/results/trace.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio

from perception import Runtime, load_config
from perception.benchmark import environment, load_average
from perception.benchmark._stats import ratio_interval
from perception.config import RuntimeConfig
from perception.drives import DriveReader
from perception.metrics import ChromeTrace, ServerSplitter, TraceSplitter, percentiles
from perception.triton import TraceReader, TritonClient
from perception.types import SERVER_STAGES, Frame, FrameResult

log = logging.getLogger("bench_trace")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DRIVE = ROOT / "replay_data" / "urban_seed7_10s.mcap"
PROFILE = ROOT / "launch" / "replay.yaml"
JOIN_NS = 60_000_000_000


def _config(base: RuntimeConfig, *, trace: bool, depth: int) -> RuntimeConfig:
    server = dataclasses.replace(base.server, trace=trace)
    pipeline = dataclasses.replace(
        base.pipeline, max_in_flight=depth, admission="fixed", queue_size=0, overflow="block"
    )
    return dataclasses.replace(base, server=server, pipeline=pipeline)


class _Numbered:
    """Frames with increasing ids per runtime (the trace names requests by frame id)."""

    def __init__(self) -> None:
        self.next_id = 0

    def take(self, frames: list[Frame]) -> list[Frame]:
        out = [dataclasses.replace(f, frame_id=self.next_id + i, created_ns=0) for i, f in enumerate(frames)]
        self.next_id += len(frames)
        return out


async def _chunk(
    rt: Runtime, frames: list[Frame], splitter: TraceSplitter | None, keep: list[FrameResult] | None
) -> float:
    t0 = time.perf_counter()
    n = 0
    async for raw in rt.run(frames):
        result = await splitter.attribute(raw) if splitter is not None else raw
        if keep is not None:
            keep.append(result)
        n += 1
    return n / (time.perf_counter() - t0)


def _sensors(cfg: RuntimeConfig) -> list[tuple[str, str, str]]:
    return [(s.name, s.kind, s.model) for s in cfg.active_sensors]


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    base = load_config(PROFILE)
    with DriveReader(DRIVE) as drive:
        on_cfg = _config(base, trace=True, depth=args.depth)
        off_cfg = _config(base, trace=False, depth=args.depth)
        async with (
            # every sensor awaited (a one-minute join deadline): both variants do the same work
            Runtime(on_cfg, source=drive.source, fusion=None, join_timeout_ns=JOIN_NS, trace_requests=True) as on,
            Runtime(off_cfg, source=drive.source, fusion=None, join_timeout_ns=JOIN_NS) as off,
        ):
            frames = list(on.session.assembler().feed(drive.samples()))
            cfg = on.session.config
            batched = cfg.pipeline.camera_requests == "batched"
            assert on.server is not None and on.server.trace_dir is not None
            tracer = TraceSplitter(TraceReader(on.server.trace_dir), _sensors(cfg), batched_cameras=batched)
            await tracer.start()
            ids = {"on": _Numbered(), "off": _Numbered()}
            rounds: list[dict[str, float]] = []
            timeline: list[FrameResult] = []
            load_before = load_average()
            for r in range(args.rounds):
                start = (r * args.chunk) % max(1, len(frames) - args.chunk)
                chunk = frames[start : start + args.chunk]
                row: dict[str, float] = {}
                for name in ("on", "off") if r % 2 == 0 else ("off", "on"):
                    rt = on if name == "on" else off
                    keep = timeline if name == "on" and r == args.rounds - 1 else None
                    row[name] = await _chunk(rt, ids[name].take(chunk), tracer if name == "on" else None, keep)
                rounds.append(row)
                log.info("round %d: traced %.2f frames/s, untraced %.2f frames/s", r, row["on"], row["off"])
            load_after = load_average()
            cost = _cost(rounds, args)
            cost["loadavg"] = [load_before, load_after]
            agreement = await _agreement(on, tracer, frames[: args.compare_frames], ids["on"], cfg, batched)
    _timeline(timeline)
    return {"cost": cost, "agreement": agreement}


def _cost(rounds: list[dict[str, float]], args: argparse.Namespace) -> dict[str, Any]:
    on = [r["on"] for r in rounds]
    off = [r["off"] for r in rounds]
    # Chunks have the same frames: the throughput ratio traced / untraced is the ratio of the summed
    # chunk times, untraced over traced; its interval resamples the rounds, pairs kept.
    on_ns = [int(args.chunk * 1e9 / x) for x in on]
    off_ns = [int(args.chunk * 1e9 / x) for x in off]
    ratio = round(sum(off_ns) / sum(on_ns), 3)
    interval = ratio_interval(off_ns, on_ns, "sum")
    return {
        "depth": args.depth,
        "chunk_frames": args.chunk,
        "rounds": len(rounds),
        "frames_per_s": {"traced": on, "untraced": off},
        "frames_per_s_median": {"traced": statistics.median(on), "untraced": statistics.median(off)},
        "throughput_ratio": ratio,
        "throughput_ratio_interval_95": interval,
        "per_round_ratio": [round(a / b, 3) for a, b in zip(on, off, strict=True)],
        "cost_percent": round((1 - ratio) * 100, 1),
        "within_3_percent": ratio >= 0.97,
    }


async def _agreement(
    rt: Runtime,
    tracer: TraceSplitter,
    frames: list[Frame],
    ids: _Numbered,
    cfg: RuntimeConfig,
    batched: bool,
) -> dict[str, Any]:
    client = rt.client
    assert isinstance(client, TritonClient)
    stats = ServerSplitter(client.model_statistics, _sensors(cfg), batched_cameras=batched)
    await stats.start()
    await tracer.start()
    values: dict[str, dict[str, dict[str, list[int]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    models: dict[str, dict[str, dict[str, list[int]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    unavailable = {"statistics": 0, "trace": 0}
    for frame in ids.take(frames):
        raw = await rt.process(frame)  # one frame in flight; the statistics are read between frames
        by_stats = await stats.attribute(raw)
        by_trace = await tracer.attribute(raw)
        unavailable["statistics"] += len(by_stats.latency.server_unavailable)
        unavailable["trace"] += len(by_trace.latency.server_unavailable)
        for model, a_entry in by_stats.latency.server.items():  # per model: also models serving 2+ sensors
            b_entry = by_trace.latency.server.get(model)
            if b_entry is not None and a_entry.get("requests") == b_entry.get("requests"):
                for stage in (*SERVER_STAGES, "total"):
                    models[model][stage]["statistics"].append(a_entry[stage])
                    models[model][stage]["trace"].append(b_entry[stage])
        for sensor in raw.latency.sensors:
            a, b = by_stats.latency.sensors.get(sensor, {}), by_trace.latency.sensors.get(sensor, {})
            if "server_total" not in a or "server_total" not in b:
                continue  # both sides must have split this request
            for stage in (*SERVER_STAGES, "total"):
                values[sensor][stage]["statistics"].append(a[f"server_{stage}"])
                values[sensor][stage]["trace"].append(b[f"server_{stage}"])
    out: dict[str, Any] = {"frames": len(frames), "models_unavailable": unavailable, "sensors": {}, "models": {}}
    worst = 0.0
    for kind, table in (("sensors", values), ("models", models)):
        for key, rows in _p50s(table).items():
            out[kind][key] = rows
            worst = max([worst, *(abs(r["diff_ms"]) for stage, r in rows.items() if stage in SERVER_STAGES)])
    out["max_abs_stage_p50_diff_ms"] = round(worst, 3)
    out["within_0_5_ms"] = worst <= 0.5
    return out


def _p50s(table: dict[str, dict[str, dict[str, list[int]]]]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for sensor, stages in sorted(table.items()):
        rows = {}
        for stage, pair in stages.items():
            s50 = percentiles(pair["statistics"])["p50"]
            t50 = percentiles(pair["trace"])["p50"]
            diff = round(t50 - s50, 3)
            rows[stage] = {"n": len(pair["trace"]), "statistics_p50_ms": s50, "trace_p50_ms": t50, "diff_ms": diff}
        out[sensor] = rows
    return out


def _timeline(results: list[FrameResult]) -> None:
    path = RESULTS / "trace_timeline.json"
    with ChromeTrace(path, process_name=f"bench_trace {DRIVE.name}") as trace:
        for r in results:
            trace.add(r)
    _draw(path, RESULTS / "trace_frame.png")


def _draw(trace_path: Path, png: Path) -> None:
    """One frame of the timeline, drawn from the trace file's events: its frame track and sensor tracks,
    nested intervals stacked downwards (preferably a frame that was in flight with another)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = json.loads(trace_path.read_text())
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    xs = [e for e in events if e["ph"] == "X"]
    frames = [e for e in xs if e["cat"].startswith("frame")]
    split = {e["args"]["frame_id"] for e in xs if e["name"] == "server"}
    # a frame with the server split that overlaps another (frames in flight), else the first split one
    candidates = [f for f in frames if f["args"]["frame_id"] in split]
    overlapping = [
        f
        for f in candidates
        if any(g is not f and g["ts"] < f["ts"] + f["dur"] and f["ts"] < g["ts"] + g["dur"] for g in frames)
    ]
    pick = (overlapping or candidates)[0]
    lo, hi = pick["ts"], pick["ts"] + pick["dur"]
    fid = pick["args"]["frame_id"]

    def inside(e: dict[str, Any]) -> bool:
        return bool(lo - 1 <= e["ts"] and e["ts"] + e["dur"] <= hi + 1)

    mine = [e for e in xs if e["tid"] == pick["tid"] and inside(e)]
    sensor_roots = [e for e in xs if e["cat"] == "sensor" and e["args"].get("frame_id") == fid]
    for root in sensor_roots:
        mine += [e for e in xs if e["tid"] == root["tid"] and root["ts"] - 1 <= e["ts"] <= root["ts"] + root["dur"]]
    tracks = sorted({e["tid"] for e in mine})
    colors = {
        "frame": "#9e9e9e", "stage": "#90caf9", "sensor": "#a5d6a7", "client": "#ffe082",
        "network": "#ffcc80", "server": "#ef9a9a",
    }  # fmt: skip
    fig, ax = plt.subplots(figsize=(12, 1.2 + 1.1 * len(tracks)))
    row = 0.0
    yticks, ylabels = [], []
    for tid in tracks:
        evs = sorted((e for e in mine if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict[str, Any]] = []
        depth_of: list[tuple[dict[str, Any], int]] = []
        for e in evs:
            while stack and not (
                stack[-1]["ts"] <= e["ts"] and e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"] + 0.01
            ):
                stack.pop()
            depth_of.append((e, len(stack)))
            stack.append(e)
        levels = 1 + max(d for _, d in depth_of)
        for e, d in depth_of:
            y = row + d
            cat = e["cat"].split(",")[0]
            ax.broken_barh([((e["ts"] - lo) / 1e3, e["dur"] / 1e3)], (y, 0.9), facecolors=colors.get(cat, "#ccc"),
                           edgecolors="#555", linewidth=0.5)  # fmt: skip
            label = e["name"].removeprefix("server_")
            if e["dur"] / (hi - lo) > 0.04:
                ax.text((e["ts"] - lo + e["dur"] / 2) / 1e3, y + 0.45, label, ha="center", va="center", fontsize=7)
        yticks.append(row + levels / 2)
        ylabels.append(names.get(tid, str(tid)))
        row += levels + 0.5
    from matplotlib.patches import Patch

    legend = {"frame": "frame", "stage": "frame stage", "sensor": "sensor's request", "client": "client",
              "network": "in flight", "server": "Triton: server, queue | compute"}  # fmt: skip
    ax.legend(handles=[Patch(facecolor=colors[k], edgecolor="#555", label=v) for k, v in legend.items()],
              loc="lower right", fontsize=7)  # fmt: skip
    ax.set_yticks(yticks, ylabels)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the frame's origin")
    missed = " (deadline missed)" if pick["args"].get("deadline_missed") else ""
    ax.set_title(f"frame {fid}: {pick['dur'] / 1e3:.1f} ms{missed}; Triton's queue and compute nested in each request")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8, help="chunks per runtime (default 8)")
    parser.add_argument("--chunk", type=int, default=20, help="frames per chunk (default 20)")
    parser.add_argument("--depth", type=int, default=2, help="frames in flight in the cost section (default 2)")
    parser.add_argument("--compare-frames", type=int, default=60, help="frames of the agreement section")
    parser.add_argument("--out", type=Path, default=RESULTS / "trace.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result = {"environment": environment(), "drive": str(DRIVE.relative_to(ROOT)), **anyio.run(_run, args)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    log.info("wrote %s", args.out)
    sys.stdout.write(json.dumps({k: v for k, v in result.items() if k != "environment"}, indent=1) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
