"""``perception live``: a realistic host — a publisher process plays a drive over a Unix socket, this
process pushes what arrives into a :class:`perception.live.LiveRuntime` and reports."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from perception.cli._args import output_dir
from perception.cli._common import add_fault_options, add_runtime_options, make_output_folders, open_session
from perception.cli._record import add_record_options, recorder, recording
from perception.cli._replay import add_trace_out, check_drive
from perception.live import StopSignals, live_session, parse_faults
from perception.replay import safe_output_path
from perception.types import FrameResult, SensorStatus

__all__ = ["register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "live",
        help="run the live API as a vehicle host would: a publisher process plays DRIVE over a Unix socket",
        description="A separate publisher process plays DRIVE at its recorded timing over a Unix socket, each "
        "sensor on its own thread, stamping samples on the host's monotonic clock; this process uses only "
        "the live API (LiveRuntime.push) and prints latency from the trigger sample's arrival to its result "
        "(p50/p99), frames produced vs expected, drops by reason and deadline misses. Fault options make the "
        "publisher misbehave as middleware does. A damaged drive is refused before anything runs (exit 3).",
    )
    add_runtime_options(p)
    add_fault_options(p)
    p.add_argument(
        "--time-base",
        choices=("monotonic", "offset", "estimate"),
        default=None,
        help="how stamps map to the host clock (default: the profile's live.time_base; "
        "'estimate' when a clock jump is injected)",
    )
    p.add_argument("--out", type=output_dir, default=None, help="write DIR/live.json (summary) and DIR/frames.jsonl")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_trace_out(p, server_split=False)  # the live runtime does not read Triton's trace
    add_record_options(p)
    p.set_defaults(func=run)


@contextlib.contextmanager
def _stop_signals() -> Iterator[StopSignals]:
    """SIGINT and SIGTERM (a service manager's stop) stop the command alike: the publisher stopped, the
    server and the socket's temporary folder cleaned up, exit 130 (SIGTERM killed the process where it
    stood: the folder was left behind and the publisher wrote into the closed socket, a traceback per
    sensor). Held back while the runtime is made and opened (:class:`perception.live.StopSignals`: the
    open is given up at once), where an interrupt landing anywhere failed with a traceback (exit 1), hung,
    leaked the runtime or was swallowed (the run went on to its end)."""
    signals = StopSignals()
    if threading.current_thread() is not threading.main_thread():
        yield signals
        return
    previous = {s: signal.signal(s, signals) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield signals
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run(args: argparse.Namespace) -> int:
    with _stop_signals() as signals:
        return _run(args, signals)


def _run(args: argparse.Namespace, signals: StopSignals) -> int:
    faults = parse_faults(args.silence, args.burst, args.jitter_ms, args.clock_jump)
    # the drive is opened once on this side, the session assembled once against it
    with open_session(args, strict=True) as (reader, session):  # live plays only whole drives, as before
        # A truncation is not found by opening (only once a read reaches it): the publisher met it, died
        # before connecting, and this side waited for it a minute, then blamed the publisher (exit 1).
        check_drive(reader)
        # before --record replaces an earlier recording: a typo in a fault option deleted it
        cfg = session.config
        faults.check_sensors(list(reader.rig), reader.path, [s.name for s in cfg.active_sensors])
        faults.check_times((reader.end_ns - reader.start_ns) / 1e9, reader.path)
        time_base = args.time_base or ("estimate" if faults.clock_jumps else cfg.live.time_base)
        cfg = dataclasses.replace(cfg, live=dataclasses.replace(cfg.live, time_base=time_base))
        # --record is checked (a file it would replace that is not a recording: refused) before --out is made,
        # as replay's: a refused run left an empty --out behind
        rec = recorder(args)
        make_output_folders(args)
        if rec is None:
            outcome = live_session(reader, cfg, faults, signals=signals)
        else:
            with recording(rec):
                outcome = live_session(reader, cfg, faults, observer=rec, signals=signals)
    summary = {**outcome.summary, "push_cpu_us_per_frame": outcome.push_cpu_us_per_frame}
    if args.out is not None:
        safe_output_path(args.out, "live.json").write_text(json.dumps(summary, indent=2) + "\n")
        with safe_output_path(args.out, "frames.jsonl").open("w") as f:
            for r in outcome.records:
                f.write(json.dumps(frame_line(r)) + "\n")
    if args.trace_out is not None:
        # The client's side of every frame (the live runtime does not read Triton's trace: no server split).
        from perception.metrics import ChromeTrace, with_in_flight

        with ChromeTrace(args.trace_out, process_name=f"perception live {args.drive.name}") as trace:
            for r in sorted(outcome.records, key=lambda r: r.latency.start_ns):
                trace.add(with_in_flight(r))
    sys.stdout.write(json.dumps(summary, indent=2) + "\n" if args.json else _render(summary))
    code = _publisher_verdict(summary)
    unusable = no_usable_frame(outcome.records, summary, cfg.trigger.sensor)
    if unusable is not None and code == 0:
        sys.stderr.write(f"perception live: error: {unusable}\n")
        return 1
    return code


def no_usable_frame(records: Sequence[FrameResult], summary: Mapping[str, Any], trigger: str | None) -> str | None:
    """Why the run gave nothing to use, when no frame had a sensor answer ok, else None: a run that
    produced no frame (a trigger silent from the start opens none: the timer covers a trigger once it
    was seen) or only failed ones exited 0, where a replay of the same exits 1 (``no usable frame``)."""
    if any(s.status is SensorStatus.OK for r in records for s in r.sensors.values()):
        return None
    if not records:
        expected = summary.get("expected_frames", 0)
        why = (
            f": the trigger {trigger} sent no sample" if trigger and not summary["intake"]["frames_by_trigger"] else ""
        )
        return f"no usable frame: no frame produced of {expected} expected{why}"
    return f"no usable frame: no sensor answered ok in any of the {len(records)} frames"


def frame_line(r: FrameResult) -> dict[str, Any]:
    """A frame's line of DIR/frames.jsonl: its status, latency, detections counted, each sensor's status,
    and, as in replay's records, why it was dropped (``reason``: a shed frame's ``overload (...)``) and
    whether its detections are the tracker's prediction (``predicted``)."""
    line: dict[str, Any] = {
        "frame_id": r.frame_id,
        "t_ns": r.t_ns,
        "status": r.status.value,
        "deadline_missed": r.deadline_missed,
        "latency_ms": r.latency.total_ns / 1e6,
        "detections": len(r.detections),
        "sensors": {n: s.status.value for n, s in r.sensors.items()},
    }
    if r.reason:
        line["reason"] = r.reason
    if r.predicted:
        line["predicted"] = True
    return line


