"""Latency of the reference lidar, radar and camera models through the embedded Triton server on this machine.

For each case it measures the client round trip (sync gRPC client, one request in flight, after
warm-up) and, for comparison, the same pipeline called in-process (no Triton), as wall and as CPU
time (the CPU time is what the pipeline costs when the shared machine is busy). Writes p50/p95/p99/mean
per case, and the load average, to ``bench/results/models.json``.

Cases (default rig: 32-beam lidar, front radar, two 640x360 cameras):

* ``lidar_32beam``: a 32-beam sweep at 0.2 deg azimuth steps (~50k points) of an urban-ish scene;
* ``lidar_250k``: a 128-beam sweep with ~250k points, the largest input the contract is sized for;
* ``radar_100``: ~100 radar rows (10 objects and isolated clutter);
* ``camera_2x640x360``: both cameras' images in one ``[2, 360, 640, 3]`` request, as the runtime sends
  them (``camera_requests: batched``): the default rig's decoded JPEGs of an urban drive (seed 7);
* ``camera_1x640x360``: the front image alone (``camera_requests: per_camera``, or one camera late).

The camera's in-process reference is :class:`perception.modelkit.CameraDetector` on the same ONNX file
with the model's default settings (one onnxruntime thread).

Usage: ``.venv/bin/python bench/bench_models.py [--repeats 60] [--output bench/results/models.json]``
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from perception.metrics import percentiles
from perception.modelkit import (
    CameraDetector,
    SyntheticBox,
    detect_lidar,
    detect_radar,
    synthetic_lidar_sweep,
    synthetic_radar_returns,
)
from perception.server import EmbeddedTriton

log = logging.getLogger("bench_models")

REPO = Path(__file__).resolve().parents[1]
MODELS = ("lidar_detector", "radar_detector", "camera_detector")
CAMERA_ONNX = REPO / "models" / "camera_detector" / "1" / "camera_detector.onnx"
CAMERA_SEED, CAMERA_TIME_S = 7, 6.0  # an evaluation seed (< 100): training never saw it


def _scene() -> list[SyntheticBox]:
    rng = np.random.default_rng(0)
    boxes = []
    for k in range(14):  # parked and moving cars along both sides, a few trucks
        x = -40.0 + 6.5 * k + rng.uniform(-1, 1)
        y = (-5.5 if k % 2 else 5.5) + rng.uniform(-0.3, 0.3)
        length, width, height = (9.0, 2.5, 3.2) if k % 5 == 0 else (4.5, 1.8, 1.5)
        boxes.append(SyntheticBox(x, y, length, width, height, rng.uniform(-0.1, 0.1)))
    for k in range(8):  # pedestrians on the sidewalks
        boxes.append(SyntheticBox(-30.0 + 8 * k, 9.0 if k % 2 else -9.0, 0.5, 0.5, 1.75, 0.0))
    boxes.append(SyntheticBox(0.0, 14.0, 80.0, 0.5, 8.0, 0.0))  # building fronts
    boxes.append(SyntheticBox(0.0, -14.0, 80.0, 0.5, 8.0, 0.0))
    return boxes


def _camera_images() -> npt.NDArray[np.uint8]:
    """``[2, H, W, 3]`` uint8: the default rig's two cameras near ``CAMERA_TIME_S``, decoded as the runtime does."""
    from perception.sim import Simulator  # heavy: only for this one batch
    from perception.types import ImageSample

    sim = Simulator("urban", seed=CAMERA_SEED, duration_s=CAMERA_TIME_S + 1.0)
    images = []
    for name in ("cam_front", "cam_back"):
        times = np.asarray(sim.capture_times(name))
        sample = sim.sample(name, int(np.argmin(np.abs(times - CAMERA_TIME_S * 1e9))))
        assert isinstance(sample, ImageSample)
        images.append(sample.decode())
    return np.stack(images)


