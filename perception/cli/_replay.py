"""``perception replay``: replay a recorded drive through Triton and write one record per frame."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio

from perception._paths import DETECTIONS_FILE, FUSED_MCAP_FILE, MODES_FILE, REPORT_FILE, REPORT_MD_FILE
from perception.cli._args import output_dir, output_file, port_or_zero, rate
from perception.cli._common import (
    Interrupted,
    add_runtime_options,
    make_output_folders,
    open_session,
    run_with_signals,
)
from perception.cli._exitcodes import EXIT_CODES_HELP
from perception.cli._record import (
    add_as_recorded_options,
    add_record_options,
    recorder,
    recording,
    run_as_recorded,
)
from perception.drives import DriveReader
from perception.errors import ConfigError, ReplayStoppedError
from perception.metrics import LatencyStats, PrometheusExporter, late_lines
from perception.replay import (
    ReplayOptions,
    ReplayOutcome,
    ReplaySink,
    each_frame,
    replay_drive,
    safe_output_path,
    score_modes,
)
from perception.scheduler import Session
from perception.types import FrameResult

__all__ = ["check_drive", "register", "replay_with_stop"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "replay",
        help="replay a recorded drive through Triton (embedded by default)",
        description="Replay DRIVE: concurrent per-sensor inference under the frame deadline, fusion, "
        "one JSON record per frame in DIR/detections.jsonl, a summary in DIR/report.json and DIR/report.md, "
        "and a Foxglove recording (drive + fused detections + frame stats) in DIR/fused.mcap. "
        "A damaged drive (unreadable chunk, truncation) is replayed for all its readable data, the damage "
        "is in DIR/report.json (drive_damage) and DIR/report.md, and the exit code is 3.",
        epilog=EXIT_CODES_HELP,
    )
    add_runtime_options(p)
    p.add_argument(
        "--rate",
        type=rate,
        default="1.0",
        help="1.0 = recorded speed (a multiplier from 0.01 to 1000), 'max', or 'lockstep' (default: 1.0)",
    )
    p.add_argument("--out", type=output_dir, default=Path("out"), help="output directory (default: out)")
    p.add_argument("--raw-outputs", action="store_true", help="also write each sensor's raw model outputs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--metrics-port",
        type=port_or_zero,
        default=None,
        help="serve Prometheus metrics on this port (0 = pick a free one)",
    )
    p.add_argument("--no-fused-mcap", action="store_true", help="do not write DIR/fused.mcap")
    p.add_argument(
        "--server-split",
        action="store_true",
        help="split every request's time in flight into Triton's queue and compute per frame also against an "
        "external server, from its statistics: one frame in flight (--rate lockstep), a statistics request "
        "after every frame (the embedded server's trace does it anyway, at no extra request)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="check every chunk of the drive first: any damage is an error (exit 3, naming file and byte "
        "offset) before any frame runs",
    )
    p.add_argument(
        "--compare-modes",
        action="store_true",
        help="after the replay, re-fuse its model outputs per sensor mode (lidar_only, no_radar, ...) and "
        "compare each mode's mAP with the fused one (needs ground truth; no extra inference)",
    )
    p.add_argument("--live", action="store_true", help="serve a live Foxglove WebSocket view while replaying")
    p.add_argument(
        "--live-port", type=port_or_zero, default=8765, help="port of the live view (default 8765, 0 = pick a free one)"
    )
    add_trace_out(p)
    add_record_options(p)
    add_as_recorded_options(p)
    p.set_defaults(func=run)


def add_trace_out(p: argparse.ArgumentParser, *, server_split: bool = True) -> None:
    """``--trace-out FILE``: every frame's latency tree as a timeline (Chrome trace-event JSON).
    ``server_split``: the command reads Triton's trace (its queue and compute nested in each request)."""
    request = (
        "each sensor's request with Triton's queue and compute nested"
        if server_split
        else "each sensor's request as the client saw it: no split of Triton's queue and compute"
    )
    p.add_argument(
        "--trace-out",
        type=output_file,
        default=None,
        metavar="FILE",
        help=f"write every frame's timeline (frame stages, {request}) as Chrome trace-event JSON: open it in "
        "ui.perfetto.dev or chrome://tracing",
    )


def trace_sinks(args: argparse.Namespace, command: str) -> list[ReplaySink]:
    """The ``--trace-out`` sink, if asked for."""
    if args.trace_out is None:
        return []
    from perception.metrics import timeline_sink

    return [timeline_sink(args.trace_out, process_name=f"perception {command} {args.drive.name}")]


async def replay_with_stop(
    stop: anyio.Event, drive: Path | DriveReader, cfg: Any, options: ReplayOptions, **kwargs: Any
) -> ReplayOutcome:
    """:func:`replay_drive` that stops gracefully when ``stop`` is set.

    Once the runtime is up, a stop ends intake and drains (every record written). Before that -- the
    embedded server can take a while to start -- it abandons the start (the server is stopped) and
    raises :class:`Interrupted`: nothing was replayed.
    """
    try:
        return await replay_drive(drive, cfg, options, stop=stop, **kwargs)
    except ReplayStoppedError:
        raise Interrupted from None


def check_drive(reader: DriveReader) -> None:
    """``--strict``: read every chunk of the drive now; any damage raises :class:`DriveDamagedError`."""
    damage = reader.verify()
    if damage:
        raise damage.error(str(reader.path))


