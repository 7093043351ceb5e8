"""``perception budget``: replay a drive and check the per-frame latency budget, stage by stage."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perception._paths import REPORT_FILE, REPORT_MD_FILE
from perception.cli._args import int_within, output_dir, percentile, positive_float, rate
from perception.cli._common import add_runtime_options, make_output_folders, open_session, run_with_signals
from perception.cli._exitcodes import EXIT_INTERRUPTED
from perception.cli._replay import add_trace_out, replay_with_stop, trace_sinks
from perception.metrics import (
    BUDGET_PERCENTILE,
    BudgetVerdict,
    RunCounters,
    ServerSplit,
    budget_rows,
    budget_violations,
    incomplete_note,
    late_lines,
    render_table,
    server_rows,
    server_split_lines,
    server_table,
    write_markdown,
    write_plots,
)
from perception.replay import ReplayOptions, safe_output_path

__all__ = ["register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "budget",
        help="latency-budget test: replay a drive, attribute every millisecond, gate on the budget",
        description="Replay DRIVE and check the total per-frame budget (and per-stage budgets from the "
        "config's budget.stages) at a percentile. Prints a table, writes report.json, report.md and plots. "
        "Exits 1 on any violation. Each sensor's request is split into client time (preprocess, serialize) "
        "and time in flight, and the time in flight into Triton's queue/compute time for that request and "
        "the remaining network/client overhead: from Triton's trace on the embedded server (any --in-flight), "
        "from its statistics on an external one (--in-flight 1 only).",
    )
    add_runtime_options(p)
    p.add_argument("--budget-ms", type=positive_float, required=True, help="total per-frame budget in ms")
    p.add_argument(
        "--percentile",
        type=percentile,
        default=BUDGET_PERCENTILE,
        help="percentile checked against budgets (default %(default)g)",
    )
    p.add_argument(
        "--rate",
        type=rate,
        default="max",
        help="replay rate: multiplier of recorded speed, 'max' or 'lockstep' (default: max)",
    )
    p.add_argument(
        "--in-flight",
        type=int_within(1, 64),
        default=1,
        metavar="K",
        help="frames in flight (default 1: every frame is measured on its own; K > 1 measures under "
        "pipelining: the embedded server's trace still splits every request into server queue/compute time "
        "and client/network overhead, an external server's statistics give per-run means only)",
    )
    p.add_argument("--out", type=output_dir, default=Path("out/budget"), help="output directory (default: out/budget)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_trace_out(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # the drive is opened once for the run, the session assembled once against it: both passed down
    with open_session(args) as (reader, assembled):
        make_output_folders(args)
        # The gate's budget is also the runtime's frame budget (join deadline = budget - fusion reserve).
        session = assembled.with_overrides(budget_ms=args.budget_ms)
        # --in-flight K measures the run at that depth: a fixed admission, not the adaptive one.
        pipeline = dataclasses.replace(session.config.pipeline, max_in_flight=args.in_flight, admission="fixed")
        session = dataclasses.replace(session, config=dataclasses.replace(session.config, pipeline=pipeline))
        out: Path = args.out
        progress = False if args.no_progress else None
        # A budget test splits Triton's time per frame wherever it can: from the statistics (one frame in
        # flight), when the server's trace is not readable here.
        per_frame_split = True if args.in_flight == 1 else None
        options = ReplayOptions(rate=args.rate, out_dir=out, progress=progress, server_split=per_frame_split)
        sinks = trace_sinks(args, "budget")
        outcome = run_with_signals(lambda stop: replay_with_stop(stop, reader, session, options, sinks=sinks))
    cfg = session.config
    rows = budget_rows(outcome.latency, args.budget_ms, cfg.budget.stages, args.percentile)
    table = render_table(rows)
    sys.stdout.write(table)
    report = outcome.report
    split = report.server_split or ServerSplit(per_frame=False)
    per_frame = server_rows(outcome.latency)
    if per_frame:
        source = "Triton's trace" if split.source == "trace" else "Triton's statistics"
        depth = (report.admission or {}).get("peak") or cfg.pipeline.max_in_flight
        sys.stdout.write(
            f"\nTriton server side per frame from {source}, {depth} frame(s) in flight, ms "
            "(a sensor's in_flight - server_total = its overhead):\n"
        )
        sys.stdout.write(render_table(per_frame))
        sys.stdout.write("\n".join(server_split_lines(split.models)) + "\n")
    else:
        server = server_table(report.server_ms or {})
        if server:
            why = split.why_not
            sys.stdout.write(
                "\nTriton server side, mean ms per request (client minus server = network + serialisation)"
                + (f"; no per-frame split: {why}" if why else "")
                + ":\n"
            )
            sys.stdout.write("\n".join(server) + "\n")
    for line in late_lines(report.late_causes or {}):
        sys.stdout.write(line + "\n")
    plots = write_plots(out, outcome.latency, args.budget_ms)
    # the replay wrote report.md (tables, quality, frames): the budget verdict becomes a section of it
    write_markdown(safe_output_path(out, REPORT_MD_FILE), rows, report, plots, args.percentile, append=True)
    violations = budget_violations(rows)
    budget = BudgetVerdict(args.budget_ms, args.percentile, tuple(violations), tuple(r.as_dict() for r in rows))
    dataclasses.replace(report, budget=budget).write(safe_output_path(out, REPORT_FILE))
    sys.stdout.write(verdict_line(args.budget_ms, args.percentile, violations, report.counters) + "\n")
    sys.stdout.write(f"wrote {out}/report.md\n")
    if outcome.interrupted:  # the verdict covers only the frames replayed before the stop
        sys.stdout.write(f"interrupted: the verdict covers {report.counters.frames} frame(s) replayed\n")
        return EXIT_INTERRUPTED
    if outcome.drive_error is not None:
        raise outcome.drive_error  # damaged drive (exit 3): the verdict covers all its readable data
    unusable = outcome.unusable()
    if unusable is not None:
        raise unusable  # fast failures meet any budget: a run without one answer passes none
    return 0 if not violations else 1


def verdict_line(budget_ms: float, percentile: float, violations: Sequence[str], counters: RunCounters) -> str:
    """The printed verdict (``violations``: the stages over budget; ``perception fleet``'s: the drives, over
    every drive's frames pooled). Latencies are of the frames processed: when frames were dropped (shed under
    overload at ``--rate R``) it says over how many, and why the others were not (a PASS over 39 of 100
    frames read as a PASS of the run); when sensors were not ok in some (late, failed, skipped, missing),
    which and in how many (:func:`perception.metrics.incomplete_note`: a frame with a late sensor ends at
    the join deadline, inside the budget)."""
    verdict = "PASS" if not violations else f"FAIL ({', '.join(violations)})"
    line = f"budget {budget_ms:g} ms at p{percentile:g}: {verdict}"
    if counters.dropped:
        why = ", ".join(f"{k} {n}" for k, n in sorted(counters.drop_reasons.items()))
        line += (
            f" over the {counters.frames - counters.dropped} frame(s) processed of {counters.frames}; "
            f"{counters.dropped} dropped" + (f" ({why})" if why else "")
        )
    note = incomplete_note(counters)
    return line if note is None else f"{line}; {note}"