def make_inputs() -> dict[str, tuple[str, str, npt.NDArray[Any]]]:
    """``case -> (model, input name, tensor)``."""
    scene = _scene()
    lidar = synthetic_lidar_sweep(scene, beams=32, fov=(-30.0, 10.0), azimuth_steps=1800)
    dense = synthetic_lidar_sweep(scene, beams=128, fov=(-30.0, 10.0), azimuth_steps=2200)
    objects = [(8.0 + 7 * k, (-1) ** k * 3.5, 4.5, 1.8, 8.0 * (k % 3 - 1), 0.0) for k in range(10)]
    radar = synthetic_radar_returns(objects, per_object=8, seed=1)
    rng = np.random.default_rng(2)
    clutter = np.column_stack(
        [rng.uniform(5, 80, 20), rng.uniform(-30, 30, 20), np.zeros(20), rng.normal(0, 2, 20), rng.uniform(-10, 5, 20)]
    ).astype(np.float32)
    images = _camera_images()
    _, height, width, _ = images.shape
    return {
        "lidar_32beam": ("lidar_detector", "POINTS", lidar),
        "lidar_250k": ("lidar_detector", "POINTS", dense),
        "radar_100": ("radar_detector", "POINTS", np.concatenate([radar, clutter])),
        f"camera_2x{width}x{height}": ("camera_detector", "IMAGE", images),
        f"camera_1x{width}x{height}": ("camera_detector", "IMAGE", images[:1]),
    }


def _detections(model: str, answer: Any) -> int:
    if model == "camera_detector":
        return int(answer.as_numpy("COUNT").sum())
    return int(answer.as_numpy("SCORES").shape[0])


def _stats(samples_ms: list[float]) -> dict[str, float]:
    return percentiles(round(ms * 1e6) for ms in samples_ms)


def _time(
    fn: Callable[[], Any], repeats: int, warmup: int, clock: Callable[[], float] = time.perf_counter
) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        out.append((clock() - t0) * 1e3)
    return out


def bench(url: str, repeats: int, warmup: int) -> dict[str, Any]:
    client = grpcclient.InferenceServerClient(url)
    camera = CameraDetector(CAMERA_ONNX)  # the model's defaults: one onnxruntime thread
    local: dict[str, Callable[[npt.NDArray[Any]], Any]] = {
        "lidar_detector": detect_lidar,
        "radar_detector": detect_radar,
        "camera_detector": lambda images: camera(list(images)),
    }
    results: dict[str, Any] = {}
    try:
        for case, (model, name, tensor) in make_inputs().items():
            reps = max(10, repeats // 3) if tensor.shape[0] > 100_000 else repeats
            inp = grpcclient.InferInput(name, list(tensor.shape), np_to_triton_dtype(tensor.dtype))
            inp.set_data_from_numpy(tensor)

            def remote(model: str = model, inp: grpcclient.InferInput = inp) -> Any:
                return client.infer(model, [inp], client_timeout=30.0)

            local_fn = local[model]
            n_out = _detections(model, remote())
            triton_ms = _time(remote, reps, warmup)
            in_process = partial(local_fn, tensor)
            local_ms = _time(in_process, reps, warmup)
            # CPU time of the same call: what the pipeline costs without other processes' contention.
            cpu_ms = _time(in_process, reps, 0, time.process_time)
            results[case] = {
                "model": model,
                "input_shape": list(tensor.shape),
                "detections": n_out,
                "triton": _stats(triton_ms),
                "in_process": _stats(local_ms),
                "in_process_cpu": _stats(cpu_ms),
            }
            log.info(
                "%-16s %-15s %-18s -> %3d det | triton p50 %7.2f p99 %7.2f ms | in-process p50 %7.2f ms"
                " (cpu %6.2f ms)",
                case,
                model,
                "x".join(map(str, tensor.shape)),
                n_out,
                results[case]["triton"]["p50"],
                results[case]["triton"]["p99"],
                results[case]["in_process"]["p50"],
                results[case]["in_process_cpu"]["p50"],
            )
    finally:
        client.close()
    return results


async def run(args: argparse.Namespace) -> dict[str, Any]:
    # Serve only the reference models: a repository of links to them (the real repository may hold more).
    with tempfile.TemporaryDirectory(prefix="bench_models_") as tmp:
        repo = Path(tmp) / "models"
        repo.mkdir()
        for name in MODELS:
            (repo / name).symlink_to(REPO / "models" / name, target_is_directory=True)
        async with EmbeddedTriton([repo], startup_timeout_s=180.0) as server:
            return await anyio.to_thread.run_sync(bench, server.grpc_url, args.repeats, args.warmup)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results" / "models.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    load_before = os.getloadavg()
    cases = anyio.run(run, args)
    report = {
        "benchmark": "bench/bench_models.py",
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpu": _cpu_name(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "load_average_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
            "note": "shared CPU: other processes may run concurrently; latencies are upper bounds",
        },
        "client": "tritonclient.grpc (sync), one request in flight, after warm-up",
        "cases": cases,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    log.info("wrote %s", args.output)
    return 0 if all(math.isfinite(c["triton"]["p50"]) for c in cases.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
