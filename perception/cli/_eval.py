"""``perception eval``: score fused detections against the drive's ground truth, in every sensor mode."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from perception.cli._common import add_runtime_options, run_with_signals, runtime_config
from perception.replay import MODES, evaluate_modes, safe_output_path

__all__ = ["register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "eval",
        help="replay in lockstep and score detections vs ground truth: fused, single-sensor and degraded modes",
        description="Replays DRIVE once in lockstep with every sensor, then scores fusion in each mode "
        f"({', '.join(MODES)}) with nuScenes-style metrics: per-class AP at 0.5/1/2/4 m centre distance, "
        "mAP, translation (ATE) and velocity (AVE) errors, ID switches.",
    )
    add_runtime_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object keyed by mode")
    p.add_argument("--out", type=Path, default=None, help="also write DIR/eval.json")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def _fmt(x: Any, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def run(args: argparse.Namespace) -> int:
    cfg = runtime_config(args)
    progress = False if (args.no_progress or args.json) else None

    async def main(stop: Any) -> Any:
        return await evaluate_modes(args.drive, cfg, progress=progress)

    modes, outcome = run_with_signals(main)
    unusable = outcome.unusable()
    if unusable is not None:
        raise unusable  # no model answered: every mode would score an empty run
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        safe_output_path(args.out, "eval.json").write_text(json.dumps(modes, indent=2) + "\n")
    if args.json:
        sys.stdout.write(json.dumps(modes) + "\n")
        return 0
    sys.stdout.write(f"{'mode':<12} {'mAP':>6} {'ATE m':>7} {'AVE m/s':>8} {'IDsw':>5}  sensors\n")
    for mode, m in modes.items():
        sys.stdout.write(
            f"{mode:<12} {_fmt(m.get('mAP')):>6} {_fmt(m.get('ate')):>7} {_fmt(m.get('ave')):>8} "
            f"{m.get('id_switches', 0):>5}  {','.join(m.get('sensors', []))}\n"
        )
    return 0
