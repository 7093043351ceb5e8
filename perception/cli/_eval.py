"""``perception eval``: score fused detections against the drive's ground truth, in every sensor mode."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perception.cli._args import output_dir
from perception.cli._common import (
    Interrupted,
    add_runtime_options,
    make_output_folders,
    open_session,
    run_with_signals,
)
from perception.cli._exitcodes import EXIT_CODES_HELP, EXIT_INTERRUPTED
from perception.errors import ReplayStoppedError
from perception.evaluation import PROTOCOLS
from perception.replay import MODES, evaluate_modes, safe_output_path

__all__ = ["register"]

_PROTOCOL_TITLE = {
    "native": "native (nuScenes-style, with the departures documented in perception/evaluation/_detection.py)",
    "nuscenes": "nuscenes (the nuScenes detection protocol as nuscenes-devkit computes it, detection_cvpr_2019)",
}


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "eval",
        help="replay in lockstep and score detections vs ground truth: fused, single-sensor and degraded modes",
        description="Replays DRIVE once in lockstep with the sensors enabled (every sensor unless --sensors), "
        f"then scores fusion in each mode ({', '.join(MODES)}; a mode none of whose sensors is enabled is "
        "skipped). Ctrl-C stops the replay: the frames replayed are scored, exit 130. Protocols: 'nuscenes' "
        "(the default for drives imported from nuScenes) is the "
        "nuScenes detection protocol exactly as the official devkit computes it: mAP over 0.5/1/2/4 m, the TP "
        "errors ATE/ASE/AOE/AVE/AAE and NDS, with its class ranges and ground-truth filters, one sample per "
        "keyframe; 'native' (the default otherwise) is nuScenes-style per-frame AP at 0.5/1/2/4 m centre "
        "distance, mAP, ATE, AVE and ID switches, with documented departures. The report names the protocol. "
        "A damaged drive is scored on all its readable data and the exit code is 3.",
        epilog=EXIT_CODES_HELP,
    )
    add_runtime_options(p)
    p.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default=None,
        help="evaluation protocol (default: nuscenes for a drive imported from nuScenes, else native)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object keyed by mode")
    p.add_argument("--out", type=output_dir, default=None, help="also write DIR/eval.json and DIR/eval.md")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _fmt(x: Any, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _protocol(modes: Mapping[str, Mapping[str, Any]]) -> str:
    return str(next(iter(modes.values()), {}).get("protocol", "native"))


def _skipped(mode: str, m: Mapping[str, Any]) -> str | None:
    """A mode not scored (none of its sensors enabled) as its line says it, or None: its '-' and 0 ID switches
    read as a score."""
    return f"{mode:<12} skipped: {m['skipped']}" if m.get("skipped") else None


def _table(modes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per mode (header first), plain text."""
    if _protocol(modes) == "nuscenes":
        lines = [f"{'mode':<12} {'mAP':>6} {'NDS':>6} {'ATE m':>6} {'ASE':>6} {'AOE rad':>7} {'AVE m/s':>7} {'AAE':>6}"]
        for mode, m in modes.items():
            if skipped := _skipped(mode, m):
                lines.append(skipped)
                continue
            e = m.get("tp_errors", {})
            lines.append(
                f"{mode:<12} {_fmt(m.get('mAP')):>6} {_fmt(m.get('NDS')):>6} {_fmt(e.get('ATE')):>6} "
                f"{_fmt(e.get('ASE')):>6} {_fmt(e.get('AOE')):>7} {_fmt(e.get('AVE')):>7} {_fmt(e.get('AAE')):>6}"
            )
        return lines
    lines = [f"{'mode':<12} {'mAP':>6} {'ATE m':>7} {'AVE m/s':>8} {'IDsw':>5}  sensors"]
    for mode, m in modes.items():
        if skipped := _skipped(mode, m):
            lines.append(skipped)
            continue
        lines.append(
            f"{mode:<12} {_fmt(m.get('mAP')):>6} {_fmt(m.get('ate')):>7} {_fmt(m.get('ave')):>8} "
            f"{m.get('id_switches', 0):>5}  {','.join(m.get('sensors', []))}"
        )
    return lines


def _markdown(drive: Path, modes: Mapping[str, Mapping[str, Any]]) -> str:
    protocol = _protocol(modes)
    out = [f"# Evaluation of `{drive.name}`", "", f"Protocol: **{_PROTOCOL_TITLE.get(protocol, protocol)}**", ""]
    rows = _table(modes)
    head = rows[0].split()
    head = [h for h in head if h not in ("m", "rad", "m/s")]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row, (mode, m) in zip(rows[1:], modes.items(), strict=True):
        cells = [mode, f"skipped: {m['skipped']}", *["-"] * (len(head) - 2)] if m.get("skipped") else row.split()
        out.append("| " + " | ".join(cells) + " |")
    fused = modes.get("fused")
    if fused and fused.get("interrupted"):
        out += ["", "**Interrupted**: scored on the frames replayed before the stop only."]
    if fused:
        n_gt = fused.get("num_ground_truth", {})
        out += ["", "Fused, per class (AP; ground truth n):", ""]
        out += [f"- {c}: {_fmt(ap)} (n={n_gt.get(c, 0)})" for c, ap in fused.get("per_class_ap", {}).items()]
        notes = fused.get("notes") or []
        if notes:
            out += ["", "Notes:", "", *[f"- {n}" for n in notes]]
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> int:
    progress = False if (args.no_progress or args.json) else None
    # the drive is opened once for the run, the session assembled once against it: both passed down
    with open_session(args) as (reader, session):
        make_output_folders(args)

        async def main(stop: Any) -> Any:
            # the stop passed on: Ctrl-C said "stopping after in-flight frames" and the replay went on to
            # its end, scored and exited 0; now it stops there, and the scores say so (exit 130)
            try:
                return await evaluate_modes(reader, session.config, args.protocol, progress=progress, stop=stop)
            except ReplayStoppedError:
                raise Interrupted from None  # stopped before the runtime was up: nothing replayed

        modes, outcome = run_with_signals(main)
    if outcome.interrupted:  # the scores cover the frames replayed before the stop, and say so
        modes = {mode: {**summary, "interrupted": True} for mode, summary in modes.items()}
    if args.out is not None:  # (made before the run)
        # keyed by mode, as --json prints it; every mode's summary names its "protocol"
        safe_output_path(args.out, "eval.json").write_text(json.dumps(modes, indent=2) + "\n")
        safe_output_path(args.out, "eval.md").write_text(_markdown(Path(args.drive), modes))
    if args.json:
        sys.stdout.write(json.dumps(modes) + "\n")
    else:
        sys.stdout.write(f"protocol: {_PROTOCOL_TITLE.get(_protocol(modes), _protocol(modes))}\n")
        sys.stdout.write("\n".join(_table(modes)) + "\n")
    if outcome.interrupted:
        sys.stderr.write(f"interrupted: the scores cover the {outcome.report.counters.frames} frame(s) replayed\n")
        return EXIT_INTERRUPTED
    if outcome.drive_error is not None:
        raise outcome.drive_error  # damaged drive (exit 3): scored on all its readable data
    unusable = outcome.unusable()
    if unusable is not None:
        raise unusable  # no model answered: every mode scored an empty run
    return 0
