"""One benchmark run: the server (embedded, plus the ``sink`` test model when available), the suite, the
environment — everything that goes into ``bench.json``."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from perception.benchmark._env import environment, load_average
from perception.benchmark._models import bench_model_repository
from perception.benchmark._repeat import compare_runs
from perception.benchmark._sequential import SequentialClient
from perception.benchmark._suite import BenchSettings, run_suite
from perception.benchmark._transport import SINK_MODEL
from perception.config import RuntimeConfig
from perception.scheduler import Session
from perception.types import Frame

__all__ = ["BenchServer", "bench_server", "run_bench"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BenchServer:
    url: str
    embedded: bool
    repositories: tuple[str, ...] = ()


@contextlib.asynccontextmanager
async def bench_server(
    config: RuntimeConfig, *, extra_models: Sequence[str] = (SINK_MODEL,)
) -> AsyncIterator[BenchServer]:
    """The server to measure against: ``config.server.url`` when external; otherwise an embedded server
    on the profile's repositories plus, from :func:`bench_model_repository`, the ``extra_models`` those
    lack (linked into a temporary repository, so only they are loaded)."""
    if not config.server.embedded:
        yield BenchServer(url=config.server.url, embedded=False)
        return
    from perception.server import EmbeddedTriton, check_models_held

    repositories = [Path(p) for p in config.server.models]
    models: dict[str, str] = {}
    for sensor in config.active_sensors:
        models.setdefault(sensor.model, sensor.name)
    check_models_held(repositories, models)  # now, not after the start-up timeout ran out
    with tempfile.TemporaryDirectory(prefix="perception-bench-") as tmp:
        source = bench_model_repository()
        wanted = [
            m for m in extra_models if (source / m).is_dir() and not any((repo / m).exists() for repo in repositories)
        ]
        if wanted:
            extra = Path(tmp) / "models"
            extra.mkdir()
            for m in wanted:
                (extra / m).symlink_to(source / m, target_is_directory=True)
            repositories.append(extra)
        async with EmbeddedTriton(repositories, startup_timeout_s=config.server.startup_timeout_s) as server:
            yield BenchServer(
                url=server.grpc_url,
                embedded=True,
                repositories=tuple(str(p) for p in config.server.models) + tuple(str(source / m) for m in wanted),
            )


async def run_bench(
    session: Session,
    frames: Sequence[Frame],
    settings: BenchSettings,
    *,
    input_info: Mapping[str, Any] | None = None,
    repeat: int = 1,
) -> dict[str, Any]:
    """Start (or reach) the server, run the suite ``repeat`` times, return the whole report (see
    ``bench/README.md``): ``sections`` is the first run; with ``repeat`` > 1, ``repeats`` holds the other
    runs' sections and ``reproducibility`` the headline ratios of every run side by side. ``session``: the
    profile assembled against the drive the frames come from (once for the run: every variant runs it)."""
    config = session.config
    started = time.monotonic()
    env = environment()
    async with bench_server(config) as server:
        with SequentialClient(server.url, config.sensors) as probe:
            version = await anyio.to_thread.run_sync(probe.server_version)
        runs = []
        for i in range(repeat):
            if repeat > 1:
                log.info("bench run %d of %d", i + 1, repeat)
            runs.append(await run_suite(server.url, session, frames, settings))
    env["load_average_end"] = load_average()
    sections = runs[0]
    extra: dict[str, Any] = {}
    if repeat > 1:
        extra = {"repeats": runs[1:], "reproducibility": compare_runs(runs)}
    return {
        "benchmark": "perception bench: the runtime's variants side by side (same drive, models, server, run)",
        "quick": settings.quick,
        "environment": env,
        "server": {**dataclasses.asdict(server), "triton_version": version},
        "config": str(config.source) if config.source else None,
        "input": dict(input_info or {}),
        "settings": dataclasses.asdict(settings),
        "sections": sections,
        **extra,
        "wall_s": round(time.monotonic() - started, 1),
    }
