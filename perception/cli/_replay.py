"""``perception replay``: replay a recorded drive through Triton and write one record per frame."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio

from perception.cli._common import add_runtime_options, run_with_signals, runtime_config
from perception.errors import ConfigError
from perception.metrics import PrometheusExporter
from perception.replay import Rate, ReplayOptions, ReplayOutcome, replay_drive
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
        "one JSON record per frame in DIR/detections.jsonl and a summary in DIR/report.json.",
    )
    add_runtime_options(p)
    p.add_argument("--rate", default="1.0", help="1.0 = recorded speed (any multiplier), 'max', or 'lockstep'")
    p.add_argument("--out", type=Path, default=Path("out"), help="output directory (default: out)")
    p.add_argument("--raw-outputs", action="store_true", help="also write each sensor's raw model outputs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port (0 = pick a free one)"
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


def run(args: argparse.Namespace) -> int:
    rate = parse_rate(args.rate)
    cfg = runtime_config(args)
    options = ReplayOptions(
        rate=rate,
        out_dir=args.out,
        progress=False if args.no_progress else None,
        include_outputs=args.raw_outputs,
    )
    with PrometheusExporter(port=args.metrics_port) as metrics:
        if args.metrics_port is not None:
            sys.stdout.write(f"prometheus metrics on http://127.0.0.1:{metrics.port}/metrics\n")
            sys.stdout.flush()
        outcome = run_with_signals(
            lambda stop: replay_with_stop(stop, args.drive, cfg, options, on_result=metrics.observe)
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
    sys.stdout.write(f"wrote {args.out / 'detections.jsonl'} and {args.out / 'report.json'}\n")
    if outcome.interrupted:
        sys.stdout.write("interrupted: records are complete up to the last finished frame\n")
        return 130
    return 0
