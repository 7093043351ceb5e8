"""Where training images come from: the synthetic generator (:class:`perception.sim.Simulator`).

Each training image is exactly what a generated drive holds (the camera's JPEG, decoded), labelled with
:func:`perception.sim.project_ground_truth` of the ground truth *at the image's capture time*, so labels
carry no timing error. Drives are sampled sparsely (one frame every ``frame_step_s``) over many seeds
and scenarios: more distinct worlds per image than consecutive frames would give.

Seeds below 100 and 1234 are reserved for evaluation and refused here.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path

import numpy as np
import numpy.typing as npt

from perception.sim import EVAL_SEED, FIRST_TRAINING_SEED, is_evaluation_seed

from ._data import Dataset, Projected

__all__ = [
    "EVAL_SEED",
    "RESERVED_SEEDS",
    "TRAIN_SCENARIOS",
    "TRAIN_SEEDS",
    "camera_samples",
    "check_training_seeds",
    "training_dataset",
]

log = logging.getLogger("perception.camera_training")

#: Never trained on: everything below 100, and the evaluation seed (:func:`perception.sim.is_evaluation_seed`).
RESERVED_SEEDS = (range(0, FIRST_TRAINING_SEED), EVAL_SEED)
TRAIN_SEEDS = range(FIRST_TRAINING_SEED, FIRST_TRAINING_SEED + 24)
TRAIN_SCENARIOS = ("urban", "highway", "dense")
#: Length of each training drive and spacing of the frames taken from it (per camera).
DRIVE_S = 20.0
FRAME_STEP_S = 1.5

U8 = npt.NDArray[np.uint8]


def check_training_seeds(seeds: Iterable[int]) -> None:
    """Raise ``ValueError`` if any seed is reserved for evaluation."""
    bad = sorted(s for s in seeds if is_evaluation_seed(s))
    if bad:
        raise ValueError(
            f"seeds {bad} are reserved for evaluation (< {FIRST_TRAINING_SEED} and {EVAL_SEED}); train on others"
        )


def camera_samples(
    scenario: str, seed: int, *, duration_s: float = DRIVE_S, frame_step_s: float | None = FRAME_STEP_S
) -> list[tuple[str, int, U8, list[Projected]]]:
    """``(camera, t_ns, image, labels)`` of a simulated drive's camera frames.

    ``frame_step_s=None`` takes every frame. Labels are ``(label, x1, y1, x2, y2, visible_fraction)``
    from :func:`perception.sim.project_ground_truth` at the frame's capture time.
    """
    from perception._imageio import decode_image
    from perception.sim import Simulator, project_ground_truth
    from perception.types import ImageSample, SensorKind

    sim = Simulator(scenario, seed=seed, duration_s=duration_s)
    out: list[tuple[str, int, U8, list[Projected]]] = []
    for cfg in sim.rig.sensors:
        if cfg.kind != SensorKind.CAMERA:
            continue
        times = sim.capture_times(cfg.name)
        if frame_step_s is None:
            picks = list(range(len(times)))
        else:
            wanted = np.arange(frame_step_s / 2, duration_s, frame_step_s) * 1e9
            picks = sorted({int(np.argmin(np.abs(np.asarray(times) - t))) for t in wanted})
        for k in picks:
            sample = sim.sample(cfg.name, k)
            assert isinstance(sample, ImageSample)
            labels: list[Projected] = [
                (b.label, b.x1, b.y1, b.x2, b.y2, b.visible_fraction)
                for b in project_ground_truth(sim.ground_truth(sample.t_ns), cfg.spec)
            ]
            out.append((cfg.name, sample.t_ns, decode_image(sample.data, sensor=cfg.name), labels))
    return out


def _drive_dataset(job: tuple[str, int]) -> Dataset:
    scenario, seed = job
    return Dataset.build((image, labels) for _, _, image, labels in camera_samples(scenario, seed))


def _generator_fingerprint() -> str:
    """A digest of the code that makes training images: the simulator, JPEG coding and letterboxing.

    Part of the cache key, so a cache built by an older generator is rebuilt instead of silently
    training on images the current code would not make.
    """
    import perception
    import perception.sim

    root = Path(perception.__file__).parent
    files = sorted(Path(perception.sim.__file__).parent.glob("*.py"))
    files += [root / "_imageio.py", root / "modelkit" / "_camera.py", Path(__file__).with_name("_data.py")]
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def training_dataset(
    seeds: Sequence[int], scenarios: Sequence[str], cache: Path, *, workers: int | None = None
) -> Dataset:
    """The letterboxed training set of every ``(scenario, seed)`` drive, cached per drive under ``cache``."""
    check_training_seeds(seeds)
    jobs = [(sc, seed) for sc in scenarios for seed in seeds]
    key = {"drive_s": DRIVE_S, "frame_step_s": FRAME_STEP_S, "version": 1, "generator": _generator_fingerprint()}
    files = {job: cache / f"{job[0]}-{job[1]}.npz" for job in jobs}
    parts: dict[tuple[str, int], Dataset] = {}
    todo = []
    for job in jobs:
        cached = Dataset.try_load(files[job], key)
        if cached is None:
            todo.append(job)
        else:
            parts[job] = cached
    if todo:
        n = workers or max(1, min(2, os.cpu_count() or 1))
        log.info("simulating %d drive(s) with %d worker(s) (%d cached)", len(todo), n, len(parts))
        method = "fork" if "fork" in get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(max_workers=n, mp_context=get_context(method)) as pool:
            for job, data in zip(todo, pool.map(_drive_dataset, todo), strict=True):
                data.save(files[job], key)
                parts[job] = data
                log.info("  %s seed %d: %d images, %d objects", job[0], job[1], len(data), data.labels.size)
    return Dataset.concatenate([parts[job] for job in jobs])
