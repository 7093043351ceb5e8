"""``perception fleet``: replay many drives on a Ray cluster, one report and one verdict."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perception.cli._args import (
    non_negative_float,
    non_negative_int,
    output_dir,
    percentile,
    positive_float,
    positive_int,
    rate,
)
from perception.cli._budget import verdict_line
from perception.cli._common import DEFAULT_CONFIG, repo_root, run_with_signals
from perception.cli._exitcodes import EXIT_CODES_HELP, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK
from perception.config import load_config
from perception.errors import ConfigError
from perception.metrics import BUDGET_PERCENTILE

__all__ = ["register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "fleet",
        help="replay many drives on a Ray cluster: one report and one verdict",
        description="Replay every DRIVE (files, or directories searched for *.mcap) on a Ray cluster: each "
        "worker holds an open Triton client, one drive is one task, and OUT/<drive>/ gets what "
        "`perception replay --out` writes (staged, then renamed into place). OUT/fleet.json and "
        "OUT/fleet.md list every drive worst first, then the totals. Exit 1 when a drive failed, broke "
        "--budget-ms, or regressed against --baseline.",
        epilog=EXIT_CODES_HELP,
    )
    p.add_argument("drives", nargs="+", type=Path, metavar="DRIVE", help="drive files or directories of drives")
    p.add_argument(
        "--out",
        type=output_dir,
        required=True,
        help="output directory. Reused, it keeps what this run does not replace: the drive directories of an "
        "earlier run that this one does not replay stay (a line says which), but OUT/fleet.json and fleet.md "
        "list this run's drives only, and a later --baseline OUT compares only the drives fleet.json lists",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="write into an OUT that holds other files (directories that are not fleet drive outputs are "
        "still never replaced)",
    )
    p.add_argument("--address", default=None, help="join a Ray cluster: auto or ray://host:port (default: local)")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="worker actors (default: what the servers can serve: one per 4 CPUs of a node with its "
        "embedded Triton, at least one a node; one per CPU with --url servers). At most the cluster's CPUs "
        "(a local cluster's: this machine's): more is lowered to that, with a warning",
    )
    p.add_argument(
        "--url",
        action="append",
        default=[],
        help="external Triton gRPC host:port (repeat for several; default: one embedded server per node)",
    )
    p.add_argument(
        "--config", type=Path, default=None, help=f"launch profile (default: {DEFAULT_CONFIG.relative_to(repo_root())})"
    )
    p.add_argument(
        "--budget-ms",
        type=positive_float,
        default=None,
        metavar="B",
        help="frame budget, ms; it is also each drive's frame deadline: the profile's budget becomes total_ms B "
        "for every drive (recorded ones too), so the join deadline is B minus fusion_reserve_ms (the reserve "
        "capped at B/2; stage budgets kept). Exit 1 when any drive breaks it at --percentile",
    )
    p.add_argument(
        "--percentile",
        type=percentile,
        default=BUDGET_PERCENTILE,
        help="percentile the budget is checked at (default %(default)g)",
    )
    p.add_argument("--eval", action="store_true", help="also score every sensor mode per drive (modes.json)")
    p.add_argument(
        "--rate", type=rate, default="max", help="replay rate: max (default), lockstep, or a speed multiplier"
    )
    p.add_argument(
        "--retries", type=non_negative_int, default=2, help="more attempts of a drive whose worker died (default 2)"
    )
    p.add_argument("--no-fused-mcap", action="store_true", help="do not write OUT/<drive>/fused.mcap")
    p.add_argument(
        "--no-report-md",
        action="store_true",
        help="do not write OUT/<drive>/report.md (its rendered frames take about 2 s of CPU a drive)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    b = p.add_argument_group("baseline", "compare with an earlier fleet run of the same drives; exit 1 on a regression")
    b.add_argument("--baseline", type=Path, default=None, metavar="PREV_OUT", help="an earlier fleet run's OUT")
    b.add_argument(
        "--tolerance-map", type=non_negative_float, default=0.01, help="mAP / class AP drop allowed (default 0.01)"
    )
    b.add_argument(
        "--tolerance-latency-pct",
        type=non_negative_float,
        default=10.0,
        help="p50/p99 increase allowed, percent (default 10)",
    )
    b.add_argument(
        "--tolerance-latency-ms",
        type=non_negative_float,
        default=1.0,
        help="p50/p99 increase allowed, ms; a regression exceeds both latency tolerances (default 1)",
    )
    b.add_argument(
        "--tolerance-status",
        type=non_negative_int,
        default=0,
        help="frames per drive allowed to turn worse (default 0)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perception.fleet import DriveSummary, FleetOptions, Tolerances, WorkerSettings, find_drives, run_fleet

    profile = (args.config or DEFAULT_CONFIG).resolve()
    load_config(profile)  # a bad profile is an error now, not once per drive
    if args.url:  # a malformed --url too (each drive failed with it, exit 1, after a cluster started)
        from perception.triton import ClientOptions

        try:
            ClientOptions(urls=tuple(args.url))
        except ConfigError as exc:
            raise ConfigError(exc.message, key="--url") from None
    drives = find_drives(args.drives)
    tolerances = Tolerances(
        map_drop=args.tolerance_map,
        latency_pct=args.tolerance_latency_pct,
        latency_ms=args.tolerance_latency_ms,
        status_changes=args.tolerance_status,
    )
    if args.baseline is not None and not args.baseline.is_dir():
        raise ConfigError(
            "baseline not found: expected an earlier fleet run's output directory", file=str(args.baseline)
        )
    settings = WorkerSettings(
        profile=str(profile),
        budget_ms=args.budget_ms,
        percentile=args.percentile,
        rate=args.rate,
        fused_mcap=not args.no_fused_mcap,
        report_md=not args.no_report_md,
        eval_modes=args.eval,
    )
    options = FleetOptions(
        out=args.out.resolve(),
        profile=profile,
        address=args.address,
        workers=args.workers,
        urls=tuple(args.url),
        settings=settings,
        retries=args.retries,
        progress=False if args.no_progress else None,
        baseline=args.baseline.resolve() if args.baseline is not None else None,
        tolerances=tolerances,
        force=args.force,
    )
    outcome = run_with_signals(lambda stop: run_fleet(drives, options, stop))
    t = outcome.totals
    lat = t.latency_ms
    status = ", ".join(f"{k} {v}" for k, v in sorted(t.by_status.items()))
    sys.stdout.write(
        f"drives {t.drives}: {status}; frames {t.frames} (ok {t.ok}, degraded {t.degraded}, "
        f"dropped {t.dropped}); latency p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms\n"
    )
    if t.drives_with_mAP or t.drives_without_ground_truth:
        mean = t.mean_drive_mAP
        without = t.drives_without_ground_truth
        sys.stdout.write(
            f"mAP: mean {'-' if mean is None else f'{mean:.3f}'} over {t.drives_with_mAP} drive(s) with ground truth"
            + (f"; no ground truth: {', '.join(without)}" if without else "")
            + "\n"
        )
    for d in outcome.drives:
        if d.status != "ok":
            sys.stdout.write(f"  {d.name}: {d.status}: {d.error}\n")
    broken = [d.name for d in outcome.drives if d.over_budget]
    if args.budget_ms is not None:  # `perception budget`'s line over every drive's frames, naming the drives
        sys.stdout.write(verdict_line(args.budget_ms, args.percentile, broken, t.counters()) + "\n")
    sys.stdout.write(f"wrote {options.out / 'fleet.json'}, {options.out / 'fleet.md'}\n")
    regressed = outcome.baseline is not None and not outcome.baseline.ok
    if outcome.baseline is not None:
        verdict = "no regression" if not regressed else f"{len(outcome.baseline.regressions)} regression(s)"
        sys.stdout.write(f"baseline {args.baseline}: {verdict}\n")
        for line in outcome.baseline.regressions[:20]:
            sys.stdout.write(f"  {line}\n")
    if outcome.interrupted:
        sys.stdout.write("interrupted: finished drives are kept\n")
        return EXIT_INTERRUPTED
    failed: list[DriveSummary] = [d for d in outcome.drives if d.status != "ok"]
    return EXIT_ERROR if failed or broken or regressed else EXIT_OK
