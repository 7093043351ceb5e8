"""``perception live``: a realistic host — a publisher process plays a drive over a Unix socket, this
process pushes what arrives into a :class:`perception.live.LiveRuntime` and reports."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perception.cli._common import add_runtime_options, runtime_config
from perception.drives import DriveReader
from perception.errors import PerceptionError
from perception.live import LiveRuntime
from perception.live._publisher import parse_faults, receive
from perception.replay import safe_output_path
from perception.types import EgoPose, FrameResult

__all__ = ["register"]

log = logging.getLogger(__name__)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "live",
        help="run the live API as a vehicle host would: a publisher process plays DRIVE over a Unix socket",
        description="A separate publisher process plays DRIVE at its recorded timing over a Unix socket, each "
        "sensor on its own thread, stamping samples on the host's monotonic clock; this process uses only "
        "the live API (LiveRuntime.push) and prints latency from the trigger sample's arrival to its result "
        "(p50/p99), frames produced vs expected, drops by reason and deadline misses. Fault options make the "
        "publisher misbehave as middleware does.",
    )
    add_runtime_options(p)
    p.add_argument(
        "--silence",
        action="append",
        default=[],
        metavar="SENSOR:FROM:TO",
        help="do not send SENSOR's samples between FROM and TO seconds (repeatable)",
    )
    p.add_argument(
        "--burst",
        action="append",
        default=[],
        metavar="SENSOR:FROM:TO",
        help="hold SENSOR's samples back between FROM and TO s, then send them at once (repeatable)",
    )
    p.add_argument("--jitter-ms", type=float, default=0.0, help="random extra delay per sample, up to this")
    p.add_argument(
        "--clock-jump",
        action="append",
        default=[],
        metavar="SENSOR:AT:OFFSET_S",
        help="from AT seconds on, SENSOR's stamps are OFFSET_S seconds off (repeatable)",
    )
    p.add_argument(
        "--time-base",
        choices=("monotonic", "offset", "estimate"),
        default=None,
        help="how stamps map to the host clock (default: the profile's live.time_base; "
        "'estimate' when a clock jump is injected)",
    )
    p.add_argument("--out", type=Path, default=None, help="write DIR/live.json (summary) and DIR/frames.jsonl")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    faults = parse_faults(args.silence, args.burst, args.jitter_ms, args.clock_jump)
    cfg = runtime_config(args)
    time_base = args.time_base or ("estimate" if faults.clock_jumps else cfg.live.time_base)
    cfg = dataclasses.replace(cfg, live=dataclasses.replace(cfg.live, time_base=time_base))
    with DriveReader(args.drive) as reader:
        rig = dict(reader.rig)
        duration_s = (reader.end_ns - reader.start_ns) / 1e9
    unknown = {s for s, _, _ in (*faults.silence, *faults.bursts, *faults.clock_jumps)} - set(rig)
    if unknown:
        from perception.errors import ConfigError

        raise ConfigError(f"no such sensor in the drive: {', '.join(sorted(unknown))} (it has: {', '.join(rig)})")
    records: list[FrameResult] = []
    with tempfile.TemporaryDirectory(prefix="perception-live-") as tmp:
        path = Path(tmp) / "samples.sock"
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen(1)
        with LiveRuntime(cfg, rig, on_result=records.append) as live:
            fault_json = json.dumps(dataclasses.asdict(faults))
            env = {**os.environ}
            publisher = subprocess.Popen(
                [sys.executable, "-m", "perception.live._publisher", str(args.drive), str(path), fault_json], env=env
            )
            try:
                server.settimeout(60)
                conn, _ = server.accept()
                server.close()
                t0 = time.monotonic()
                with conn:
                    for item in receive(conn):
                        if isinstance(item, EgoPose):
                            live.push_ego(item)
                        else:
                            live.push(item)
                wall_s = time.monotonic() - t0
            except TimeoutError:
                raise PerceptionError("the publisher process did not connect within 60 s") from None
            finally:
                code = publisher.wait(timeout=30)
        summary = live.status()
    trigger = cfg.trigger.sensor
    rate = rig[trigger].rate_hz if trigger and trigger in rig else (cfg.trigger.rate_hz or 0.0)
    summary["expected_frames"] = round(duration_s * rate) if rate else None
    summary["wall_s"] = round(wall_s, 2)
    summary["publisher_exit_code"] = code
    summary["time_base"] = time_base
    summary["faults"] = dataclasses.asdict(faults)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        safe_output_path(args.out, "live.json").write_text(json.dumps(summary, indent=2) + "\n")
        with safe_output_path(args.out, "frames.jsonl").open("w") as f:
            for r in records:
                f.write(
                    json.dumps(
                        {
                            "frame_id": r.frame_id,
                            "t_ns": r.t_ns,
                            "status": r.status.value,
                            "latency_ms": r.latency.total_ns / 1e6,
                            "detections": len(r.detections),
                            "sensors": {n: s.status.value for n, s in r.sensors.items()},
                        }
                    )
                    + "\n"
                )
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        sys.stdout.write(_render(summary))
    return 0 if code == 0 else 1


def _render(s: dict[str, Any]) -> str:
    lat = s["latency_ms"]
    intake = s["intake"]
    drops = {k: intake[k] for k in ("late", "out_of_order", "duplicate", "clock_jump", "intake_overflow") if intake[k]}
    lines = [
        f"frames {s['frames']} produced, {s['expected_frames']} expected; ok {s['ok']}, degraded {s['degraded']}, "
        f"dropped {s['dropped']} {s['drop_reasons'] or ''}".rstrip(),
        f"  by trigger {intake['frames_by_trigger']}, by timer {intake['frames_by_timer']} "
        f"(trigger silent {intake['trigger_silences']}x), by rate {intake['frames_by_rate']}",
        f"latency trigger arrival -> result: p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms; "
        f"deadline misses {s['deadline_misses']}",
        f"samples {intake['samples']} used; not used: {drops or 'none'}",
        f"time base {s['time_base']}: offsets {json.dumps({k: round(v, 3) for k, v in s['offsets_ms'].items()})} ms",
    ]
    return "\n".join(lines) + "\n"
