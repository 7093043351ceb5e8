"""``perception model-quality``: score each reference model on a drive generated from an unseen seed.

Generates a drive (``perception sim``), sends every sample once to its sensor kind's model on Triton
(embedded by default, ``--url`` for a running server) and scores the raw outputs against the
generator's exact ground truth at each capture time. Prints one JSON object on stdout (``--table``: a
human-readable table instead); progress and logs go to stderr.
The protocol is :mod:`perception.evaluation._models`; every metric's definition is in the report.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from perception.cli._args import non_negative_int, output_file, positive_float, positive_int, within
from perception.cli._common import make_folder
from perception.config import GRPC_NAMES, ServerConfig, url_problem
from perception.errors import ConfigError, ConnectError
from perception.sim import EVAL_SEED, FIRST_TRAINING_SEED, is_evaluation_seed

__all__ = ["RESERVED_SEEDS_NOTE", "register", "run"]

log = logging.getLogger(__name__)

RESERVED_SEEDS_NOTE = (
    f"seeds below {FIRST_TRAINING_SEED} and {EVAL_SEED} are reserved for evaluation: training never sees them"
)

_DESCRIPTION = f"""\
Generates a drive from SEED (default rig), sends every sample once to its sensor kind's model on Triton
(lidar_detector, radar_detector, camera_detector; embedded server on --models unless --url) and scores
the raw model outputs against the generator's exact ground truth at each sample's capture time.
{RESERVED_SEEDS_NOTE}.

metrics (the JSON report repeats these under "definitions"):
  camera_ap50_<class>      2D AP at IoU >= 0.5 (car, truck, pedestrian, cyclist) over every image;
                           objects < 50% visible or < 10 px tall are don't-care; null: no such object
  lidar_bev_ap_car         BEV AP for cars within 50 m of base_link, true positive = nearest unmatched
                           car within 2 m centre distance (greedy by score), boxes in base_link
  radar_*                  per radar scan, moving = ground-truth speed > 1 m/s, centre in the radar's
                           FOV and range. A detection matches an object (one-to-one, Hungarian) when
                           it is within the position gate of the object's BEV box (anisotropic: 0.6 m
                           along the line of sight, hypot(0.5 m, range * 2 deg) across, chi2 9.21)
                           and its RADIAL_VELOCITY is within 3 m/s of v_gt . u (u: its line of sight)
  radar_detection_rate     matched / observed moving objects (>= 1 return in the gate whose Doppler
                           agrees within 1 m/s: the objects the radar saw)
  radar_detection_rate_fov matched / all moving objects in FOV and range (occluded ones count as missed)
  radar_precision_moving   share of detections with |RADIAL_VELOCITY| > 1 m/s matched to a moving object
  radar_velocity_rmse      RMS of RADIAL_VELOCITY - v_gt . u (m/s) over ALL matched moving objects:
                           the ego-compensated Doppler velocity a radar measures for every object
  radar_velocity_rmse_over_ground  RMS of |VELOCITY - v_gt| (2D) over the matched moving objects whose
                           detection reports a finite VELOCITY (only where the returns' azimuth spread
                           determines it; NaN otherwise), so read it with:
  radar_velocity_coverage_over_ground  fraction of matched moving objects with a finite VELOCITY

