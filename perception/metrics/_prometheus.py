"""Prometheus metrics endpoint (prometheus-client) for the runtime running as a service.

Exposes per-stage latency histograms, per-sensor request latency, deadline misses, frame status and
per-sensor status counters. Uses its own registry, so several runtimes in one process don't clash.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any

from perception.errors import ConfigError
from perception.types import FrameResult

__all__ = ["PrometheusExporter"]

log = logging.getLogger(__name__)

_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0)


class PrometheusExporter:
    """``with PrometheusExporter(port=9108) as m: m.observe(result)`` (``port=0`` picks a free one)."""

    def __init__(self, port: int | None = None, *, addr: str = "127.0.0.1", namespace: str = "perception") -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self._port = port
        self._addr = addr
        self._server: Any = None
        self._thread: Any = None
        self.frame_latency = Histogram(
            "frame_latency_seconds", "Per-frame end-to-end latency", namespace=namespace,
            buckets=_BUCKETS_S, registry=self.registry,
        )  # fmt: skip
        self.stage_latency = Histogram(
            "stage_latency_seconds", "Per-frame latency of each stage", ["stage"], namespace=namespace,
            buckets=_BUCKETS_S, registry=self.registry,
        )  # fmt: skip
        self.sensor_latency = Histogram(
            "sensor_latency_seconds", "Per-sensor request latency", ["sensor"], namespace=namespace,
            buckets=_BUCKETS_S, registry=self.registry,
        )  # fmt: skip
        self.frames = Counter(
            "frames_total", "Frames by status", ["status"], namespace=namespace, registry=self.registry
        )
        self.deadline_misses = Counter(
            "deadline_misses_total", "Frames whose latency exceeded the budget", namespace=namespace,
            registry=self.registry,
        )  # fmt: skip
        self.sensor_status = Counter(
            "sensor_status_total", "Per-sensor outcome per frame", ["sensor", "status"], namespace=namespace,
            registry=self.registry,
        )  # fmt: skip

    @property
    def port(self) -> int | None:
        return self._server.server_port if self._server is not None else self._port

    def __enter__(self) -> PrometheusExporter:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> None:
        if self._port is None or self._server is not None:
            return
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(self._port, addr=self._addr, registry=self.registry)
        except OSError as exc:  # the port taken, an address not of this host
            raise ConfigError(
                f"cannot serve Prometheus metrics on {self._addr}:{self._port}: {exc.strerror or exc}",
                key="--metrics-port",
            ) from exc
        log.info("prometheus metrics on http://%s:%d/metrics", self._addr, self.port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = self._thread = None

    def observe(self, r: FrameResult) -> None:
        self.frames.labels(r.status.value).inc()
        if r.status.value == "dropped":
            return
        self.frame_latency.observe(r.latency.total_ns / 1e9)
        if r.deadline_missed:
            self.deadline_misses.inc()
        for stage, ns in r.latency.stages.items():
            self.stage_latency.labels(stage).observe(ns / 1e9)
        for name, s in r.sensors.items():
            self.sensor_status.labels(name, s.status.value).inc()
            if s.latency_ns:
                self.sensor_latency.labels(name).observe(s.latency_ns / 1e9)
