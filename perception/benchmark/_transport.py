"""Transport cost of lidar-sized inputs: plain gRPC versus system shared memory, interleaved.

Sends ``N x 4`` float32 point clouds, flattened, to the ``sink`` model (``perception/benchmark/models/sink``,
shipped with the package: it sums its input and answers 4 bytes, so the input transfer dominates) through
:class:`perception.triton.TritonClient`, one request in flight, alternating the transports request by
request (and which goes first) so both see the same machine load. Used by
``perception bench``, ``bench/bench_transport.py`` and ``bench/bench_scheduler.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from perception.benchmark._stats import latency_stats, ratio, ratio_interval
from perception.errors import InferenceError
from perception.triton import TritonClient

__all__ = ["SINK_MODEL", "TRANSPORTS", "measure_transport"]

log = logging.getLogger(__name__)

SINK_MODEL = "sink"
TRANSPORTS = ("grpc", "shm")


async def measure_transport(
    client: TritonClient,
    points: int,
    *,
    repeats: int,
    warmup: int = 3,
    model: str = SINK_MODEL,
    modes: Sequence[str] = TRANSPORTS,
) -> dict[str, Any]:
    """Round trip and preparation time per transport for one cloud size; ``shm_over_grpc_*`` ratios.

    Raises :class:`InferenceError` if a request did not use the transport asked for or the sink's
    answer is wrong (a broken measurement must not produce numbers).
    """
    cloud = np.random.default_rng(points).random((points, 4), dtype=np.float32)
    flat = cloud.reshape(-1)  # the sink takes FP32 [-1]; same bytes as the N x 4 cloud
    expected = float(flat.sum(dtype=np.float64))
    total: dict[str, list[int]] = {m: [] for m in modes}
    prepare: dict[str, list[int]] = {m: [] for m in modes}
    for i in range(warmup + repeats):
        for mode in modes if i % 2 == 0 else list(modes)[::-1]:
            res = await client.infer(model, {"INPUT": flat}, use_shm=mode == "shm")
            if res.used_shm != (mode == "shm"):
                raise InferenceError(
                    f"a {mode} request went over {'shm' if res.used_shm else 'grpc'}", model=model, url=res.url
                )
            got = float(res.outputs["OUTPUT"][0])
            if abs(got - expected) > 1e-3 * abs(expected):
                raise InferenceError(f"sink returned {got}, expected {expected}", model=model, url=res.url)
            if i >= warmup:
                total[mode].append(res.client_ns)
                prepare[mode].append(res.prepare_ns)
    result: dict[str, Any] = {"points": points, "bytes": int(cloud.nbytes)}
    for mode in modes:
        result[mode] = {"round_trip": latency_stats(total[mode]), "prepare": latency_stats(prepare[mode])}
    if set(TRANSPORTS) <= set(modes):
        for q in ("p50", "p99"):
            grpc_ms, shm_ms = (result[m]["round_trip"][f"{q}_ms"] for m in TRANSPORTS)
            result[f"shm_over_grpc_{q}"] = ratio(shm_ms, grpc_ms)
            result[f"shm_over_grpc_{q}_ci95"] = ratio_interval(total["shm"], total["grpc"], q)
            result[f"grpc_over_shm_{q}"] = ratio(grpc_ms, shm_ms)
        log.info(
            "%7d points (%5.1f MB): grpc p50 %.2f ms p99 %.2f ms | shm p50 %.2f ms p99 %.2f ms | shm x%.1f faster",
            points,
            cloud.nbytes / 1e6,
            result["grpc"]["round_trip"]["p50_ms"],
            result["grpc"]["round_trip"]["p99_ms"],
            result["shm"]["round_trip"]["p50_ms"],
            result["shm"]["round_trip"]["p99_ms"],
            result["grpc_over_shm_p50"] or 0.0,
        )
    return result