def _publisher_verdict(summary: dict[str, Any]) -> int:
    """0 when the publisher played the whole drive; else 1, with a line of this host's own (after the
    summary) for each sensor whose publisher died and why, or for how the publisher process ended."""
    code, died = summary["publisher_exit_code"], summary["publisher_died"]
    for sensor, why in sorted(died.items()):
        sys.stderr.write(f"perception live: error: the publisher of {sensor} died mid-run: {why}\n")
    if code == 0 and not died:
        return 0
    if not (died and code == 1):  # the publisher process itself ended early (killed, or failed)
        how = f"was killed by {signal.Signals(-code).name}" if -code in _SIGNALS else f"exited with code {code}"
        sys.stderr.write(f"perception live: error: the publisher {how}; the summary covers what it sent\n")
    return 1


_SIGNALS = {s.value for s in signal.Signals}


def _render(s: dict[str, Any]) -> str:
    lat = s["latency_ms"]
    intake = s["intake"]
    # every sample pushed and not used, by reason (the sensors not enabled and the invalid ones were left out);
    # of the clock jumps, those dropped: a re-anchored sample (time base estimate) was used, or counted where
    # it was dropped later (it showed as 'not used' while in 'used'); of the samples taken, those a full
    # buffer evicted (they showed as 'used')
    not_used = ("unknown_sensor", "invalid", "late", "out_of_order", "duplicate", "clock_jump", "intake_overflow")
    evicted = intake.get("buffer_evicted", 0)
    counts = {**intake, "clock_jump": intake.get("clock_jump_dropped", intake["clock_jump"]), "buffer_evicted": evicted}
    drops = {k: counts[k] for k in (*not_used, "buffer_evicted") if counts[k]}
    # what raised, per sensor or stage (status()["failed"]: an item in assembly or processing, dropped; the
    # recorder...), and the results not recorded (the callback queue full, or the callback raised): counted
    # in the summary only, they are said here too
    lost = {k: s[k] for k in ("callbacks_dropped", "callbacks_failed") if s.get(k)}
    failed = s.get("failed") or {}
    # the runtime's stream: frames whose intake waited for the results' consumer far behind, records it did not
    # take (status()'s; logged as they happen)
    behind = {k: s[k] for k in ("intake_held", "undelivered") if s.get(k)}
    # trigger slots past the assembly's catch-up limit in one call: no frame opened for them
    skipped = intake.get("slots_skipped", 0)
    lines = [
        f"frames {s['frames']} produced, {s['expected_frames']} expected; ok {s['ok']}, degraded {s['degraded']}, "
        f"dropped {s['dropped']} {s['drop_reasons'] or ''}".rstrip(),
        f"  by trigger {intake['frames_by_trigger']}, by timer {intake['frames_by_timer']} "
        f"(trigger silent {intake['trigger_silences']}x), by rate {intake['frames_by_rate']}"
        + (f"; trigger slots skipped (no frame opened): {skipped}" if skipped else ""),
        f"latency trigger arrival -> result: p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms; "
        f"deadline misses {s['deadline_misses']}",
        f"samples {intake['samples'] - evicted} used; not used: {drops or 'none'}",
        f"time base {s['time_base']}: offsets {json.dumps({k: round(v, 3) for k, v in s['offsets_ms'].items()})} ms",
    ]
    if failed or lost:
        lines.append(f"failed: {dict(failed) or 'none'}; results not recorded: {lost or 'none'}")
    if behind:
        lines.append(f"results' consumer behind: {behind}")
    if s.get("publisher_died"):
        died = s["publisher_died"]
        lines.append(f"publisher died mid-run for {len(died)} sensor(s): {', '.join(sorted(died))}")
    return "\n".join(lines) + "\n"
