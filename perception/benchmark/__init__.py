"""Side-by-side benchmarks of the runtime: the measurements behind ``perception bench`` and ``bench/``.

* :func:`run_bench`: one drive, one server, the variants interleaved (sequential
  sync client vs concurrent runtime, gRPC vs shared memory, channels, batched cameras, frames in
  flight); :func:`render_markdown` / :func:`write_report` turn the report into ``bench.json`` and
  ``bench.md``.
* :class:`SequentialClient`: the classic blocking baseline (sync ``tritonclient.grpc``, one request at
  a time).
* :func:`measure_transport`: gRPC vs system shared memory round trips through the ``sink`` test model.
* ``_repeat.compare_runs``: the headline ratios of repeated runs side by side (``--repeat``).
* :func:`ratio`, :func:`environment` (and ``_stats.throughput``): the shared numbers (latency summaries are
  :func:`perception.metrics.percentiles`).

The machine these run on is usually shared: variants are always interleaved in one run and the
reports lead with ratios. See ``bench/README.md``.
"""

from __future__ import annotations

from perception.benchmark._env import environment, load_average
from perception.benchmark._frames import find_drive, generate_drive_for_bench, load_frames
from perception.benchmark._models import bench_model_repository
from perception.benchmark._report import render_markdown, write_report
from perception.benchmark._run import run_bench
from perception.benchmark._sequential import SequentialClient
from perception.benchmark._stats import ratio
from perception.benchmark._suite import SECTIONS, BenchSettings
from perception.benchmark._transport import BASELINES, SINK_MODEL, measure_transport

__all__ = [
    "BASELINES",
    "SECTIONS",
    "SINK_MODEL",
    "BenchSettings",
    "SequentialClient",
    "bench_model_repository",
    "environment",
    "find_drive",
    "generate_drive_for_bench",
    "load_average",
    "load_frames",
    "measure_transport",
    "ratio",
    "render_markdown",
    "run_bench",
    "write_report",
]