def _viz_sinks(args: argparse.Namespace, stack: ExitStack) -> list[ReplaySink]:
    """The fused MCAP recording and/or the live Foxglove view (the server lives as long as ``stack``)."""
    if args.no_fused_mcap and not args.live:
        return []
    from perception.viz import LiveServer, recorder_sink

    live = None
    if args.live:
        live = stack.enter_context(LiveServer(port=args.live_port))
        sys.stdout.write(f"live view: {live.url} (Foxglove: Open connection > Foxglove WebSocket)\n")
        sys.stdout.flush()  # before the replay starts: a client reading a pipe can connect now
    mcap = None if args.no_fused_mcap else safe_output_path(args.out, FUSED_MCAP_FILE)
    return [recorder_sink(mcap_path=mcap, live=live)]


def _fmt(x: Any) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _compare_modes(args: argparse.Namespace, session: Session, results: list[FrameResult], reader: DriveReader) -> bool:
    """Fused mAP against every single-sensor and one-sensor-removed mode, from this replay's outputs.
    True when DIR/modes.json was written."""
    if not reader.has_ground_truth:
        sys.stdout.write("no ground truth in this drive: mode comparison skipped\n")
        return False
    modes = score_modes(results, session, reader)
    args.out.mkdir(parents=True, exist_ok=True)
    safe_output_path(args.out, MODES_FILE).write_text(json.dumps(modes, indent=2) + "\n")
    fused = modes["fused"].get("mAP")
    singles: dict[str, float | None] = {m: modes[m].get("mAP") for m in ("lidar_only", "radar_only", "camera_only")}
    best = max(singles, key=lambda m: -1.0 if singles[m] is None else float(singles[m] or 0.0))
    verdict = "above" if fused is not None and all(v is None or fused > v for v in singles.values()) else "NOT above"
    sys.stdout.write(
        f"fused mAP {_fmt(fused)} vs best single sensor {_fmt(singles[best])} ({best}): {verdict} every single sensor\n"
    )
    sys.stdout.write(
        "  modes: " + ", ".join(f"{m} {_fmt(v.get('mAP'))}" for m, v in modes.items() if m != "fused") + "\n"
    )
    return True


def run(args: argparse.Namespace) -> int:
    if args.as_recorded:
        return run_as_recorded(args)  # a recording, not a drive: it assembles its own session (segments)
    if args.rerun_models:
        raise ConfigError("needs --as-recorded", key="--rerun-models")
    # the drive is opened once for the run, the session assembled once against it: both passed down
    with open_session(args) as (reader, session):
        return _run(args, reader, session)


def _run(args: argparse.Namespace, reader: DriveReader, session: Session) -> int:
    if args.strict:
        check_drive(reader)
    # --record is checked (a file it would replace that is not a recording: refused) before --out is made
    rec = recorder(args, tuple(reader.ego_poses())) if args.record is not None else None  # fusion reads the poses
    make_output_folders(args)
    options = ReplayOptions(
        rate=args.rate,
        out_dir=args.out,
        progress=False if args.no_progress else None,
        include_outputs=args.raw_outputs,
        server_split=True if args.server_split else None,
    )
    with PrometheusExporter(port=args.metrics_port) as metrics, ExitStack() as stack:
        if args.metrics_port is not None:
            sys.stdout.write(f"prometheus metrics on http://127.0.0.1:{metrics.port}/metrics\n")
        results: list[FrameResult] = []  # --compare-modes re-fuses them offline
        sinks = [each_frame(metrics.observe), *_viz_sinks(args, stack), *trace_sinks(args, "replay")]
        if args.compare_modes:
            sinks.append(each_frame(results.append))
        sys.stdout.flush()
        # closed and reported however the run ends (cut by a stop, its failure or the recording's)
        stopped = stack.enter_context(recording(rec)) if rec is not None else None
        outcome = run_with_signals(
            lambda stop: replay_with_stop(
                stop,
                reader,
                session,
                options,
                sinks=sinks,
                observer=rec,
            )
        )
        if stopped is not None and outcome.interrupted:
            stopped()
    r = outcome.report.counters
    total = outcome.report.latency.total or LatencyStats()
    sys.stdout.write(
        f"frames {r.frames}: ok {r.ok}, degraded {r.degraded}, dropped {r.dropped}; "
        f"latency p50 {total.p50:.1f} ms, p99 {total.p99:.1f} ms (budget {r.deadline_ms:.0f} ms, "
        f"{r.deadline_misses} misses)\n"
    )
    for line in late_lines(outcome.report.late_causes or {}):
        sys.stdout.write(line + "\n")
    if outcome.evaluation and not args.compare_modes:
        sys.stdout.write(f"fused mAP {_fmt(outcome.evaluation.get('mAP'))}\n")
    modes = args.compare_modes and _compare_modes(args, session, results, reader)
    written = [DETECTIONS_FILE, REPORT_FILE, REPORT_MD_FILE, *([] if args.no_fused_mcap else [FUSED_MCAP_FILE])]
    written += [MODES_FILE] if modes else []
    paths = [str(args.out / name) for name in written] + ([str(args.trace_out)] if args.trace_out else [])
    sys.stdout.write(f"wrote {', '.join(paths)}\n")
    if outcome.interrupted:
        sys.stdout.write("interrupted: records are complete up to the last finished frame\n")
        return 130
    if outcome.drive_error is not None:
        raise outcome.drive_error  # damaged drive (exit 3): the outputs cover all its readable data
    unusable = outcome.unusable()
    if unusable is not None:
        raise unusable  # every record is written, but none of them holds a model's answer
    return 0
