"""Command line of ``python -m perception.camera_training``.

Torch is imported only after the training data exists: the simulation workers are forked before any
torch thread pool does.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from perception.sim import SCENARIOS

from ._settings import TrainSettings
from ._sources import EVAL_SEED, TRAIN_SCENARIOS, TRAIN_SEEDS, check_training_seeds

__all__ = ["main"]

log = logging.getLogger("perception.camera_training")


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m perception.camera_training",
        description="Train the camera detector on generated drives and export it to ONNX.",
    )
    p.add_argument("--seed", type=int, default=0, help="training seed (weights init, shuffling, augmentation)")
    p.add_argument("--out", type=Path, required=True, help="where to write the .onnx")
    p.add_argument("--epochs", type=_positive, default=TrainSettings().epochs)
    p.add_argument("--batch-size", type=_positive, default=TrainSettings().batch_size)
    p.add_argument("--lr", type=float, default=TrainSettings().lr)
    p.add_argument(
        "--threads", type=_positive, default=TrainSettings().threads, help="torch intra-op threads (part of the recipe)"
    )
    p.add_argument("--time-budget", type=float, default=None, help="stop after the epoch exceeding this many s")
    p.add_argument(
        "--data-seeds",
        type=_training_seeds,
        default=TRAIN_SEEDS,
        help="drive seeds to train on, 'A-B' inclusive (seeds < 100 and 1234 are reserved for evaluation)",
    )
    p.add_argument("--scenarios", type=_scenarios, default=TRAIN_SCENARIOS, help="comma-separated scenarios")
    p.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("TMPDIR", "/tmp")) / "perception-camera-training",
        help="cache of generated drives and datasets",
    )
    p.add_argument("--eval-seed", type=int, default=EVAL_SEED, help="evaluate the export on this urban drive")
    p.add_argument("--no-eval", action="store_true", help="skip the evaluation after export")
    return p.parse_args(argv)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _seed_range(text: str) -> range:
    """``A-B`` (inclusive) or ``A``: the seeds (argparse says what is wrong)."""
    a, _, b = text.partition("-")
    try:
        lo = int(a)
        hi = int(b) if b else lo
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'A-B' or 'A' (whole numbers), got {text!r}") from None
    if hi < lo:
        raise argparse.ArgumentTypeError(f"an empty range: {text!r} ends before it begins")
    return range(lo, hi + 1)


def _training_seeds(text: str) -> range:
    """:func:`_seed_range`, none of them reserved for evaluation."""
    seeds = _seed_range(text)
    try:
        check_training_seeds(seeds)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return seeds


def _scenarios(text: str) -> tuple[str, ...]:
    names = tuple(s for s in text.split(",") if s)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown scenario(s) {unknown or [text]}; known: {', '.join(SCENARIOS)}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    args = _parse(argv)
    from ._evaluate import evaluate_onnx, format_results
    from ._sources import training_dataset

    t0 = time.monotonic()
    data = training_dataset(args.data_seeds, list(args.scenarios), args.cache)
    t_data = time.monotonic() - t0
    log.info("training data ready: %d images, %d objects (%.0f s)", len(data), data.labels.size, t_data)
    from ._train import export_onnx, train

    settings = TrainSettings(
        seed=args.seed,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        threads=args.threads,
        time_budget_s=args.time_budget,
    )
    t1 = time.monotonic()
    net = train(data, settings)
    t_train = time.monotonic() - t1
    export_onnx(net, args.out)
    log.info("data %.0f s, training %.0f s", t_data, t_train)
    if not args.no_eval:
        results = evaluate_onnx(args.out, seed=args.eval_seed)
        for line in format_results(results).splitlines():
            log.info("%s", line)
    return 0