targets: camera_ap50_car >= 0.7, lidar_bev_ap_car >= 0.7, radar_velocity_rmse <= 0.5
exit status: 0 (whatever the targets) unless --check: then 1 if a target fails; 2 for usage errors.
"""


def register(sub: Any) -> None:
    from perception.sim import MAX_DURATION_S, SCENARIOS

    p: argparse.ArgumentParser = sub.add_parser(
        "model-quality",
        help="score each reference model on a drive generated from an unseen seed",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seed", type=non_negative_int, required=True, help="drive seed (use one training never saw)")
    p.add_argument(
        "--duration",
        type=within(0.0, MAX_DURATION_S),  # as sim's: a longer one was named "duration", not the option
        default=20.0,
        metavar="S",
        help=f"seconds to drive, up to {MAX_DURATION_S:g} (default: 20)",
    )
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="urban", help="traffic preset (default: urban)")
    p.add_argument("--url", default=None, metavar="HOST:PORT", help="Triton gRPC URL (default: embedded server)")
    p.add_argument(
        "--models",
        action="append",
        type=Path,
        metavar="DIR",
        help="model repository of the embedded server; repeat for several (default: ./models, else the repo's)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object (the default)")
    out.add_argument("--table", action="store_true", help="print a human-readable table instead of the JSON object")
    p.add_argument(
        "--output", type=output_file, default=None, metavar="FILE", help="also write the JSON report to FILE"
    )
    p.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    p.add_argument("--concurrency", type=positive_int, default=4, metavar="N", help="requests in flight (default: 4)")
    p.add_argument(
        "--timeout", type=positive_float, default=60.0, metavar="S", help="per-request timeout (default: 60)"
    )
    p.add_argument(
        "--workers", type=positive_int, default=None, metavar="N", help="drive generation processes (default: up to 2)"
    )
    p.add_argument(
        "--keep-drive", type=output_file, default=None, metavar="FILE", help="write the generated drive here"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars (only drawn on a terminal)")
    p.set_defaults(func=run)


def _probe(url: str, timeout_s: float = 5.0) -> None:
    """Fail fast (before generating a drive) when nothing listens at ``host:port``."""
    if url.startswith(GRPC_NAMES):
        return  # gRPC name syntaxes: leave them to the client
    problem = url_problem(url)
    if problem is not None:
        raise ConfigError(problem, key="--url")
    host, _, port_text = url.rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port_text)), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ConnectError(f"cannot reach the Triton server: {reason}", url=url) from exc


def _check_args(args: argparse.Namespace) -> None:
    from perception.triton import ClientOptions

    # The outputs' folders made now: one that cannot be made is said before the drive is generated and
    # scored, not after (the report would be lost).
    for path, option in ((args.output, "--output"), (args.keep_drive, "--keep-drive")):
        if path is not None:
            make_folder(path.parent, option)

    if args.url is not None:
        ClientOptions(urls=(args.url,))  # validates the URL's form
    else:
        from perception.cli._server import default_model_repository
        from perception.server import check_model_repository

        args.models = [check_model_repository(p) for p in (args.models or [default_model_repository()])]
    if not is_evaluation_seed(args.seed):
        log.warning(
            "seed %d is not reserved for evaluation (%s): the camera model may have seen it",
            args.seed,
            RESERVED_SEEDS_NOTE,
        )


async def _evaluate(args: argparse.Namespace, drive_path: Path, sim: Any, total: int) -> tuple[dict[str, Any], str]:
    from perception._progress import Progress
    from perception.drives import DriveReader
    from perception.evaluation import ModelQualityEvaluator, RadarCoverage, evaluate_models
    from perception.sim import SimRadarParams
    from perception.triton import ClientOptions, TritonClient

    coverage = {
        s.name: RadarCoverage(s.params.fov_deg, s.params.max_range_m, s.params.min_range_m)
        for s in sim.rig.sensors
        if isinstance(s.params, SimRadarParams)
    }

    async def score(url: str) -> dict[str, Any]:
        with DriveReader(drive_path) as drive:
            evaluator = ModelQualityEvaluator(drive.rig, radar_coverage=coverage)
            enabled = False if args.no_progress else None
            with Progress(total, "inference", enabled=enabled) as bar:
                async with TritonClient(ClientOptions(urls=(url,))) as client:
                    await evaluate_models(
                        client,
                        drive.samples(),
                        evaluator,
                        sim.ground_truth,
                        concurrency=args.concurrency,
                        timeout_s=args.timeout,
                        progress=lambda n: bar.update(n, f"{n}/{total} samples"),
                    )
            return evaluator.summary()

    if args.url is not None:
        return await score(args.url), args.url
    from perception.server import EmbeddedTriton

    async with EmbeddedTriton(args.models, startup_timeout_s=ServerConfig().startup_timeout_s) as server:
        log.info("embedded Triton ready at %s", server.grpc_url)
        return await score(server.grpc_url), "embedded"


def _report(args: argparse.Namespace, summary: dict[str, Any], server: str, wall_s: float) -> dict[str, Any]:
    from perception.evaluation import check_targets

    def rounded(value: Any) -> Any:
        return round(value, 4) if isinstance(value, float) else value

    metrics = {k: rounded(v) for k, v in summary.items() if k not in ("frames", "counts", "definitions")}
    targets = {k: {**t, "value": rounded(t["value"])} for k, t in check_targets(summary).items()}
    return {
        "seed": args.seed,
        "scenario": args.scenario,
        "duration_s": args.duration,
        **metrics,
        "frames": summary["frames"],
        "targets": targets,
        "counts": summary["counts"],
        "server": server,
        "wall_s": round(wall_s, 1),
        "definitions": summary["definitions"],
    }


def _fmt(value: Any) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _table(report: dict[str, Any]) -> str:
    frames = ", ".join(f"{model} {n}" for model, n in report["frames"].items())
    lines = [
        f"{report['scenario']}, seed {report['seed']}, {report['duration_s']:g} s; samples: {frames}",
        f"{'metric':<36} {'value':>7}  target",
    ]
    for key in report["definitions"]:
        target = report["targets"].get(key)
        bar = ""
        if target:
            n = f" (n={target['n']})" if "n" in target else ""
            bar = f"{target['op']} {target['threshold']:g}  {'pass' if target['pass'] else 'FAIL'}{n}"
        lines.append(f"{key:<36} {_fmt(report.get(key)):>7}  {bar}".rstrip())
    c = report["counts"]
    lines.append(
        f"lidar cars {c['lidar_gt_car']} (TP {c['lidar_tp_car']}, FP {c['lidar_fp_car']}); radar moving objects "
        f"{c['radar_moving_objects']} (observed {c['radar_observed_moving']}), matched {c['radar_matched_moving']} "
        f"(of the observed {c['radar_matched_observed']}; {c['radar_doppler_rejected']} more by position alone), "
        f"finite over-ground velocity {c['radar_velocity_over_ground']}"
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from perception.sim import Simulator, generate_drive

    _check_args(args)
    if args.url is not None:
        _probe(args.url)
    t0 = time.monotonic()
    sim = Simulator(args.scenario, seed=args.seed, duration_s=args.duration)
    if args.url is None:
        from perception.evaluation import scored_model
        from perception.server import check_models_held

        # a model the repositories lack is said now, not after the drive was generated and the server's
        # start waited 30 s for it ("camera_detector: not ready after 30 s: model is not ready")
        needed: dict[str, str] = {}
        for sensor in sim.rig.sensors:
            needed.setdefault(scored_model(sensor.kind), sensor.name)
        check_models_held(args.models, needed)
    with tempfile.TemporaryDirectory(prefix="perception-model-quality-") as tmp:
        drive_path = args.keep_drive if args.keep_drive is not None else Path(tmp) / "drive.mcap"
        log.info("generating %s drive, seed %d, %g s -> %s", args.scenario, args.seed, args.duration, drive_path)
        made = generate_drive(
            drive_path,
            scenario=args.scenario,
            seed=args.seed,
            duration_s=args.duration,
            rig=sim.rig,
            progress=not args.no_progress and sys.stderr.isatty(),
            workers=args.workers,
        )
        total = sum(n for name, n in made.messages.items() if name not in ("ego_pose", "ground_truth"))
        summary, server = anyio.run(_evaluate, args, drive_path, sim, total)
    report = _report(args, summary, server, time.monotonic() - t0)
    text = json.dumps(report, indent=2)
    if args.output is not None:
        args.output.write_text(text + "\n")
    sys.stdout.write((_table(report) if args.table else json.dumps(report)) + "\n")
    failed = [metric for metric, t in report["targets"].items() if not t["pass"]]
    if failed:
        log.warning("targets not met: %s", ", ".join(failed))
    return 1 if args.check and failed else 0
