"""Transport cost of lidar-sized inputs: plain gRPC versus system shared memory, interleaved.

Sends ``N x 4`` float32 point clouds, flattened, to the ``sink`` model (``perception/benchmark/models/sink``,
shipped with the package: it sums its input and answers 4 bytes, so the input transfer dominates) through
:class:`perception.triton.TritonClient`, one request in flight, alternating the transports request by
request (and which goes first) so both see the same machine load. Used by
``perception bench``, ``bench/bench_transport.py`` and ``bench/bench_scheduler.py``.

Optional *baselines* (``BASELINES``) send the same cloud with ``tritonclient`` directly, interleaved
with the runtime's own requests, so the runtime's gRPC path can be compared with them in one run:

``sync_client``
    ``tritonclient.grpc.InferenceServerClient.infer``, the blocking client (called on the event loop's
    thread: one request in flight, nothing else runs meanwhile), building its ``InferInput`` per request
    as a user of that client does.
``tritonclient_aio``
    ``tritonclient.grpc.aio.InferenceServerClient.infer``: what the runtime's gRPC path used before it
    encoded requests itself (``perception/triton/_wire.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from perception.benchmark._stats import ratio, ratio_interval
from perception.errors import ConfigError, InferenceError
from perception.metrics import percentiles
from perception.triton import TritonClient

__all__ = ["BASELINES", "SINK_MODEL", "TRANSPORTS", "measure_transport"]

log = logging.getLogger(__name__)

SINK_MODEL = "sink"
TRANSPORTS = ("grpc", "shm")
BASELINES = ("sync_client", "tritonclient_aio")


class _Baseline:
    """One ``tritonclient`` client sending the sink's input as its users would (see the module doc)."""

    def __init__(self, name: str, url: str, model: str) -> None:
        import tritonclient.grpc as tgrpc
        import tritonclient.grpc.aio as tgrpc_aio

        if name not in BASELINES:
            raise ConfigError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}", key="baselines")
        self.name = name
        self._model = model
        self._tgrpc = tgrpc
        self._client: Any = (tgrpc if name == "sync_client" else tgrpc_aio).InferenceServerClient(url)

    def _inputs(self, flat: npt.NDArray[np.float32]) -> list[Any]:
        tensor = self._tgrpc.InferInput("INPUT", [int(flat.size)], "FP32")
        tensor.set_data_from_numpy(flat)
        return [tensor]

    async def infer(self, flat: npt.NDArray[np.float32]) -> float:
        """One request; the sink's answer (the sum of ``flat``)."""
        if self.name == "sync_client":
            result = self._client.infer(self._model, self._inputs(flat))
        else:
            result = await self._client.infer(self._model, self._inputs(flat))
        return float(result.as_numpy("OUTPUT")[0])

    async def close(self) -> None:
        if self.name == "sync_client":
            self._client.close()
        else:
            await self._client.close()


async def measure_transport(
    client: TritonClient,
    points: int,
    *,
    repeats: int,
    warmup: int = 3,
    model: str = SINK_MODEL,
    modes: Sequence[str] = TRANSPORTS,
    baselines: Sequence[str] = (),
    baseline_url: str | None = None,
) -> dict[str, Any]:
    """Round trip and preparation time per transport for one cloud size; ``shm_over_grpc_*`` ratios.

    With ``baselines`` (names from ``BASELINES``, sent to ``baseline_url``), each baseline's round trip
    too, interleaved with the transports (the order rotating every request), and the runtime's gRPC
    path over each baseline: ``grpc_over_<baseline>_p50`` / ``_p99`` (and their paired ``_ci95``).

    Raises :class:`InferenceError` if a request did not use the transport asked for or the sink's
    answer is wrong (a broken measurement must not produce numbers).
    """
    if baselines and baseline_url is None:
        raise ConfigError("baselines need the server's gRPC URL", key="baseline_url")
    cloud = np.random.default_rng(points).random((points, 4), dtype=np.float32)
    flat = cloud.reshape(-1)  # the sink takes FP32 [-1]; same bytes as the N x 4 cloud
    expected = float(flat.sum(dtype=np.float64))

    def check(got: float, url: str | None) -> None:
        if abs(got - expected) > 1e-3 * abs(expected):
            raise InferenceError(f"sink returned {got}, expected {expected}", model=model, url=url)

    clients = [_Baseline(name, str(baseline_url), model) for name in baselines]
    variants = [*modes, *baselines]
    total: dict[str, list[int]] = {v: [] for v in variants}
    prepare: dict[str, list[int]] = {m: [] for m in modes}
    try:
        for i in range(warmup + repeats):
            shift = i % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                if variant in baselines:
                    baseline = clients[baselines.index(variant)]
                    t0 = time.perf_counter_ns()
                    got = await baseline.infer(flat)
                    elapsed = time.perf_counter_ns() - t0
                    check(got, baseline_url)
                    if i >= warmup:
                        total[variant].append(elapsed)
                    continue
                res = await client.infer(model, {"INPUT": flat}, use_shm=variant == "shm")
                if res.used_shm != (variant == "shm"):
                    raise InferenceError(
                        f"a {variant} request went over {'shm' if res.used_shm else 'grpc'}", model=model, url=res.url
                    )
                check(float(res.outputs["OUTPUT"][0]), res.url)
                if i >= warmup:
                    total[variant].append(res.client_ns)
                    prepare[variant].append(res.prepare_ns)
    finally:
        for baseline in clients:
            await baseline.close()
    result: dict[str, Any] = {"points": points, "bytes": int(cloud.nbytes)}
    for mode in modes:
        result[mode] = {"round_trip": percentiles(total[mode]), "prepare": percentiles(prepare[mode])}
    for name in baselines:
        result[name] = {"round_trip": percentiles(total[name])}
        if "grpc" in modes:
            for q in ("p50", "p99"):
                grpc_ms, base_ms = (result[v]["round_trip"][q] for v in ("grpc", name))
                result[f"grpc_over_{name}_{q}"] = ratio(grpc_ms, base_ms)
                result[f"grpc_over_{name}_{q}_ci95"] = ratio_interval(total["grpc"], total[name], q)
            log.info(
                "%7d points: runtime gRPC p50 %.2f ms vs %s %.2f ms (x%.2f)",
                points,
                result["grpc"]["round_trip"]["p50"],
                name,
                result[name]["round_trip"]["p50"],
                result[f"grpc_over_{name}_p50"] or 0.0,
            )
    if set(TRANSPORTS) <= set(modes):
        for q in ("p50", "p99"):
            grpc_ms, shm_ms = (result[m]["round_trip"][q] for m in TRANSPORTS)
            result[f"shm_over_grpc_{q}"] = ratio(shm_ms, grpc_ms)
            result[f"shm_over_grpc_{q}_ci95"] = ratio_interval(total["shm"], total["grpc"], q)
            result[f"grpc_over_shm_{q}"] = ratio(grpc_ms, shm_ms)
        log.info(
            "%7d points (%5.1f MB): grpc p50 %.2f ms p99 %.2f ms | shm p50 %.2f ms p99 %.2f ms | shm x%.1f faster",
            points,
            cloud.nbytes / 1e6,
            result["grpc"]["round_trip"]["p50"],
            result["grpc"]["round_trip"]["p99"],
            result["shm"]["round_trip"]["p50"],
            result["shm"]["round_trip"]["p99"],
            result["grpc_over_shm_p50"] or 0.0,
        )
    return result
