"""``perception replay``: replay a recorded drive through Triton and write one record per frame."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio

from perception.cli._common import add_runtime_options, run_with_signals, runtime_config
from perception.errors import ConfigError
from perception.metrics import PrometheusExporter
from perception.replay import Rate, ReplayOptions, ReplayOutcome, ReplaySink, replay_drive
from perception.scheduler import Runtime

__all__ = ["parse_rate", "register", "replay_with_stop"]


def parse_rate(text: str) -> Rate:
    if text == "max":
        return "max"
    if text == "lockstep":
        return "lockstep"
    try:
        rate = float(text)
    except ValueError:
        raise ConfigError(f"--rate must be a number, 'max' or 'lockstep', got {text!r}", key="--rate") from None
    if not 0 < rate <= 1000:
        raise ConfigError(f"--rate must be within (0, 1000], got {rate}", key="--rate")
    return rate


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "replay",
        help="replay a recorded drive through Triton (embedded by default)",
        description="Replay DRIVE: concurrent per-sensor inference under the frame deadline, fusion, "
        "one JSON record per frame in DIR/detections.jsonl, a summary in DIR/report.json and DIR/report.md, "
        "and a Foxglove recording (drive + fused detections + frame stats) in DIR/fused.mcap.",
    )
    add_runtime_options(p)
    p.add_argument("--rate", default="1.0", help="1.0 = recorded speed (any multiplier), 'max', or 'lockstep'")
    p.add_argument("--out", type=Path, default=Path("out"), help="output directory (default: out)")
    p.add_argument("--raw-outputs", action="store_true", help="also write each sensor's raw model outputs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port (0 = pick a free one)"
    )
    p.add_argument("--no-fused-mcap", action="store_true", help="do not write DIR/fused.mcap")
    p.add_argument("--live", action="store_true", help="serve a live Foxglove WebSocket view while replaying")
    p.add_argument(
        "--live-port", type=int, default=8765, help="port of the live view (default 8765, 0 = pick a free one)"
    )
    p.set_defaults(func=run)


async def replay_with_stop(
    stop: anyio.Event, drive: Path, cfg: Any, options: ReplayOptions, **kwargs: Any
) -> ReplayOutcome:
    """:func:`replay_drive` that stops gracefully when ``stop`` is set."""
    holder: list[Runtime] = []
    async with anyio.create_task_group() as tg:

        async def watcher() -> None:
            await stop.wait()
            for rt in holder:
                rt.stop()

        tg.start_soon(watcher)
        outcome = await replay_drive(drive, cfg, options, runtime_hook=holder.append, **kwargs)
        outcome.interrupted = stop.is_set()
        tg.cancel_scope.cancel()
    return outcome


def _viz_sinks(args: argparse.Namespace, stack: ExitStack) -> list[ReplaySink]:
    """The fused MCAP recording and/or the live Foxglove view (the server lives as long as ``stack``)."""
    if args.no_fused_mcap and not args.live:
        return []
    from perception.viz import FUSED_MCAP, LiveServer, recorder_sink

    live = None
    if args.live:
        live = stack.enter_context(LiveServer(port=args.live_port))
        sys.stdout.write(f"live view: {live.url} (Foxglove: Open connection > Foxglove WebSocket)\n")
    mcap = None if args.no_fused_mcap else args.out / FUSED_MCAP
    return [recorder_sink(mcap_path=mcap, live=live)]


def run(args: argparse.Namespace) -> int:
    rate = parse_rate(args.rate)
    cfg = runtime_config(args)
    options = ReplayOptions(
        rate=rate,
        out_dir=args.out,
        progress=False if args.no_progress else None,
        include_outputs=args.raw_outputs,
    )
    with PrometheusExporter(port=args.metrics_port) as metrics, ExitStack() as stack:
        if args.metrics_port is not None:
            sys.stdout.write(f"prometheus metrics on http://127.0.0.1:{metrics.port}/metrics\n")
        sinks = _viz_sinks(args, stack)
        sys.stdout.flush()
        outcome = run_with_signals(
            lambda stop: replay_with_stop(stop, args.drive, cfg, options, on_result=metrics.observe, sinks=sinks)
        )
    r = outcome.report
    total = r["latency_ms"]["total"]
    sys.stdout.write(
        f"frames {r['frames']}: ok {r['ok']}, degraded {r['degraded']}, dropped {r['dropped']}; "
        f"latency p50 {total['p50']:.1f} ms, p99 {total['p99']:.1f} ms (budget {r['deadline_ms']:.0f} ms, "
        f"{r['deadline_misses']} misses)\n"
    )
    if outcome.evaluation:
        sys.stdout.write(f"fused mAP {outcome.evaluation.get('mAP', 0):.3f}\n")
    written = ["detections.jsonl", "report.json", "report.md", *([] if args.no_fused_mcap else ["fused.mcap"])]
    sys.stdout.write(f"wrote {', '.join(str(args.out / name) for name in written)}\n")
    if outcome.interrupted:
        sys.stdout.write("interrupted: records are complete up to the last finished frame\n")
        return 130
    return 0
